//! An MCP `tools/call`, as a client sends it: JSON with a tool `name` and
//! `arguments`, turned into the verb's command line by the generator
//! (`collab_proto::verbs::tools::command_line`). Never panics; a line it
//! builds is within the command length, splits as a shell would, and
//! parses back to the same verb, so a tool call can only ever reach the
//! verb it names, with quoted values.
#![no_main]
use collab_proto::tokens::{shell_tokens, MAX_COMMAND_LEN};
use collab_proto::verbs::{self, tools};
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    let Ok(call) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Some(name) = call["name"].as_str() else {
        return;
    };
    let Some(verb) = tools::tool_verb(name) else {
        return;
    };
    let Some(arguments) = call["arguments"].as_object() else {
        return;
    };
    let Ok((line, _stdin)) = tools::command_line(verb, arguments) else {
        return;
    };
    assert!(line.len() <= MAX_COMMAND_LEN);
    let tokens = shell_tokens(&line).expect("a built line splits");
    let invocation = verbs::parse(&tokens).expect("a built line parses");
    assert_eq!(invocation.verb, verb, "{line}");
});
