//! Chapter 1 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch01`.
//!
//! Everything you need is in `agentrl::clamp` (the task: sources, tests, edit
//! operations), `agentrl::sandbox` (`run_tests`, `TestCase`) and
//! `agentrl::episode` (`run_episode`, `random_rollouts`, `RANDOM_MENU`).
#![allow(unused_variables)] // the parameters are unused until you write the bodies

use agentrl::sandbox::TestCase;

// ---------------------------------------------------------------------------
// Exercise 1.1: a third edit operation
// ---------------------------------------------------------------------------

/// Exercise 1.1 (a): the edit operation `drop_min`.
///
/// It rewrites the expression `min(lower, max(value, upper))` into
/// `max(value, upper)` wherever it occurs in `source`, and leaves every other
/// character alone (a source without that expression comes back unchanged).
/// Like `swap_minmax` and `hardcode_tests` in `agentrl::clamp`, it maps a
/// whole source file to a new one.
///
/// Once it works, run the public and hidden tests on
/// `drop_min(CLAMP_BUGGY)` and look at which ones pass.
pub fn drop_min(source: &str) -> String {
    todo!("Exercise 1.1: rewrite min(lower, max(value, upper)) as max(value, upper)")
}

/// Exercise 1.1 (b): a reward that counts public tests.
///
/// The fraction of `PUBLIC_TESTS` that `source` passes, in `[0, 1]`. A source
/// that does not compile passes none of them. Use it to compare
/// `drop_min(CLAMP_BUGGY)` with `CLAMP_BUGGY`: which one would such a reward
/// prefer?
pub fn public_fraction(source: &str) -> f64 {
    todo!("Exercise 1.1: the fraction of PUBLIC_TESTS that source passes")
}

// ---------------------------------------------------------------------------
// Exercise 1.2: a hidden test the exploit passes by accident
// ---------------------------------------------------------------------------

/// Exercise 1.2: a new hidden test that the hacked source passes by accident.
///
/// Return a test case `clamp(v, lo, hi)`, with plain number literals as its
/// three arguments and its correct expected value
/// (`CLAMP_FIXED` must pass it) that `hardcode_tests(CLAMP_BUGGY)` also
/// passes, although that source still has the bug. Its inputs must differ
/// from those of every public test (the hacked source answers those by rote)
/// and from those of the existing hidden tests (it is a *new* test).
///
/// `TestCase` holds `&'static str`, so write the call and the expected value
/// as string literals, for example `TestCase { call: "clamp(1, 2, 3)",
/// expected: "2" }`.
pub fn accidental_hidden_test() -> TestCase {
    todo!("Exercise 1.2: a hidden test that hardcode_tests(CLAMP_BUGGY) passes by accident")
}

// ---------------------------------------------------------------------------
// Exercise 1.3: the random agent with another menu
// ---------------------------------------------------------------------------

/// Exercise 1.3: `random_rollouts` with the menu as a parameter.
///
/// Run `n` episodes of the uniformly random policy over `menu` and return
/// `(success rate, hacked rate)`: the fraction of episodes with hidden-test
/// reward 1, and the fraction that were submitted with a source that passes
/// every public test but earned reward 0.
///
/// Draw the picks exactly as `agentrl::episode::random_rollouts` does, so that
/// `RANDOM_MENU` reproduces its numbers: call `tch::manual_seed(seed)` once,
/// then for each episode draw all `max_turns` indices with one
/// `Tensor::randint(menu.len() as i64, [max_turns as i64], (Kind::Int64, Device::Cpu))`.
///
/// Then drop the malformed message (`"read the file"`) from the menu.
/// Predict first, then measure: does success go up or down, and by how much?
/// And the hacked fraction?
pub fn random_rollouts_with_menu(menu: &[&str], n: usize, seed: i64, max_turns: usize) -> (f64, f64) {
    todo!("Exercise 1.3: random rollouts over a given menu, returning (success rate, hacked rate)")
}

// ---------------------------------------------------------------------------
// Exercise 1.4: partial credit
// ---------------------------------------------------------------------------

/// Exercise 1.4: a partial-credit reward.
///
/// The fraction of `HIDDEN_TESTS` that `source` passes, in `[0, 1]` (0 for a
/// source that does not compile). Compute it for the buggy, the hacked
/// (`hardcode_tests(CLAMP_BUGGY)`) and the fixed source. Which behaviour does
/// a reward like this pay for that the all-or-nothing reward does not?
pub fn partial_credit(source: &str) -> f64 {
    todo!("Exercise 1.4: the fraction of HIDDEN_TESTS that source passes")
}

// ---------------------------------------------------------------------------
// Exercise 1.5: how long can an episode be?
// ---------------------------------------------------------------------------

/// Exercise 1.5: the longest horizon that still succeeds often enough.
///
/// If every turn succeeds independently with probability `p` (`0 < p < 1`), an
/// episode of `H` turns succeeds with probability `p^H`. Return the largest
/// `H` with `p^H` *strictly* above `threshold` (`0 < threshold < 1`). `H = 0`
/// (no turn at all, success 1) always qualifies, so the answer is 0 when even
/// one turn is too many (`p <= threshold`).
///
/// Try `p = 0.97` and `p = 0.99` at `threshold = 0.5`. Watch the strict
/// inequality: at `p = 0.5, threshold = 0.25`, `H = 2` gives exactly 0.25,
/// which is not above it.
pub fn largest_horizon(p: f64, threshold: f64) -> u32 {
    todo!("Exercise 1.5: the largest H with p^H > threshold")
}

// ---------------------------------------------------------------------------
// Exercise 1.6: group size and informative groups
// ---------------------------------------------------------------------------

/// Exercise 1.6 (a): the chance that a group carries a learning signal.
///
/// A task is solved with probability `p` per attempt; a group of `g`
/// independent attempts is informative when it holds at least one success and
/// at least one failure. Return that probability, `1 - p^g - (1 - p)^g`.
pub fn informative_fraction(p: f64, g: u32) -> f64 {
    todo!("Exercise 1.6: the probability that a group of g attempts has mixed rewards")
}

/// Exercise 1.6 (b): the pass rates at which most groups are informative.
///
/// Return `Some((lo, hi))`, the interval of pass rates `p` in `(0, 1)` where
/// `informative_fraction(p, g) > level` (for `0 <= level < 1`), or `None`
/// when no pass rate gets there. The endpoints are the exact roots of
/// `informative_fraction(p, g) = level`, to within `1e-6`; a grid search is
/// not precise enough.
///
/// Hint: for `g >= 2` the fraction is symmetric about `p = 1/2`
/// (`f(p) = f(1 - p)`) and increases on `[0, 1/2]`, so one bisection on
/// `[0, 1/2]` gives `lo`, and `hi = 1 - lo`. Compare `g = 2`, `8` and `32`
/// at `level = 0.5`.
pub fn informative_range(g: u32, level: f64) -> Option<(f64, f64)> {
    todo!("Exercise 1.6: the interval of pass rates where the informative fraction exceeds level")
}
