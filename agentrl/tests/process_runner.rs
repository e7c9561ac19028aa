//! Chapter 3: the process runner, end to end with its child binary.
//!
//! Integration tests, because only they (and benches) are told where cargo
//! put the `sandbox-child` binary.

use agentrl::gym::task_zero;
use agentrl::runner::{Guarded, ProcessRunner, RunLimits, Test, TestRunner, HOSTILE_SOURCES};
use std::time::Duration;

fn runner() -> ProcessRunner {
    ProcessRunner::new(env!("CARGO_BIN_EXE_sandbox-child"))
}

fn one() -> Vec<Test> {
    vec![Test::new("f(1)", "1")]
}

#[test]
fn the_child_gives_the_same_lines_as_the_in_process_runner() {
    let task = task_zero();
    for source in [&task.source, &task.fixed] {
        for tests in [&task.public_tests, &task.hidden_tests] {
            assert_eq!(
                runner().run(source, tests),
                Guarded::shared().run(source, tests)
            );
        }
    }
    for (name, source) in HOSTILE_SOURCES {
        let lines = runner().run(source, &one());
        assert_eq!(lines, Guarded::shared().run(source, &one()), "{name}");
        assert!(lines[0].text.starts_with("FAIL "), "{name}");
    }
}

#[test]
fn the_parent_kills_a_child_that_outstays_the_wall_clock() {
    // In-process limits off: only the operating system and the parent stop the loop.
    let mut runner = runner();
    runner.limits = RunLimits {
        max_operations: 0,
        cpu_time_ms: 60_000,
        ..RunLimits::default()
    };
    runner.wall_clock = Duration::from_millis(300);
    let lines = runner.run("fn f(x){\n    loop { x += 1; }\n}\n", &one());
    assert_eq!(lines.len(), 1);
    assert_eq!(
        lines[0].text,
        "FAIL runner error: killed after the wall-clock limit of 300 ms"
    );
}

#[test]
fn the_kernel_kills_a_child_that_uses_too_much_cpu() {
    let mut runner = runner();
    runner.limits = RunLimits {
        max_operations: 0,
        cpu_time_ms: 60_000,
        ..RunLimits::default()
    };
    runner.cpu_seconds = 1;
    runner.wall_clock = Duration::from_secs(20);
    let lines = runner.run("fn f(x){\n    loop { x += 1; }\n}\n", &one());
    assert!(
        lines[0]
            .text
            .starts_with("FAIL runner error: child killed by SIGXCPU"),
        "{}",
        lines[0].text
    );
}

#[test]
fn the_kernel_stops_a_child_that_maps_too_much_memory() {
    let mut runner = runner();
    runner.limits = RunLimits {
        max_operations: 0,
        max_string_len: 0,
        cpu_time_ms: 60_000,
        ..RunLimits::default()
    };
    runner.memory_bytes = 256 << 20;
    runner.wall_clock = Duration::from_secs(20);
    let lines = runner.run(
        "fn f(x){\n    let s = \"ab\";\n    loop { s += s; }\n}\n",
        &one(),
    );
    assert!(
        lines[0]
            .text
            .starts_with("FAIL runner error: child killed by"),
        "{}",
        lines[0].text
    );
}
