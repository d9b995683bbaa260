//! What every fuzz target shares: an allocator that turns any single
//! allocation over [`LIMIT`] into a crash (libFuzzer then keeps the input),
//! because "a small input makes us allocate a lot" is one of the bugs we
//! fuzz for (russh's 2026 pre-auth advisories were exactly that). It works
//! without a sanitizer, so the targets build with `cargo fuzz -s none`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write as _;

/// The largest single allocation a target may make: 16 MiB.
pub const LIMIT: usize = 16 << 20;

/// [`System`], refusing allocations over [`LIMIT`] by aborting.
pub struct Capped;

fn too_big(size: usize) -> ! {
    // No allocation from here on: a fixed message to the unbuffered stderr.
    let _ = std::io::stderr().write_all(b"collab-fuzz: an allocation over 16 MiB\n");
    let _ = size;
    std::process::abort()
}

unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT {
            too_big(layout.size());
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT {
            too_big(layout.size());
        }
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > LIMIT {
            too_big(new_size);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Every target's allocator.
#[macro_export]
macro_rules! capped_allocator {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::Capped = $crate::Capped;
    };
}
