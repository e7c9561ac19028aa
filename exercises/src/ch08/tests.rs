//! Grading tests for the Chapter 8 exercises: `cargo test -p exercises ch08`.
//!
//! Each test is named after its exercise (`ex3_...` grades Exercise 8.3) and
//! checks consequences of the exercise's statement, computed here from the
//! `agentrl` library (`ppo::clipped_surrogate` and its gradients by autograd,
//! `ppo::ppo_policy_loss` and its diagnostics) and from exact expectations
//! over small categorical distributions, not values copied from one
//! particular solution.

use super::*;
use agentrl::mdp::{sample_action, seeded_rng, StdRng};
use agentrl::ppo::{clipped_surrogate, ppo_policy_loss};
use tch::{Kind, Tensor};

use crate::testkit::{assert_close, between, tensor, to_vec};

/// The library's clipped surrogate for one token with the given ratio (log π_old = 0).
fn library_objective(ratio: f64, advantage: f64, eps: f64) -> f64 {
    clipped_surrogate(&tensor(&[ratio.ln()]), &tensor(&[0.0]), &tensor(&[advantage]), (eps, eps)).double_value(&[0])
}

/// d(surrogate)/d(log π) per token, by autograd through the library's clipped surrogate.
fn library_slopes(ratios: &[f64], advantages: &[f64], eps: f64) -> Vec<f64> {
    let logp = tensor(&ratios.iter().map(|r| r.ln()).collect::<Vec<_>>()).set_requires_grad(true);
    let old = Tensor::zeros([ratios.len() as i64], (Kind::Double, tch::Device::Cpu));
    clipped_surrogate(&logp, &old, &tensor(advantages), (eps, eps)).sum(Kind::Double).backward();
    to_vec(&logp.grad())
}

/// Whether a ratio is within `margin` of one of the kinks 1 ± ε.
fn near_kink(ratio: f64, eps: f64, margin: f64) -> bool {
    (ratio - (1.0 + eps)).abs() < margin || (ratio - (1.0 - eps)).abs() < margin
}

const EPSILONS: [f64; 4] = [0.1, 0.2, 0.25, 0.3];

/// Random (ratio, advantage) points: ratios from 0.2 to 2.5, advantages of both signs, some exactly 0.
fn points(seed: u64, count: usize) -> Vec<(f64, f64)> {
    let mut rng = seeded_rng(seed);
    (0..count)
        .map(|i| {
            let ratio = between(-1.6, 0.92, &mut rng).exp();
            let advantage = if i % 10 == 0 { 0.0 } else { between(-2.0, 2.0, &mut rng) };
            (ratio, advantage)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Exercise 8.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_objective_matches_the_library() {
    for eps in EPSILONS {
        // The objective is continuous, so the kinks themselves are included.
        let kinks = [(1.0 + eps, 1.5), (1.0 - eps, 1.5), (1.0 + eps, -0.5), (1.0 - eps, -0.5), (1.0, 0.7)];
        for (ratio, advantage) in points(1, 300).into_iter().chain(kinks) {
            let want = library_objective(ratio, advantage, eps);
            assert_close(&format!("objective at ratio {ratio}, A = {advantage}, eps = {eps}"), clipped_objective(ratio, advantage, eps), want, 1e-10);
        }
    }
}

#[test]
fn ex1_slope_matches_autograd_away_from_the_kinks() {
    for eps in EPSILONS {
        let pts: Vec<(f64, f64)> = points(2, 400).into_iter().filter(|&(r, _)| !near_kink(r, eps, 1e-3)).collect();
        let (ratios, advantages): (Vec<f64>, Vec<f64>) = pts.iter().copied().unzip();
        let want = library_slopes(&ratios, &advantages, eps);
        for (i, (&ratio, &advantage)) in ratios.iter().zip(&advantages).enumerate() {
            assert_close(&format!("slope at ratio {ratio}, A = {advantage}, eps = {eps}"), clipped_slope(ratio, advantage, eps), want[i], 1e-10);
        }
    }
}

#[test]
fn ex1_slope_is_the_derivative_in_the_log_ratio() {
    // A central difference of the library's objective in log ρ, independent of autograd.
    let h: f64 = 1e-6;
    for eps in EPSILONS {
        for (ratio, advantage) in points(3, 300).into_iter().filter(|&(r, _)| !near_kink(r, eps, 1e-3)) {
            let difference = (library_objective(ratio * h.exp(), advantage, eps) - library_objective(ratio * (-h).exp(), advantage, eps)) / (2.0 * h);
            assert_close(&format!("slope at ratio {ratio}, A = {advantage}, eps = {eps}"), clipped_slope(ratio, advantage, eps), difference, 1e-6);
        }
    }
    // At ρ = 1 the slope is the advantage: PPO's first step is the policy gradient.
    for advantage in [-1.3, -0.2, 0.0, 0.4, 2.0] {
        assert_close(&format!("slope at ratio 1, A = {advantage}"), clipped_slope(1.0, advantage, 0.2), advantage, 1e-12);
    }
}

#[test]
fn ex1_kinks_follow_the_closed_range_convention() {
    for eps in [0.25, 0.5] {
        for advantage in [-1.3, 0.8] {
            for ratio in [1.0 + eps, 1.0 - eps] {
                // Both terms agree there, and the slope is the one from inside the range.
                assert_close(&format!("objective at the kink {ratio}, A = {advantage}"), clipped_objective(ratio, advantage, eps), ratio * advantage, 1e-12);
                assert_close(&format!("slope at the kink {ratio}, A = {advantage}, eps = {eps}"), clipped_slope(ratio, advantage, eps), ratio * advantage, 1e-12);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Exercises 8.2 and 8.3: two categoricals
// ---------------------------------------------------------------------------

/// (old policy, new policy, f): categoricals with full support and a function of the action.
fn categoricals() -> Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    vec![
        (vec![0.1, 0.2, 0.3, 0.4], vec![0.25, 0.35, 0.15, 0.25], vec![1.0, -2.0, 0.5, 3.0]),
        (vec![0.5, 0.5], vec![0.9, 0.1], vec![1.0, 0.0]),
        (vec![0.05, 0.15, 0.3, 0.2, 0.3], vec![0.3, 0.1, 0.2, 0.2, 0.2], vec![4.0, 1.0, -1.0, 0.0, 2.0]),
        (vec![0.7, 0.1, 0.1, 0.1], vec![0.6, 0.15, 0.05, 0.2], vec![0.0, 1.0, 1.0, -1.0]),
    ]
}

/// Actions drawn from `probs` with `sample_action`.
fn draws(probs: &[f64], n: usize, rng: &mut StdRng) -> Vec<usize> {
    (0..n).map(|_| sample_action(probs, rng)).collect()
}

/// Mean and standard error of the mean of a sample.
fn mean_and_standard_error(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

// ---------------------------------------------------------------------------
// Exercise 8.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_converges_to_the_exact_mean_under_the_new_policy() {
    let mut rng = seeded_rng(21);
    for (old, new, f) in categoricals() {
        let exact: f64 = new.iter().zip(&f).map(|(q, v)| q * v).sum();
        let actions = draws(&old, 20_000, &mut rng);
        let values: Vec<f64> = actions.iter().map(|&a| f[a]).collect();
        let logp_new: Vec<f64> = actions.iter().map(|&a| new[a].ln()).collect();
        let logp_old: Vec<f64> = actions.iter().map(|&a| old[a].ln()).collect();
        let got = importance_weighted_mean(&values, &logp_new, &logp_old);
        // The spread of the per-sample terms ρ f sets the tolerance.
        let terms: Vec<f64> = actions.iter().map(|&a| new[a] / old[a] * f[a]).collect();
        let (_, se) = mean_and_standard_error(&terms);
        assert_close(&format!("IS estimate of E_new[f] from 20000 draws of old = {old:?}, new = {new:?}"), got, exact, 4.0 * se + 1e-12);
        // The plain mean of the same samples estimates E_old[f] instead, which is far away here.
        let exact_old: f64 = old.iter().zip(&f).map(|(p, v)| p * v).sum();
        assert!((got - exact).abs() < (got - exact_old).abs(), "the estimate {got} should be nearer E_new[f] = {exact} than E_old[f] = {exact_old}");
    }
}

#[test]
fn ex2_is_unbiased_even_in_batches_of_three() {
    let mut rng = seeded_rng(22);
    for (old, new, f) in categoricals() {
        let exact: f64 = new.iter().zip(&f).map(|(q, v)| q * v).sum();
        let estimates: Vec<f64> = (0..4000)
            .map(|_| {
                let actions = draws(&old, 3, &mut rng);
                let values: Vec<f64> = actions.iter().map(|&a| f[a]).collect();
                let logp_new: Vec<f64> = actions.iter().map(|&a| new[a].ln()).collect();
                let logp_old: Vec<f64> = actions.iter().map(|&a| old[a].ln()).collect();
                importance_weighted_mean(&values, &logp_new, &logp_old)
            })
            .collect();
        let (mean, se) = mean_and_standard_error(&estimates);
        assert_close(&format!("mean of 4000 estimates from 3 draws each, old = {old:?}, new = {new:?}"), mean, exact, 4.0 * se + 1e-12);
    }
}

#[test]
fn ex2_same_policy_gives_the_plain_mean() {
    let mut rng = seeded_rng(23);
    for n in [1, 2, 7, 50] {
        let values: Vec<f64> = (0..n).map(|_| between(-3.0, 3.0, &mut rng)).collect();
        let logp: Vec<f64> = (0..n).map(|_| between(-5.0, -0.01, &mut rng)).collect();
        let plain = values.iter().sum::<f64>() / n as f64;
        assert_close(&format!("IS estimate with new = old on {values:?}"), importance_weighted_mean(&values, &logp, &logp), plain, 1e-12);
    }
    assert_eq!(importance_weighted_mean(&[], &[], &[]), 0.0, "no samples, estimate 0");
}

#[test]
fn ex2_weights_each_sample_by_its_ratio() {
    // One sample: the estimate is the sample's value times its ratio, not renormalised.
    for (value, new, old) in [(2.0, -0.5, -1.5), (-1.0, -2.0, -0.3), (0.5, -0.1, -0.1), (3.0, -4.0, -1.0)] {
        let ratio = f64::exp(new - old);
        assert_close(&format!("one sample, f = {value}, log pi_new = {new}, log pi_old = {old}"), importance_weighted_mean(&[value], &[new], &[old]), ratio * value, 1e-12);
    }
    // Doubling the new probability of every sample doubles the estimate.
    let (values, old) = ([1.0, -2.0, 0.5], [-1.0, -1.5, -0.7]);
    let new = [-1.2, -1.1, -0.9];
    let doubled: Vec<f64> = new.iter().map(|x| x + 2f64.ln()).collect();
    assert_close("ratios doubled", importance_weighted_mean(&values, &doubled, &old), 2.0 * importance_weighted_mean(&values, &new, &old), 1e-12);
}

// ---------------------------------------------------------------------------
// Exercise 8.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_is_never_negative_and_zero_without_change() {
    let mut rng = seeded_rng(31);
    for n in [1, 2, 5, 40] {
        for _ in 0..50 {
            let old: Vec<f64> = (0..n).map(|_| between(-6.0, -0.01, &mut rng)).collect();
            let new: Vec<f64> = old.iter().map(|x| x + between(-4.0, 4.0, &mut rng)).collect();
            let kl = k3_kl(&new, &old);
            assert!(kl >= 0.0, "k3 = {kl} < 0 for new {new:?}, old {old:?}");
            assert!(kl > 0.0, "k3 = {kl} should be positive when the log-probs differ: new {new:?}, old {old:?}");
            assert_close(&format!("k3 with new = old = {old:?}"), k3_kl(&old, &old), 0.0, 1e-15);
        }
    }
    assert_eq!(k3_kl(&[], &[]), 0.0, "no samples, estimate 0");
}

#[test]
fn ex3_estimates_the_exact_kl_from_old_samples() {
    let mut rng = seeded_rng(32);
    for (old, new, _) in categoricals() {
        let exact: f64 = old.iter().zip(&new).map(|(p, q)| p * (p / q).ln()).sum();
        let actions = draws(&old, 20_000, &mut rng);
        let logp_new: Vec<f64> = actions.iter().map(|&a| new[a].ln()).collect();
        let logp_old: Vec<f64> = actions.iter().map(|&a| old[a].ln()).collect();
        let per_sample: Vec<f64> = (0..actions.len()).map(|i| k3_kl(&logp_new[i..=i], &logp_old[i..=i])).collect();
        let (mean, se) = mean_and_standard_error(&per_sample);
        let all = k3_kl(&logp_new, &logp_old);
        assert_close("k3 of the batch vs the mean of its per-sample values", all, mean, 1e-10);
        assert_close(&format!("k3 from 20000 draws vs KL(old || new), old = {old:?}, new = {new:?}"), all, exact, 4.0 * se + 1e-12);
    }
}

/// Random [B, T] log-probs of a batch, old and new, drifted apart by up to ±`drift` per token.
fn random_logps(b: usize, t: usize, drift: f64, rng: &mut StdRng) -> (Vec<f64>, Vec<f64>) {
    let old: Vec<f64> = (0..b * t).map(|_| between(-4.0, -0.05, rng)).collect();
    let new: Vec<f64> = old.iter().map(|x| x + between(-drift, drift, rng)).collect();
    (new, old)
}

/// `ppo_policy_loss`'s diagnostics on [B, T] tensors built from the vectors.
fn library_diagnostics(new: &[f64], old: &[f64], advantages: &[f64], mask: &[f64], b: usize, eps: f64) -> agentrl::ppo::Diagnostics {
    let shape = [b as i64, -1];
    ppo_policy_loss(&tensor(new).view(shape), &tensor(old).view(shape), &tensor(advantages).view(shape), &tensor(mask).view(shape), eps).1
}

#[test]
fn ex3_equals_ppo_approx_kl() {
    let mut rng = seeded_rng(33);
    for (b, t, drift) in [(1, 5, 0.1), (4, 9, 0.5), (3, 20, 1.5), (8, 16, 0.02)] {
        let (new, old) = random_logps(b, t, drift, &mut rng);
        let advantages: Vec<f64> = (0..b * t).map(|_| between(-1.0, 1.0, &mut rng)).collect();
        let ones = vec![1.0; b * t];
        let want = library_diagnostics(&new, &old, &advantages, &ones, b, 0.2).approx_kl;
        // The library sums in f32, hence the relative tolerance.
        assert_close(&format!("k3 vs approx_kl on a {b}x{t} batch, mask of ones"), k3_kl(&new, &old), want, 1e-6 * want.abs() + 1e-9);
        // With a mask, approx_kl is k3 over the action tokens only.
        let mask: Vec<f64> = (0..b * t).map(|i| if i % 3 == 0 { 0.0 } else { 1.0 }).collect();
        let keep = |xs: &[f64]| -> Vec<f64> { xs.iter().zip(&mask).filter(|(_, &m)| m > 0.0).map(|(x, _)| *x).collect() };
        let want = library_diagnostics(&new, &old, &advantages, &mask, b, 0.2).approx_kl;
        assert_close(&format!("k3 vs approx_kl on a {b}x{t} batch, masked"), k3_kl(&keep(&new), &keep(&old)), want, 1e-6 * want.abs() + 1e-9);
    }
}

// ---------------------------------------------------------------------------
// Exercise 8.4
// ---------------------------------------------------------------------------

#[test]
fn ex4_matches_ppo_clip_fraction() {
    let mut rng = seeded_rng(41);
    for (b, t, drift) in [(1, 6, 0.3), (4, 9, 0.4), (3, 20, 1.0), (8, 16, 0.15), (2, 3, 2.0)] {
        let (new, old) = random_logps(b, t, drift, &mut rng);
        let advantages: Vec<f64> = (0..b * t).map(|_| between(-1.0, 1.0, &mut rng)).collect();
        let mask: Vec<f64> = (0..b * t).map(|_| sample_action(&[0.3, 0.7], &mut rng) as f64).collect();
        let ratios: Vec<f64> = new.iter().zip(&old).zip(&mask).filter(|(_, &m)| m > 0.0).map(|((n, o), _)| (n - o).exp()).collect();
        for eps in EPSILONS {
            let want = library_diagnostics(&new, &old, &advantages, &mask, b, eps).clip_fraction;
            assert_close(&format!("clip fraction of {} action tokens of a {b}x{t} batch, eps = {eps}", ratios.len()), clip_fraction(&ratios, eps), want, 1e-6);
        }
    }
    // No action tokens at all: the library reports 0, and so should an empty batch.
    let (new, old) = random_logps(2, 4, 1.0, &mut rng);
    let zeros = vec![0.0; 8];
    assert_eq!(library_diagnostics(&new, &old, &zeros, &zeros, 2, 0.2).clip_fraction, 0.0);
    assert_eq!(clip_fraction(&[], 0.2), 0.0, "an empty batch has clip fraction 0");
}

#[test]
fn ex4_counts_both_sides_and_shrinks_with_eps() {
    let mut rng = seeded_rng(42);
    let ratios: Vec<f64> = (0..200).map(|_| between(-1.0, 1.0, &mut rng).exp()).collect();
    let mut previous = 1.0;
    for eps in [0.01, 0.05, 0.1, 0.2, 0.4, 0.8, 2.0] {
        let fraction = clip_fraction(&ratios, eps);
        assert!((0.0..=1.0).contains(&fraction), "a fraction, got {fraction}");
        assert!(fraction <= previous, "the clip fraction cannot grow with eps: {fraction} at eps = {eps} after {previous}");
        previous = fraction;
    }
    assert_eq!(clip_fraction(&ratios, 2.0), 0.0, "no ratio here is beyond 1 ± 2");
    // One ratio on each side, one inside, one exactly on each (representable) edge.
    assert_close("both sides count", clip_fraction(&[0.5, 1.6, 1.0, 0.75, 1.25], 0.25), 2.0 / 5.0, 1e-15);
}

// ---------------------------------------------------------------------------
// Exercise 8.5
// ---------------------------------------------------------------------------

#[test]
fn ex5_matches_autograd_of_the_clipped_surrogate() {
    for eps in EPSILONS {
        let pts: Vec<(f64, f64)> = points(51, 400).into_iter().filter(|&(r, _)| !near_kink(r, eps, 1e-6)).collect();
        let (ratios, advantages): (Vec<f64>, Vec<f64>) = pts.iter().copied().unzip();
        let slopes = library_slopes(&ratios, &advantages, eps);
        let got = tokens_still_pushed(&ratios, &advantages, eps);
        assert_eq!(got.len(), ratios.len(), "one answer per token");
        for i in 0..ratios.len() {
            assert_eq!(got[i], slopes[i] != 0.0, "token with ratio {}, A = {}, eps = {eps}: autograd gives slope {}", ratios[i], advantages[i], slopes[i]);
        }
    }
}

#[test]
fn ex5_matches_the_gradient_of_the_masked_ppo_loss() {
    let mut rng = seeded_rng(52);
    let (b, t, eps) = (4, 12, 0.2);
    let (new, old) = random_logps(b, t, 0.6, &mut rng);
    let advantages: Vec<f64> = (0..b * t).map(|i| if i % 7 == 0 { 0.0 } else { between(-1.5, 1.5, &mut rng) }).collect();
    let mask: Vec<f64> = (0..b * t).map(|_| sample_action(&[0.25, 0.75], &mut rng) as f64).collect();
    let logp = tensor(&new).view([b as i64, t as i64]).set_requires_grad(true);
    let shape = [b as i64, t as i64];
    let (loss, _) = ppo_policy_loss(&logp, &tensor(&old).view(shape), &tensor(&advantages).view(shape), &tensor(&mask).view(shape), eps);
    loss.backward();
    let grad = to_vec(&logp.grad());
    let ratios: Vec<f64> = new.iter().zip(&old).map(|(n, o)| (n - o).exp()).collect();
    let pushed = tokens_still_pushed(&ratios, &advantages, eps);
    for i in 0..b * t {
        if near_kink(ratios[i], eps, 1e-6) {
            continue;
        }
        assert_eq!(pushed[i] && mask[i] > 0.0, grad[i] != 0.0, "token {i}: ratio {}, A = {}, mask {}, gradient {}", ratios[i], advantages[i], mask[i], grad[i]);
    }
}

#[test]
fn ex5_a_token_moves_exactly_when_it_is_pushed() {
    // Free per-token log-probs climbing the library's clipped surrogate by gradient ascent: each
    // step moves exactly the tokens still pushed, and after a few steps none is.
    let mut rng = seeded_rng(53);
    let (n, eps, lr) = (30, 0.2, 0.1);
    let old: Vec<f64> = (0..n).map(|_| between(-3.0, -0.1, &mut rng)).collect();
    let advantages: Vec<f64> = (0..n).map(|i| if i % 2 == 0 { between(0.2, 1.5, &mut rng) } else { -between(0.2, 1.5, &mut rng) }).collect();
    let mut logp: Vec<f64> = old.iter().map(|x| x + between(-0.3, 0.3, &mut rng)).collect();
    let mut settled = false;
    for step in 0..100 {
        let ratios: Vec<f64> = logp.iter().zip(&old).map(|(n, o)| (n - o).exp()).collect();
        let pushed = tokens_still_pushed(&ratios, &advantages, eps);
        if pushed.iter().all(|p| !p) {
            settled = true;
            break;
        }
        let x = tensor(&logp).set_requires_grad(true);
        clipped_surrogate(&x, &tensor(&old), &tensor(&advantages), (eps, eps)).sum(Kind::Double).backward();
        let next: Vec<f64> = logp.iter().zip(to_vec(&x.grad())).map(|(l, g)| l + lr * g).collect();
        for i in 0..n {
            if !near_kink(ratios[i], eps, 1e-9) {
                assert_eq!(pushed[i], next[i] != logp[i], "step {step}, token {i}: ratio {}, A = {}", ratios[i], advantages[i]);
            }
        }
        logp = next;
    }
    assert!(settled, "after 100 ascent steps every token should have stopped being pushed");
    for i in 0..n {
        let ratio = (logp[i] - old[i]).exp();
        if advantages[i] > 0.0 {
            assert!(ratio > 1.0 + eps, "a good token stops only past 1 + eps: ratio {ratio}");
        } else {
            assert!(ratio < 1.0 - eps, "a bad token stops only below 1 - eps: ratio {ratio}");
        }
    }
}
