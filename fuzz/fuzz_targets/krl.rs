//! `ssh.revoked_keys`: an OpenSSH KRL (binary, from `ssh-keygen -k`) or a
//! list of keys, re-read whenever it changes. Every length in a KRL is a
//! claim about the bytes that follow; none may make us allocate more than
//! the input holds (lookups, bitmaps included, are proptested in
//! `identity::krl::tests`).
#![no_main]
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    use collab_server::identity::krl::Revoked;
    if let Ok(revoked) = Revoked::parse(data) {
        let _ = revoked.summary();
    }
});
