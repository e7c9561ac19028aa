//! Chapter 9: reference solutions. The model answers, with the reasoning
//! behind them, are in `chapters/answers-09.md`.

use agentrl::advantage::GroupBaseline;
use agentrl::grpo::LossNorm;

/// The coefficient $\partial(\text{aggregate}) / \partial \ell_{b,t}$ that `norm` gives
/// every token of sequence `b`.
fn coefficient(lengths: &[usize], b: usize, norm: LossNorm) -> f64 {
    let sequences = lengths.len() as f64;
    match norm {
        LossNorm::SequenceMean => 1.0 / (sequences * lengths[b].max(1) as f64),
        LossNorm::TokenMean => 1.0 / lengths.iter().sum::<usize>().max(1) as f64,
        LossNorm::Constant(c) => 1.0 / (sequences * c),
    }
}

/// Exercise 9.1: at $\rho = 1$ the surrogate's slope in $\log \pi$ is $A_b$, and the
/// aggregate multiplies it by its coefficient (the loss is minus the aggregate, so
/// minus its derivative is this): $A_b / (B |o_b|)$, $A_b / \sum_b |o_b|$ or $A_b / (B c)$.
pub fn token_weights(lengths: &[usize], advantages: &[f64], norm: LossNorm) -> Vec<Vec<f64>> {
    assert_eq!(lengths.len(), advantages.len(), "one advantage per sequence");
    (0..lengths.len()).map(|b| vec![advantages[b] * coefficient(lengths, b, norm); lengths[b]]).collect()
}

/// Exercise 9.2: $|o_b|$ equal weights, so $A_b / B$ (for $|o_b| > 0$),
/// $A_b |o_b| / \sum_b |o_b|$ or $A_b |o_b| / (B c)$.
pub fn sequence_push(lengths: &[usize], advantages: &[f64], norm: LossNorm) -> Vec<f64> {
    assert_eq!(lengths.len(), advantages.len(), "one advantage per sequence");
    (0..lengths.len()).map(|b| advantages[b] * coefficient(lengths, b, norm) * lengths[b] as f64).collect()
}

/// Exercise 9.3: all successes or all failures, $p^G + (1 - p)^G$.
pub fn uninformative_probability(p: f64, g: usize) -> f64 {
    assert!(g >= 1, "a group has at least one episode");
    p.powi(g as i32) + (1.0 - p).powi(g as i32)
}

/// Exercise 9.3: linearity of expectation over the groups.
pub fn expected_informative(p: f64, g: usize, groups: usize) -> f64 {
    groups as f64 * (1.0 - uninformative_probability(p, g))
}

/// Exercise 9.4: $\rho = \pi / \pi_{\text{old}} \le 1 + \epsilon_{\text{high}}$, and $\pi \le 1$.
pub fn probability_ceiling(old_prob: f64, eps_high: f64) -> f64 {
    ((1.0 + eps_high) * old_prob).min(1.0)
}

/// The mean and the population standard deviation of a group.
fn mean_and_std(rewards: &[f64]) -> (f64, f64) {
    let n = rewards.len() as f64;
    let mean = rewards.iter().sum::<f64>() / n;
    let var = rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Exercise 9.5: each group on its own, with Chapter 7's four baselines.
pub fn grpo_advantages(rewards: &[f64], g: usize, baseline: GroupBaseline) -> Vec<f64> {
    assert!(g >= 1 && rewards.len().is_multiple_of(g), "whole groups of at least one episode");
    let mut advantages = Vec::with_capacity(rewards.len());
    for group in rewards.chunks(g) {
        let (mean, std) = mean_and_std(group);
        let total: f64 = group.iter().sum();
        for &r in group {
            advantages.push(match baseline {
                GroupBaseline::None => r,
                GroupBaseline::Mean => r - mean,
                GroupBaseline::LeaveOneOut if g < 2 => 0.0,
                GroupBaseline::LeaveOneOut => r - (total - r) / (g as f64 - 1.0),
                GroupBaseline::MeanStd => (r - mean) / (std + 1e-6),
            });
        }
    }
    advantages
}

/// Exercise 9.5: `MeanStd` is `Mean` divided by $\sigma + 10^{-6}$.
pub fn group_weight(rewards: &[f64]) -> f64 {
    assert!(!rewards.is_empty(), "a group has at least one episode");
    1.0 / (mean_and_std(rewards).1 + 1e-6)
}
