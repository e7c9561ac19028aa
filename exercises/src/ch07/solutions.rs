//! Chapter 7: reference solutions. The model answers, with the reasoning
//! behind them, are in `chapters/answers-07.md`.

use agentrl::bandit::softmax;

/// Exercise 7.1: with $w_a = \lVert e_a - \pi \rVert^2 = 1 - 2\pi_a + \sum_c \pi_c^2$,
/// $b^* = \sum_a \pi_a p_a w_a / \sum_a \pi_a w_a$ (since $\mathbb{E}[R \mid a] = p_a$).
pub fn optimal_constant_baseline(theta: &[f64], p: &[f64]) -> f64 {
    let pi = softmax(theta);
    let sq: f64 = pi.iter().map(|x| x * x).sum();
    let w: Vec<f64> = pi.iter().map(|&x| 1.0 - 2.0 * x + sq).collect();
    let num: f64 = (0..pi.len()).map(|a| pi[a] * p[a] * w[a]).sum();
    let den: f64 = (0..pi.len()).map(|a| pi[a] * w[a]).sum();
    num / den
}

/// Exercise 7.2: $R_i - \frac{S - R_i}{G - 1} = \frac{G}{G - 1}(R_i - S/G)$, so each
/// mean-baseline advantage times $G / (G - 1)$.
pub fn rloo_from_mean(mean_advantages: &[f64]) -> Vec<f64> {
    let g = mean_advantages.len();
    if g < 2 {
        return vec![0.0; g];
    }
    let scale = g as f64 / (g as f64 - 1.0);
    mean_advantages.iter().map(|a| a * scale).collect()
}

/// Exercise 7.3: the TD errors, then for every $t$ the discounted sum of those from $t$ on.
pub fn gae_by_sum(rewards: &[f64], values: &[f64], gamma: f64, lambda: f64) -> Vec<f64> {
    assert_eq!(values.len(), rewards.len() + 1, "one value per state, the final one included");
    let n = rewards.len();
    let deltas: Vec<f64> = (0..n).map(|t| rewards[t] + gamma * values[t + 1] - values[t]).collect();
    (0..n)
        .map(|t| {
            let mut sum = 0.0;
            let mut weight = 1.0; // (γλ)^k
            for delta in &deltas[t..] {
                sum += weight * delta;
                weight *= gamma * lambda;
            }
            sum
        })
        .collect()
}

/// Exercise 7.4: the $n$-step returns from $t$ built up one reward at a time, each
/// added with its weight $(1 - \lambda)\lambda^{n-1}$, the longest with $\lambda^{T-t-1}$.
pub fn lambda_return(rewards: &[f64], values: &[f64], gamma: f64, lambda: f64) -> Vec<f64> {
    assert_eq!(values.len(), rewards.len() + 1, "one value per state, the final one included");
    let big_t = rewards.len();
    (0..big_t)
        .map(|t| {
            let longest = big_t - t;
            let (mut partial, mut discount, mut lam, mut total) = (0.0, 1.0, 1.0, 0.0); // Σ γ^k r, γ^n, λ^{n-1}
            for n in 1..=longest {
                partial += discount * rewards[t + n - 1];
                discount *= gamma;
                let n_step = partial + discount * values[t + n];
                total += if n < longest { (1.0 - lambda) * lam * n_step } else { lam * n_step };
                lam *= lambda;
            }
            total
        })
        .collect()
}

/// Exercise 7.5: a group has no signal when every reward equals its first one.
pub fn zero_variance_groups(rewards: &[f64], group: usize) -> Vec<usize> {
    assert!(group >= 1 && rewards.len() % group == 0, "whole groups of at least one episode");
    rewards
        .chunks(group)
        .enumerate()
        .filter(|(_, chunk)| chunk.iter().all(|&r| r == chunk[0]))
        .map(|(i, _)| i)
        .collect()
}
