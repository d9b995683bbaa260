//! The bytes a terminal sends the terminal UI (`tui::keys`), fed in two
//! reads split at the first byte's value: keys come out, nothing panics,
//! and what stays pending for the next read is bounded.
#![no_main]
use collab_server::tui::keys::{Parser, MAX_PENDING};
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    let mut parser = Parser::default();
    let mut keys = parser.feed(&data[..split]);
    keys.extend(parser.feed(&data[split..]));
    assert!(keys.len() <= data.len());
    assert!(parser.pending() <= MAX_PENDING);
});
