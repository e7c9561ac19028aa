//! Grading tests for the Chapter 16 exercises: `cargo test -p exercises ch16`.
//!
//! Each test is named after its exercise (`ex2_...` grades Exercise 16.2)
//! and checks hand-checked values, extreme inputs, and agreement with the
//! library (`agentrl::distill`) or with libtorch.

use super::*;
use agentrl::distill::reverse_kl;
use agentrl::mdp::seeded_rng;

use crate::testkit::{assert_close, between, index_below, tensor, to_vec};

// ---------------------------------------------------------------------------
// Exercise 16.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_hand_values() {
    // p = (1/2, 1/2), q = (3/4, 1/4): KL = ½ ln(2/3) + ½ ln 2 = ½ ln(4/3).
    let three = (3.0f64).ln();
    assert_close("KL(p ‖ q)", kl_from_logits(&[0.0, 0.0], &[three, 0.0]), 0.5 * (4.0f64 / 3.0).ln(), 1e-12);
    // And the other way: ¾ ln(3/2) + ¼ ln(1/2).
    assert_close("KL(q ‖ p)", kl_from_logits(&[three, 0.0], &[0.0, 0.0]), 0.75 * 1.5f64.ln() + 0.25 * 0.5f64.ln(), 1e-12);
    assert_close("equal distributions", kl_from_logits(&[1.0, 2.0, 3.0], &[11.0, 12.0, 13.0]), 0.0, 1e-12);
}

#[test]
fn ex1_is_finite_for_large_logits_and_asymmetric() {
    // Logits in the hundreds: e^800 overflows, the answer does not.
    let kl = kl_from_logits(&[800.0, 0.0], &[0.0, 800.0]);
    assert_close("almost all mass moved: KL ≈ 800", kl, 800.0, 1e-9);
    // A teacher split between two tokens, a student sure of one: reverse KL(student ‖ teacher) ≈ ln 2, forward is large.
    let (student, teacher) = ([20.0, 0.0], [0.0, 0.0]);
    assert_close("reverse KL", kl_from_logits(&student, &teacher), std::f64::consts::LN_2, 1e-6);
    assert!(kl_from_logits(&teacher, &student) > 9.0, "forward KL punishes the missing mode: {}", kl_from_logits(&teacher, &student));
}

#[test]
fn ex1_matches_the_library() {
    let mut rng = seeded_rng(16);
    for _ in 0..200 {
        let v = 2 + index_below(12, &mut rng);
        let (p, q): (Vec<f64>, Vec<f64>) = (0..v).map(|_| (between(-8.0, 8.0, &mut rng), between(-8.0, 8.0, &mut rng))).unzip();
        let (log_p, log_q) = (tensor(&p).log_softmax(-1, tch::Kind::Double).unsqueeze(0), tensor(&q).log_softmax(-1, tch::Kind::Double).unsqueeze(0));
        let yours = kl_from_logits(&p, &q);
        assert_close("distill::reverse_kl", yours, to_vec(&reverse_kl(&log_p, &log_q))[0], 1e-10);
        assert!(yours >= -1e-12, "a KL is never negative: {yours}");
    }
}

// ---------------------------------------------------------------------------
// Exercise 16.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_hand_values() {
    // Mean 2, biased variance 2/3.
    let got = layer_norm(&[1.0, 2.0, 3.0], 0.0);
    let s = (2.0f64 / 3.0).sqrt();
    for (g, w) in got.iter().zip([-1.0 / s, 0.0, 1.0 / s]) {
        assert_close("layer_norm([1, 2, 3])", *g, w, 1e-12);
    }
    let flat = layer_norm(&[5.0, 5.0, 5.0, 5.0], 1e-5);
    assert!(flat.iter().all(|v| *v == 0.0), "a constant vector becomes zeros, not NaN: {flat:?}");
}

#[test]
fn ex2_forgets_a_shift_and_a_scale_and_matches_libtorch() {
    let mut rng = seeded_rng(17);
    for _ in 0..200 {
        let n = 2 + index_below(30, &mut rng);
        let x: Vec<f64> = (0..n).map(|_| between(-3.0, 3.0, &mut rng)).collect();
        let y = layer_norm(&x, 1e-5);
        let shift = between(-100.0, 100.0, &mut rng);
        let shifted = layer_norm(&x.iter().map(|v| v + shift).collect::<Vec<_>>(), 1e-5);
        for (a, b) in y.iter().zip(&shifted) {
            assert_close("the same constant added to every component", *b, *a, 1e-9);
        }
        let scale = between(0.5, 10.0, &mut rng);
        // With ε = 0 a positive scale changes nothing at all; ε only matters when the variance is tiny.
        let (plain, scaled) = (layer_norm(&x, 0.0), layer_norm(&x.iter().map(|v| v * scale).collect::<Vec<_>>(), 0.0));
        for (a, b) in plain.iter().zip(&scaled) {
            assert_close("every component times the same positive number, ε = 0", *b, *a, 1e-9);
        }
        let torch = to_vec(&tensor(&x).layer_norm([n as i64], None::<tch::Tensor>, None::<tch::Tensor>, 1e-5, false));
        for (a, b) in y.iter().zip(&torch) {
            assert_close("libtorch's layer_norm", *a, *b, 1e-10);
        }
        let mean = y.iter().sum::<f64>() / n as f64;
        assert_close("mean 0", mean, 0.0, 1e-12);
    }
}
