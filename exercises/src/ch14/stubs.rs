//! Chapter 14 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch14`.
//!
//! The tests compare your answers with hand-checked values, with
//! consequences of each statement checked on random inputs, and with the
//! library (`agentrl::packing`, `agentrl::curriculum`). The answers are plain
//! Rust on numbers; do not call the function an exercise is checked against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

// ---------------------------------------------------------------------------
// Exercise 14.1: first-fit decreasing
// ---------------------------------------------------------------------------

/// Exercise 14.1: pack sequences of `lengths` into rows of `capacity`
/// tokens. Take the sequences longest first (equal lengths in the order of
/// their indices) and put each into the first row, in the order the rows
/// were opened, that still has room for it; open a new row when none has.
/// Returns each row's sequence indices in the order they were put in.
/// Panics if a sequence is longer than `capacity`.
pub fn first_fit_decreasing(lengths: &[usize], capacity: usize) -> Vec<Vec<usize>> {
    todo!("Exercise 14.1: sort the indices by length, longest first, then place each in the first row with room")
}

// ---------------------------------------------------------------------------
// Exercise 14.2: micro-batch weights
// ---------------------------------------------------------------------------

/// Exercise 14.2: a batch is cut into micro-batches; micro-batch k holds
/// `rows[k]` sequences and `tokens[k]` action tokens. Return the weight of
/// each micro-batch's own loss (averaged as if it were the whole batch) such
/// that the weighted sum is the whole batch's loss under `norm`:
/// `"sequence_mean"`, `"token_mean"` or `"constant"` (Chapter 9's three
/// normalisations). Panics on another name.
pub fn microbatch_weights(norm: &str, rows: &[usize], tokens: &[f64]) -> Vec<f64> {
    todo!("Exercise 14.2: each micro-batch's share of the normaliser")
}

// ---------------------------------------------------------------------------
// Exercise 14.3: the chance of signal
// ---------------------------------------------------------------------------

/// Exercise 14.3: after `successes` successes in `trials` episodes of a
/// task (both may be fractional, after decay), the pass rate p has the
/// Beta(successes + 1, trials − successes + 1) posterior. Return the
/// probability that a group of `g` new episodes has at least one success and
/// at least one failure: 1 − E[p^g] − E[(1 − p)^g] under that posterior.
pub fn group_signal_probability(successes: f64, trials: f64, g: usize) -> f64 {
    todo!("Exercise 14.3: the moments of a Beta distribution, E[p^g] is the product over i < g of (a + i) / (a + b + i)")
}
