//! `collab_testkit`: the test harness every integration test and bench uses.
//!
//! [`ServerHarness`] is the real `git-collab-server` on ephemeral loopback
//! ports with a temporary state directory, driven by the real OpenSSH `ssh`
//! and the real `git`. Keys come from `ssh-keygen`. Each test gets its own
//! server, killed on drop. With `GIT_COLLAB_TEST_BACKEND=postgres` the
//! harness gives each server a fresh PostgreSQL database instead of
//! `collab.db` ([`pg`]); the `postgres` nextest profile runs the suites that
//! go through the harness once more that way (ARCHITECTURE.md, "Cross-cutting concerns", Testing).
//!
//! # Layout
//!
//! - [`harness`]: [`ServerHarness`], keys, `ssh` and `git` runners, waits,
//!   crash helpers ([`ServerHarness::kill`]).
//! - [`bins`]: [`bin`], which finds the workspace's binaries, and
//!   [`workspace_root`].
//! - [`files`]: [`write_live`], a file replaced under a running server
//!   (renamed into place, never read half-written).
//! - [`client`]: the `git-collab` CLI against a harness server.
//! - [`cli`]: a world of clones for the client-only suites.
//! - [`review`], [`web`]: fixtures of the review and web suites.
//! - [`bench`]: timing, medians and docs/benchmarks.md sections for benches.
//! - [`mcp`]: a raw MCP session over `ssh … collab-mcp`, for benches.
//!
//! This file only declares the parts and re-exports what every test uses
//! (`collab_testkit::ServerHarness`, `collab_testkit::bin`, …); the parts
//! name each other by their own paths (`crate::harness::ServerHarness`), so
//! the fixtures sit above the harness, which sits above `bins`.
//!
//! Its own unit test runs `scripts/import-graph.py --check`: no file of any
//! crate of the workspace imports a file that imports it back.

pub mod bench;
pub mod bins;
pub mod cli;
pub mod client;
pub mod files;
pub mod git_daemon;
pub mod harness;
pub mod mcp;
pub mod review;
pub mod web;

pub use bins::{bin, cli_bin, workspace_root};
pub use files::write_live;
pub use harness::{
    fingerprint, generate_key, host_cli, public_key_line, server_cli, server_command, stdout_json,
    synthetic_history, HarnessOptions, ServerHarness, SshOutput, ADMIN_OPTION, NOT_FOUND,
};

/// Throwaway PostgreSQL databases (`GIT_COLLAB_TEST_POSTGRES`).
pub use collab_store::sql::test_database as pg;

#[cfg(test)]
mod tests {
    /// No crate's file-level import graph has a cycle, but the ones
    /// `scripts/import-graph.py` still allows (its `ALLOWED`).
    #[test]
    fn no_import_loops() {
        let root = super::workspace_root();
        // The Nix package builds from Cargo.toml, Cargo.lock and crates/
        // only (nix/package.nix): there is no script to run there.
        if !root.join("scripts/import-graph.py").is_file() {
            eprintln!("skipped: scripts/import-graph.py is not in this tree");
            return;
        }
        let output = std::process::Command::new("python3")
            .args(["scripts/import-graph.py", "--check"])
            .current_dir(root)
            .output()
            .expect("running python3 scripts/import-graph.py --check");
        assert!(
            output.status.success(),
            "scripts/import-graph.py --check failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
