//! Chapter 12 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch12`.
//!
//! The tests compare your answers with hand-checked values, with
//! consequences of each statement checked on random inputs, and with the
//! library (`agentrl::horizon`) on the repair MDP and on gym episodes. The
//! answers themselves are plain Rust on numbers and strings; do not call the
//! function an exercise is checked against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

// ---------------------------------------------------------------------------
// Exercise 12.1: a soft overlong penalty
// ---------------------------------------------------------------------------

/// Exercise 12.1: DAPO's soft overlong penalty, counted in turns. An
/// episode of `turns` turns under a budget of `budget` turns, the last
/// `cache` of which are the penalty's ramp, gets
///
/// - 0 when it was not truncated and `turns <= budget - cache`;
/// - `(budget - cache - turns) / cache` when it was not truncated and
///   `budget - cache < turns <= budget`, a straight line from 0 down to -1;
/// - -1 when the budget truncated it (whatever `turns` is).
///
/// `cache` is at least 1 and at most `budget`.
pub fn overlong_penalty(turns: usize, truncated: bool, budget: usize, cache: usize) -> f64 {
    todo!("Exercise 12.1: zero, then a ramp down to -1 over the last `cache` turns, and -1 if truncated")
}

// ---------------------------------------------------------------------------
// Exercise 12.2: the shaped return
// ---------------------------------------------------------------------------

/// Exercise 12.2: the discounted return of an episode under potential-based
/// shaping. With $n$ = `rewards.len()` turns, `rewards[t]` is the reward of
/// turn `t` (t = 0 .. n-1) and `potentials[t]` is $\Phi(s_t)$ for the states
/// $s_0, \dots, s_n$ (`potentials.len() == n + 1`). The episode ends in
/// $s_n$, a terminal state, whose potential counts as 0 whatever
/// `potentials[n]` says. Return
///
/// $$\sum_{t=0}^{n-1} \gamma^t \bigl(r_t + \gamma \Phi(s_{t+1}) - \Phi(s_t)\bigr).$$
///
/// Panic if the lengths do not fit.
pub fn shaped_return(rewards: &[f64], potentials: &[f64], gamma: f64) -> f64 {
    todo!("Exercise 12.2: add gamma * phi(next) - phi(now) to every reward, with phi = 0 at the end")
}

// ---------------------------------------------------------------------------
// Exercise 12.3: repeated calls
// ---------------------------------------------------------------------------

/// Exercise 12.3: whether an episode's `actions` contain a repeated call
/// that cannot change anything: two consecutive actions that are the same
/// well-formed call of `read`, `test` or `edit` (same tool, same argument).
/// A call is well formed, as the gym's parser reads it, when the action
/// with whitespace at both ends removed is `<call>`, optional whitespace,
/// the tool, optionally whitespace and one argument, optional whitespace and
/// `</call>`, where tool and argument are words of ASCII letters, digits and
/// `_`. Two consecutive `undo` or `submit` calls do not count, nor do
/// malformed actions.
pub fn repeated_call(actions: &[&str]) -> bool {
    todo!("Exercise 12.3: parse each action and compare neighbours")
}
