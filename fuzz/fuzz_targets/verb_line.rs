//! An SSH exec command line, as a client sends it: split into words as a
//! shell would, then parsed against the verb table. Never panics; every
//! line is either an invocation of a verb in the table or a refusal.
#![no_main]
use collab_proto::tokens::shell_tokens;
use collab_proto::verbs;
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(tokens) = shell_tokens(line) else {
        return;
    };
    if let Ok(invocation) = verbs::parse(&tokens) {
        // What parsed names a row of the table.
        let verb = invocation.verb;
        assert!(verbs::find(verb.family, verb.action).is_some());
    }
    // The server's own reading of the line (aliases, git verbs, shapes).
    let _ = collab_server::service::command::parse_exec_command(line);
});
