//! docs/ssh-verbs.md's reference section, written from the table. The
//! file keeps it between two marker lines; a test compares the two, and
//! `UPDATE_VERB_DOCS=1 cargo test -p collab-proto` rewrites the section.

use std::fmt::Write as _;

use super::row::{Arity, Kind};
use super::table::VERBS;

/// The line before the generated section.
pub const BEGIN: &str = "<!-- BEGIN verb reference: generated from crates/collab-proto/src/verbs/table.rs; UPDATE_VERB_DOCS=1 cargo test -p collab-proto rewrites it -->";
/// The line after it.
pub const END: &str = "<!-- END verb reference -->";

/// The reference: per family, a table of its verbs (usage, access, what it
/// does) and a list of its arguments and flags.
pub fn reference_markdown() -> String {
    let mut out = String::new();
    let mut families: Vec<&str> = Vec::new();
    for verb in VERBS {
        if !families.contains(&verb.family) {
            families.push(verb.family);
        }
    }
    for family in families {
        let verbs: Vec<_> = VERBS.iter().filter(|v| v.family == family).collect();
        let _ = writeln!(out, "### `{family}`\n");
        out.push_str("| verb | access | what it does |\n| --- | --- | --- |\n");
        for verb in &verbs {
            let aliases: String = verb
                .aliases
                .iter()
                .map(|alias| format!(" (or `{alias}`)"))
                .collect();
            let _ = writeln!(
                out,
                "| `{}`{aliases} | {} | {} |",
                cell(&verb.usage()),
                cell(verb.need.describe()),
                cell(verb.help)
            );
        }
        let mut seen: Vec<String> = Vec::new();
        let mut lines = String::new();
        for verb in &verbs {
            for arg in verb.args {
                let name = match (arg.kind, arg.arity) {
                    (Kind::Choice(words), _) => words.join("|"),
                    (Kind::Int { .. }, _) => format!("<{}>", arg.name),
                    (_, Arity::Many(max)) => format!("'<{}>'... (at most {max})", arg.name),
                    _ => format!("'<{}>'", arg.name),
                };
                if !seen.contains(&name) {
                    let _ = writeln!(lines, "- `{name}`: {}{}", arg.doc, range(arg.kind));
                    seen.push(name);
                }
            }
            for flag in verb.flags {
                let name = match flag.value {
                    Some((placeholder, _)) => format!("{} {placeholder}", flag.long),
                    None => flag.long.to_string(),
                };
                if !seen.contains(&name) {
                    let kind = flag.value.map(|(_, k)| range(k)).unwrap_or_default();
                    let _ = writeln!(lines, "- `{name}`: {}{kind}", flag.doc);
                    seen.push(name);
                }
            }
        }
        if !lines.is_empty() {
            let _ = write!(out, "\n{lines}");
        }
        out.push('\n');
    }
    out
}

fn range(kind: Kind) -> String {
    match kind {
        Kind::Int { min, max } if max == i64::MAX => format!(" ({min} or more)"),
        Kind::Int { min, max } => format!(" ({min} to {max})"),
        _ => String::new(),
    }
}

/// Text safe inside a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// `doc` with its generated section replaced by `section`; `None` if the
/// markers are missing.
pub fn splice(doc: &str, section: &str) -> Option<String> {
    let start = doc.find(BEGIN)? + BEGIN.len();
    let end = doc[start..].find(END)? + start;
    Some(format!("{}\n\n{}{}", &doc[..start], section, &doc[end..]))
}
