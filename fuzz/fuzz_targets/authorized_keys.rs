//! An `authorized_keys` file: key lines with their options (`from=`,
//! `expiry-time=`, …), as the server reads it at every change.
#![no_main]
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = collab_server::identity::parse_authorized_keys(text);
        for line in text.lines().take(64) {
            let _ = collab_server::identity::options::KeyOptions::parse(line);
        }
    }
});
