//! The governance file (`collab-governance.toml` in the admin repository),
//! which governance writers control.
#![no_main]
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = collab_server::governance::conf::GovernanceConf::parse(text);
    }
});
