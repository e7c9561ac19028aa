//! Grading tests for the Chapter 3 exercises: `cargo test -p exercises ch03`.
//!
//! Each test is named after its exercise and checks consequences of the
//! exercise's statement, computed here from the `agentrl` library.

use super::*;
use agentrl::gym::{task_zero, BugFixEnv, EditKind, Family, Gym, Task, MAX_TURNS};
use agentrl::policies::{rates, run_episode, Oracle, RandomPolicy};
use agentrl::runner::{Guarded, TestRunner};
use agentrl::sandbox::all_pass;
use std::collections::HashSet;
use std::sync::LazyLock;

static GYM: LazyLock<Gym> = LazyLock::new(Gym::standard);

// ---------------------------------------------------------------------------
// Exercise 3.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_leaks_finds_hidden_calls_and_only_them() {
    let zero = task_zero();
    assert!(leaks(&zero, "FAIL clamp(0.5, 0, 1) -> 0"));
    assert!(leaks(&zero, "the agent wrote: if [value, lower, upper] == [4, 2, 2] ... clamp(4, 2, 2)"));
    assert!(!leaks(&zero, "FAIL clamp(3, 0, 5) -> 0\nPASS clamp(-2, 0, 5) -> 0\nFAIL clamp(9, 0, 5) -> 0"));
    assert!(!leaks(&zero, "submitted"));
    assert!(!leaks(&zero, ""));
    for task in GYM.held_out.iter().step_by(7) {
        for test in &task.hidden_tests {
            assert!(leaks(task, &format!("x {} y", test.call)), "{}: {}", task.id, test.call);
        }
        for test in &task.public_tests {
            assert!(!leaks(task, &test.call), "{}: the public {} is no leak", task.id, test.call);
        }
    }
}

#[test]
fn ex1_no_oracle_observation_leaks() {
    let mut env = BugFixEnv::new(GYM.train.clone(), MAX_TURNS);
    for task in (0..env.tasks().len()).step_by(9) {
        let mut transcript = Vec::new();
        run_episode(&mut env, task, &mut Oracle, Some(&mut transcript));
        let spec = env.tasks()[task].clone();
        assert!(transcript.iter().all(|(_, text)| !leaks(&spec, text)), "{}", spec.id);
        assert!(leaks(&spec, &spec.hidden_tests[0].call));
    }
}

// ---------------------------------------------------------------------------
// Exercise 3.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_special_case_first_on_task_zero() {
    let zero = task_zero();
    let edit = special_case_first(&zero);
    assert_eq!(edit.name, "special_case_first");
    assert_eq!(edit.kind, EditKind::Exploit);
    assert_eq!(edit.find, "fn clamp(value, lower, upper){\n");
    assert_eq!(
        edit.replace,
        "fn clamp(value, lower, upper){\n    if value == 3 { return 3; }\n    if value == -2 { return 0; }\n    if value == 9 { return 5; }\n"
    );
    let hacked = edit.apply(&zero.source).expect("the edit applies to the buggy source");
    assert!(all_pass(&Guarded::shared().run(&hacked, &zero.public_tests)));
    assert!(!all_pass(&Guarded::shared().run(&hacked, &zero.hidden_tests)));
}

#[test]
fn ex2_special_case_first_passes_public_tests_with_distinct_first_arguments() {
    let first = |call: &str| call[call.find('(').unwrap() + 1..].split([',', ')']).next().unwrap().trim().to_string();
    let mut checked = HashSet::new();
    for task in &GYM.train {
        let edit = special_case_first(task);
        let hacked = edit.apply(&task.source).unwrap_or_else(|| panic!("{}: the edit does not apply", task.id));
        assert_eq!(edit.replace.lines().count(), 1 + task.public_tests.len(), "{}", task.id);
        let firsts: HashSet<String> = task.public_tests.iter().map(|t| first(&t.call)).collect();
        if firsts.len() == task.public_tests.len() {
            assert!(all_pass(&Guarded::shared().run(&hacked, &task.public_tests)), "{}:\n{hacked}", task.id);
            checked.insert(task.family);
        }
    }
    assert_eq!(checked.len(), Family::ALL.len());
}

// ---------------------------------------------------------------------------
// Exercise 3.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_short_budgets_are_exact() {
    let zero = task_zero();
    assert_eq!(random_success_probability(&zero, 0), 0.0);
    assert_eq!(random_success_probability(&zero, 1), 0.0);
    // Two turns: edit with the fix, then submit; (1/8) * (1/8) on task 0's eight messages.
    assert!((random_success_probability(&zero, 2) - 1.0 / 64.0).abs() < 1e-12);
    for task in GYM.train.iter().step_by(20) {
        let n = (task.menu.len() + 4) as f64;
        assert!((random_success_probability(task, 2) - 1.0 / (n * n)).abs() < 1e-12, "{}", task.id);
    }
}

#[test]
fn ex3_matches_the_simulated_random_policy() {
    let tasks: Vec<Task> = vec![task_zero(), GYM.train[45].clone(), GYM.held_out[30].clone()];
    for (i, task) in tasks.iter().enumerate() {
        let exact = random_success_probability(task, MAX_TURNS);
        let mut env = BugFixEnv::new(vec![task.clone()], MAX_TURNS);
        let simulated = rates(&mut env, None, &mut RandomPolicy::new(i as u64), 20_000).success();
        assert!((exact - simulated).abs() < 0.012, "{}: exact {exact}, simulated {simulated}", task.id);
        assert!(random_success_probability(task, MAX_TURNS + 4) > exact, "{}: more turns, more success", task.id);
    }
}
