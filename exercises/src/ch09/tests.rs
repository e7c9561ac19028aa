//! Grading tests for the Chapter 9 exercises: `cargo test -p exercises ch09`.
//!
//! Each test is named after its exercise (`ex3_...` grades Exercise 9.3) and
//! checks consequences of the exercise's statement, computed here from the
//! `agentrl` library (the gradients of `grpo::grpo_loss` and
//! `ppo::clipped_surrogate` by autograd, `grpo::informative_groups` on
//! simulated groups, `advantage::group_advantages`), not values copied from
//! one particular solution.

use super::*;
use agentrl::advantage::{group_advantages, GroupBaseline};
use agentrl::grpo::{grpo_loss, informative_groups, LossNorm};
use agentrl::pg::per_token;
use agentrl::ppo::clipped_surrogate;
use agentrl::mdp::{sample_action, seeded_rng, StdRng};
use tch::Kind;

use crate::testkit::{assert_close, between, index_below, tensor, to_vec};

const NORMS: [LossNorm; 5] = [LossNorm::SequenceMean, LossNorm::TokenMean, LossNorm::Constant(1.0), LossNorm::Constant(7.5), LossNorm::Constant(128.0)];

/// A random batch: 1 to 6 sequences of 0 to 12 action tokens (some empty), advantages in [−2, 2).
fn random_batch(rng: &mut StdRng) -> (Vec<usize>, Vec<f64>) {
    let b = 1 + index_below(6, rng);
    let lengths: Vec<usize> = (0..b).map(|_| if sample_action(&[0.85, 0.15], rng) == 1 { 0 } else { 1 + index_below(12, rng) }).collect();
    let advantages: Vec<f64> = (0..b).map(|_| between(-2.0, 2.0, rng)).collect();
    (lengths, advantages)
}

/// −d loss / d log π at every action token, by autograd through `grpo_loss` at ratio 1.
///
/// Each sequence's action tokens sit at random positions of a padded row (between
/// them, positions the mask leaves out, as environment tokens are), the
/// log-probs are random and the old log-probs equal them, so every ratio is 1.
/// Returns minus the gradient at the action tokens, one vector per sequence in order.
fn autograd_weights(lengths: &[usize], advantages: &[f64], norm: LossNorm, rng: &mut StdRng) -> Vec<Vec<f64>> {
    let (b, t) = (lengths.len(), 2 * lengths.iter().copied().max().unwrap_or(0) + 3);
    let mut mask = vec![0.0; b * t];
    let mut positions = Vec::with_capacity(b);
    for (row, &len) in lengths.iter().enumerate() {
        let mut free: Vec<usize> = (0..t).collect();
        let mut chosen: Vec<usize> = (0..len).map(|_| free.remove(index_below(free.len(), rng))).collect();
        chosen.sort();
        for &p in &chosen {
            mask[row * t + p] = 1.0;
        }
        positions.push(chosen);
    }
    let logp: Vec<f64> = (0..b * t).map(|_| between(-4.0, -0.05, rng)).collect();
    let shape = [b as i64, t as i64];
    let logp = tensor(&logp).view(shape).set_requires_grad(true);
    let eps = (between(0.1, 0.3, rng), between(0.1, 0.4, rng));
    let mask = tensor(&mask).view(shape);
    let (loss, _) = grpo_loss(&logp, &logp.detach(), &per_token(advantages, &mask), &mask, eps, norm);
    let mask = Vec::<f64>::try_from(mask.view([-1])).unwrap();
    loss.backward();
    let grad = to_vec(&logp.grad());
    for (i, g) in grad.iter().enumerate() {
        assert!(mask[i] > 0.0 || *g == 0.0, "the library gave a masked position a gradient");
    }
    positions.iter().enumerate().map(|(row, ps)| ps.iter().map(|&p| -grad[row * t + p]).collect()).collect()
}

/// The library works in `f32` inside `aggregate`, hence a relative tolerance.
fn tolerance(want: f64) -> f64 {
    1e-6 * (1.0 + want.abs())
}

// ---------------------------------------------------------------------------
// Exercise 9.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_matches_autograd_through_grpo_loss() {
    let mut rng = seeded_rng(11);
    for _ in 0..40 {
        let (lengths, advantages) = random_batch(&mut rng);
        for norm in NORMS {
            let want = autograd_weights(&lengths, &advantages, norm, &mut rng);
            let got = token_weights(&lengths, &advantages, norm);
            assert_eq!(got.len(), lengths.len(), "one vector per sequence, lengths {lengths:?}");
            for b in 0..lengths.len() {
                assert_eq!(got[b].len(), lengths[b], "sequence {b} has {} action tokens, lengths {lengths:?}", lengths[b]);
                for t in 0..lengths[b] {
                    let what = format!("{norm:?}, token {t} of sequence {b}, lengths {lengths:?}, advantages {advantages:?}");
                    assert_close(&what, got[b][t], want[b][t], tolerance(want[b][t]));
                }
            }
        }
    }
}

#[test]
fn ex1_empty_sequences_still_count_in_the_batch() {
    // An empty sequence adds nothing to the sums but is one of the B sequences that
    // `SequenceMean` and `Constant` divide by; `TokenMean` counts only tokens.
    let mut rng = seeded_rng(12);
    for (lengths, advantages) in [(vec![3, 0, 5], vec![1.0, 0.7, -1.0]), (vec![0, 0, 2, 0], vec![-0.4, 1.5, 0.9, 2.0]), (vec![0], vec![1.0])] {
        for norm in NORMS {
            let want = autograd_weights(&lengths, &advantages, norm, &mut rng);
            let got = token_weights(&lengths, &advantages, norm);
            assert_eq!(got.len(), lengths.len(), "one vector per sequence, empty ones included: lengths {lengths:?}");
            for b in 0..lengths.len() {
                assert_eq!(got[b].len(), lengths[b], "sequence {b} of lengths {lengths:?}");
                for t in 0..lengths[b] {
                    assert_close(&format!("{norm:?}, token {t} of sequence {b}, lengths {lengths:?}"), got[b][t], want[b][t], tolerance(want[b][t]));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 9.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_is_the_row_sum_of_the_autograd_gradient() {
    let mut rng = seeded_rng(21);
    for _ in 0..40 {
        let (lengths, advantages) = random_batch(&mut rng);
        for norm in NORMS {
            let want: Vec<f64> = autograd_weights(&lengths, &advantages, norm, &mut rng).iter().map(|row| row.iter().sum()).collect();
            let got = sequence_push(&lengths, &advantages, norm);
            assert_eq!(got.len(), lengths.len(), "one number per sequence, lengths {lengths:?}");
            for b in 0..lengths.len() {
                let what = format!("{norm:?}, push on sequence {b}, lengths {lengths:?}, advantages {advantages:?}");
                assert_close(&what, got[b], want[b], 1e-5 * (1.0 + want[b].abs()));
            }
        }
    }
}

#[test]
fn ex2_only_the_sequence_mean_ignores_length() {
    let mut rng = seeded_rng(22);
    for _ in 0..30 {
        let b = 2 + index_below(6, &mut rng);
        let lengths: Vec<usize> = (0..b).map(|_| 1 + index_below(40, &mut rng)).collect();
        // The same |A| for every sequence, with random signs.
        let size = between(0.1, 2.0, &mut rng);
        let advantages: Vec<f64> = (0..b).map(|_| if sample_action(&[0.5, 0.5], &mut rng) == 0 { size } else { -size }).collect();
        let total_tokens: usize = lengths.iter().sum();
        for norm in NORMS {
            let push = sequence_push(&lengths, &advantages, norm);
            for i in 0..b {
                assert!(push[i] * advantages[i] > 0.0, "{norm:?}: a sequence is pushed in the direction of its advantage, got {} for A = {}", push[i], advantages[i]);
                let what = format!("{norm:?}, sequences 0 and {i} of lengths {lengths:?}");
                match norm {
                    // Every sequence gets the same push, whatever its length.
                    LossNorm::SequenceMean => assert_close(&what, push[i].abs(), push[0].abs(), 1e-12),
                    // The push is proportional to the length.
                    _ => assert_close(&what, push[i].abs() / lengths[i] as f64, push[0].abs() / lengths[0] as f64, 1e-12),
                }
            }
            // Summed over the batch: |A| for both means; |A| times the mean length over C for a constant.
            let total: f64 = push.iter().map(|x| x.abs()).sum();
            let want = match norm {
                LossNorm::Constant(c) => size * total_tokens as f64 / (b as f64 * c),
                _ => size,
            };
            assert_close(&format!("{norm:?}, total |push| over lengths {lengths:?}"), total, want, 1e-10 * (1.0 + want));
        }
    }
}

#[test]
fn ex2_long_wrong_answers_are_punished_less_per_token() {
    // One group of four on a task: two short right answers, a short wrong one and a long wrong one.
    let rewards = [1.0, 1.0, 0.0, 0.0];
    let lengths = [4, 4, 4, 16];
    let advantages = group_advantages(&rewards, GroupBaseline::Mean); // [0.5, 0.5, −0.5, −0.5]
    let (short_wrong, long_wrong) = (2, 3);
    for norm in NORMS {
        let push = sequence_push(&lengths, &advantages, norm);
        let per_token: Vec<f64> = push.iter().zip(&lengths).map(|(p, &l)| p / l as f64).collect();
        assert!(push[short_wrong] < 0.0 && push[long_wrong] < 0.0, "{norm:?}: wrong answers are pushed down, got {push:?}");
        if norm == LossNorm::SequenceMean {
            // The same total penalty spread over four times as many tokens.
            assert_close("SequenceMean: total penalty, long vs short wrong answer", push[long_wrong], push[short_wrong], 1e-12);
            assert_close("SequenceMean: penalty per token, long vs a quarter of short", per_token[long_wrong], per_token[short_wrong] / 4.0, 1e-12);
        } else {
            // Every token of a wrong answer is penalised alike, so the long one four times as much in total.
            assert_close(&format!("{norm:?}: penalty per token, long vs short wrong answer"), per_token[long_wrong], per_token[short_wrong], 1e-12);
            assert_close(&format!("{norm:?}: total penalty, long vs four times short"), push[long_wrong], 4.0 * push[short_wrong], 1e-12);
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 9.3
// ---------------------------------------------------------------------------

/// `groups` groups of `g` Bernoulli(`p`) rewards.
fn bernoulli_rewards(p: f64, g: usize, groups: usize, rng: &mut StdRng) -> Vec<f64> {
    (0..g * groups).map(|_| sample_action(&[1.0 - p, p], rng) as f64).collect()
}

#[test]
fn ex3_matches_the_simulated_frequency() {
    let mut rng = seeded_rng(31);
    for (p, g) in [(0.5, 8), (0.1, 8), (0.9, 8), (0.3, 4), (0.7, 2), (0.05, 16), (0.97, 5)] {
        let groups = 4000;
        let rewards = bernoulli_rewards(p, g, groups, &mut rng);
        let measured = 1.0 - informative_groups(&rewards, g).len() as f64 / groups as f64;
        let got = uninformative_probability(p, g);
        let se = (got.clamp(1e-3, 1.0 - 1e-3) * (1.0 - got.clamp(1e-3, 1.0 - 1e-3)) / groups as f64).sqrt();
        assert_close(&format!("share of uninformative groups of {g} at p = {p}, from {groups} simulated groups"), got, measured, 5.0 * se);
    }
}

#[test]
fn ex3_expected_count_matches_simulated_iterations() {
    let mut rng = seeded_rng(32);
    for (p, g, groups) in [(0.2, 8, 8), (0.5, 4, 16), (0.95, 8, 8), (0.6, 3, 5)] {
        let iterations = 1000;
        let counts: Vec<f64> = (0..iterations).map(|_| informative_groups(&bernoulli_rewards(p, g, groups, &mut rng), g).len() as f64).collect();
        let mean = counts.iter().sum::<f64>() / iterations as f64;
        let var = counts.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (iterations - 1) as f64;
        let se = (var / iterations as f64).sqrt();
        let got = expected_informative(p, g, groups);
        assert_close(&format!("informative groups per iteration of {groups} groups of {g} at p = {p}"), got, mean, 5.0 * se + 1e-3);
    }
}

#[test]
fn ex3_limits_and_shape() {
    for g in [1, 2, 5, 8, 16] {
        // A task that is always failed, or always solved, never gives signal.
        assert_close(&format!("p = 0, G = {g}"), uninformative_probability(0.0, g), 1.0, 1e-15);
        assert_close(&format!("p = 1, G = {g}"), uninformative_probability(1.0, g), 1.0, 1e-15);
        assert_close(&format!("expected informative groups at p = 0, G = {g}"), expected_informative(0.0, g, 10), 0.0, 1e-12);
    }
    for p in [0.0, 0.1, 0.37, 0.5, 0.9, 1.0] {
        // A group of one is compared with nothing.
        assert_close(&format!("G = 1, p = {p}"), uninformative_probability(p, 1), 1.0, 1e-15);
        assert_close(&format!("expected informative groups of one, p = {p}"), expected_informative(p, 1, 12), 0.0, 1e-12);
        for g in [2, 4, 8] {
            // Symmetric in success and failure, and a larger group is less often unanimous.
            assert_close(&format!("p = {p} vs 1 - p, G = {g}"), uninformative_probability(p, g), uninformative_probability(1.0 - p, g), 1e-12);
            if p > 0.0 && p < 1.0 {
                assert!(uninformative_probability(p, 2 * g) < uninformative_probability(p, g), "doubling G from {g} at p = {p} should make unanimity rarer");
            }
        }
    }
    // Two episodes of a coin disagree half the time; eight agree 2 times in 256.
    assert_close("p = 0.5, G = 2", uninformative_probability(0.5, 2), 0.5, 1e-15);
    assert_close("p = 0.5, G = 8", uninformative_probability(0.5, 8), 2.0 / 256.0, 1e-15);
    assert_close("8 groups of 8 at p = 0.5", expected_informative(0.5, 8, 8), 8.0 * 254.0 / 256.0, 1e-12);
}

// ---------------------------------------------------------------------------
// Exercise 9.4
// ---------------------------------------------------------------------------

/// d(surrogate)/d(log π) by autograd through `clipped_surrogate`, for a token
/// whose probability went from `old_prob` to `prob` (ε_low = 0.2).
fn surrogate_slope(prob: f64, old_prob: f64, advantage: f64, eps_high: f64) -> f64 {
    let logp = tensor(&[prob.ln()]).set_requires_grad(true);
    clipped_surrogate(&logp, &tensor(&[old_prob.ln()]), &tensor(&[advantage]), (0.2, eps_high)).sum(Kind::Double).backward();
    logp.grad().double_value(&[0])
}

const OLD_PROBS: [f64; 11] = [0.001, 0.01, 0.05, 0.2, 0.45, 0.7, 0.76, 0.8, 0.85, 0.95, 1.0];
const EPS_HIGHS: [f64; 5] = [0.1, 0.2, 0.28, 0.4, 1.0];

#[test]
fn ex4_the_gradient_stops_exactly_at_the_ceiling() {
    for old in OLD_PROBS {
        for eps in EPS_HIGHS {
            let ceiling = probability_ceiling(old, eps);
            assert!(ceiling >= old && ceiling <= 1.0, "the ceiling of a token at {old} with eps_high = {eps} is a probability at least {old}, got {ceiling}");
            for advantage in [0.3, 1.0, 2.5] {
                if ceiling < 1.0 {
                    let below = surrogate_slope(ceiling * (1.0 - 1e-6), old, advantage, eps);
                    let above = surrogate_slope(ceiling * (1.0 + 1e-6), old, advantage, eps);
                    assert!(below > 0.0, "a token at {old} should still be pushed just below your ceiling {ceiling} (eps_high = {eps}), autograd gives {below}");
                    assert_eq!(above, 0.0, "a token at {old} should not be pushed just above your ceiling {ceiling} (eps_high = {eps})");
                } else {
                    // Certainty itself is within the clip range: the token is pushed all the way.
                    let at_one = surrogate_slope(1.0, old, advantage, eps);
                    assert!(at_one > 0.0, "your ceiling is 1 for a token at {old} with eps_high = {eps}, but autograd stops pushing it before 1");
                }
            }
        }
    }
}

#[test]
fn ex4_gradient_ascent_stops_at_the_ceiling() {
    // One token of a two-way softmax, π = σ(z), climbing the surrogate with A = 1 by plain
    // gradient ascent on z: it rises until the clip stops it, a step's overshoot past the ceiling.
    let lr = 0.02;
    for old in [0.01, 0.1, 0.3, 0.5, 0.9] {
        for eps in [0.2, 0.28] {
            let ceiling = probability_ceiling(old, eps);
            let mut z = (old / (1.0 - old)).ln();
            let mut stopped = false;
            for _ in 0..3000 {
                let zt = tensor(&[z]).set_requires_grad(true);
                clipped_surrogate(&zt.log_sigmoid(), &tensor(&[old.ln()]), &tensor(&[1.0]), (0.2, eps)).sum(Kind::Double).backward();
                let grad = zt.grad().double_value(&[0]);
                if grad == 0.0 {
                    stopped = true;
                    break;
                }
                z += lr * grad;
            }
            let prob = 1.0 / (1.0 + (-z).exp());
            if stopped {
                assert!(ceiling < 1.0, "the token at {old} stopped at {prob} (eps_high = {eps}), but your ceiling is {ceiling}");
                assert!(prob >= ceiling && prob <= ceiling * 1.03, "the token at {old} stopped at {prob}, just past the true ceiling; yours is {ceiling} (eps_high = {eps})");
            } else {
                assert_eq!(ceiling, 1.0, "the token at {old} was still pushed at {prob} after 3000 steps (eps_high = {eps}), but your ceiling is {ceiling}");
            }
        }
    }
}

#[test]
fn ex4_clip_higher_lifts_rare_tokens_by_a_share_of_their_probability() {
    let gain = |old: f64, eps: f64| probability_ceiling(old, eps) - old;
    // A rare token can gain 0.0028 in one iteration with eps_high = 0.28, against 0.002 with 0.2...
    assert_close("gain of a token at 0.01, eps_high = 0.28", gain(0.01, 0.28), 0.0028, 1e-12);
    assert_close("gain of a token at 0.01, eps_high = 0.2", gain(0.01, 0.2), 0.002, 1e-12);
    // ...while a likely token can gain 0.1 to 0.14, fifty times more.
    assert_close("gain of a token at 0.5, eps_high = 0.28", gain(0.5, 0.28), 0.14, 1e-12);
    assert_close("gain of a token at 0.5, eps_high = 0.2", gain(0.5, 0.2), 0.1, 1e-12);
    // A token that is already likely reaches 1 under either range.
    assert_close("gain of a token at 0.9, eps_high = 0.2", gain(0.9, 0.2), 0.1, 1e-12);
    assert_close("gain of a token at 0.9, eps_high = 0.28", gain(0.9, 0.28), 0.1, 1e-12);
    // Below the cap, raising eps_high from 0.2 to 0.28 multiplies every gain by 1.4.
    for old in [0.001, 0.01, 0.1, 0.3, 0.6, 0.78] {
        assert_close(&format!("gain ratio at {old}"), gain(old, 0.28) / gain(old, 0.2), 1.4, 1e-9);
    }
}

// ---------------------------------------------------------------------------
// Exercise 9.5
// ---------------------------------------------------------------------------

const BASELINES: [GroupBaseline; 4] = [GroupBaseline::None, GroupBaseline::Mean, GroupBaseline::LeaveOneOut, GroupBaseline::MeanStd];

/// Random batches of groups: binary rewards at random success rates, and real-valued ones.
fn reward_batches(rng: &mut StdRng) -> Vec<(Vec<f64>, usize)> {
    let mut batches = Vec::new();
    for g in [1, 2, 3, 4, 8] {
        let groups = 6;
        let binary: Vec<f64> = (0..groups).flat_map(|_| {
            let p = between(0.0, 1.0, rng);
            (0..g).map(|_| sample_action(&[1.0 - p, p], rng) as f64).collect::<Vec<_>>()
        }).collect();
        batches.push((binary, g));
        batches.push(((0..g * groups).map(|_| between(-1.0, 2.0, rng)).collect(), g));
    }
    batches.push((vec![0.1, 0.1, 0.1, 0.7, 0.7, 0.2, 0.3, 0.3, 0.3], 3));
    batches
}

#[test]
fn ex5_matches_group_advantages() {
    let mut rng = seeded_rng(51);
    for (rewards, g) in reward_batches(&mut rng) {
        for baseline in BASELINES {
            let want: Vec<f64> = rewards.chunks(g).flat_map(|group| group_advantages(group, baseline)).collect();
            let got = grpo_advantages(&rewards, g, baseline);
            assert_eq!(got.len(), rewards.len(), "one advantage per episode");
            for i in 0..rewards.len() {
                assert_close(&format!("{baseline:?}, episode {i} of groups of {g}: {rewards:?}"), got[i], want[i], 1e-9 * (1.0 + want[i].abs()));
            }
        }
    }
}

#[test]
fn ex5_group_weight_is_the_ratio_of_mean_std_to_mean() {
    let mut rng = seeded_rng(52);
    for (rewards, g) in reward_batches(&mut rng) {
        for group in rewards.chunks(g) {
            let (mean, scaled) = (group_advantages(group, GroupBaseline::Mean), group_advantages(group, GroupBaseline::MeanStd));
            let w = group_weight(group);
            for i in 0..g {
                if mean[i].abs() > 1e-3 {
                    let ratio = scaled[i] / mean[i];
                    assert_close(&format!("weight of the group {group:?}"), w, ratio, 1e-9 * ratio);
                }
            }
        }
    }
    // A group whose rewards are equal has σ = 0: the factor is 1e6, on advantages that are all 0.
    assert_close("weight of a unanimous group", group_weight(&[1.0; 8]), 1e6, 1e-3);
    assert_close("weight of a group of one", group_weight(&[0.3]), 1e6, 1e-3);
}

#[test]
fn ex5_rare_successes_weigh_more_than_even_groups() {
    let g = 8;
    let group_with = |k: usize| -> Vec<f64> { (0..g).map(|i| if i < k { 1.0 } else { 0.0 }).collect() };
    let weights: Vec<f64> = (1..g).map(|k| group_weight(&group_with(k))).collect(); // k = 1..=7 successes
    for k in 1..g {
        // Checked against the library's MeanStd / Mean on the first episode (a success).
        let ratio = group_advantages(&group_with(k), GroupBaseline::MeanStd)[0] / group_advantages(&group_with(k), GroupBaseline::Mean)[0];
        assert_close(&format!("weight of a group with {k} of {g} successes"), weights[k - 1], ratio, 1e-9 * ratio);
        // Success and failure play symmetric roles.
        assert_close(&format!("{k} vs {} successes of {g}", g - k), weights[k - 1], weights[g - k - 1], 1e-9);
    }
    // The weight falls from one success to four, where the rewards are most spread.
    for k in 1..4 {
        assert!(weights[k - 1] > weights[k], "a group with {k} of {g} successes should weigh more than one with {}: {weights:?}", k + 1);
    }
    assert!(weights[0] > 1.5 * weights[3], "1 of 8 should weigh much more than 4 of 8: {weights:?}");
    // So the lone success of a hard task gets an advantage of about √7, against 1 in an even group.
    let lone = grpo_advantages(&group_with(1), g, GroupBaseline::MeanStd)[0];
    let even = grpo_advantages(&group_with(4), g, GroupBaseline::MeanStd)[0];
    assert_close("the lone success's advantage", lone, group_advantages(&group_with(1), GroupBaseline::MeanStd)[0], 1e-9);
    assert!(lone > 2.5 * even, "the lone success ({lone}) should get far more than a success of an even group ({even})");
}
