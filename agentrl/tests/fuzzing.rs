//! Chapter 19: the fuzzer over the child-process runner, end to end with its child binary
//! (only integration tests are told where cargo put `sandbox-child`).

use agentrl::fuzzing::{check_lines, check_runner, fuzz, FuzzConfig, Pools, Target, FOUND_SOURCES};
use agentrl::runner::{Guarded, ProcessRunner, Test, TestRunner};
use std::path::PathBuf;

fn child() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sandbox-child"))
}

#[test]
fn the_child_process_runner_keeps_every_property_under_fuzzing() {
    let config = FuzzConfig {
        seed: 5,
        threads: 2,
        child: child(),
        record: None,
    };
    let report = fuzz(
        Target::ProcessRunner,
        400,
        &config,
        &Pools::standard(),
        &|_| {},
    );
    assert!(
        report.properties_hold(),
        "{:#?}",
        report.findings.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        report.outcomes.len() >= 4,
        "too few kinds of outcome: {:?}",
        report.outcomes
    );
}

#[test]
fn the_found_sources_give_the_same_lines_in_the_child() {
    let tests = vec![Test::new("f(1)", "1")];
    for (name, source) in FOUND_SOURCES {
        let lines = ProcessRunner::new(child()).run(source, &tests);
        assert_eq!(lines, Guarded::shared().run(source, &tests), "{name}");
        assert_eq!(check_lines(&lines, &tests, 80), None, "{name}");
    }
}

#[test]
fn the_runners_are_checked_against_each_other() {
    // A loop of 5 000 steps passes in process and in a child with the same
    // limits; a child allowed 1 000 operations fails it, and the differential
    // check reports the disagreement.
    let source = "fn f(x){\n    let s = 0;\n    for i in 0..5000 { s += x; }\n    s\n}\n";
    let tests = vec![Test::new("f(1)", "5000")];
    let same = ProcessRunner::new(child());
    assert_eq!(
        check_runner(Target::ProcessRunner, source, &tests, &same),
        Ok("all pass".to_string())
    );
    let mut planted = ProcessRunner::new(child());
    planted.limits.max_operations = 1_000;
    let outcome = check_runner(Target::ProcessRunner, source, &tests, &planted);
    assert!(
        outcome
            .as_ref()
            .is_err_and(|e| e.starts_with("the runners disagree")),
        "{outcome:?}"
    );
}
