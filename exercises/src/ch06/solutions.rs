//! Chapter 6: reference solutions. The model answers, with the reasoning
//! behind them, are in `chapters/answers-06.md`.

use agentrl::bandit::softmax;
use agentrl::mdp::{sample_action, StdRng};

/// Exercise 6.1: $\nabla_\theta \log \pi_\theta(a) = e_a - \pi_\theta$.
pub fn softmax_score(theta: &[f64], a: usize) -> Vec<f64> {
    softmax(theta).iter().enumerate().map(|(b, &pi)| f64::from(b == a) - pi).collect()
}

/// Exercise 6.2: $\partial J / \partial \theta_a = \sum_b \pi_b p_b (1[a = b] - \pi_a)
/// = \pi_a (p_a - J)$.
pub fn exact_bandit_gradient(theta: &[f64], p: &[f64]) -> Vec<f64> {
    let pi = softmax(theta);
    let j: f64 = pi.iter().zip(p).map(|(x, y)| x * y).sum();
    pi.iter().zip(p).map(|(x, y)| x * (y - j)).collect()
}

/// Exercise 6.3: the mean over `n` draws of $(R_i - b)(e_{a_i} - \pi_\theta)$.
pub fn reinforce_with_baseline(theta: &[f64], p: &[f64], n: usize, b: f64, rng: &mut StdRng) -> Vec<f64> {
    let pi = softmax(theta);
    let mut sum = vec![0.0; theta.len()];
    for _ in 0..n {
        let a = sample_action(&pi, rng);
        let r = sample_action(&[1.0 - p[a], p[a]], rng) as f64;
        for (k, s) in sum.iter_mut().enumerate() {
            *s += (r - b) * (f64::from(k == a) - pi[k]);
        }
    }
    sum.iter().map(|s| if n == 0 { 0.0 } else { s / n as f64 }).collect()
}

/// Exercise 6.4: the returns from the back ($G_t = r_t + \gamma G_{t+1}$), then
/// each times $\gamma^t$.
pub fn returns_to_go_weights(rewards: &[f64], gamma: f64) -> Vec<f64> {
    let mut returns = vec![0.0; rewards.len()];
    let mut g = 0.0;
    for t in (0..rewards.len()).rev() {
        g = rewards[t] + gamma * g;
        returns[t] = g;
    }
    returns.iter().enumerate().map(|(t, g)| gamma.powi(t as i32) * g).collect()
}

/// Exercise 6.5: $\partial L / \partial \ell_{b,t} = -m_{b,t} R_b / \max(1, \sum m)$.
pub fn masked_token_loss_grad(mask: &[Vec<f32>], returns: &[f32]) -> Vec<Vec<f32>> {
    let count: f32 = mask.iter().flatten().sum::<f32>().max(1.0);
    mask.iter()
        .zip(returns)
        .map(|(row, &r)| row.iter().map(|&m| if m == 0.0 { 0.0 } else { -m * r / count }).collect())
        .collect()
}
