//! Chapter 7: advantages and credit assignment. Baselines for the score
//! function estimator; group baselines (the group mean, leave-one-out, std
//! normalisation); TD errors and generalised advantage estimation; a TD(0)
//! critic for the repair MDP.
//!
//! Shapes: `G` episodes in a group, `T` steps of an episode.

use crate::mdp::{sample_action, Mdp, Policy};
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

// ANCHOR: baseline
/// REINFORCE on the softmax bandit with a constant baseline `b`:
/// (1/n) Σ_i (R_i − b) ∇ log π_θ(a_i). Unbiased for every b, since
/// E[∇ log π] = 0; its variance depends on b.
pub fn reinforce_gradient_with_baseline(theta: &[f64], p: &[f64], n: usize, baseline: f64, rng: &mut StdRng) -> Vec<f64> {
    let theta = Tensor::from_slice(theta).set_requires_grad(true); // [K]
    let probs = Vec::<f64>::try_from(theta.softmax(-1, Kind::Double).detach()).expect("probabilities");
    let (mut actions, mut advantages) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let a = sample_action(&probs, rng);
        actions.push(a as i64);
        advantages.push(f64::from(rng.random::<f64>() < p[a]) - baseline);
    }
    let logp = theta.log_softmax(-1, Kind::Double).index_select(0, &Tensor::from_slice(&actions)); // [N]
    (Tensor::from_slice(&advantages) * logp).mean(Kind::Double).backward();
    Vec::<f64>::try_from(theta.grad()).expect("a gradient per arm")
}
// ANCHOR_END: baseline

// ANCHOR: group
/// How the rewards of a group of episodes on the same task become advantages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupBaseline {
    /// A_i = R_i: plain REINFORCE.
    None,
    /// A_i = R_i − mean(R): the group mean, the episode's own reward included.
    Mean,
    /// A_i = R_i − mean_{j≠i} R_j: leave-one-out (RLOO), independent of R_i.
    LeaveOneOut,
    /// A_i = (R_i − mean(R)) / (std(R) + ε): GRPO's normalisation.
    MeanStd,
}

/// Advantages for one group of rewards.
pub fn group_advantages(rewards: &[f64], baseline: GroupBaseline) -> Vec<f64> {
    let g = rewards.len() as f64;
    let mean = rewards.iter().sum::<f64>() / g;
    match baseline {
        GroupBaseline::None => rewards.to_vec(),
        GroupBaseline::Mean => rewards.iter().map(|r| r - mean).collect(),
        GroupBaseline::LeaveOneOut => {
            if rewards.len() < 2 {
                return vec![0.0; rewards.len()];
            }
            let total: f64 = rewards.iter().sum();
            rewards.iter().map(|r| r - (total - r) / (g - 1.0)).collect()
        }
        GroupBaseline::MeanStd => {
            let std = (rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / g).sqrt();
            rewards.iter().map(|r| (r - mean) / (std + 1e-6)).collect()
        }
    }
}
// ANCHOR_END: group

/// The bandit's gradient estimated from `groups` groups of `g` draws each, with
/// a group baseline: (1/(groups·g)) Σ A_i ∇ log π_θ(a_i).
pub fn group_gradient(theta: &[f64], p: &[f64], groups: usize, g: usize, baseline: GroupBaseline, rng: &mut StdRng) -> Vec<f64> {
    let theta = Tensor::from_slice(theta).set_requires_grad(true); // [K]
    let probs = Vec::<f64>::try_from(theta.softmax(-1, Kind::Double).detach()).expect("probabilities");
    let (mut actions, mut advantages) = (Vec::new(), Vec::new());
    for _ in 0..groups {
        let mut rewards = Vec::with_capacity(g);
        for _ in 0..g {
            let a = sample_action(&probs, rng);
            actions.push(a as i64);
            rewards.push(f64::from(rng.random::<f64>() < p[a]));
        }
        advantages.extend(group_advantages(&rewards, baseline));
    }
    let logp = theta.log_softmax(-1, Kind::Double).index_select(0, &Tensor::from_slice(&actions)); // [groups·G]
    (Tensor::from_slice(&advantages) * logp).mean(Kind::Double).backward();
    Vec::<f64>::try_from(theta.grad()).expect("a gradient per arm")
}

// ANCHOR: gae
/// One-step TD errors δ_t = r_t + γ V(s_{t+1}) − V(s_t) of an episode, given
/// the values of its states `values` (length T + 1; the last is the value
/// after the final step, 0 at a terminal state).
pub fn td_errors(rewards: &[f64], values: &[f64], gamma: f64) -> Vec<f64> {
    assert_eq!(values.len(), rewards.len() + 1, "one value per state, the final one included");
    (0..rewards.len()).map(|t| rewards[t] + gamma * values[t + 1] - values[t]).collect()
}

/// Generalised advantage estimation: Â_t = Σ_k (γλ)^k δ_{t+k}, computed
/// backwards as Â_t = δ_t + γλ Â_{t+1}. λ = 0 gives the TD errors; λ = 1
/// gives the Monte Carlo return minus the value.
pub fn gae(rewards: &[f64], values: &[f64], gamma: f64, lambda: f64) -> Vec<f64> {
    let deltas = td_errors(rewards, values, gamma);
    let mut advantages = vec![0.0; deltas.len()];
    let mut next = 0.0;
    for t in (0..deltas.len()).rev() {
        next = deltas[t] + gamma * lambda * next;
        advantages[t] = next;
    }
    advantages
}
// ANCHOR_END: gae

// ANCHOR: critic
/// A tabular critic learned by TD(0): V(s) ← V(s) + α (r + γ V(s') − V(s)),
/// from episodes of `policy` on `mdp`.
pub fn td0_critic(mdp: &Mdp, policy: &Policy, start: usize, gamma: f64, alpha: f64, episodes: usize, rng: &mut StdRng) -> Vec<f64> {
    let mut v = vec![0.0; mdp.n_states()];
    for _ in 0..episodes {
        let mut s = start;
        for _ in 0..50 {
            if mdp.terminal[s] {
                break;
            }
            let a = sample_action(&policy[s], rng);
            let (next, r) = mdp.step(s, a, rng);
            let target = r + if mdp.terminal[next] { 0.0 } else { gamma * v[next] };
            v[s] += alpha * (target - v[s]);
            s = next;
        }
    }
    v
}
// ANCHOR_END: critic

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mdp::{discounted_return, evaluate_policy, q_from_v, repair_mdp, Verifier, BUGGY};
    use rand::SeedableRng;

    #[test]
    fn gae_interpolates_between_td_errors_and_monte_carlo() {
        let rewards = [0.0, 0.5, -0.2, 1.0];
        let values = [0.3, 0.1, 0.7, 0.4, 0.0];
        let gamma = 0.9;
        assert_eq!(gae(&rewards, &values, gamma, 0.0), td_errors(&rewards, &values, gamma));
        let mc = gae(&rewards, &values, gamma, 1.0);
        for t in 0..rewards.len() {
            let g = discounted_return(&rewards[t..], gamma);
            assert!((mc[t] - (g - values[t])).abs() < 1e-12, "t = {t}");
        }
    }

    #[test]
    fn leave_one_out_ignores_the_episodes_own_reward_and_the_mean_does_not() {
        let rewards = [1.0, 0.0, 0.0, 1.0];
        let loo = group_advantages(&rewards, GroupBaseline::LeaveOneOut);
        assert_eq!(loo, vec![1.0 - 1.0 / 3.0, -2.0 / 3.0, -2.0 / 3.0, 1.0 - 1.0 / 3.0]);
        // The mean baseline is the leave-one-out one scaled by (G − 1) / G.
        let mean = group_advantages(&rewards, GroupBaseline::Mean);
        for (m, l) in mean.iter().zip(&loo) {
            assert!((m - l * 3.0 / 4.0).abs() < 1e-12);
        }
        // A group with equal rewards has no signal under any baseline.
        for baseline in [GroupBaseline::Mean, GroupBaseline::LeaveOneOut, GroupBaseline::MeanStd] {
            assert!(group_advantages(&[1.0; 5], baseline).iter().all(|a| a.abs() < 1e-9));
        }
    }

    #[test]
    fn with_the_exact_values_the_td_error_is_an_unbiased_advantage() {
        // E[δ_t | s, a] = Q(s, a) − V(s) when V is the policy's value.
        let mdp = repair_mdp(Verifier::Hidden);
        let policy = mdp.uniform_policy();
        let gamma = 0.9;
        let v = evaluate_policy(&mdp, &policy, gamma);
        let q = q_from_v(&mdp, &v, gamma);
        let mut rng = StdRng::seed_from_u64(0);
        let (mut sum, mut count) = (vec![0.0; mdp.n_actions()], vec![0usize; mdp.n_actions()]);
        for _ in 0..20_000 {
            let a = sample_action(&policy[BUGGY], &mut rng);
            let (next, r) = mdp.step(BUGGY, a, &mut rng);
            sum[a] += r + gamma * v[next] - v[BUGGY];
            count[a] += 1;
        }
        for a in 0..mdp.n_actions() {
            let mean = sum[a] / count[a] as f64;
            assert!((mean - (q[BUGGY][a] - v[BUGGY])).abs() < 0.02, "action {a}: {mean} vs {}", q[BUGGY][a] - v[BUGGY]);
        }
    }

    #[test]
    fn the_td0_critic_converges_to_the_policy_value() {
        let mdp = repair_mdp(Verifier::Hidden);
        let policy = mdp.uniform_policy();
        let v = evaluate_policy(&mdp, &policy, 0.9);
        let learned = td0_critic(&mdp, &policy, BUGGY, 0.9, 0.02, 20_000, &mut StdRng::seed_from_u64(1));
        assert!((learned[BUGGY] - v[BUGGY]).abs() < 0.05, "{} vs {}", learned[BUGGY], v[BUGGY]);
    }
}
