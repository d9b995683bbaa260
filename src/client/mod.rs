//! The client's side: operations the `git-collab` CLI runs on a user's
//! clone (`issue`, `sync`) and over SSH against a git-collab server
//! (`lease`, `release`, through `remote_ssh`), and `terminal`, which makes
//! other people's text safe to print.

pub mod issue;
pub mod lease;
pub mod release;
pub mod remote_ssh;
pub mod sync;
pub mod terminal;
