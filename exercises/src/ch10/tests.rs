//! Grading tests for the Chapter 10 exercises: `cargo test -p exercises ch10`.
//!
//! Each test is named after its exercise (`ex3_...` grades Exercise 10.3) and
//! checks consequences of the exercise's statement, computed here from the
//! `agentrl` library (`regularization::exact_kl`, `exact_moments`, the
//! `Estimator`s, the reward penalty of `KlPenalty` on a small TinyAgent), from
//! torch (`kl_div`, autograd through `tinyagent::entropy`), from a grid search
//! and from exact sums over small categorical distributions, not values copied
//! from one particular solution.

use super::*;
use agentrl::bandit::softmax;
use agentrl::episode::Owner;
use agentrl::grpo::Regularizer;
use agentrl::mdp::{sample_action, seeded_rng, StdRng};
use agentrl::regularization::{exact_kl, exact_moments, Estimator, KlPenalty, Placement};
use agentrl::tinyagent::{self, TinyAgent};
use agentrl::trajectory::{collate, policy_logprobs, Trajectory};

use crate::testkit::{assert_close, between, index_below, tensor, to_vec};

/// `k` logits drawn uniformly from [−scale, scale).
fn logits(k: usize, scale: f64, rng: &mut StdRng) -> Vec<f64> {
    (0..k).map(|_| between(-scale, scale, rng)).collect()
}

/// A number of categories from 2 to `max`.
fn categories(max: usize, rng: &mut StdRng) -> usize {
    2 + index_below(max - 1, rng)
}

/// Two random categoricals over the same 2 to 8 categories, every probability positive.
fn random_pair(scale: f64, rng: &mut StdRng) -> (Vec<f64>, Vec<f64>) {
    let k = categories(8, rng);
    (softmax(&logits(k, scale, rng)), softmax(&logits(k, scale, rng)))
}

/// `q = softmax(z)` and, for each ε, `p = softmax(z + ε d)`: a path on which p approaches q.
fn shrinking_path(k: usize, epsilons: &[f64], rng: &mut StdRng) -> (Vec<f64>, Vec<Vec<f64>>) {
    let (z, mut d) = (logits(k, 1.5, rng), logits(k, 1.0, rng));
    // A direction that really moves p: the first two logits go opposite ways.
    (d[0], d[1]) = (1.0, -1.0);
    let path = epsilons.iter().map(|eps| softmax(&z.iter().zip(&d).map(|(zi, di)| zi + eps * di).collect::<Vec<_>>())).collect();
    (softmax(&z), path)
}

/// ε = 0.4, 0.2, 0.1, ..., halving each time.
fn halvings(n: usize) -> Vec<f64> {
    (0..n).map(|i| 0.4 / 2f64.powi(i as i32)).collect()
}

// ---------------------------------------------------------------------------
// Exercise 10.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_matches_exact_kl_and_torch() {
    let mut rng = seeded_rng(101);
    for scale in [0.3, 1.0, 2.5, 4.0] {
        for _ in 0..10 {
            let (q, p) = random_pair(scale, &mut rng);
            let got = kl_categorical(&q, &p);
            assert_close(&format!("KL(q || p) for q = {q:?}, p = {p:?}, against exact_kl"), got, exact_kl(&q, &p), 1e-12 * (1.0 + got.abs()));
            // torch's kl_div(input = log p, target = q) sums q (log q − log p).
            let torch = tensor(&p).log().kl_div(&tensor(&q), tch::Reduction::Sum, false).double_value(&[]);
            assert_close(&format!("KL(q || p) for q = {q:?}, p = {p:?}, against torch's kl_div"), got, torch, 1e-12 * (1.0 + got.abs()));
        }
    }
}

#[test]
fn ex1_is_zero_against_itself_and_positive_otherwise() {
    let mut rng = seeded_rng(102);
    for _ in 0..40 {
        let (q, p) = random_pair(2.0, &mut rng);
        assert_close(&format!("KL(q || q) for q = {q:?}"), kl_categorical(&q, &q), 0.0, 1e-15);
        let kl = kl_categorical(&q, &p);
        let gap: f64 = q.iter().zip(&p).map(|(a, b)| (a - b).abs()).sum();
        // Pinsker's inequality: KL ≥ ½ (Σ |q − p|)², so distinct distributions are strictly apart.
        assert!(kl >= 0.5 * gap * gap - 1e-12, "KL(q || p) = {kl} is below Pinsker's bound {} for q = {q:?}, p = {p:?}", 0.5 * gap * gap);
        assert!(kl > 0.0, "KL(q || p) = {kl} should be positive for q = {q:?} and p = {p:?}");
    }
}

#[test]
fn ex1_handles_zero_probabilities() {
    // A category q never draws costs nothing, however unlikely p makes it.
    let q = [0.5, 0.5, 0.0];
    for p in [[0.4, 0.4, 0.2], [0.5, 0.5, 0.0], [0.01, 0.9, 0.09]] {
        let got = kl_categorical(&q, &p);
        assert!(got.is_finite(), "KL({q:?} || {p:?}) should be finite, got {got}");
        assert_close(&format!("KL({q:?} || {p:?})"), got, exact_kl(&q, &p), 1e-12);
    }
    assert_close("KL(q || p) where q leaves out a category p has", kl_categorical(&q, &[0.5, 0.5, 0.0]), 0.0, 1e-15);
    // A category q draws and p never does makes the divergence infinite.
    let got = kl_categorical(&[0.4, 0.4, 0.2], &[0.5, 0.5, 0.0]);
    assert!(got.is_infinite() && got > 0.0, "KL(q || p) where p gives 0 to a category q draws should be +inf, got {got}");
}

#[test]
fn ex1_is_asymmetric() {
    // q spreads over two categories; p nearly rules out the second.
    let (q, p) = ([0.5, 0.5], [0.999, 0.001]);
    let (forward, reverse) = (kl_categorical(&q, &p), kl_categorical(&p, &q));
    assert_close("KL(q || p)", forward, exact_kl(&q, &p), 1e-12);
    assert_close("KL(p || q)", reverse, exact_kl(&p, &q), 1e-12);
    // Half of q's samples are ones p calls a 1-in-1000 event: that costs about ½ log 500.
    assert!(forward > 2.5 && reverse < 0.7, "expected KL(q || p) ≈ 2.76 and KL(p || q) ≈ 0.69, got {forward} and {reverse}");
    let mut rng = seeded_rng(103);
    let mut largest_gap: f64 = 0.0;
    for _ in 0..40 {
        let (q, p) = random_pair(2.0, &mut rng);
        let (forward, reverse) = (kl_categorical(&q, &p), kl_categorical(&p, &q));
        assert_close("KL(p || q) on a random pair", reverse, exact_kl(&p, &q), 1e-12 * (1.0 + reverse));
        largest_gap = largest_gap.max((forward - reverse).abs() / forward.max(reverse));
    }
    assert!(largest_gap > 0.2, "some random pair should show KL(q || p) and KL(p || q) differing by more than 20%, the largest relative gap was {largest_gap}");
}

// ---------------------------------------------------------------------------
// Exercise 10.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_matches_the_exact_moments() {
    let mut rng = seeded_rng(201);
    let mut pairs: Vec<(Vec<f64>, Vec<f64>)> = vec![(vec![0.9, 0.1], vec![0.1, 0.9]), (vec![0.25; 4], vec![0.7, 0.1, 0.1, 0.1])];
    pairs.extend((0..40).map(|i| random_pair([0.3, 1.0, 2.0, 3.0][i % 4], &mut rng)));
    for (q, p) in pairs {
        let want = exact_moments(&q, &p, Estimator::K2).0 - exact_kl(&q, &p);
        let got = k2_bias(&q, &p);
        assert_close(&format!("the bias of k2 for q = {q:?}, p = {p:?}"), got, want, 1e-11 * (1.0 + want.abs()));
    }
    // Far apart, the bias is a large share of the divergence: 0.66 nats on 1.76.
    let far = k2_bias(&[0.9, 0.1], &[0.1, 0.9]);
    assert!(far > 0.6, "the bias of k2 between [0.9, 0.1] and [0.1, 0.9] should be about 0.656, got {far}");
}

#[test]
fn ex2_vanishes_relative_to_kl_as_p_approaches_q() {
    let mut rng = seeded_rng(202);
    let epsilons = halvings(10); // 0.4 down to 0.00078
    for _ in 0..12 {
        let k = categories(8, &mut rng);
        let (q, path) = shrinking_path(k, &epsilons, &mut rng);
        let shares: Vec<f64> = path.iter().map(|p| k2_bias(&q, p).abs() / exact_kl(&q, p)).collect();
        // Second-order agreement: the bias is O(ε³) while the KL is O(ε²), so their ratio is
        // O(ε), like |log r| (at most 2ε on these paths); it stays below ε.
        for (share, eps) in shares.iter().zip(&epsilons).skip(2) {
            assert!(*share <= *eps, "|bias| / KL should be O(ε), below ε = {eps}: got {share}, along the path {shares:?} for ε = {epsilons:?}, q = {q:?}");
        }
        let last = *shares.last().unwrap();
        assert!(last < 1e-3, "at ε = {} the bias of k2 should be a negligible share of the KL, got {last}", epsilons.last().unwrap());
    }
}

// ---------------------------------------------------------------------------
// Exercise 10.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_k3_is_k1_plus_a_control_variate() {
    for log_r in [-6.0, -2.0, -0.7, -0.1, -1e-4, 0.0, 1e-4, 0.05, 0.4, 1.3, 3.0] {
        assert_close(&format!("k3 at log r = {log_r}"), k3_from_k1(log_r), Estimator::K3.value(log_r), 1e-12 * (1.0 + Estimator::K3.value(log_r)));
    }
    // The added term has mean zero under q, so k3 has the mean of k1: the KL.
    let mut rng = seeded_rng(301);
    for _ in 0..20 {
        let (q, p) = random_pair(2.0, &mut rng);
        let mean: f64 = q.iter().zip(&p).map(|(qx, px)| qx * k3_from_k1((px / qx).ln())).sum();
        assert_close(&format!("E_q[k3] for q = {q:?}, p = {p:?}"), mean, exact_kl(&q, &p), 1e-12);
    }
}

/// Var_q[k1 + λ (r − 1)], exactly.
fn controlled_variance(q: &[f64], p: &[f64], lambda: f64) -> f64 {
    let values: Vec<f64> = q.iter().zip(p).map(|(qx, px)| -(px / qx).ln() + lambda * (px / qx - 1.0)).collect();
    let mean: f64 = q.iter().zip(&values).map(|(w, v)| w * v).sum();
    q.iter().zip(&values).map(|(w, v)| w * (v - mean).powi(2)).sum()
}

#[test]
fn ex3_coefficient_minimises_the_variance_on_a_grid() {
    let mut rng = seeded_rng(302);
    for i in 0..30 {
        let (q, p) = random_pair([0.3, 0.8, 1.5][i % 3], &mut rng);
        // The variance at λ = 1 is the library's k3, at λ = 0 its k1.
        assert_close("Var(k3) from the grid's formula", controlled_variance(&q, &p, 1.0), exact_moments(&q, &p, Estimator::K3).1.powi(2), 1e-12);
        assert_close("Var(k1) from the grid's formula", controlled_variance(&q, &p, 0.0), exact_moments(&q, &p, Estimator::K1).1.powi(2), 1e-12);
        let (step, grid) = (1e-3, -2000..=4000);
        let best = grid.map(|j| j as f64 * step).min_by(|a, b| controlled_variance(&q, &p, *a).total_cmp(&controlled_variance(&q, &p, *b))).unwrap();
        assert!(best > -1.99 && best < 3.99, "the test's grid should contain the minimum, found {best} for q = {q:?}, p = {p:?}");
        let got = optimal_control_coefficient(&q, &p);
        assert_close(&format!("the minimising λ for q = {q:?}, p = {p:?}, against a grid of step {step}"), got, best, step);
        let at = controlled_variance(&q, &p, got);
        for nearby in [best - step, best, best + step, 0.0, 1.0] {
            assert!(at <= controlled_variance(&q, &p, nearby) * (1.0 + 1e-12), "Var at your λ = {got} is {at}, more than at λ = {nearby}");
        }
    }
}

#[test]
fn ex3_coefficient_tends_to_one_as_p_approaches_q() {
    let mut rng = seeded_rng(303);
    let epsilons = halvings(9); // 0.4 down to 0.0016
    for _ in 0..12 {
        let k = categories(8, &mut rng);
        let (q, path) = shrinking_path(k, &epsilons, &mut rng);
        let lambdas: Vec<f64> = path.iter().map(|p| optimal_control_coefficient(&q, p)).collect();
        let gaps: Vec<f64> = lambdas.iter().map(|l| (l - 1.0).abs()).collect();
        // |λ* − 1| is O(ε), like |log r| (at most 2ε on these paths).
        for (gap, eps) in gaps.iter().zip(&epsilons).skip(2) {
            assert!(*gap <= 2.0 * eps, "|λ* − 1| should be O(ε), below 2ε = {}: got λ* = {lambdas:?} for ε = {epsilons:?}", 2.0 * eps);
        }
        assert!(gaps.last().unwrap() < &5e-3, "λ* should be within 0.005 of 1 at ε = {}, got {lambdas:?}", epsilons.last().unwrap());
        // Each λ* is the true minimiser along the path too.
        for (p, l) in path.iter().zip(&lambdas) {
            let at = controlled_variance(&q, p, *l);
            assert!(at <= controlled_variance(&q, p, l * 1.01) && at <= controlled_variance(&q, p, l * 0.99), "λ* = {l} does not minimise the variance for p = {p:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 10.4
// ---------------------------------------------------------------------------

#[test]
fn ex4_matches_the_reward_penalty_of_kl_penalty() {
    let mut rng = seeded_rng(401);
    let config = tinyagent::Config { vocab: 32, n_ctx: 16, d_model: 16, n_layer: 1, n_head: 2 };
    let reference = {
        let _turn = agentrl::book::seeded(401);
        TinyAgent::new(config, tch::Device::Cpu)
    };
    // Three episodes of different lengths: a prompt, then policy turns and environment replies.
    let mut trajectories = Vec::new();
    for (task, len) in [(0, 16), (1, 9), (2, 12)] {
        let ids: Vec<u32> = (0..len).map(|_| 1 + sample_action(&[1.0 / 31.0; 31], &mut rng) as u32).collect();
        let owners: Vec<Owner> = (0..len).map(|t| if t < 3 { Owner::Prompt } else if (t / 3) % 2 == 1 { Owner::Policy } else { Owner::Env }).collect();
        let logprobs: Vec<f64> = owners.iter().map(|o| if *o == Owner::Policy { between(-4.0, -0.01, &mut rng) } else { 0.0 }).collect();
        trajectories.push(Trajectory { task, ids, owners, logprobs, reward: between(0.0, 1.0, &mut rng), info: Default::default() });
    }
    // The reference's log-probs at every position, by a plain forward pass.
    let batch = collate(&trajectories, tch::Device::Cpu);
    let reference_logprobs = tch::no_grad(|| policy_logprobs(&reference, &batch));
    let width = reference_logprobs.size()[1] as usize;
    let reference_logprobs = to_vec(&reference_logprobs);
    let estimates: Vec<f64> = trajectories
        .iter()
        .enumerate()
        .map(|(b, tr)| {
            let policy: Vec<f64> = tr.logprobs.to_vec();
            let reference = &reference_logprobs[b * width..b * width + tr.ids.len()];
            sequence_kl_k1(&policy, reference, &tr.action_mask())
        })
        .collect();
    let mut penalty = KlPenalty { reference, beta: 1.0, placement: Placement::Reward };
    for beta in [1.0, 0.3] {
        penalty.beta = beta;
        let before: Vec<f64> = trajectories.iter().map(|tr| tr.reward).collect();
        let mut rewards = before.clone();
        penalty.shape_rewards(&trajectories, &mut rewards);
        for b in 0..trajectories.len() {
            assert_close(&format!("the reward shift of episode {b} with β = {beta}, against β times your sequence KL"), rewards[b] - before[b], -beta * estimates[b], 1e-4);
        }
    }
}

/// log-probs of a random conditional distribution over `k` tokens for each of `contexts` contexts.
fn random_conditionals(contexts: usize, k: usize, rng: &mut StdRng) -> Vec<Vec<f64>> {
    (0..contexts).map(|_| softmax(&logits(k, 2.0, rng))).collect()
}

#[test]
fn ex4_averages_to_the_kl_between_whole_episodes() {
    // Episodes of four tokens over a vocabulary of k: a prompt token, the policy's first token
    // x1, the environment's reply e (drawn from the same distribution under both policies), and
    // the policy's second token x2. Enumerating all k³ episodes, the mean of the sequence k1
    // under the policy must be the exact KL between the two distributions over whole episodes.
    let mut rng = seeded_rng(402);
    let k = 3;
    for _ in 0..10 {
        let (first, first_ref) = (softmax(&logits(k, 2.0, &mut rng)), softmax(&logits(k, 2.0, &mut rng)));
        let env = random_conditionals(k, k, &mut rng); // env[x1][e]
        let (second, second_ref) = (random_conditionals(k * k, k, &mut rng), random_conditionals(k * k, k, &mut rng)); // [x1 * k + e][x2]
        // Numbers at the positions off the mask: what each model would assign to the prompt and
        // the environment's token. They differ between the models and must not count.
        let prompt = (between(-4.0, 0.0, &mut rng), between(-4.0, 0.0, &mut rng));
        let env_scores: Vec<(f64, f64)> = (0..k * k).map(|_| (between(-4.0, 0.0, &mut rng), between(-4.0, 0.0, &mut rng))).collect();
        let mask = [false, true, false, true];
        let (mut joint, mut joint_ref, mut mean) = (Vec::new(), Vec::new(), 0.0);
        for episode in 0..k * k * k {
            let (x1, e, x2) = (episode / (k * k), episode / k % k, episode % k);
            let c = x1 * k + e;
            let probability = first[x1] * env[x1][e] * second[c][x2];
            joint.push(probability);
            joint_ref.push(first_ref[x1] * env[x1][e] * second_ref[c][x2]);
            let policy = [prompt.0, first[x1].ln(), env_scores[c].0, second[c][x2].ln()];
            let reference = [prompt.1, first_ref[x1].ln(), env_scores[c].1, second_ref[c][x2].ln()];
            mean += probability * sequence_kl_k1(&policy, &reference, &mask);
        }
        let want = exact_kl(&joint, &joint_ref);
        assert_close("E over episodes of the sequence k1, against the KL between the episode distributions", mean, want, 1e-12);
    }
    // One episode on its own can come out negative: k1 is unbiased, not positive.
    let got = sequence_kl_k1(&[0.0, -2.0, -1.0, -0.5], &[-3.0, -1.0, -9.0, -0.25], &[false, true, false, true]);
    assert_close("the sequence k1 of an episode the reference likes better", got, -1.25, 1e-12);
}

// ---------------------------------------------------------------------------
// Exercise 10.5
// ---------------------------------------------------------------------------

/// The gradient of `tinyagent::entropy` with respect to the logits, by autograd.
fn autograd_gradient(z: &[f64]) -> Vec<f64> {
    let logits = tensor(z).set_requires_grad(true);
    tinyagent::entropy(&logits).backward();
    to_vec(&logits.grad())
}

/// The entropy of softmax(z), in `f64`.
fn entropy_of(z: &[f64]) -> f64 {
    softmax(z).iter().filter(|p| **p > 0.0).map(|p| -p * p.ln()).sum()
}

#[test]
fn ex5_matches_autograd_through_entropy() {
    let mut rng = seeded_rng(501);
    for i in 0..40 {
        let z = logits(categories(10, &mut rng), [0.5, 2.0, 5.0, 10.0][i % 4], &mut rng);
        let (got, want) = (entropy_gradient(&z), autograd_gradient(&z));
        assert_eq!(got.len(), z.len(), "one derivative per logit");
        for j in 0..z.len() {
            assert_close(&format!("dH/dz_{j} at logits {z:?}"), got[j], want[j], 1e-6);
        }
    }
    // Large logits: the softmax must not overflow.
    let z = [800.0, 799.0, -250.0];
    let (got, want) = (entropy_gradient(&z), autograd_gradient(&z));
    for j in 0..z.len() {
        assert!(got[j].is_finite(), "dH/dz_{j} at {z:?} should be finite, got {got:?}");
        assert_close(&format!("dH/dz_{j} at logits {z:?}"), got[j], want[j], 1e-6);
    }
}

#[test]
fn ex5_sums_to_zero_and_vanishes_at_the_extremes() {
    let mut rng = seeded_rng(502);
    for _ in 0..40 {
        let z = logits(categories(10, &mut rng), 3.0, &mut rng);
        // Adding a constant to every logit leaves the softmax, so the entropy, unchanged.
        let total: f64 = entropy_gradient(&z).iter().sum();
        assert_close(&format!("the sum of dH/dz at {z:?}"), total, 0.0, 1e-12);
    }
    for k in [2, 3, 7, 32] {
        for c in [0.0, -1.7, 4.0] {
            let z = vec![c; k];
            let norm: f64 = entropy_gradient(&z).iter().map(|g| g.abs()).sum();
            assert_close(&format!("|dH/dz| at the uniform distribution over {k} (logits all {c})"), norm, 0.0, 1e-12);
        }
        // Nearly deterministic: the entropy is nearly flat too, so a bonus barely pushes.
        let mut z = vec![0.0; k];
        z[0] = 15.0;
        let (got, want) = (entropy_gradient(&z), autograd_gradient(&z));
        let norm: f64 = got.iter().map(|g| g.abs()).sum();
        assert!(norm < 1e-4 * k as f64, "|dH/dz| at a nearly one-hot softmax over {k} should be tiny, got {got:?}");
        for j in 0..k {
            assert_close(&format!("dH/dz_{j} at a nearly one-hot softmax over {k}"), got[j], want[j], 1e-6);
        }
    }
}

#[test]
fn ex5_gradient_ascent_raises_the_entropy() {
    let mut rng = seeded_rng(503);
    for _ in 0..20 {
        let k = categories(8, &mut rng);
        let z = logits(k, 2.0, &mut rng);
        let g = entropy_gradient(&z);
        let squared: f64 = g.iter().map(|x| x * x).sum();
        // A small step along the gradient raises H by η |g|², to first order.
        let eta = 1e-4;
        let stepped: Vec<f64> = z.iter().zip(&g).map(|(zi, gi)| zi + eta * gi).collect();
        let gain = entropy_of(&stepped) - entropy_of(&z);
        assert!(gain > 0.0, "a step along your gradient lowered the entropy at {z:?}");
        assert_close(&format!("the entropy gained by a step of {eta} at {z:?}, against η |g|²"), gain, eta * squared, 1e-2 * eta * squared + 1e-15);
        // Many steps climb to the maximum, log k at the uniform distribution.
        let mut current = z.clone();
        for _ in 0..400 {
            let g = entropy_gradient(&current);
            current.iter_mut().zip(&g).for_each(|(zi, gi)| *zi += 1.0 * gi);
        }
        let top = (k as f64).ln();
        assert_close(&format!("the entropy after 400 ascent steps from {z:?}"), entropy_of(&current), top, 1e-4);
        // The library's entropy (in f32) agrees.
        assert_close("tinyagent::entropy at the end of the climb", tinyagent::entropy(&tensor(&current)).double_value(&[]), top, 1e-5);
    }
}
