//! `git push -o` options, as the hooks read them: the review options
//! (`patch=`, `title=`, …) and the fencing tokens (`collab-lease=`).
#![no_main]
use collab_server::hooks::{fencing, review};
use libfuzzer_sys::fuzz_target;

collab_fuzz::capped_allocator!();

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let options: Vec<String> = text.split('\n').map(str::to_string).collect();
    let _ = review::review_options(&options);
    let _ = fencing::lease_options(&options);
});
