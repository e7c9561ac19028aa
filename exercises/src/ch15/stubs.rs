//! Chapter 15 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch15`.
//!
//! The tests compare your answers with hand-checked values, with extreme
//! inputs, and with the library (`agentrl::preference`). The answers are
//! plain Rust on numbers; do not call the function an exercise is checked against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

// ---------------------------------------------------------------------------
// Exercise 15.1: the DPO loss of one pair, stably
// ---------------------------------------------------------------------------

/// Exercise 15.1: the DPO loss of one pair and its derivative with respect
/// to `chosen`. `chosen` and `rejected` are the summed action log-probs of
/// the two episodes under the policy, `ref_chosen` and `ref_rejected` under
/// the reference; with h = β ((chosen − ref_chosen) − (rejected − ref_rejected))
/// the loss is −(1 − ε) ln σ(h) − ε ln σ(−h). Returns (loss, ∂loss/∂chosen).
/// Both must be finite and accurate for |h| in the thousands.
pub fn dpo_pair(beta: f64, label_smoothing: f64, chosen: f64, rejected: f64, ref_chosen: f64, ref_rejected: f64) -> (f64, f64) {
    todo!("Exercise 15.1: h, then −ln σ(x) in a form that neither overflows nor loses digits, then the chain rule")
}

// ---------------------------------------------------------------------------
// Exercise 15.2: how many pairs
// ---------------------------------------------------------------------------

/// Exercise 15.2: `rewards` holds groups of `group` consecutive episodes of
/// one task each (the last group may be shorter). Within a group, every
/// episode with reward above `threshold` is paired with a different episode
/// at or below it until one side runs out. Return the number of pairs.
pub fn pair_count(rewards: &[f64], group: usize, threshold: f64) -> usize {
    todo!("Exercise 15.2: per group, the smaller of the two counts")
}
