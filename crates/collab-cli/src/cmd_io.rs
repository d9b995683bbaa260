//! What every command module shares at the terminal: text arguments where
//! `-` reads standard input (`text_arg`), `--json` output (`print_json`),
//! and a server verb's reply printed as JSON or text (`read_value`) or
//! passed through when it failed (`pass_through`).

use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use anyhow::{Context, Result};
use collab_proto::replies::fenced::Fenced;
use serde::Serialize;
use serde_json::Value;

use collab_cli::client::remote_ssh::RemoteOutput;
use collab_cli::client::server_issue::EXIT_CONFLICT;
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

/// The server's reply to show as it is (an error, or an ssh failure), with
/// its exit status; a fencing refusal in text is its one-line `message`.
pub(crate) fn pass_through(reply: &RemoteOutput, json: bool) -> ExitCode {
    if reply.code == EXIT_CONFLICT && !json {
        if let Ok(fenced) = serde_json::from_slice::<Fenced>(&reply.stdout) {
            if let Some(message) = &fenced.message {
                eprintln!("error: {}", terminal::line(message));
                return ExitCode::from(u8::try_from(reply.code).unwrap_or(1));
            }
        }
    }
    if json {
        print!("{}", terminal::json(&reply.stdout_text()));
    } else {
        print!("{}", terminal::text(&reply.stdout_text()));
    }
    eprint!("{}", terminal::text(&reply.stderr_text()));
    ExitCode::from(u8::try_from(reply.code).unwrap_or(1))
}

/// A server verb's reply: printed as its JSON (`--json`) or through `text`
/// when it succeeded, else passed through ([`pass_through`]).
pub(crate) fn read_value(
    reply: &RemoteOutput,
    json: bool,
    text: impl FnOnce(&Value) -> Result<()>,
) -> Result<ExitCode> {
    if !reply.success() {
        return Ok(pass_through(reply, json));
    }
    let value: Value = serde_json::from_slice(&reply.stdout)?;
    if json {
        print_json(&value)?;
    } else {
        text(&value)?;
    }
    Ok(ExitCode::SUCCESS)
}
