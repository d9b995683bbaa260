//! `collab_record`: the collab record kept in git, shared by the
//! `git-collab` CLI and the `git-collab-server`.
//!
//! Issues and patches are DAGs of signed event commits under
//! `refs/collab/*`; everything shown about them is derived by replaying
//! those DAGs ([`state::list_issues`], [`state::IssueState::from_ref`]).
//! The crate never listens on the network and uses no async runtime; it
//! knows nothing of serving SSH or HTTP and holds no server state. See
//! `docs/data-model.md` for the on-disk format.
//!
//! # Reading issues (server, web UI)
//!
//! ```no_run
//! use collab_record::state::{self, IssueState, IssueStatus};
//!
//! let repo = git2::Repository::open("/srv/repos/demo.git")?; // bare is fine
//! let (ref_name, full_id) = state::resolve_issue_ref(&repo, "4f2a")?; // 4+ hex
//! let issue = IssueState::from_ref(&repo, &ref_name, &full_id)?;
//! assert!(issue.status == IssueStatus::Open || issue.status == IssueStatus::Closed);
//! for issue in state::list_issues(&repo)? {
//!     println!("{} {} {:?}", &issue.id[..8], issue.title, issue.labels);
//! }
//! // Every dropped event and invalid issue, for auditing:
//! let report = collab_record::verify::verify(&repo)?;
//! # Ok::<(), collab_record::Error>(())
//! ```
//!
//! Replay is a pure function of an issue ref's tip and the allowlist
//! (`$GIT_DIR/collab/trusted_keys`), so a materialized [`state::IssueState`]
//! may be cached by tip id; `list_issues` already does so on disk
//! ([`cache`]).
//!
//! # Reading patches
//!
//! ```no_run
//! use collab_record::{diff, patch};
//!
//! let repo = git2::Repository::open("/srv/repos/demo.git")?;
//! for p in patch::list_patches(&repo)? {
//!     println!("{} {} ({} revisions)", &p.id[..8], p.title, p.revisions.len());
//! }
//! let p = patch::PatchState::load(&repo, "9c1e")?; // revisions, reviews, timeline
//! let latest = diff::revision_diff(&repo, &p, None)?; // against its base
//! let since_first = diff::interdiff(&repo, &p, 1, p.latest().n)?; // rebase left out
//! print!("{}{}", latest.diff.text, since_first.diff.text);
//! # Ok::<(), collab_record::Error>(())
//! ```
//!
//! # Layout
//!
//! - `refs`: the only place that spells `refs/collab/...`.
//! - `event`: envelope, payloads, canonical JSON; `sign`: Ed25519 and
//!   OpenSSH keys; `trust`: the allowlist.
//! - `store`: event commits, compare-and-swap on the ref.
//! - `issue`: writing issue events on a clone (the serverless mode).
//! - `state` and `patch`: replay of issue and patch DAGs; `replay`: the
//!   shared fold; `cache`, `timeline`, `diff`, `merge_scan`, `verify`.
//! - `export`: the signed export format the server writes.
//! - `text`: which invisible and text-direction characters titles, names
//!   and bodies refuse.
//! - [`error`]: the crate's [`Error`] enum.

pub mod cache;
#[cfg(test)]
mod cache_tests;
pub mod diff;
pub mod error;
pub mod event;
pub mod export;
pub mod issue;
pub mod merge_scan;
pub mod patch;
pub mod refs;
pub mod replay;
pub mod sign;
pub mod state;
pub mod store;
pub mod text;
pub mod timeline;
pub mod trust;
pub mod verify;

pub use error::{Error, Result};
