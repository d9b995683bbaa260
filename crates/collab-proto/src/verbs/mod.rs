//! The verb table: the one definition of every SSH exec verb the server
//! answers. Each [`Verb`] row says its family and action, its positional
//! arguments and flags with their types, the rules between its flags, the
//! access it needs and its help line. Everything else is derived from it:
//!
//! - [`parse`]: the server's argument parsing (shape, arity, flag values of
//!   numeric type); the server's handlers then turn an [`Invocation`] into
//!   their typed command and check what only they know (labels, cursors).
//! - [`family_usage`]: the `error: usage: …` line a malformed call gets.
//! - [`help_groups`]: the `help` verb's list.
//! - [`Call`]: how the client writes a remote command (checked against the
//!   table, every argument quoted).
//! - [`reference_markdown`]: docs/ssh-verbs.md's reference tables (a test
//!   fails when the file and the table disagree).
//! - [`tools`]: the MCP tool list (a tool per row, named
//!   [`Verb::tool_name`], its input schema from the row) and how a tool
//!   call's arguments become the command line.
//!
//! The rows themselves are in [`table`]; adding a verb is one row there and
//! one handler in the server (CONTRIBUTING.md). What a row is (its types)
//! is `row`, below the table; the questions asked of the whole table
//! ([`find`], [`help_groups`]) are `lookup`, above it. This file only
//! declares the parts and re-exports them.

mod call;
pub mod docs;
mod lookup;
mod parse;
mod row;
pub mod table;
pub mod tools;

pub use call::Call;
pub use docs::reference_markdown;
pub use lookup::{find, help_groups, is_family, level, named, HelpGroup};
pub use parse::{family_usage, parse, Invocation, Refusal};
pub use row::{int_in, Access, Arg, Arity, Flag, Kind, Need, Rule, Verb};
pub use table::VERBS;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tools_tests;

/// This crate's directory as the running test sees it (cargo and nextest
/// set `CARGO_MANIFEST_DIR` at run time), not the compile-time one: a
/// build cached from a checkout elsewhere (CI shares one target directory
/// between clones) would point at that checkout's docs.
#[cfg(test)]
fn crate_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}
