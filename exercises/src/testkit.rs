//! Helpers shared by the grading tests: tolerant comparison, seeded uniform
//! numbers (drawn with `agentrl::mdp::sample_action`, since the exercises
//! crate has no `rand` of its own), and conversions between slices and tensors.

use agentrl::mdp::{sample_action, StdRng};
use tch::{Kind, Tensor};

/// `got` and `want` agree to within `tol`, with a readable failure message.
pub fn assert_close(what: &str, got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, expected {want} (within {tol})"
    );
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

/// An index in 0..n, each equally likely.
pub fn index_below(n: usize, rng: &mut StdRng) -> usize {
    sample_action(&vec![1.0 / n as f64; n], rng).min(n - 1)
}

/// A 1-D f64 tensor holding `values`.
pub fn tensor(values: &[f64]) -> Tensor {
    Tensor::from_slice(values)
}

/// Every element of `t`, flattened, as f64.
pub fn to_vec(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(Kind::Double).reshape([-1])).expect("a tensor of numbers")
}
