//! The MCP tools against the table: every row is a tool or says why not;
//! every tool's input schema accepts the verb's documented examples (the
//! command lines in docs/*.md, and one example built from each row) turned
//! into tool arguments, and refuses what the row refuses; the command line
//! built back from those arguments parses to the same call.

use serde_json::{json, Map, Value};

use super::tools::{self, command_line, input_schema, tool_verb, tool_verbs};
use super::*;
use crate::tokens::shell_tokens;

/// A JSON Schema check by hand, for the keywords the generator writes
/// (`type`, `properties`, `required`, `additionalProperties`, `enum`,
/// `minimum`, `maximum`, `minLength`, `items`, `maxItems`). Any other
/// keyword fails the test, so a generator that starts writing one cannot
/// pass unchecked.
fn validate(schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let known = [
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "items",
        "maxItems",
        "description",
    ];
    for key in schema.as_object().expect("a schema is an object").keys() {
        assert!(
            known.contains(&key.as_str()),
            "{at}: unchecked keyword {key}"
        );
    }
    let ty = schema["type"].as_str().expect("every schema has a type");
    let ok = match ty {
        "object" => value.is_object(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        other => panic!("{at}: type {other}"),
    };
    if !ok {
        return Err(format!("{at}: not a {ty}"));
    }
    if let Some(words) = schema.get("enum").and_then(Value::as_array) {
        if !words.contains(value) {
            return Err(format!("{at}: not one of {words:?}"));
        }
    }
    if let Some(min) = schema.get("minimum").and_then(Value::as_i64) {
        if value.as_i64().is_none_or(|n| n < min) {
            return Err(format!("{at}: below {min}"));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_i64) {
        if value.as_i64().is_none_or(|n| n > max) {
            return Err(format!("{at}: above {max}"));
        }
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
        if (value.as_str().unwrap_or_default().chars().count() as u64) < min {
            return Err(format!("{at}: shorter than {min}"));
        }
    }
    if let Value::Array(items) = value {
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
            if items.len() as u64 > max {
                return Err(format!("{at}: more than {max} items"));
            }
        }
        for (i, item) in items.iter().enumerate() {
            validate(&schema["items"], item, &format!("{at}[{i}]"))?;
        }
    }
    if let Value::Object(map) = value {
        let properties = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for name in schema["required"].as_array().into_iter().flatten() {
            let name = name.as_str().unwrap();
            if !map.contains_key(name) {
                return Err(format!("{at}: `{name}` is required"));
            }
        }
        for (key, v) in map {
            match properties.get(key) {
                Some(s) => validate(s, v, &format!("{at}.{key}"))?,
                None if schema["additionalProperties"] == json!(false) => {
                    return Err(format!("{at}: unknown property `{key}`"))
                }
                None => {}
            }
        }
    }
    Ok(())
}

/// A parsed command line as tool arguments: the inverse of
/// `command_line`.
fn arguments_of(inv: &Invocation, stdin: Option<&str>) -> Map<String, Value> {
    let verb = inv.verb;
    let (args, flags) = (inv.given_args(), inv.given_flags());
    let mut out = Map::new();
    for (name, value) in args {
        let arg = verb.arg(name).unwrap();
        let v = scalar(arg.kind, value);
        let key = tools::arg_property(name);
        match arg.arity {
            Arity::Many(_) => out
                .entry(key)
                .or_insert_with(|| json!([]))
                .as_array_mut()
                .unwrap()
                .push(v),
            _ => {
                out.insert(key, v);
            }
        }
    }
    for (long, value) in flags {
        let flag = verb.flag(long).unwrap();
        match (flag.value, value) {
            (None, _) if long.ends_with("-stdin") => {
                // The text the example would pipe in.
                let key = long.trim_start_matches("--").trim_end_matches("-stdin");
                out.insert(
                    key.replace('-', "_"),
                    json!(stdin.unwrap_or("text from stdin")),
                );
            }
            (None, _) => {
                out.insert(flag.property(), json!(true));
            }
            (Some(("<path>", _)), _) => {
                // `--credential-file F < F`: a tool sends the text itself.
                let key = long.trim_start_matches("--").trim_end_matches("-file");
                out.insert(
                    key.replace('-', "_"),
                    json!(stdin.unwrap_or("text from stdin")),
                );
            }
            (Some((_, kind)), Some(value)) if flag.repeat => out
                .entry(flag.property())
                .or_insert_with(|| json!([]))
                .as_array_mut()
                .unwrap()
                .push(scalar(kind, value)),
            (Some((_, kind)), Some(value)) => {
                out.insert(flag.property(), scalar(kind, value));
            }
            (Some(_), None) => unreachable!("a value flag without a value parsed"),
        }
    }
    out
}

fn scalar(kind: Kind, value: &str) -> Value {
    match kind {
        Kind::Int { .. } => json!(value.parse::<i64>().unwrap()),
        _ => json!(value),
    }
}

/// One command line per row, every argument and flag given once (the
/// first of a one-of group, `--X` rather than `--X-stdin`).
fn example_line(verb: &Verb) -> String {
    fn sample(kind: Kind) -> String {
        match kind {
            Kind::Repo => "'team/app'".into(),
            Kind::RepoGlob => "'team/*'".into(),
            Kind::Id => "'4f2a'".into(),
            Kind::Text => "'some text'".into(),
            Kind::Word => "'main'".into(),
            Kind::Int { min, .. } => min.to_string(),
            Kind::Choice(words) => words[0].into(),
        }
    }
    let mut line = verb.name();
    for arg in verb.args {
        line.push(' ');
        line.push_str(&sample(arg.kind));
    }
    let mut skip: Vec<&str> = Vec::new();
    for rule in verb.rules {
        if let Rule::OneOf(g) | Rule::AtMostOne(g) = rule {
            skip.extend(&g[1..]);
        }
    }
    for flag in verb.flags {
        if skip.contains(&flag.long) {
            continue;
        }
        if flag.long.ends_with("-stdin")
            && verb.flag(flag.long.trim_end_matches("-stdin")).is_some()
        {
            continue;
        }
        line.push(' ');
        line.push_str(flag.long);
        if let Some((_, kind)) = flag.value {
            line.push(' ');
            line.push_str(&sample(kind));
        }
    }
    line
}

/// The `collab-…` command lines the docs show (`$ ssh … git@host "…"`,
/// or in backticks), those the table parses (usage lines with
/// placeholders are not examples).
fn documented_lines() -> Vec<String> {
    let docs = super::crate_dir().join("../../docs");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(docs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let Some(at) = line.find("git@host ") else {
                continue;
            };
            let rest = &line[at + "git@host ".len()..];
            let command = match rest.strip_prefix('"') {
                Some(quoted) => quoted.split('"').next().unwrap_or_default(),
                None => rest
                    .split(['`', '#', '|', '<', '>'])
                    .next()
                    .unwrap_or_default(),
            };
            let command = command.trim();
            if let Ok(tokens) = shell_tokens(command) {
                if parse(&tokens).is_ok() {
                    out.push(command.to_string());
                }
            }
        }
    }
    out
}

/// The example `line` through the tool: its arguments fit the schema, and
/// the line built back from them parses to the same call.
fn check_example(line: &str) {
    let tokens = shell_tokens(line).unwrap();
    let inv = parse(&tokens).unwrap_or_else(|e| panic!("{line}: {e:?}"));
    let verb = inv.verb;
    if tools::excluded(verb).is_some() {
        return;
    }
    let tool = tool_verb(&verb.tool_name()).expect("a tool per row");
    assert_eq!(tool, verb);
    let arguments = arguments_of(&inv, None);
    validate(
        &input_schema(verb),
        &Value::Object(arguments.clone()),
        &verb.tool_name(),
    )
    .unwrap_or_else(|e| panic!("{line}: {e}"));
    let (built, stdin) = command_line(verb, &arguments).unwrap_or_else(|e| panic!("{line}: {e}"));
    let rebuilt_tokens = shell_tokens(&built).unwrap();
    let again = parse(&rebuilt_tokens).unwrap_or_else(|e| panic!("{built}: {e:?}"));
    assert_eq!(again.verb, verb, "{built}");
    assert_eq!(
        arguments_of(&again, stdin.as_deref()),
        arguments,
        "{line} came back as {built}"
    );
}

#[test]
fn every_row_is_a_tool_or_says_why_not() {
    let mut names = Vec::new();
    for verb in VERBS {
        if tools::excluded(verb).is_some() {
            continue;
        }
        let name = verb.tool_name();
        assert!(
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{name}"
        );
        assert!(!names.contains(&name), "{name} twice");
        names.push(name);
    }
    for tool in tools::session_tools() {
        let name = tool["name"].as_str().unwrap().to_string();
        assert!(!names.contains(&name), "{name} twice");
        names.push(name);
    }
    // The names the issue and the spec promise.
    for want in [
        "issue_open",
        "issue_comment",
        "issue_close",
        "issue_show",
        "issue_list",
        "issue_ready",
        "lease_next",
        "lease_acquire",
        "lease_renew",
        "lease_release",
        "patch_list",
        "patch_show",
        "patch_diff",
        "patch_review",
        "patch_merge",
        "repo_list",
        "events_read",
        "whoami",
    ] {
        assert!(names.iter().any(|n| n == want), "no tool {want}");
    }
    for excluded in ["git-upload-pack", "git-receive-pack", "collab-mcp"] {
        assert!(tools_named(excluded).is_none(), "{excluded} is a tool");
    }
}

fn tools_named(family: &str) -> Option<&'static Verb> {
    tool_verbs().find(|v| v.family == family)
}

#[test]
fn input_properties_follow_the_spec() {
    let open = input_schema(find("collab-issue", "open").unwrap());
    assert_eq!(open["properties"]["repo"]["type"], "string");
    assert_eq!(open["properties"]["label"]["type"], "array");
    assert_eq!(open["properties"]["body"]["type"], "string");
    assert!(open["properties"].get("body_stdin").is_none());
    assert_eq!(open["required"], json!(["repo", "title"]));
    let comment = input_schema(find("collab-issue", "comment").unwrap());
    assert_eq!(comment["properties"]["lease_token"]["type"], "integer");
    assert_eq!(comment["properties"]["lease_token"]["minimum"], 1);
    assert_eq!(comment["required"], json!(["repo", "issue", "body"]));
    let acquire = input_schema(find("collab-lease", "acquire").unwrap());
    assert_eq!(
        acquire["properties"]["ttl"]["maximum"],
        crate::limits::MAX_TTL_SECS as i64
    );
    let list = input_schema(find("collab-issue", "list").unwrap());
    assert_eq!(
        list["properties"]["state"]["enum"],
        json!(["open", "closed", "all"])
    );
    let review = input_schema(find("collab-patch", "review").unwrap());
    assert_eq!(review["properties"]["request_changes"]["type"], "boolean");
    assert_eq!(review["properties"]["patch"]["type"], "string");
    let rename = input_schema(find("collab-repo", "rename").unwrap());
    assert!(rename["properties"].get("new_name").is_some());
}

#[test]
fn every_tool_schema_takes_its_rows_example() {
    for verb in tool_verbs() {
        check_example(&example_line(verb));
    }
}

#[test]
fn every_tool_schema_takes_the_documented_examples() {
    let lines = documented_lines();
    // The docs show these at least; a docs change that drops every example
    // should not make this test vacuous.
    assert!(lines.len() >= 10, "only {} examples found", lines.len());
    for line in lines {
        check_example(&line);
    }
}

#[test]
fn schemas_and_calls_refuse_what_the_row_refuses() {
    let acquire = find("collab-lease", "acquire").unwrap();
    let schema = input_schema(acquire);
    let bad: Vec<(Value, &str)> = vec![
        (json!({"repo": "r", "issue": "4f2a", "ttl": 0}), "ttl"),
        (json!({"repo": "r", "issue": "4f2a", "ttl": "300"}), "ttl"),
        (json!({"repo": "r"}), "issue"),
        (json!({"repo": "r", "issue": "4f2a", "owner": "x"}), "owner"),
        (json!({"repo": "", "issue": "4f2a"}), "repo"),
    ];
    for (arguments, what) in bad {
        assert!(
            validate(&schema, &arguments, "acquire").is_err(),
            "{arguments}"
        );
        let err = command_line(acquire, arguments.as_object().unwrap()).unwrap_err();
        assert!(err.contains(what), "{err} should name {what}");
    }
    let list = find("collab-issue", "list").unwrap();
    let arguments = json!({"repo": "r", "state": "everything"});
    assert!(validate(&input_schema(list), &arguments, "list").is_err());
    assert!(command_line(list, arguments.as_object().unwrap()).is_err());
    // A control character would make the server refuse the whole line
    // (found by the `mcp_tool_call` fuzz target): refused here, by name.
    let next = find("collab-lease", "next").unwrap();
    for arguments in [
        json!({"repo": "r", "label": ["a", "b\u{7f}c"]}),
        json!({"repo": "r\nx"}),
        json!({"repo": "r", "note": "two\nlines"}),
    ] {
        let err = command_line(next, arguments.as_object().unwrap()).unwrap_err();
        assert!(err.contains("control characters"), "{err}");
    }
    // The rules between flags are the parser's (also found by fuzzing).
    let comment = find("collab-issue", "comment").unwrap();
    let err = command_line(
        comment,
        json!({"repo": "r", "issue": "4f2a", "lease_token": 3})
            .as_object()
            .unwrap(),
    )
    .unwrap_err();
    assert!(err == "missing argument `body`", "{err}");
    let review = find("collab-patch", "review").unwrap();
    let err = command_line(
        review,
        json!({"repo": "r", "patch": "abcd", "approve": true, "comment": true})
            .as_object()
            .unwrap(),
    )
    .unwrap_err();
    assert!(err.contains("exactly one of"), "{err}");
    // Quoting: a hostile value stays one argument.
    let show = find("collab-issue", "show").unwrap();
    let arguments = json!({"repo": "a'; rm -rf / #", "issue": "$(id)"});
    let (line, _) = command_line(show, arguments.as_object().unwrap()).unwrap();
    let tokens = shell_tokens(&line).unwrap();
    let inv = parse(&tokens).unwrap();
    assert_eq!(inv.arg("repo"), "a'; rm -rf / #");
    assert_eq!(inv.arg("issue"), "$(id)");
}

#[test]
fn a_body_goes_on_standard_input() {
    let comment = find("collab-issue", "comment").unwrap();
    let long = "x".repeat(10_000);
    let arguments = json!({"repo": "r", "issue": "4f2a", "body": long, "lease_token": 7});
    let (line, stdin) = command_line(comment, arguments.as_object().unwrap()).unwrap();
    assert_eq!(
        line,
        "collab-issue comment 'r' '4f2a' --body-stdin --lease-token 7"
    );
    assert_eq!(stdin.as_deref(), Some(long.as_str()));
}

#[test]
fn a_credential_goes_on_standard_input_not_as_a_path() {
    let add = find("collab-repo", "mirror add").unwrap();
    let schema = input_schema(add);
    assert!(
        schema["properties"].get("credential_file").is_none(),
        "{schema}"
    );
    assert_eq!(schema["properties"]["credential"]["type"], "string");
    let arguments = json!({"repo": "r", "url": "https://h/x.git", "credential": "tok"});
    let (line, stdin) = command_line(add, arguments.as_object().unwrap()).unwrap();
    assert_eq!(
        line,
        "collab-repo mirror add 'r' 'https://h/x.git' --credential-stdin"
    );
    assert_eq!(stdin.as_deref(), Some("tok"));
    let path = json!({"repo": "r", "url": "https://h/x.git", "credential_file": "/etc/shadow"});
    let refused = command_line(add, path.as_object().unwrap()).unwrap_err();
    assert_eq!(refused, "unknown argument `credential_file`");
}

/// docs/mcp.md holds the tool list the table writes; with
/// `UPDATE_VERB_DOCS=1` this rewrites it instead of failing.
#[test]
fn the_docs_tool_list_is_the_table() {
    let path = super::crate_dir().join("../../docs/mcp.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = doc
        .find(tools::BEGIN)
        .expect("docs/mcp.md has the BEGIN marker")
        + tools::BEGIN.len();
    let end = doc[start..].find(tools::END).expect("and the END marker") + start;
    let want = format!(
        "{}\n\n{}{}",
        &doc[..start],
        tools::tools_markdown(),
        &doc[end..]
    );
    if want != doc {
        if std::env::var_os("UPDATE_VERB_DOCS").is_some() {
            std::fs::write(&path, want).unwrap();
        } else {
            panic!(
                "{} is out of date with the verb table: run UPDATE_VERB_DOCS=1 cargo test -p collab-proto",
                path.display()
            );
        }
    }
}
