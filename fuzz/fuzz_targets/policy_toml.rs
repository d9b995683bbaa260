//! A repository's `collab-policy.toml`, which its writers control.
#![no_main]
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = collab_server::repos::RepoPolicy::parse(text);
    }
});
