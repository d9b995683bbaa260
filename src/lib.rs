//! `git_collab`: the collab record kept in git, shared by the `git-collab`
//! CLI and the `git-collab-server`.
//!
//! Issues (and later patches) are DAGs of signed event commits under
//! `refs/collab/*`; everything shown about them is derived by replaying
//! those DAGs ([`state::list_issues`], [`state::IssueState::from_ref`]).
//! The library never listens on the network and uses no async runtime; it
//! shells out to `git` for fetch and push. See `docs/data-model.md` for the
//! on-disk format.
//!
//! # Layout
//!
//! - [`error`]: the library's [`Error`] enum.
//! - [`refs`]: the only place that spells `refs/collab/...` names.
//! - [`event`]: the event envelope, payload types and canonical JSON.
//! - [`sign`]: Ed25519 signing keys (OpenSSH format), sign and verify.
//! - [`store`]: writing event commits and reading a DAG's commits (git2).
//! - [`trust`]: the `$GIT_DIR/collab/trusted_keys` allowlist.
//! - [`state`]: replay, `IssueState`, `resolve_issue_ref`, `list_issues`.
//! - [`cache`]: the disk cache of replayed issues used by `list_issues`.
//! - [`issue`]: the issue operations (open, comment, edit, label, close, reopen).
//! - [`sync`]: fetch, join and push `refs/collab/*` through a git remote.
//! - [`verify`]: report every dropped event and invalid issue.
//! - [`release`]: client side of `collab-release` (release files on the server).
//! - [`remote_ssh`]: run a server exec verb through the user's `ssh`.

pub mod cache;
pub mod error;
pub mod event;
pub mod issue;
pub mod refs;
pub mod release;
pub mod remote_ssh;
pub mod sign;
pub mod state;
pub mod store;
pub mod sync;
pub mod trust;
pub mod verify;

pub use error::{Error, Result};
