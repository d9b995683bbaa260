//! What every command module shares at the terminal: text arguments where
//! `-` reads standard input (`text_arg`), and `--json` output
//! (`print_json`).

use std::io::{IsTerminal, Read};

use anyhow::{Context, Result};
use serde::Serialize;

use collab_cli::client::terminal;

/// A text argument, where `-` means "read standard input".
pub(crate) fn text_arg(value: String) -> Result<String> {
    if value != "-" {
        return Ok(value);
    }
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!("reading text from stdin; end with Ctrl-D");
    }
    let mut text = String::new();
    stdin
        .read_to_string(&mut text)
        .context("reading standard input")?;
    Ok(text)
}

/// `--json` output: serde_json escapes C0 in strings but not DEL or C1.
pub(crate) fn print_json<T: Serialize>(value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    println!("{}", terminal::json(&text));
    Ok(())
}
