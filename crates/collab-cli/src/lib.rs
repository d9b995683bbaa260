//! `collab_cli`: what the `git-collab` CLI does on a user's clone and over
//! SSH against a git-collab server. The binary (`main.rs` and its
//! `*_cmd.rs` modules) parses flags and prints; this library does the work.
//!
//! # Layout
//!
//! - [`client`]: `sync` (fetch and push of `refs/collab/*`), `mode` (which
//!   of the two holds a remote's issues), `server_issue`, `server_patch`,
//!   `lease`, `release`, `watch` (SSH verbs through `remote_ssh`, the
//!   user's own `ssh`), `terminal` (what is safe to print).
//!
//! Writing issues on a clone (the serverless mode) is `collab_record::issue`.

pub mod client;
