//! Helpers shared by the grading tests: tolerant comparison and seeded
//! uniform numbers (drawn with `agentrl::mdp::sample_action`, since the
//! exercises crate has no `rand` of its own).

use agentrl::mdp::{sample_action, StdRng};

/// `got` and `want` agree to within `tol`, with a readable failure message.
pub fn assert_close(what: &str, got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol, "{what}: got {got}, expected {want} (within {tol})");
}

/// A number in [0, 1) on a grid of 1e-4, drawn from `rng`.
pub fn uniform(rng: &mut StdRng) -> f64 {
    let digits = [0.01; 100];
    (sample_action(&digits, rng) * 100 + sample_action(&digits, rng)) as f64 / 1e4
}

/// A number in [lo, hi).
pub fn between(lo: f64, hi: f64, rng: &mut StdRng) -> f64 {
    lo + (hi - lo) * uniform(rng)
}
