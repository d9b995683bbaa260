//! `git_collab`: the collab record kept in git, shared by the `git-collab`
//! CLI and the `git-collab-server`.
//!
//! Issues and patches are DAGs of signed event commits under
//! `refs/collab/*`; everything shown about them is derived by replaying
//! those DAGs ([`state::list_issues`], [`state::IssueState::from_ref`]).
//! The library never listens on the network and uses no async runtime; it
//! shells out to `git` for fetch and push. See `docs/data-model.md` for the
//! on-disk format.
//!
//! # Reading issues (server, web UI)
//!
//! ```no_run
//! use git_collab::state::{self, IssueState, IssueStatus};
//!
//! let repo = git2::Repository::open("/srv/repos/demo.git")?; // bare is fine
//! let (ref_name, full_id) = state::resolve_issue_ref(&repo, "4f2a")?; // 4+ hex
//! let issue = IssueState::from_ref(&repo, &ref_name, &full_id)?;
//! assert!(issue.status == IssueStatus::Open || issue.status == IssueStatus::Closed);
//! for issue in state::list_issues(&repo)? {
//!     println!("{} {} {:?}", &issue.id[..8], issue.title, issue.labels);
//! }
//! // Every dropped event and invalid issue, for auditing:
//! let report = git_collab::verify::verify(&repo)?;
//! # Ok::<(), git_collab::Error>(())
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
//! use git_collab::{diff, patch};
//!
//! let repo = git2::Repository::open("/srv/repos/demo.git")?;
//! for p in patch::list_patches(&repo)? {
//!     println!("{} {} ({} revisions)", &p.id[..8], p.title, p.revisions.len());
//! }
//! let p = patch::PatchState::load(&repo, "9c1e")?; // revisions, reviews, timeline
//! let latest = diff::revision_diff(&repo, &p, None)?; // against its base
//! let since_first = diff::interdiff(&repo, &p, 1, p.latest().n)?; // rebase left out
//! print!("{}{}", latest.diff.text, since_first.diff.text);
//! # Ok::<(), git_collab::Error>(())
//! ```
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
//! - [`patch`]: patch state (revisions, reviews, comments) and operations.
//! - [`timeline`]: a patch's events as one ordered stream.
//! - [`diff`]: a revision against its base, and interdiffs of revisions.
//! - [`merge_scan`]: finds patches merged by plain git; run at sync.
//! - [`sync`]: fetch, join and push `refs/collab/*` through a git remote.
//! - [`verify`]: report every dropped event and invalid issue.
//! - [`release`]: client side of `collab-release` (release files on the server).
//! - [`remote_ssh`]: run a server exec verb through the user's `ssh`.
//! - [`lease`]: the client side of `collab-lease` (issue claims).

pub mod cache;
pub mod diff;
pub mod error;
pub mod event;
pub mod issue;
pub mod lease;
pub mod merge_scan;
pub mod patch;
pub mod refs;
pub mod release;
pub mod remote_ssh;
pub mod sign;
pub mod state;
pub mod store;
pub mod sync;
pub mod timeline;
pub mod trust;
pub mod verify;

pub use error::{Error, Result};
