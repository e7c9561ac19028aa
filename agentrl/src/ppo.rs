//! Chapter 8: PPO. Importance ratios and the clipped surrogate, with clip
//! fraction and approximate KL as diagnostics; and PPO as an algorithm of the
//! training loop for TinyAgent in the gym, with Chapter 7's value head at turn
//! level: several epochs of minibatch updates on each batch of episodes.
//!
//! Shapes: `B` trajectories, `T` positions, `D` the model width.

use crate::advantage::Critic;
use crate::book::REAL;
use crate::pg::{Algorithm, Forward, Report};
use crate::tinyagent::TinyAgent;
use crate::trajectory::{Batch, Trajectory};
use serde::{Deserialize, Serialize};
use tch::Tensor;

// ANCHOR: clip
/// PPO's clipped surrogate per token, to be maximised:
/// min(ρ A, clip(ρ, 1 − ε_low, 1 + ε_high) A) with ρ = π_θ / π_old =
/// exp(log π_θ − log π_old). PPO clips symmetrically, ε_low = ε_high = ε;
/// Chapter 9's clip-higher raises ε_high.
pub fn clipped_surrogate(
    logp: &Tensor,
    old_logp: &Tensor,
    advantages: &Tensor,
    eps: (f64, f64),
) -> Tensor {
    let ratio = (logp - old_logp).exp(); // [B, T]
    let unclipped = &ratio * advantages;
    let clipped = ratio.clamp(1.0 - eps.0, 1.0 + eps.1) * advantages;
    unclipped.minimum(&clipped) // [B, T]
}

/// What one policy update reports besides its loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics {
    /// Share of action tokens whose ratio lies outside [1 − ε, 1 + ε].
    pub clip_fraction: f64,
    /// Mean of (ρ − 1) − log ρ over action tokens: an estimate of KL(π_old ‖ π_θ) ≥ 0.
    pub approx_kl: f64,
}

/// The PPO policy loss, the negated surrogate averaged over action tokens, and its diagnostics.
pub fn ppo_policy_loss(
    logp: &Tensor,
    old_logp: &Tensor,
    advantages: &Tensor,
    mask: &Tensor,
    eps: f64,
) -> (Tensor, Diagnostics) {
    let tokens = mask.sum(REAL).clamp_min(1.0);
    let loss =
        -(clipped_surrogate(logp, old_logp, advantages, (eps, eps)) * mask).sum(REAL) / &tokens;
    (
        loss,
        diagnostics(logp, old_logp, mask, 1.0 - eps, 1.0 + eps),
    )
}

/// Clip fraction (ratios outside [low, high]) and approximate KL over the masked tokens.
pub fn diagnostics(
    logp: &Tensor,
    old_logp: &Tensor,
    mask: &Tensor,
    low: f64,
    high: f64,
) -> Diagnostics {
    tch::no_grad(|| {
        let tokens = mask.sum(REAL).clamp_min(1.0);
        let log_ratio = logp - old_logp; // [B, T]
        let ratio = log_ratio.exp();
        let outside = ratio.lt(low).logical_or(&ratio.gt(high)).to_kind(REAL);
        let kl = (&ratio - 1.0) - &log_ratio;
        Diagnostics {
            clip_fraction: ((outside * mask).sum(REAL) / &tokens).double_value(&[]),
            approx_kl: ((kl * mask).sum(REAL) / &tokens).double_value(&[]),
        }
    })
}
// ANCHOR_END: clip

// ANCHOR: train
/// PPO as a part of the training loop: Chapter 7's critic gives turn-level
/// GAE advantages once per rollout, and every minibatch of every epoch takes
/// a step on the clipped loss (and the value head one on its loss). The
/// schedule's `epochs × minibatches` is the sample reuse.
pub struct Ppo {
    pub critic: Critic,
    pub clip: f64,
}

impl Diagnostics {
    /// Into a run's metrics.
    pub fn report(&self, report: &mut Report) {
        report.insert("clip_fraction".into(), self.clip_fraction);
        report.insert("approx_kl".into(), self.approx_kl);
    }
}

impl Algorithm for Ppo {
    fn advantages(
        &mut self,
        model: &TinyAgent,
        trajectories: &[Trajectory],
        rollout: &Batch,
        _rewards: &[f64],
        _group: usize,
        _report: &mut Report,
    ) -> Tensor {
        self.critic.rollout_advantages(model, trajectories, rollout) // [N, T]
    }

    fn loss(
        &mut self,
        forward: &Forward,
        minibatch: &Batch,
        advantages: &Tensor,
        rows: &[usize],
        report: &mut Report,
    ) -> Tensor {
        report.insert(
            "value_loss".into(),
            self.critic.value_step(&forward.hidden, rows),
        );
        let (loss, diagnostics) = ppo_policy_loss(
            &forward.logp,
            &minibatch.logprobs,
            advantages,
            &minibatch.mask,
            self.clip,
        );
        diagnostics.report(report);
        loss
    }
}
// ANCHOR_END: train

#[cfg(test)]
mod tests {
    use super::*;

    /// d(surrogate)/d(log π) at one token with the given ratio and advantage.
    fn slope(ratio: f64, advantage: f64, eps: f64) -> f64 {
        let logp = Tensor::from_slice(&[ratio.ln()]).set_requires_grad(true);
        let old = Tensor::from_slice(&[0.0f64]);
        clipped_surrogate(&logp, &old, &Tensor::from_slice(&[advantage]), (eps, eps))
            .sum(REAL)
            .backward();
        logp.grad().double_value(&[0])
    }

    #[test]
    fn the_gradient_vanishes_outside_the_clip_range_in_the_right_direction() {
        let eps = 0.2;
        // A > 0: the ratio may grow to 1 + ε; beyond, no further push up.
        assert!(slope(1.1, 1.0, eps) > 0.0);
        assert_eq!(slope(1.3, 1.0, eps), 0.0);
        // ... but below 1 − ε the gradient is still there: a good action made unlikely is pushed back up.
        assert!(slope(0.5, 1.0, eps) > 0.0);
        // A < 0: the ratio may shrink to 1 − ε; below, no further push down.
        assert!(slope(0.9, -1.0, eps) < 0.0);
        assert_eq!(slope(0.7, -1.0, eps), 0.0);
        // ... and above 1 + ε a bad action made likelier is still pushed down.
        assert!(slope(1.5, -1.0, eps) < 0.0);
        // At ρ = 1 the slope is the advantage: PPO's first step is the policy gradient.
        assert!((slope(1.0, 0.7, eps) - 0.7).abs() < 1e-6);
    }

    #[test]
    fn diagnostics_are_zero_when_nothing_changed() {
        let logp = Tensor::from_slice(&[-1.0f64, -2.0, -0.5, -0.1]).view([1, 4]);
        let mask = Tensor::from_slice(&[0.0f64, 1.0, 1.0, 1.0]).view([1, 4]);
        let adv = Tensor::from_slice(&[0.0f64, 1.0, -1.0, 0.5]).view([1, 4]);
        let (loss, d) = ppo_policy_loss(&logp, &logp, &adv, &mask, 0.2);
        assert_eq!((d.clip_fraction, d.approx_kl), (0.0, 0.0));
        assert!((loss.double_value(&[]) + 0.5 / 3.0).abs() < 1e-6);
        let moved = &logp + Tensor::from_slice(&[0.0f64, 0.5, 0.01, -0.3]).view([1, 4]);
        let (_, d) = ppo_policy_loss(&moved, &logp, &adv, &mask, 0.2);
        assert!((d.clip_fraction - 2.0 / 3.0).abs() < 1e-6);
        assert!(d.approx_kl > 0.0);
    }
}
