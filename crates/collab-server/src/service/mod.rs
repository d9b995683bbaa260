//! One service, many doors (issue 46): every verb that is not a stream
//! answers here, without a channel. A door (SSH exec, the MCP session, the
//! terminal UI; HTTP later) turns what its client sent into the typed
//! request (`command::ExecCommand`, parsed with the verb table), then
//! takes the same two steps:
//!
//! 1. [`authorize`]: the running-verb admission (`limits::running`, by
//!    [`weight`]) and, for a verb that reads a body on standard input, the
//!    repository at the level the verb needs, so a stranger's body is never
//!    read; the refusal is an [`Answer`] already.
//! 2. [`run`]: the verb's work with the body, if any: the [`Answer`] (its
//!    one line and exit status, exactly what `ssh HOST verb …` prints).
//!
//! Both count the verbs-by-outcome metric, so every door counts the same.
//! Streams (git, git-lfs-transfer, `collab-events watch`, release upload
//! and download, the terminal UI and MCP sessions) stay their door's; the
//! families still answered by the SSH door alone ([`serves`] says which)
//! move here one by one.
//!
//! This folder imports no door (`crate::ssh`, `crate::mcp`, `crate::tui`,
//! `crate::http`) and neither russh, axum nor ratatui (the test below
//! reads its files), and no door imports another
//! (`scripts/import-graph.py --check`, with the arrows still allowed).

pub mod context;
pub mod events;
pub mod release;
pub mod reply;

pub mod admin;
pub mod check;
pub mod command;
pub mod issue;
pub mod lease;
pub mod mirror;
pub mod patch;
pub mod queue;
pub mod search;
pub mod webhook;

#[cfg(test)]
mod parse_tests;
mod run;

pub use context::Context;
pub use reply::Answer;
pub use run::{
    admit, authorize, call, parse, run, serves, stops_at_once, undelivered, weight, Authorized,
    Stdin, STOPPED_AT_ONCE,
};

#[cfg(test)]
mod tests {
    /// The files of this folder.
    fn service_files() -> Vec<(String, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/service");
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                files.push((path.display().to_string(), text));
            }
        }
        files
    }

    /// The service imports no door, and no transport's crate.
    #[test]
    fn the_service_imports_no_door() {
        let files = service_files();
        assert!(files.len() > 8, "{} files", files.len());
        let doors = [
            "crate::ssh",
            "crate::mcp",
            "crate::tui",
            "crate::http",
            "russh",
            "axum",
            "ratatui",
        ];
        let mut found = Vec::new();
        for (path, text) in &files {
            // The unit tests are not the service (this one names the doors).
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for door in doors {
                    let named = code.match_indices(door).any(|(at, _)| {
                        let before = code[..at].chars().last();
                        let after = code[at + door.len()..].chars().next();
                        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    });
                    if named {
                        found.push(format!("{path}:{}: {door}", n + 1));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "the service names a door:\n{}",
            found.join("\n")
        );
    }
}
