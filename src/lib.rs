//! `git_collab`: the collab record kept in git, shared by the `git-collab`
//! CLI and the `git-collab-server`.
//!
//! Issues and patches are DAGs of signed event commits under
//! `refs/collab/*`; everything shown about them is derived by replaying
//! those DAGs ([`record::state::list_issues`], [`record::state::IssueState::from_ref`]).
//! The library never listens on the network and uses no async runtime; it
//! shells out to `git` for fetch and push. See `docs/data-model.md` for the
//! on-disk format.
//!
//! # Reading issues (server, web UI)
//!
//! ```no_run
//! use git_collab::record::state::{self, IssueState, IssueStatus};
//!
//! let repo = git2::Repository::open("/srv/repos/demo.git")?; // bare is fine
//! let (ref_name, full_id) = state::resolve_issue_ref(&repo, "4f2a")?; // 4+ hex
//! let issue = IssueState::from_ref(&repo, &ref_name, &full_id)?;
//! assert!(issue.status == IssueStatus::Open || issue.status == IssueStatus::Closed);
//! for issue in state::list_issues(&repo)? {
//!     println!("{} {} {:?}", &issue.id[..8], issue.title, issue.labels);
//! }
//! // Every dropped event and invalid issue, for auditing:
//! let report = git_collab::record::verify::verify(&repo)?;
//! # Ok::<(), git_collab::Error>(())
//! ```
//!
//! Replay is a pure function of an issue ref's tip and the allowlist
//! (`$GIT_DIR/collab/trusted_keys`), so a materialized [`record::state::IssueState`]
//! may be cached by tip id; `list_issues` already does so on disk
//! ([`record::cache`]).
//!
//! # Reading patches
//!
//! ```no_run
//! use git_collab::record::{diff, patch};
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
//! The tree shows the layers:
//!
//! - [`record`]: the git-native collab record, shared by client and server:
//!   `refs` (the only place that spells `refs/collab/...`), `event`
//!   (envelope, payloads, canonical JSON), `sign` (Ed25519, OpenSSH keys),
//!   `store` (event commits, compare-and-swap on the ref), `trust` (the
//!   allowlist), `state` and `patch` (replay of issue and patch DAGs),
//!   `cache`, `timeline`, `diff`, `merge_scan`, `verify`.
//! - [`client`]: what the `git-collab` CLI does on a user's clone and over
//!   SSH: `issue` (local issue operations), `sync`, `lease`, `release`,
//!   `remote_ssh` (running a server exec verb through the user's `ssh`).
//! - [`error`]: the library's [`Error`] enum.
//!
//! The server's own state (the collab database: leases, and from phase 2
//! issues and events) lives in the server binary, `src/server/db/`.

pub mod client;
pub mod error;
pub mod record;

pub use error::{Error, Result};
