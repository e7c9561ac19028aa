//! The in-process runner on any source: the bytes are a Rhai source, run
//! against the tests `f(1)` and `f("a")`; its lines must have the promised
//! shape (`agentrl::fuzzing::check_runner`).
#![no_main]
use agentrl::fuzzing::{check_runner, Target};
use agentrl::runner::{ProcessRunner, Test};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static TESTS: LazyLock<Vec<Test>> =
    LazyLock::new(|| vec![Test::new("f(1)", "1"), Test::new("f(\"a\")", "\"a\"")]);
static CHILD: LazyLock<ProcessRunner> =
    LazyLock::new(|| ProcessRunner::new(agentrl::fuzzing::child_exe()));

fuzz_target!(|data: &[u8]| {
    let source = String::from_utf8_lossy(data);
    if let Err(problem) = check_runner(Target::Guarded, &source, &TESTS, &CHILD) {
        panic!("{problem}");
    }
});
