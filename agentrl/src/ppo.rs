//! Chapter 8: PPO. Importance ratios and the clipped surrogate, with clip
//! fraction and approximate KL as diagnostics; and the PPO loop for TinyAgent
//! in the gym, with Chapter 7's value head at turn level: several epochs of
//! minibatch updates on each batch of episodes.
//!
//! Shapes: `B` trajectories, `T` positions, `D` the model width.

use crate::book::REAL;
use crate::advantage::{critic_advantages, logprobs_and_hidden, Credit, ValueHead};
use crate::gym::Task;
use crate::pg::{play_groups, success_rate};
use crate::pretrain::progress;
use crate::tinyagent::TinyAgent;
use crate::tokenizer::Bpe;
use crate::trajectory::{collate, Trajectory};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;
use tch::nn::OptimizerConfig;
use tch::{nn, Tensor};

// ANCHOR: clip
/// PPO's clipped surrogate per token, to be maximised:
/// min(ρ A, clip(ρ, 1 − ε, 1 + ε) A) with ρ = π_θ / π_old = exp(log π_θ − log π_old).
pub fn clipped_surrogate(logp: &Tensor, old_logp: &Tensor, advantages: &Tensor, eps: f64) -> Tensor {
    let ratio = (logp - old_logp).exp(); // [B, T]
    let unclipped = &ratio * advantages;
    let clipped = ratio.clamp(1.0 - eps, 1.0 + eps) * advantages;
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
pub fn ppo_policy_loss(logp: &Tensor, old_logp: &Tensor, advantages: &Tensor, mask: &Tensor, eps: f64) -> (Tensor, Diagnostics) {
    let tokens = mask.sum(REAL).clamp_min(1.0);
    let loss = -(clipped_surrogate(logp, old_logp, advantages, eps) * mask).sum(REAL) / &tokens;
    (loss, diagnostics(logp, old_logp, mask, 1.0 - eps, 1.0 + eps))
}

/// Clip fraction (ratios outside [low, high]) and approximate KL over the masked tokens.
pub fn diagnostics(logp: &Tensor, old_logp: &Tensor, mask: &Tensor, low: f64, high: f64) -> Diagnostics {
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
/// Settings of a PPO run in the gym.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PpoConfig {
    pub iterations: usize,
    pub tasks: usize,
    pub episodes: usize,
    pub lr: f64,
    pub value_lr: f64,
    /// Passes over each batch of episodes, and minibatches per pass.
    pub epochs: usize,
    pub minibatches: usize,
    pub clip: f64,
    pub eval_every: usize,
    pub seed: u64,
}

/// One line of a PPO run's metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PpoRecord {
    pub iteration: usize,
    pub episodes: usize,
    pub train_success: Option<f64>,
    pub held_out_success: Option<f64>,
    pub value_loss: Option<f64>,
    /// Diagnostics of the last minibatch of the last epoch.
    pub last: Option<Diagnostics>,
}

/// PPO in the gym: each iteration plays `episodes` episodes on each of `tasks`
/// training tasks, computes turn-level advantages with the value head, then
/// makes `epochs` passes over the episodes in `minibatches` minibatches, each
/// a step on the clipped loss; the value head takes one step per minibatch.
pub fn train_ppo(model: &mut TinyAgent, bpe: &Bpe, train: &[Task], held_out: &[Task], config: &PpoConfig, metrics: &Path) -> Vec<PpoRecord> {
    let mut opt = nn::AdamW::default().build(&model.vs, config.lr).expect("an optimiser for the policy");
    let critic = ValueHead::new(model.config.d_model, model.device());
    let mut value_opt = nn::Adam::default().build(&critic.vs, config.value_lr).expect("an optimiser for the critic");
    let mut rng = StdRng::seed_from_u64(config.seed);
    let bar = progress(config.iterations as u64, "PPO");
    let mut records = Vec::new();
    for iteration in 0..=config.iterations {
        let held_out_success = (iteration % config.eval_every == 0).then(|| success_rate(model, bpe, held_out, 2, 1_000 + iteration as u64));
        let episodes = iteration * config.tasks * config.episodes;
        if iteration == config.iterations {
            records.push(PpoRecord { iteration, episodes, train_success: None, held_out_success, value_loss: None, last: None });
            break;
        }
        let (played, _) = play_groups(model, bpe, train, config.tasks, config.episodes, &mut rng);
        let trajectories: Vec<Trajectory> = played.iter().map(Trajectory::from_played).collect();
        let mut order: Vec<usize> = (0..trajectories.len()).collect();
        let (mut last, mut value_loss) = (Diagnostics::default(), 0.0);
        for _ in 0..config.epochs {
            order.shuffle(&mut rng);
            for chunk in order.chunks(order.len().div_ceil(config.minibatches)) {
                let picked: Vec<Trajectory> = chunk.iter().map(|&i| trajectories[i].clone()).collect();
                let batch = collate(&picked, model.device());
                let (logp, hidden) = logprobs_and_hidden(model, &batch); // [b, T], [b, T, D]
                let (advantages, v_loss) = critic_advantages(&critic.values(&hidden), &picked, Credit::Turn);
                let (loss, diagnostics) = ppo_policy_loss(&logp, &batch.logprobs, &advantages, &batch.mask, config.clip);
                opt.backward_step(&loss);
                value_opt.backward_step(&v_loss);
                (last, value_loss) = (diagnostics, v_loss.double_value(&[]));
            }
        }
        let train_success = played.iter().map(|p| p.reward).sum::<f64>() / played.len() as f64;
        records.push(PpoRecord { iteration, episodes, train_success: Some(train_success), held_out_success, value_loss: Some(value_loss), last: Some(last) });
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut file = std::fs::File::create(metrics).unwrap_or_else(|err| panic!("cannot write {}: {err}", metrics.display()));
    for record in &records {
        writeln!(file, "{}", serde_json::to_string(record).expect("a record serialises")).expect("metrics written");
    }
    records
}
// ANCHOR_END: train

#[cfg(test)]
mod tests {
    use super::*;

    /// d(surrogate)/d(log π) at one token with the given ratio and advantage.
    fn slope(ratio: f64, advantage: f64, eps: f64) -> f64 {
        let logp = Tensor::from_slice(&[ratio.ln() as f64]).set_requires_grad(true);
        let old = Tensor::from_slice(&[0.0f64]);
        clipped_surrogate(&logp, &old, &Tensor::from_slice(&[advantage as f64]), eps).sum(REAL).backward();
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
