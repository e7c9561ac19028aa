//! Chapter 13 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch13`.
//!
//! The tests compare your answers with hand-checked values, with
//! consequences of each statement checked on random inputs, and with the
//! library (`agentrl::offpolicy`, `agentrl::pipeline`). The answers
//! themselves are plain Rust on numbers; do not call the function an
//! exercise is checked against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

// ---------------------------------------------------------------------------
// Exercise 13.1: truncated importance weights
// ---------------------------------------------------------------------------

/// Exercise 13.1: the importance weights of one episode's action tokens.
/// `old[i]` is log π_old of the i-th action token and `behaviour[i]` its
/// sampling log-prob, log μ. With `sequence == false`, token i gets
/// min(π_old/μ, cap) of its own token (token-level truncated importance
/// sampling); with `sequence == true`, every token gets the same weight,
/// min(Π_i π_old/μ, cap) (sequence level). An episode without action tokens
/// has no weights.
pub fn truncated_weights(old: &[f64], behaviour: &[f64], cap: f64, sequence: bool) -> Vec<f64> {
    todo!("Exercise 13.1: exp of the log-ratio, per token or summed over the episode, capped")
}

// ---------------------------------------------------------------------------
// Exercise 13.2: the makespan of a lockstep rollout
// ---------------------------------------------------------------------------

/// Exercise 13.2: how long a synchronous rollout in lockstep takes.
/// `episodes[e][t] = (generate, call)` is the time episode `e` spends
/// generating its action at turn `t` and the time its call takes. Each turn,
/// the episodes still open generate together until the slowest is done,
/// then all their calls run at once, and the next turn starts when the
/// slowest call returns. An episode is open at turn t while t < its number
/// of turns. No episodes, or none with a turn, take no time.
pub fn lockstep_time(episodes: &[Vec<(f64, f64)>]) -> f64 {
    todo!("Exercise 13.2: per turn, the slowest generation plus the slowest call of the open episodes")
}

// ---------------------------------------------------------------------------
// Exercise 13.3: the effective sample size of weighted samples
// ---------------------------------------------------------------------------

/// Exercise 13.3: the effective sample size of importance weights,
/// (Σ w)² / Σ w²: n for n equal weights, 1 when one weight carries
/// everything. The weights are at least 0; when all are 0 (or there are
/// none) the answer is 0.
pub fn effective_sample_size(weights: &[f64]) -> f64 {
    todo!("Exercise 13.3: the squared sum over the sum of squares")
}
