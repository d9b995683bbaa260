//! git-collab
