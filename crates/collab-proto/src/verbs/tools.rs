//! The MCP tool list, generated from the verb table: one tool per row
//! (named [`Verb::tool_name`]), its `inputSchema` from the row's arguments
//! and flags, its description from the help line, and the way a tool call's
//! arguments become the exec command line the server then parses with the
//! same table ([`command_line`]). Nothing here is written per verb except
//! which rows are not tools ([`excluded`]) and why.
//!
//! Properties: a positional argument is its name (`repo`, `issue`,
//! `patch`; `-` → `_`), a flag its long name without `--` (`lease_token`,
//! `ttl`); a repeatable flag or a many-valued argument is an array, a
//! switch a boolean, a choice an enum, a number an integer with its range.
//! A `--X-stdin` switch is not a property: its text is the property `X`
//! (the same as `--X` when the row has both), sent on standard input, so a
//! body is not bounded by the command line's length.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::row::{Arity, Flag, Kind, Need, Rule, Verb};
use super::table::VERBS;
use crate::tokens::{shell_quote, MAX_COMMAND_LEN};

/// Why a row is not a tool, or `None` when it is one.
pub fn excluded(verb: &Verb) -> Option<&'static str> {
    match (verb.family, verb.action) {
        ("git-upload-pack" | "git-receive-pack" | "git-upload-archive", _) => {
            Some("git's own transport: use git")
        }
        ("git-lfs-transfer" | "git-lfs-authenticate", _) => {
            Some("git-lfs's own transport: use git lfs")
        }
        ("collab-mcp", _) => Some("the MCP session itself"),
        ("tui", _) => Some("a screen for a person on a terminal: use the other tools"),
        ("collab-release", "create") => Some("uploads a file on standard input: use ssh"),
        ("collab-release", "download") => Some("a file on standard output: use ssh"),
        ("collab-events", "watch") => {
            Some("a stream that never ends: use the tools `events_read` and `events_subscribe`")
        }
        _ => None,
    }
}

/// The rows that are tools, in table order.
pub fn tool_verbs() -> impl Iterator<Item = &'static Verb> {
    VERBS.iter().filter(|v| excluded(v).is_none())
}

/// The row behind the tool `name`.
pub fn tool_verb(name: &str) -> Option<&'static Verb> {
    tool_verbs().find(|v| v.tool_name() == name)
}

/// A flag naming a file on the caller's machine (`--credential-file
/// <path>`, whose contents go on standard input): meaningless to a tool
/// call, which sends the text itself through the row's `--X-stdin` switch.
fn is_client_path(flag: &Flag) -> bool {
    matches!(flag.value, Some(("<path>", _)))
}

/// The input property of a positional argument: `new-name` → `new_name`.
pub fn arg_property(name: &str) -> String {
    name.replace('-', "_")
}

/// The switch a text property is sent on standard input with
/// (`body` → `--body-stdin`), if the row has one for it.
fn stdin_switch(verb: &Verb, property: &str) -> Option<&'static str> {
    verb.flags
        .iter()
        .find(|f| {
            f.value.is_none() && f.long.ends_with("-stdin") && stdin_property(f.long) == property
        })
        .map(|f| f.long)
}

/// `--body-stdin` → `body`.
fn stdin_property(long: &str) -> String {
    long.trim_start_matches("--")
        .trim_end_matches("-stdin")
        .replace('-', "_")
}

fn kind_schema(kind: Kind, doc: &str) -> Value {
    match kind {
        Kind::Int { min, max } => {
            json!({ "type": "integer", "minimum": min, "maximum": max, "description": doc })
        }
        Kind::Choice(words) => json!({ "type": "string", "enum": words, "description": doc }),
        _ => json!({ "type": "string", "minLength": 1, "description": doc }),
    }
}

/// The tool's `inputSchema`: a JSON Schema object, every property named
/// and typed, nothing else allowed.
pub fn input_schema(verb: &Verb) -> Value {
    let mut properties = Map::new();
    let mut required: Vec<String> = Vec::new();
    for arg in verb.args {
        let name = arg_property(arg.name);
        let schema = match arg.arity {
            Arity::Many(max) => json!({
                "type": "array",
                "items": kind_schema(arg.kind, arg.doc),
                "maxItems": max,
                "description": arg.doc,
            }),
            _ => kind_schema(arg.kind, arg.doc),
        };
        if arg.arity == Arity::One {
            required.push(name.clone());
        }
        properties.insert(name, schema);
    }
    for flag in verb.flags {
        if is_client_path(flag) {
            continue;
        }
        let (name, schema) = match flag.value {
            None if flag.long.ends_with("-stdin") => {
                let name = stdin_property(flag.long);
                if properties.contains_key(&name) {
                    continue; // `--body` already made `body`
                }
                (name, json!({ "type": "string", "description": flag.doc }))
            }
            None => (
                flag.property(),
                json!({ "type": "boolean", "description": flag.doc }),
            ),
            Some((_, kind)) if flag.repeat => (
                flag.property(),
                json!({ "type": "array", "items": kind_schema(kind, flag.doc), "description": flag.doc }),
            ),
            Some((_, kind)) => (flag.property(), kind_schema(kind, flag.doc)),
        };
        if flag.required {
            required.push(name.clone());
        }
        properties.insert(name, schema);
    }
    // A rule that, once `--X`/`--X-stdin` are one property, asks for
    // exactly one property makes that property required.
    for rule in verb.rules {
        if let Rule::OneOf(group) = rule {
            let names = group_properties(verb, group);
            if names.len() == 1 && !required.contains(&names[0]) {
                required.push(names[0].clone());
            }
        }
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// The distinct properties a group of flags is spelled as.
fn group_properties(verb: &Verb, group: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for long in group {
        let name = match verb.flag(long) {
            Some(f) if f.value.is_none() && f.long.ends_with("-stdin") => stdin_property(f.long),
            Some(f) => f.property(),
            None => continue,
        };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The rules between flags, in words, for the description.
fn rules_text(verb: &Verb) -> String {
    let mut out = String::new();
    for rule in verb.rules {
        let (words, group): (&str, Vec<String>) = match rule {
            Rule::OneOf(g) => ("exactly one of", group_properties(verb, g)),
            Rule::AtMostOne(g) => ("at most one of", group_properties(verb, g)),
            Rule::AtLeastOne(g) => ("at least one of", group_properties(verb, g)),
            Rule::Requires(a, b) => {
                let a = verb.flag(a).map(|f| f.property()).unwrap_or_default();
                let b = verb.flag(b).map(|f| f.property()).unwrap_or_default();
                let _ = write!(out, " `{a}` only together with `{b}`.");
                continue;
            }
        };
        if group.len() > 1 {
            let names: Vec<String> = group.iter().map(|n| format!("`{n}`")).collect();
            let _ = write!(out, " Give {words} {}.", names.join(", "));
        }
    }
    out
}

/// The tool's description: the help line, the access it needs, the rules
/// between its arguments and the SSH verb it runs.
pub fn description(verb: &Verb) -> String {
    let need = match verb.need {
        Need::Anyone => "any key".to_string(),
        Need::Repo(access) => format!("{} access to `repo`", access.as_str()),
        other => other.describe().to_string(),
    };
    format!(
        "{}. Needs: {need}.{} (SSH verb: `{}`)",
        verb.help,
        rules_text(verb),
        verb.name()
    )
}

/// One entry of `tools/list`.
pub fn tool(verb: &Verb) -> Value {
    let read_only = matches!(
        verb.need,
        Need::Repo(super::row::Access::Read) | Need::Anyone
    ) || matches!(
        verb.action,
        "list" | "show" | "ready" | "diff" | "interdiff" | "deliveries"
    );
    let destructive = matches!(verb.action, "delete" | "break" | "remove");
    json!({
        "name": verb.tool_name(),
        "title": verb.name(),
        "description": description(verb),
        "inputSchema": input_schema(verb),
        "outputSchema": output_schema(),
        "annotations": {
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
            "openWorldHint": false,
        },
    })
}

/// Every tool's `outputSchema`: the verb's JSON reply is an object (a
/// refusal adds `error`, its one line).
pub fn output_schema() -> Value {
    json!({ "type": "object" })
}

/// A tool call turned into the exec command line (and the text to send on
/// standard input, for a `--X-stdin` property), or the one-line reason the
/// arguments do not fit the row: [`command_words`], quoted.
pub fn command_line(
    verb: &Verb,
    arguments: &Map<String, Value>,
) -> Result<(String, Option<String>), String> {
    let (words, stdin) = built(verb, arguments)?;
    Ok((quoted(&words), stdin))
}

/// A tool call turned into the words of the verb (as `ssh HOST words…`
/// receives them after the shell's quoting is undone; what
/// [`super::parse::parse`] takes), and the text for standard input; or
/// the one-line reason the arguments do not fit the row. The server parses
/// the words with the same table, so this only has to be right, not
/// trusted.
pub fn command_words(
    verb: &Verb,
    arguments: &Map<String, Value>,
) -> Result<(Vec<String>, Option<String>), String> {
    let (words, stdin) = built(verb, arguments)?;
    Ok((words.into_iter().map(|w| w.text).collect(), stdin))
}

/// One word of a built command, and whether the line quotes it (a value
/// that is not a number).
struct Word {
    text: String,
    quote: bool,
}

fn bare(text: &str) -> Word {
    Word {
        text: text.to_string(),
        quote: false,
    }
}

fn quoted(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| match w.quote {
            true => shell_quote(&w.text),
            false => w.text.clone(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn built(
    verb: &Verb,
    arguments: &Map<String, Value>,
) -> Result<(Vec<Word>, Option<String>), String> {
    for key in arguments.keys() {
        let known = verb.args.iter().any(|a| arg_property(a.name) == *key)
            || verb
                .flags
                .iter()
                .filter(|f| !is_client_path(f))
                .any(|f| match f.value {
                    None if f.long.ends_with("-stdin") => stdin_property(f.long) == *key,
                    _ => f.property() == *key,
                });
        if !known {
            return Err(format!("unknown argument `{key}`"));
        }
    }
    // What the schema requires (a one-of group that is one property, like
    // `body`, included), said by name.
    let schema = input_schema(verb);
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap_or_default();
        if arguments.get(name).is_none_or(Value::is_null) {
            return Err(format!("missing argument `{name}`"));
        }
    }
    let mut line: Vec<Word> = verb.name().split(' ').map(bare).collect();
    let mut missing_optional: Option<String> = None;
    for arg in verb.args {
        let name = arg_property(arg.name);
        let value = arguments.get(&name).filter(|v| !v.is_null());
        match (arg.arity, value) {
            (Arity::One, None) => return Err(format!("missing argument `{name}`")),
            (Arity::Optional, None) => missing_optional = Some(name),
            (_, Some(_)) if missing_optional.is_some() => {
                return Err(format!(
                    "`{name}` needs `{}` too",
                    missing_optional.unwrap_or_default()
                ))
            }
            (Arity::Many(max), Some(value)) => {
                let values = array(&name, value)?;
                if values.len() > max {
                    return Err(format!("`{name}`: at most {max} values"));
                }
                for v in values {
                    push_value(&mut line, &name, arg.kind, v)?;
                }
            }
            (Arity::Many(_), None) => {}
            (_, Some(value)) => push_value(&mut line, &name, arg.kind, value)?,
        }
    }
    let mut stdin = None;
    for flag in verb.flags.iter().filter(|f| !is_client_path(f)) {
        match flag.value {
            None if flag.long.ends_with("-stdin") => {
                let name = stdin_property(flag.long);
                let Some(value) = arguments.get(&name).filter(|v| !v.is_null()) else {
                    continue;
                };
                // `--X` and `--X-stdin` are one property: the text goes on
                // standard input, whatever its length.
                let Value::String(text) = value else {
                    return Err(format!("`{name}` must be a string"));
                };
                stdin = Some(text.clone());
                line.push(bare(flag.long));
            }
            None => match arguments.get(&flag.property()) {
                None | Some(Value::Null) | Some(Value::Bool(false)) => {}
                Some(Value::Bool(true)) => line.push(bare(flag.long)),
                Some(_) => return Err(format!("`{}` must be true or false", flag.property())),
            },
            Some((_, kind)) => {
                let name = flag.property();
                if stdin_switch(verb, &name).is_some() {
                    continue; // sent on standard input above
                }
                let Some(value) = arguments.get(&name).filter(|v| !v.is_null()) else {
                    if flag.required {
                        return Err(format!("missing argument `{name}`"));
                    }
                    continue;
                };
                let values = if flag.repeat {
                    array(&name, value)?
                } else {
                    vec![value]
                };
                for v in values {
                    line.push(bare(flag.long));
                    push_value(&mut line, &name, kind, v)?;
                }
            }
        }
    }
    if quoted(&line).len() > MAX_COMMAND_LEN {
        return Err(format!(
            "arguments too long (the command line is at most {MAX_COMMAND_LEN} bytes)"
        ));
    }
    // The rules between flags (exactly one of, at least one of, …) are the
    // parser's: the line must parse as the server will parse it.
    let words: Vec<String> = line.iter().map(|w| w.text.clone()).collect();
    let parses = super::parse::parse(&words).is_ok_and(|inv| inv.verb == verb);
    if !parses {
        let rules = rules_text(verb);
        return Err(if rules.is_empty() {
            format!("these arguments do not fit `{}`", verb.usage())
        } else {
            format!("these arguments do not fit:{rules}")
        });
    }
    Ok((line, stdin))
}

fn array<'v>(name: &str, value: &'v Value) -> Result<Vec<&'v Value>, String> {
    match value {
        Value::Array(items) => Ok(items.iter().collect()),
        _ => Err(format!("`{name}` must be an array")),
    }
}

/// Append one value, checked against its kind: numbers bare, the rest
/// quoted.
fn push_value(line: &mut Vec<Word>, name: &str, kind: Kind, value: &Value) -> Result<(), String> {
    let text = match (kind, value) {
        (Kind::Int { .. }, Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
        (Kind::Int { .. }, _) => return Err(int_error(name, kind)),
        (_, Value::String(s)) => s.clone(),
        _ => return Err(format!("`{name}` must be a string")),
    };
    // The command line takes no control character (the tokenizer refuses
    // the whole line); multi-line text goes as `body`, on standard input.
    if text.chars().any(char::is_control) {
        return Err(format!(
            "`{name}` must not contain control characters (newlines go in `body`)"
        ));
    }
    if !kind.accepts(&text) {
        return Err(match kind {
            Kind::Int { .. } => int_error(name, kind),
            Kind::Choice(words) => format!("`{name}` must be one of {}", words.join(", ")),
            _ => format!("`{name}` must not be empty"),
        });
    }
    let quote = !matches!(kind, Kind::Int { .. });
    line.push(Word { text, quote });
    Ok(())
}

fn int_error(name: &str, kind: Kind) -> String {
    match kind {
        Kind::Int { min, max } if max == i64::MAX => {
            format!("`{name}` must be an integer, {min} or more")
        }
        Kind::Int { min, max } => format!("`{name}` must be an integer from {min} to {max}"),
        _ => format!("`{name}` must be an integer"),
    }
}

/// The most events `events_read` returns at once.
pub const MAX_EVENTS_PAGE: i64 = 500;

/// The session's own tools, beside the table's: the event log as pages and
/// as notifications, in place of `collab-events watch`'s endless stream.
/// Their arguments are the watch row's (`repo`, `since`, `type`), plus
/// `limit` for a page.
pub fn session_tools() -> Vec<Value> {
    let watch =
        super::lookup::find("collab-events", "watch").expect("collab-events watch is in the table");
    let mut page = input_schema(watch);
    let props = page["properties"]
        .as_object_mut()
        .expect("an object schema");
    props.remove("no_follow");
    let mut subscribe = page.clone();
    page["properties"]["limit"] = json!({
        "type": "integer", "minimum": 1, "maximum": MAX_EVENTS_PAGE,
        "description": format!("at most this many events (default and most: {MAX_EVENTS_PAGE})"),
    });
    page["properties"]["wait"] = json!({
        "type": "integer", "minimum": 0, "maximum": crate::limits::MAX_WAIT_SECS,
        "description": "when nothing is there yet, wait up to this many seconds for the first event (progress is reported meanwhile)",
    });
    for own in ["limit", "wait"] {
        subscribe["properties"]
            .as_object_mut()
            .expect("an object schema")
            .remove(own);
    }
    let read_only =
        json!({ "readOnlyHint": true, "destructiveHint": false, "openWorldHint": false });
    vec![
        json!({
            "name": "events_read",
            "title": "collab-events watch --no-follow",
            "description": "The events after `since` (a seq; 0 for the oldest kept; without it, the head: no events, and the head's seq as `next_since`), oldest first, at most `limit` of them: `{\"events\": [...], \"next_since\": N, \"more\": bool}`; call again with `next_since` for the next page. With `wait`, an empty page waits up to that many seconds for the first event: a long poll. Needs: read (per event's repository). (SSH verb: `collab-events watch --no-follow`)",
            "inputSchema": page,
            "outputSchema": output_schema(),
            "annotations": read_only,
        }),
        json!({
            "name": "events_subscribe",
            "title": "collab-events watch",
            "description": "Follow the event log in this session: each event after `since` (default: from now) that you may read is sent as a `notifications/message` (logger `collab-events`, `data` the event), so an agent can wait for work without polling. One subscription per session; a new one replaces it. Needs: read (per event's repository). (SSH verb: `collab-events watch`)",
            "inputSchema": subscribe,
            "outputSchema": output_schema(),
            "annotations": read_only,
        }),
        json!({
            "name": "events_unsubscribe",
            "title": "end events_subscribe",
            "description": "Stop the session's event subscription.",
            "inputSchema": { "type": "object", "properties": {}, "additionalProperties": false },
            "outputSchema": output_schema(),
            "annotations": read_only,
        }),
    ]
}

/// docs/mcp.md's tool list, written from the table; kept between two
/// marker lines like docs/ssh-verbs.md's reference.
pub const BEGIN: &str = "<!-- BEGIN tool list: generated from crates/collab-proto/src/verbs/table.rs; UPDATE_VERB_DOCS=1 cargo test -p collab-proto rewrites it -->";
/// The line after it.
pub const END: &str = "<!-- END tool list -->";

/// The tool list for docs/mcp.md: every tool with its arguments, then
/// the session's own tools, then the rows that are not tools and why.
pub fn tools_markdown() -> String {
    let mut out = String::from("| tool | arguments (`*` required) | what it does | SSH verb |\n| --- | --- | --- | --- |\n");
    for verb in tool_verbs() {
        let schema = input_schema(verb);
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let args: Vec<String> = schema["properties"]
            .as_object()
            .map(|p| {
                p.keys()
                    .map(|k| {
                        if required.contains(&k.as_str()) {
                            format!("`{k}`*")
                        } else {
                            format!("`{k}`")
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | `{}` |",
            verb.tool_name(),
            args.join(", "),
            verb.help.replace('|', "\\|"),
            verb.name()
        );
    }
    for tool in session_tools() {
        let args: Vec<String> = tool["inputSchema"]["properties"]
            .as_object()
            .map(|p| p.keys().map(|k| format!("`{k}`")).collect())
            .unwrap_or_default();
        let help = tool["description"].as_str().unwrap_or_default();
        let first = help
            .split(". ")
            .next()
            .unwrap_or_default()
            .trim_end_matches('.');
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | `{}` |",
            tool["name"].as_str().unwrap_or_default(),
            args.join(", "),
            first.replace('|', "\\|"),
            tool["title"].as_str().unwrap_or_default()
        );
    }
    out.push_str("\nNot tools:\n\n");
    for verb in VERBS {
        if let Some(why) = excluded(verb) {
            let _ = writeln!(out, "- `{}`: {why}", verb.name());
        }
    }
    out
}
