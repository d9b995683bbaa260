//! Pages inside one repository, one file per page family: `summary` (the
//! repository's front page), `tree` (directories, files, raw bytes),
//! `commit` (a commit with its diff, its `.patch` and `.diff`, and the
//! log), `history` (one file's history and blame), `refs` (branches,
//! tags, the ref switcher, archives), `issues`, `patches`, `queue` (a
//! branch's merge queue), `releases`.
//!
//! What they share lives in `ctx`: [`ctx::open`] (the visibility check,
//! then the git repository), [`ctx::RepoNav`] (the fields `repo_base.html`
//! needs), resolving `<ref>/<path>` URL tails, and small git helpers.

pub mod commit;
pub mod ctx;
pub mod history;
pub mod issues;
pub mod patches;
pub mod queue;
pub mod refs;
pub mod releases;
pub mod summary;
pub mod tree;
