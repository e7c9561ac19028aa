//! Chapter 16 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch16`.
//!
//! The tests compare your answers with hand-checked values, with extreme
//! inputs, and with the library (`agentrl::distill`). The answers are plain
//! Rust on numbers; do not call the function an exercise is checked against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

// ---------------------------------------------------------------------------
// Exercise 16.1: forward and reverse KL from logits
// ---------------------------------------------------------------------------

/// Exercise 16.1: KL(p ‖ q) = Σ_v p_v (log p_v − log q_v) for the
/// distributions p = softmax(`logits_p`) and q = softmax(`logits_q`), which
/// have the same length. Must stay finite and accurate for logits in the hundreds.
pub fn kl_from_logits(logits_p: &[f64], logits_q: &[f64]) -> f64 {
    todo!("Exercise 16.1: a log-softmax that subtracts the largest logit first, then the sum")
}

// ---------------------------------------------------------------------------
// Exercise 16.2: what a LayerNorm forgets
// ---------------------------------------------------------------------------

/// Exercise 16.2: `(x − mean(x)) / sqrt(var(x) + eps)`, component by
/// component, with the variance taken over the components (divided by n,
/// not n − 1).
pub fn layer_norm(x: &[f64], eps: f64) -> Vec<f64> {
    todo!("Exercise 16.2: the mean, the biased variance, then each component")
}
