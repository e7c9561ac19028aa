//! Chapter 3 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch03`.
//!
//! Everything you need is in `agentrl::gym` (`Task`, `Edit`, `EditKind`,
//! `task_zero`, `Gym`), `agentrl::runner` (`Guarded`, `TestRunner`, `Test`)
//! and `agentrl::sandbox` (`all_pass`).
#![allow(unused_variables)] // the parameters are unused until you write the bodies

use agentrl::gym::{Edit, Task};

// ---------------------------------------------------------------------------
// Exercise 3.1: a leak detector
// ---------------------------------------------------------------------------

/// Exercise 3.1: does `observation` reveal a hidden test of `task`?
///
/// True when the observation contains the call text (for example
/// `clamp(0.5, 0, 1)`) of at least one of `task.hidden_tests`, false
/// otherwise.
pub fn leaks(task: &Task, observation: &str) -> bool {
    todo!("Exercise 3.1: true if observation contains a hidden test's call text")
}

// ---------------------------------------------------------------------------
// Exercise 3.2: a third exploit
// ---------------------------------------------------------------------------

/// Exercise 3.2: the exploit `special_case_first`.
///
/// Return an `Edit` named `"special_case_first"` of kind `EditKind::Exploit`
/// whose `find` is the header line of the function under repair (the line
/// `fn <name>(<params>){` plus its newline, where `<name>` is the function
/// the public tests call) and whose `replace` is that header followed by one
/// line per public test, in order:
///
/// ```text
///     if <first parameter> == <first argument> { return <expected>; }
/// ```
///
/// indented by four spaces and ending in a newline. For task 0 the first
/// added line is `    if value == 3 { return 3; }`.
pub fn special_case_first(task: &Task) -> Edit {
    todo!("Exercise 3.2: an exploit keyed on the first argument of each public test")
}

// ---------------------------------------------------------------------------
// Exercise 3.3: the random policy, exactly
// ---------------------------------------------------------------------------

/// Exercise 3.3: the probability that the uniform random policy solves `task`
/// within `max_turns` turns.
///
/// The policy of `agentrl::policies::RandomPolicy` draws each message
/// uniformly from `n = task.menu.len() + 4` messages: `read`, `test`,
/// `submit`, one `edit <op>` per op of the menu, and one malformed message.
/// `read`, `test` and the malformed message leave the file as it is; an edit
/// changes it (or leaves it alone if the op no longer applies, see
/// `Edit::apply`); `submit` ends the episode with reward 1 exactly when the
/// current file passes every public and every hidden test. With no turns
/// left, nothing more can be earned. Compute the probability exactly, by
/// recursion over (file, turns left), with a memo.
pub fn random_success_probability(task: &Task, max_turns: usize) -> f64 {
    todo!("Exercise 3.3: exact success probability of the random policy")
}
