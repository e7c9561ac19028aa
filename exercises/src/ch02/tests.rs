//! Grading tests for the Chapter 2 exercises: `cargo test -p exercises ch02`.
//!
//! Each test is named after its exercise (`ex3_...` grades Exercise 2.3) and
//! checks consequences of the exercise's statement, computed here from the
//! `agentrl` library, not values copied from one particular solution.

use super::*;
use agentrl::bandit::{gradient_step, softmax};
use agentrl::mdp::{
    discounted_return, evaluate_policy, q_from_v, repair_mdp, value_iteration, Mdp, Outcome, Verifier, BUGGY, HARDCODE,
    REPAIRED, ROTE, SUBMIT, SWAP,
};
use agentrl::pomdp::{family_prior, hidden_family};

use crate::testkit::assert_close;

/// A small stochastic MDP with rewards on the way: 3 live states, 1 terminal, 2 actions.
fn stochastic_mdp() -> Mdp {
    let o = |prob: f64, next: usize, reward: f64| Outcome { prob, next, reward };
    Mdp {
        states: ["a", "b", "c", "end"].map(String::from).to_vec(),
        actions: ["left", "right"].map(String::from).to_vec(),
        terminal: vec![false, false, false, true],
        outcomes: vec![
            vec![vec![o(0.7, 1, 0.5), o(0.3, 0, -0.2)], vec![o(0.5, 2, 1.0), o(0.5, 3, 0.0)]],
            vec![vec![o(1.0, 0, 0.1)], vec![o(0.2, 1, 0.3), o(0.8, 3, 2.0)]],
            vec![vec![o(0.6, 2, 0.4), o(0.4, 0, 0.0)], vec![o(0.9, 3, -1.0), o(0.1, 1, 0.0)]],
            vec![vec![o(1.0, 3, 0.0)], vec![o(1.0, 3, 0.0)]],
        ],
    }
}

// ---------------------------------------------------------------------------
// Exercise 2.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_returns_of_the_solver() {
    let got = returns_to_go(&[0.0, 0.0, 0.0, 0.0, 1.0], 0.9);
    let want = [0.6561, 0.729, 0.81, 0.9, 1.0];
    assert_eq!(got.len(), 5, "one return per reward");
    for (t, (g, w)) in got.iter().zip(want).enumerate() {
        assert_close(&format!("G_{t}"), *g, w, 1e-12);
    }
    assert!(returns_to_go(&[], 0.9).is_empty(), "an empty episode has no returns");
}

#[test]
fn ex1_every_return_is_the_discounted_sum_of_its_suffix() {
    let rewards = [0.3, -1.0, 0.0, 2.5, 0.7, -0.4];
    for gamma in [0.0, 0.5, 0.99, 1.0] {
        let got = returns_to_go(&rewards, gamma);
        assert_eq!(got.len(), rewards.len());
        for t in 0..rewards.len() {
            assert_close(&format!("G_{t} at gamma {gamma}"), got[t], discounted_return(&rewards[t..], gamma), 1e-12);
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 2.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_iteration_converges_to_the_linear_solve() {
    let repair = repair_mdp(Verifier::Hidden);
    let skewed = vec![vec![0.1, 0.2, 0.3, 0.15, 0.25]; repair.n_states()];
    let toy = stochastic_mdp();
    let toy_policy = vec![vec![0.35, 0.65], vec![0.8, 0.2], vec![0.5, 0.5], vec![0.5, 0.5]];
    let cases = [(&repair, repair.uniform_policy()), (&repair, skewed), (&toy, toy_policy)];
    for (mdp, policy) in cases {
        for gamma in [0.5, 0.9] {
            let exact = evaluate_policy(mdp, &policy, gamma);
            let (v, sweeps) = iterative_evaluation(mdp, &policy, gamma, 1e-10);
            assert_eq!(v.len(), mdp.n_states());
            assert!(sweeps > 1, "more than one sweep is needed");
            for s in 0..mdp.n_states() {
                assert_close(&format!("V({}) at gamma {gamma}", mdp.states[s]), v[s], exact[s], 1e-8);
            }
        }
    }
}

#[test]
fn ex2_sweeps_grow_with_gamma_and_stop_at_tol() {
    let mdp = repair_mdp(Verifier::Hidden);
    let pi = mdp.uniform_policy();
    let (_, at_09) = iterative_evaluation(&mdp, &pi, 0.9, 1e-6);
    let (_, at_099) = iterative_evaluation(&mdp, &pi, 0.99, 1e-6);
    assert!(at_099 > at_09, "sweeps at gamma 0.99 ({at_099}) should exceed those at 0.9 ({at_09})");
    // Stopping rule: the last sweep changed no value by more than tol, the one before did.
    let (v, n) = iterative_evaluation(&mdp, &pi, 0.9, 1e-6);
    let (v_before, n_before) = iterative_evaluation(&mdp, &pi, 0.9, 1e-3);
    assert!(n_before < n);
    let exact = evaluate_policy(&mdp, &pi, 0.9);
    assert!((v[BUGGY] - exact[BUGGY]).abs() < (v_before[BUGGY] - exact[BUGGY]).abs() + 1e-15);
}

// ---------------------------------------------------------------------------
// Exercise 2.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_the_flaky_mdp_is_a_valid_mdp() {
    for q in [0.0, 0.3, 1.0] {
        let mdp = flaky_repair_mdp(q, Verifier::Hidden);
        assert_eq!(mdp.states, repair_mdp(Verifier::Hidden).states, "same states, same order");
        assert_eq!(mdp.actions, repair_mdp(Verifier::Hidden).actions, "same actions, same order");
        assert!(mdp.normalisation_error() < 1e-12, "probabilities must sum to 1 (q = {q})");
    }
    // Only swap_minmax changed: every other action has the same expected reward and next-state distribution.
    let (plain, flaky) = (repair_mdp(Verifier::Hidden), flaky_repair_mdp(0.3, Verifier::Hidden));
    let v_test: Vec<f64> = (0..plain.n_states()).map(|s| 0.1 + s as f64 * 0.07).collect();
    let (q_plain, q_flaky) = (q_from_v(&plain, &v_test, 0.9), q_from_v(&flaky, &v_test, 0.9));
    for s in 0..plain.n_states() {
        for a in 0..plain.n_actions() {
            if a != SWAP || plain.terminal[s] {
                assert_close(&format!("Q({s}, {a}) of an unchanged action"), q_flaky[s][a], q_plain[s][a], 1e-12);
            }
        }
    }
    // The swap keeps the file with probability q: Q = 0.9 (0.7 V(next) + 0.3 V(s)).
    for (s, next) in [(BUGGY, REPAIRED), (REPAIRED, BUGGY), (ROTE, 3), (3, ROTE)] {
        let want = 0.9 * (0.7 * v_test[next] + 0.3 * v_test[s]);
        assert_close(&format!("Q(state {s}, swap_minmax) with q = 0.3"), q_flaky[s][SWAP], want, 1e-12);
    }
}

#[test]
fn ex3_the_optimal_value_matches_the_closed_form() {
    let gamma = 0.9;
    for q in [0.0, 0.2, 0.5, 0.9] {
        let (v, policy, _) = value_iteration(&flaky_repair_mdp(q, Verifier::Hidden), gamma, 1e-13);
        let closed = gamma * (1.0 - q) / (1.0 - gamma * q);
        assert_close(&format!("V*(buggy) at q = {q}"), v[BUGGY], closed, 1e-9);
        assert_eq!(policy[BUGGY], SWAP, "with hidden tests, swapping stays optimal (q = {q})");
    }
}

#[test]
fn ex3_with_public_tests_a_flaky_fix_loses_to_the_hack() {
    for q in [0.05, 0.5] {
        let mdp = flaky_repair_mdp(q, Verifier::Public);
        let (v, policy, _) = value_iteration(&mdp, 0.9, 1e-13);
        assert_eq!(policy[BUGGY], HARDCODE, "the reliable exploit beats a flaky fix (q = {q})");
        assert_eq!(policy[ROTE], SUBMIT, "a rote file is submitted at once (q = {q})");
        assert_close(&format!("V*(buggy) at q = {q}"), v[BUGGY], 0.9, 1e-9);
    }
}

// ---------------------------------------------------------------------------
// Exercise 2.4
// ---------------------------------------------------------------------------

#[test]
fn ex4_the_gradient_matches_finite_differences() {
    let means = [0.2, 0.5, 0.9, 0.4];
    for z in [[0.0, 0.0, 0.0, 0.0], [0.3, -0.1, 0.2, 1.5], [-2.0, 0.5, 0.0, 0.7]] {
        let got = softmax_policy_gradient(&z, &means);
        assert_eq!(got.len(), 4);
        let j = |z: &[f64]| softmax(z).iter().zip(means).map(|(p, m)| p * m).sum::<f64>();
        for b in 0..4 {
            let (mut up, mut down) = (z, z);
            up[b] += 1e-6;
            down[b] -= 1e-6;
            let numeric = (j(&up) - j(&down)) / 2e-6;
            assert_close(&format!("dJ/dz({b}) at z = {z:?}"), got[b], numeric, 1e-8);
        }
    }
}

#[test]
fn ex4_the_gradient_bandit_follows_it_in_expectation_with_any_baseline() {
    let means = [0.2, 0.5, 0.9];
    let z = [0.3, -0.4, 0.1];
    let exact = softmax_policy_gradient(&z, &means);
    let pi = softmax(&z);
    for baseline in [0.0, 0.5, 3.0] {
        // Expected update over a ~ pi, with the reward replaced by its mean.
        let mut expected = [0.0; 3];
        for a in 0..3 {
            let mut moved = z;
            gradient_step(&mut moved, a, means[a], baseline, 0.1);
            for b in 0..3 {
                expected[b] += pi[a] * (moved[b] - z[b]) / 0.1;
            }
        }
        for b in 0..3 {
            assert_close(&format!("expected update / alpha, arm {b}, baseline {baseline}"), exact[b], expected[b], 1e-12);
        }
    }
    // Shifting every mean by a constant does not change the gradient.
    let shifted: Vec<f64> = means.iter().map(|m| m + 10.0).collect();
    let again = softmax_policy_gradient(&z, &shifted);
    for b in 0..3 {
        assert_close(&format!("gradient with shifted means, arm {b}"), again[b], exact[b], 1e-12);
    }
}

// ---------------------------------------------------------------------------
// Exercise 2.5
// ---------------------------------------------------------------------------

#[test]
fn ex5_testing_first_switches_on_at_the_break_even_accuracy() {
    let q = break_even_accuracy();
    assert!((0.0..=1.0).contains(&q), "an accuracy is a probability, got {q}");
    let first = |accuracy: f64| hidden_family(accuracy).solve(&family_prior(), 0.9, 6, &[0, 1, 2, 3]).1;
    assert_eq!(first((q + 1e-4).min(1.0)), 0, "just above {q}, testing first should be optimal");
    assert_ne!(first((q - 1e-4).max(0.0)), 0, "just below {q}, testing first should not be optimal");
}
