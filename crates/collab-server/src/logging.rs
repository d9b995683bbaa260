//! Logging for the server process: a tracing subscriber writing to stderr,
//! filtered by `log.level` (or `RUST_LOG` when set) and shaped by
//! `log.format` (`text` or `json`). Nothing else configures tracing.

use std::io::IsTerminal as _;

use anyhow::{anyhow, Context as _};
use tracing_subscriber::EnvFilter;

use crate::config::LogConfig;

/// Install the global subscriber. `RUST_LOG`, when set and non-empty,
/// replaces `log.level` (the usual Rust convention for debugging a process).
pub fn init(log: &LogConfig) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(rust_log) if !rust_log.trim().is_empty() => EnvFilter::try_new(&rust_log)
            .with_context(|| format!("RUST_LOG = {rust_log:?}: invalid filter"))?,
        // Validated when the configuration was loaded.
        _ => EnvFilter::try_new(&log.level)
            .with_context(|| format!("log.level = {:?}: invalid filter", log.level))?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let installed = match log.format.as_str() {
        "json" => builder.json().try_init(),
        _ => builder.try_init(),
    };
    installed.map_err(|e| anyhow!("cannot install the logger: {e}"))
}
