//! The CLI's integration tests: the client-only suites (the record on a
//! clone, sync, patches, verify, terminal escapes), driving the real
//! `git-collab` on real repositories, with no server. Suites that drive the
//! CLI against a server live with the server's tests.

mod cli_issue;
mod patch;
mod patch_sync;
mod sync;
mod terminal_escapes;
mod verify;
