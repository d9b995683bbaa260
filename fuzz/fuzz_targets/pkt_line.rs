//! What receive-pack sends the proc-receive hook: pkt-line sections (the
//! version line, the commands, the push options), read as the hook reads
//! them, then the commands parsed as ref updates.
#![no_main]
use collab_server::hooks::{review, updates};
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    for _ in 0..3 {
        match review::read_section(&mut input) {
            Ok(lines) => {
                let _ = updates::parse(&lines.join("\n"));
            }
            Err(_) => return,
        }
    }
});
