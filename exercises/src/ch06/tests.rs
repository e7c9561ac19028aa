//! Grading tests for the Chapter 6 exercises: `cargo test -p exercises ch06`.
//!
//! Each test is named after its exercise (`ex3_...` grades Exercise 6.3) and
//! checks consequences of the exercise's statement, computed here from the
//! `agentrl` library (automatic differentiation of tiny tensors, the exact
//! bandit gradient, the tabular REINFORCE step), not values copied from one
//! particular solution.

use super::*;
use agentrl::bandit::softmax;
use agentrl::mdp::{discounted_return, repair_mdp, sample_episode, seeded_rng, Mdp, Outcome, Verifier, BUGGY};
use agentrl::pg::{exact_gradient, reinforce_loss, TabularSoftmax};
use tch::{Kind, Tensor};

use crate::testkit::assert_close;

/// Logit vectors to test at: flat, skewed, with ties, far apart.
fn points() -> Vec<Vec<f64>> {
    vec![
        vec![0.0, 0.0, 0.0],
        vec![0.5, -0.2, 0.1, 0.0],
        vec![2.0, -1.0, 0.3, 0.3, -3.5],
        vec![-0.7, 1.9],
        vec![4.0, 4.0, -2.0, 0.0, 1.0, -1.0],
    ]
}

/// $\nabla_\theta \log \operatorname{softmax}(\theta)_a$ by autograd.
fn autograd_score(theta: &[f64], a: usize) -> Vec<f64> {
    let t = Tensor::from_slice(theta).set_requires_grad(true); // [K]
    t.log_softmax(-1, Kind::Double).get(a as i64).backward();
    Vec::<f64>::try_from(t.grad()).unwrap()
}

// ---------------------------------------------------------------------------
// Exercise 6.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_score_matches_autograd() {
    for theta in points() {
        for a in 0..theta.len() {
            let got = softmax_score(&theta, a);
            let want = autograd_score(&theta, a);
            assert_eq!(got.len(), theta.len(), "one partial derivative per logit");
            for b in 0..theta.len() {
                assert_close(&format!("d log pi({a}) / d theta_{b} at {theta:?}"), got[b], want[b], 1e-12);
            }
        }
    }
}

#[test]
fn ex1_score_has_mean_zero_under_the_policy() {
    for theta in points() {
        let pi = softmax(&theta);
        let scores: Vec<Vec<f64>> = (0..theta.len()).map(|a| softmax_score(&theta, a)).collect();
        for b in 0..theta.len() {
            let mean: f64 = (0..theta.len()).map(|a| pi[a] * scores[a][b]).sum();
            assert_close(&format!("E_pi[score]_{b} at {theta:?}"), mean, 0.0, 1e-12);
        }
        // Adding a constant to every logit changes nothing, so each score sums to 0 over the logits.
        for (a, score) in scores.iter().enumerate() {
            assert_close(&format!("sum of the score of {a} at {theta:?}"), score.iter().sum(), 0.0, 1e-12);
        }
    }
}

#[test]
fn ex1_score_is_finite_for_far_apart_logits() {
    let theta = [1000.0, 0.0, -1000.0];
    for a in 0..3 {
        let got = softmax_score(&theta, a);
        let want = autograd_score(&theta, a);
        for b in 0..3 {
            assert!(got[b].is_finite(), "score of {a} at {theta:?} is {got:?}");
            assert_close(&format!("d log pi({a}) / d theta_{b} at {theta:?}"), got[b], want[b], 1e-12);
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 6.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_matches_the_autograd_gradient() {
    let rewards = [0.9, 0.2, 0.5, 0.1, 0.7, 0.0];
    for theta in points() {
        let p = &rewards[..theta.len()];
        let got = exact_bandit_gradient(&theta, p);
        let want = exact_gradient(&theta, p);
        assert_eq!(got.len(), theta.len());
        for a in 0..theta.len() {
            assert_close(&format!("dJ/dtheta_{a} at {theta:?}, p = {p:?}"), got[a], want[a], 1e-12);
        }
    }
}

#[test]
fn ex2_vanishes_when_every_arm_pays_the_same() {
    for theta in points() {
        let p = vec![0.4; theta.len()];
        for (a, g) in exact_bandit_gradient(&theta, &p).iter().enumerate() {
            assert_close(&format!("dJ/dtheta_{a} with equal arms at {theta:?}"), *g, 0.0, 1e-12);
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 6.3
// ---------------------------------------------------------------------------

const THETA: [f64; 4] = [0.5, -0.2, 0.1, 0.0];
const P: [f64; 4] = [0.9, 0.2, 0.5, 0.1];

/// `reps` estimates with baseline `b`, from one seeded generator.
fn estimates(n: usize, b: f64, reps: usize, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = seeded_rng(seed);
    (0..reps).map(|_| reinforce_with_baseline(&THETA, &P, n, b, &mut rng)).collect()
}

/// The mean squared distance of the estimates from the exact gradient.
fn mse(estimates: &[Vec<f64>], exact: &[f64]) -> f64 {
    estimates.iter().map(|g| g.iter().zip(exact).map(|(x, y)| (x - y).powi(2)).sum::<f64>()).sum::<f64>() / estimates.len() as f64
}

#[test]
fn ex3_is_unbiased_for_any_constant_baseline() {
    let exact = exact_gradient(&THETA, &P);
    let j: f64 = softmax(&THETA).iter().zip(&P).map(|(x, y)| x * y).sum();
    let reps = 4000;
    for (i, b) in [0.0, j, 1.0, -0.5, 2.0].into_iter().enumerate() {
        let all = estimates(8, b, reps, 10 + i as u64);
        assert!(all.iter().all(|g| g.len() == THETA.len()), "one component per arm");
        for a in 0..THETA.len() {
            let xs: Vec<f64> = all.iter().map(|g| g[a]).collect();
            let mean = xs.iter().sum::<f64>() / reps as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (reps - 1) as f64;
            let se = (var / reps as f64).sqrt();
            // Five standard errors: a correct estimator fails this with negligible probability.
            assert_close(&format!("mean estimate of dJ/dtheta_{a} with b = {b}"), mean, exact[a], 5.0 * se + 1e-9);
        }
    }
}

#[test]
fn ex3_baseline_at_j_has_lower_error_than_no_baseline() {
    let exact = exact_gradient(&THETA, &P);
    let j: f64 = softmax(&THETA).iter().zip(&P).map(|(x, y)| x * y).sum();
    // The same seed for both: the same arms and rewards, only the baseline differs.
    let (none, at_j, far) = (mse(&estimates(8, 0.0, 3000, 7), &exact), mse(&estimates(8, j, 3000, 7), &exact), mse(&estimates(8, 3.0, 3000, 7), &exact));
    assert!(at_j < 0.8 * none, "MSE with b = J ({at_j}) should be clearly below MSE with b = 0 ({none})");
    assert!(far > none, "a baseline far from the rewards (b = 3) should be worse than none: {far} vs {none}");
}

#[test]
fn ex3_is_exactly_zero_when_the_baseline_equals_every_reward() {
    let mut rng = seeded_rng(3);
    for (p, b) in [(vec![1.0; 4], 1.0), (vec![0.0; 4], 0.0)] {
        for n in [1, 5, 50] {
            let g = reinforce_with_baseline(&THETA, &p, n, b, &mut rng);
            assert_eq!(g, vec![0.0; 4], "every R_i = {b} = b, so every term is 0 (n = {n})");
        }
    }
    assert_eq!(reinforce_with_baseline(&THETA, &P, 0, 0.0, &mut rng), vec![0.0; 4], "no samples, no estimate");
    // Without a baseline the same certain rewards give a nonzero estimate.
    let g = reinforce_with_baseline(&THETA, &[1.0; 4], 5, 0.0, &mut rng);
    assert!(g.iter().any(|x| x.abs() > 1e-6), "with b = 0 and R = 1 the estimate is the mean score: {g:?}");
}

// ---------------------------------------------------------------------------
// Exercise 6.4
// ---------------------------------------------------------------------------

/// A small MDP with rewards on every step, some negative: 3 live states, 1 terminal, 2 actions.
fn rewarding_mdp() -> Mdp {
    let o = |prob: f64, next: usize, reward: f64| Outcome { prob, next, reward };
    Mdp {
        states: ["x", "y", "z", "done"].map(String::from).to_vec(),
        actions: ["stay", "go"].map(String::from).to_vec(),
        terminal: vec![false, false, false, true],
        outcomes: vec![
            vec![vec![o(0.8, 0, 0.3), o(0.2, 1, -0.4)], vec![o(0.6, 1, 1.0), o(0.4, 2, 0.2)]],
            vec![vec![o(0.5, 2, -0.1), o(0.5, 0, 0.6)], vec![o(0.3, 3, 2.0), o(0.7, 2, 0.5)]],
            vec![vec![o(0.9, 2, 0.1), o(0.1, 3, -1.0)], vec![o(0.4, 0, 0.0), o(0.6, 3, 1.5)]],
            vec![vec![o(1.0, 3, 0.0)], vec![o(1.0, 3, 0.0)]],
        ],
    }
}

#[test]
fn ex4_weights_are_discounted_returns_to_go() {
    let rewards = [0.3, -1.0, 0.0, 2.5, 0.7];
    for gamma in [1.0, 0.9, 0.5, 0.0] {
        let w = returns_to_go_weights(&rewards, gamma);
        assert_eq!(w.len(), rewards.len());
        for t in 0..rewards.len() {
            let want = gamma.powi(t as i32) * discounted_return(&rewards[t..], gamma);
            assert_close(&format!("w_{t} with gamma = {gamma}"), w[t], want, 1e-12);
        }
    }
    assert!(returns_to_go_weights(&[], 0.9).is_empty(), "an empty episode has no weights");
}

/// The tabular step written out with the exercise's weights.
fn step_by_hand(theta: &[Vec<f64>], episodes: &[Vec<(usize, usize, f64)>], gamma: f64, lr: f64) -> Vec<Vec<f64>> {
    let pi: Vec<Vec<f64>> = theta.iter().map(|row| softmax(row)).collect();
    let mut out = theta.to_vec();
    for episode in episodes {
        let rewards: Vec<f64> = episode.iter().map(|&(_, _, r)| r).collect();
        let weights = returns_to_go_weights(&rewards, gamma);
        assert_eq!(weights.len(), episode.len());
        for (&(s, a, _), w) in episode.iter().zip(weights) {
            for b in 0..out[s].len() {
                out[s][b] += lr / episodes.len() as f64 * w * (f64::from(a == b) - pi[s][b]);
            }
        }
    }
    out
}

/// A policy with uneven logits in every state (a different pattern per `seed`).
fn uneven_policy(states: usize, actions: usize, seed: usize) -> TabularSoftmax {
    let theta = (0..states).map(|s| (0..actions).map(|a| 1.5 * ((s * actions + a + seed) as f64 * 1.3).sin()).collect()).collect();
    TabularSoftmax { theta }
}

#[test]
fn ex4_hand_written_step_equals_reinforce_step() {
    let cases = [(rewarding_mdp(), 0, 0.9), (rewarding_mdp(), 2, 0.6), (repair_mdp(Verifier::Hidden), BUGGY, 0.9), (repair_mdp(Verifier::Public), BUGGY, 0.8)];
    for (i, (mdp, start, gamma)) in cases.into_iter().enumerate() {
        let mut policy = uneven_policy(mdp.n_states(), mdp.n_actions(), i);
        let mut rng = seeded_rng(100 + i as u64);
        let episodes: Vec<_> = (0..16).map(|_| sample_episode(&mdp, &policy.policy(), start, 12, &mut rng)).collect();
        assert!(episodes.iter().any(|e| e.len() > 2), "case {i}: some episode has three steps or more");
        let want_before = policy.theta.clone();
        let by_hand = step_by_hand(&policy.theta, &episodes, gamma, 0.7);
        policy.reinforce_step(&episodes, gamma, 0.7);
        assert_ne!(policy.theta, want_before, "case {i}: the step moved the logits");
        for s in 0..mdp.n_states() {
            for a in 0..mdp.n_actions() {
                assert_close(&format!("case {i}: theta[{s}][{a}] after one step"), by_hand[s][a], policy.theta[s][a], 1e-12);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 6.5
// ---------------------------------------------------------------------------

/// The gradient of `reinforce_loss` with respect to `logp`, by autograd, as rows.
fn autograd_loss_grad(logp: &Tensor, mask: &Tensor, returns: &Tensor) -> Vec<Vec<f32>> {
    let logp = logp.detach().set_requires_grad(true); // [B, T]
    reinforce_loss(&logp, mask, &(returns.unsqueeze(1) * mask)).backward();
    Vec::<Vec<f32>>::try_from(logp.grad()).unwrap()
}

fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    Vec::<Vec<f32>>::try_from(t).unwrap()
}

#[test]
fn ex5_matches_autograd_of_reinforce_loss() {
    for (seed, (b, t)) in [(2, 3), (4, 7), (1, 5), (6, 1)].into_iter().enumerate() {
        let _turn = agentrl::book::seeded(seed as i64);
        let opts = (Kind::Float, tch::Device::Cpu);
        let mask = Tensor::rand([b, t], opts).gt(0.4).to_kind(Kind::Float); // [B, T]
        let returns = Tensor::randn([b], opts); // [B]
        let logp = Tensor::rand([b, t], opts) * -4.0; // [B, T]
        let want = autograd_loss_grad(&logp, &mask, &returns);
        let got = masked_token_loss_grad(&rows(&mask), &Vec::<f32>::try_from(&returns).unwrap());
        assert_eq!(got.len(), b as usize, "one row per trajectory");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.len(), t as usize, "row {i} has T entries");
            for j in 0..t as usize {
                assert_close(&format!("dL/dlogp[{i}][{j}] (case {seed})"), f64::from(g[j]), f64::from(w[j]), 1e-6);
            }
        }
    }
}

#[test]
fn ex5_entries_off_the_mask_are_exactly_zero() {
    let mask = vec![vec![0.0, 1.0, 1.0, 0.0], vec![0.0, 0.0, 1.0, 0.0], vec![1.0, 1.0, 1.0, 1.0]];
    let returns = vec![1.0, -0.5, 0.25];
    let got = masked_token_loss_grad(&mask, &returns);
    let want = autograd_loss_grad(
        &Tensor::from_slice(&[-1.0f32, -2.0, -0.5, -0.1, -3.0, -0.2, -0.7, -1.5, -0.3, -0.9, -2.2, -0.4]).view([3, 4]),
        &Tensor::from_slice(&mask.concat()).view([3, 4]),
        &Tensor::from_slice(&returns),
    );
    for i in 0..3 {
        for j in 0..4 {
            if mask[i][j] == 0.0 {
                assert_eq!(got[i][j], 0.0, "[{i}][{j}] is off the mask");
                assert_eq!(want[i][j], 0.0, "autograd agrees that [{i}][{j}] gets nothing");
            } else {
                assert_close(&format!("dL/dlogp[{i}][{j}]"), f64::from(got[i][j]), f64::from(want[i][j]), 1e-7);
            }
        }
    }
    // No action token at all: the loss is 0 and so is its gradient.
    let empty = vec![vec![0.0; 3]; 2];
    assert_eq!(masked_token_loss_grad(&empty, &[1.0, 2.0]), empty, "an all-zero mask gives no gradient");
}
