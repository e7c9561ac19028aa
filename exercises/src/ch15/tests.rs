//! Grading tests for the Chapter 15 exercises: `cargo test -p exercises ch15`.
//!
//! Each test is named after its exercise (`ex2_...` grades Exercise 15.2)
//! and checks hand-checked values, extreme inputs, and agreement with the
//! library (`agentrl::preference`).

use super::*;
use agentrl::mdp::seeded_rng;
use agentrl::preference::{success_failure_pairs, Dpo};

use crate::testkit::{assert_close, between, index_below, tensor, uniform};

// ---------------------------------------------------------------------------
// Exercise 15.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_hand_values() {
    // Section 15.4's pair: β = 0.1, policy −10 and −12, reference −11 for both: h = 0.2.
    let (loss, d) = dpo_pair(0.1, 0.0, -10.0, -12.0, -11.0, -11.0);
    assert_close("loss, ε = 0", loss, 0.598138869, 1e-8);
    assert_close("∂loss/∂chosen, ε = 0: −β σ(−h)", d, -0.0450166003, 1e-9);
    let (loss, d) = dpo_pair(0.1, 0.1, -10.0, -12.0, -11.0, -11.0);
    assert_close("loss, ε = 0.1", loss, 0.618138869, 1e-8);
    assert_close("∂loss/∂chosen, ε = 0.1", d, -0.0350166003, 1e-9);
    let (loss, d) = dpo_pair(0.5, 0.0, -3.0, -3.0, -3.0, -3.0);
    assert_close("policy = reference: ln 2", loss, std::f64::consts::LN_2, 1e-12);
    assert_close("policy = reference: −β/2", d, -0.25, 1e-12);
}

#[test]
fn ex1_is_finite_and_accurate_far_from_zero() {
    // h = −2000: −ln σ(h) = 2000 + ln(1 + e^−2000) = 2000 to the last digit; the chosen episode must move up at full speed.
    let (loss, d) = dpo_pair(1.0, 0.0, -3000.0, -1000.0, 0.0, 0.0);
    assert_close("h = −2000: the loss is −h", loss, 2000.0, 1e-9);
    assert_close("h = −2000: the derivative is −β", d, -1.0, 1e-12);
    let (loss, d) = dpo_pair(1.0, 0.0, -1000.0, -3000.0, 0.0, 0.0);
    assert!((0.0..1e-300).contains(&loss), "h = +2000: the loss is e^−2000, zero in f64: {loss}");
    assert!(d <= 0.0 && d > -1e-300, "h = +2000: no pull left: {d}");
    let (loss, d) = dpo_pair(1.0, 0.1, -1000.0, -3000.0, 0.0, 0.0);
    assert_close("h = +2000, ε = 0.1: a tenth of the pairs assumed flipped costs 0.1 h", loss, 200.0, 1e-9);
    assert_close("h = +2000, ε = 0.1: the flipped share pushes back", d, 0.1, 1e-12);
    // Small h: ln(1 + e^−h) near ln 2 keeps its digits.
    let (loss, _) = dpo_pair(1.0, 0.0, 1e-12, 0.0, 0.0, 0.0);
    assert_close("h = 1e-12", loss, std::f64::consts::LN_2 - 0.5e-12, 1e-15);
}

#[test]
fn ex1_matches_the_library_and_its_gradient() {
    let mut rng = seeded_rng(15);
    for _ in 0..200 {
        let beta = between(0.01, 2.0, &mut rng);
        let eps = if uniform(&mut rng) < 0.5 { 0.0 } else { between(0.0, 0.4, &mut rng) };
        let lp: Vec<f64> = (0..4).map(|_| between(-60.0, -1.0, &mut rng)).collect();
        let (loss, d) = dpo_pair(beta, eps, lp[0], lp[1], lp[2], lp[3]);
        let chosen = tensor(&[lp[0]]).set_requires_grad(true);
        let out = Dpo { beta, label_smoothing: eps }.loss(&chosen, &tensor(&[lp[1]]), &tensor(&[lp[2]]), &tensor(&[lp[3]]));
        assert_close("the loss against preference::Dpo::loss", loss, out.loss.double_value(&[]), 1e-10);
        out.loss.backward();
        assert_close("the derivative against autograd", d, chosen.grad().double_value(&[0]), 1e-10);
    }
}

// ---------------------------------------------------------------------------
// Exercise 15.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_hand_values() {
    let rewards = [1.0, 0.0, 0.0, 1.0, /* all fail */ 0.0, 0.0, 0.0, 0.0, /* one win */ 0.0, 1.0, 0.0, 0.0];
    assert_eq!(pair_count(&rewards, 4, 0.5), 3);
    assert_eq!(pair_count(&[1.0; 8], 4, 0.5), 0, "all successes: no pair");
    assert_eq!(pair_count(&[], 4, 0.5), 0);
    assert_eq!(pair_count(&[1.0, 0.0, 1.0, 0.0, 1.0], 2, 0.5), 2, "a last group of one gives no pair");
    assert_eq!(pair_count(&[0.5, 0.2, 0.9, 0.5], 4, 0.5), 1, "a reward equal to the threshold is a failure");
}

#[test]
fn ex2_matches_the_library() {
    let mut rng = seeded_rng(16);
    for _ in 0..300 {
        let group = 1 + index_below(8, &mut rng);
        let n = index_below(40, &mut rng);
        let p = uniform(&mut rng);
        let rewards: Vec<f64> = (0..n).map(|_| if uniform(&mut rng) < p { 1.0 } else { 0.0 }).collect();
        let pairs = success_failure_pairs(&rewards, group, 0.5, &mut seeded_rng(0));
        assert_eq!(pair_count(&rewards, group, 0.5), pairs.len(), "rewards {rewards:?} in groups of {group}");
    }
}
