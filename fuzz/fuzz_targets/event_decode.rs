//! A collaboration event as it comes out of git (anyone who can push
//! writes these): decoded, and when it decodes, its canonical encoding
//! decodes to the same event.
#![no_main]
use collab_record::event::Event;
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = Event::from_canonical_json(data) {
        let again = Event::from_canonical_json(&event.to_canonical_json())
            .expect("a canonical encoding decodes");
        assert_eq!(again.to_canonical_json(), event.to_canonical_json());
    }
});
