//! `collab_proto`: what the server and the `git-collab` client agree on over
//! the wire. It holds no behaviour and does no IO, so both ends (and later
//! the MCP tool list) depend on it without depending on each other.
//!
//! # Layout
//!
//! - [`verbs`]: the verb table, the one definition of every SSH verb, and
//!   what comes from it: parsing, usage lines, `help`, the client's calls,
//!   the docs' reference tables.
//! - [`tokens`]: splitting an exec command line the way a shell would
//!   quote it (never running one), and quoting for it.
//! - [`exit`]: the exit statuses of the SSH verbs, beyond 0 and 1.
//! - [`limits`]: bounds both ends check (TTLs, note lengths, page sizes).
//! - [`replies`]: typed JSON replies both ends share, one module per verb
//!   family.

pub mod exit;
pub mod limits;
pub mod replies;
pub mod tokens;
pub mod verbs;

pub use verbs::Access;
