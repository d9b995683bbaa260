//! The client's side: operations the `git-collab` CLI runs on a user's
//! clone (`sync`) and over SSH against a git-collab server
//! (`server_issue`, `server_patch`, `lease`, `release`, through `remote_ssh`,
//! which reuses one connection across commands through `ssh_reuse`; both
//! take the remote's description from `remote`); `mode`
//! decides which of the two holds a remote's issues; `terminal` makes
//! other people's text safe to print.

pub mod lease;
pub mod mode;
pub mod release;
pub mod remote;
pub mod remote_ssh;
pub mod search;
pub mod server_issue;
pub mod server_patch;
pub mod ssh_reuse;
pub mod sync;
pub mod terminal;
pub mod watch;
