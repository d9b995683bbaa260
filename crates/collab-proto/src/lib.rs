//! `collab_proto`: what the server and the `git-collab` client agree on over
//! the wire. It holds no behaviour and does no IO, so both ends (and later
//! the MCP tool list) depend on it without depending on each other.
//!
//! # Layout
//!
//! - [`exit`]: the exit statuses of the SSH verbs, beyond 0 and 1.
//! - [`limits`]: bounds both ends check (TTLs, note lengths, file names).

pub mod exit;
pub mod limits;
