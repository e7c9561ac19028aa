//! The sandbox's bound on what all of a call's variables hold together
//! (Chapter 1's `max_live_bytes`), measured with an allocator that counts:
//! a script that keeps storing strings into a map, each within the limits on
//! one value, is stopped before it holds more than a few megabytes.

use agentrl::runner::{Guarded, Test, TestRunner, HOSTILE_SOURCES};
use agentrl::sandbox::Sandbox;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

struct Counting;
static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Relaxed);
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes allocated at the peak of `run`, above what was allocated before it.
fn peak_of(run: impl FnOnce()) -> usize {
    let before = NOW.load(Relaxed);
    PEAK.store(before, Relaxed);
    run();
    PEAK.load(Relaxed) - before
}

fn growing_map() -> &'static str {
    HOSTILE_SOURCES
        .iter()
        .find(|(name, _)| *name == "growing map")
        .map(|(_, source)| *source)
        .unwrap()
}

// One test function, so that no other test allocates while one is measured.
#[test]
fn a_growing_map_is_stopped_within_a_few_megabytes() {
    // Unbounded, this script would store 20 000 strings of 9 000 characters
    // (180 MB); the bound is 1 MB, checked every 32 variable reads.
    let sandbox = Sandbox::shared();
    let ast = sandbox.compile(growing_map()).unwrap();
    let mut result = Ok(rhai::Dynamic::UNIT);
    let peak = peak_of(|| result = sandbox.call(&ast, "f(1)"));
    let err = result.unwrap_err();
    assert!(
        err.contains("Data held by the script's variables too large"),
        "{err}"
    );
    assert!(peak < 4_000_000, "peak {peak} bytes");

    // The same through the test runner: a FAIL line, not an exhausted machine.
    let mut text = String::new();
    let peak = peak_of(|| {
        text = Guarded::shared().run(growing_map(), &[Test::new("f(1)", "1")])[0]
            .text
            .clone()
    });
    assert!(text.starts_with("FAIL f(1) -> error: Data held"), "{text}");
    assert!(peak < 4_000_000, "peak {peak} bytes");

    // A map of a hundred short entries is far inside the bound.
    let small =
        "fn f(x){\n    let m = #{};\n    for i in 0..100 { m[`${i}`] = i * x; }\n    m.len()\n}\n";
    let lines = Guarded::shared().run(small, &[Test::new("f(1)", "100")]);
    assert!(lines[0].passed, "{}", lines[0].text);
}
