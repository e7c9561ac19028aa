//! Chapter 9: GRPO and the critic-free family. Group-relative advantages
//! (from Chapter 7), Chapter 8's clipped surrogate with a separate lower and
//! upper range (clip-higher), the three ways of averaging token losses (per
//! sequence, per token, by a constant), filtering groups whose rewards do not
//! vary and masking episodes cut off by the turn budget; named configurations
//! (GRPO, Dr. GRPO, DAPO, RLOO, DeepSWE's GRPO++); and [`Grpo`], the family as
//! an algorithm of Chapter 6's training loop, with a hook for the regularisers
//! of Chapter 10.
//!
//! Shapes: `B` trajectories, `T` positions, `V` the vocabulary, `G` episodes in a group.

use crate::advantage::{group_advantages, GroupBaseline};
use crate::book::REAL;
use crate::pg::{per_token, Algorithm, Forward, Report, Run, Schedule, WEIGHT_DECAY};
use crate::ppo::{clipped_surrogate, diagnostics, Diagnostics};
use crate::rollout::Played;
use crate::tinyagent::TinyAgent;
use crate::trajectory::{Batch, Trajectory};
use serde::{Deserialize, Serialize};
use std::path::Path;
use tch::Tensor;

// ANCHOR: norm
/// How the per-token losses of a batch are averaged into one number.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum LossNorm {
    /// GRPO: the mean over each sequence's tokens, then the mean over sequences,
    /// (1/B) Σ_b (1/|o_b|) Σ_t ℓ_{b,t}.
    SequenceMean,
    /// DAPO: one mean over all the batch's tokens, Σ_{b,t} ℓ_{b,t} / Σ_b |o_b|.
    TokenMean,
    /// Dr. GRPO: the sum divided by a constant, Σ_{b,t} ℓ_{b,t} / (B · C).
    Constant(f64),
}

/// Average `per_token` [B, T] over the tokens `mask` [B, T] selects.
pub fn aggregate(per_token: &Tensor, mask: &Tensor, norm: LossNorm) -> Tensor {
    let masked = per_token * mask; // [B, T]
    match norm {
        LossNorm::SequenceMean => {
            let lengths = mask.sum_dim_intlist(1, false, REAL).clamp_min(1.0); // [B]
            (masked.sum_dim_intlist(1, false, REAL) / lengths).mean(REAL)
        }
        LossNorm::TokenMean => masked.sum(REAL) / mask.sum(REAL).clamp_min(1.0),
        LossNorm::Constant(c) => masked.sum(REAL) / (mask.size()[0] as f64 * c),
    }
}
// ANCHOR_END: norm

// ANCHOR: loss
/// The GRPO-family policy loss: Chapter 8's clipped surrogate per token, with
/// its own lower and upper range (ε_high > ε_low is clip-higher), averaged by
/// `norm`. The advantages [B, T] hold one number per sequence on its action tokens.
pub fn grpo_loss(
    logp: &Tensor,
    old_logp: &Tensor,
    advantages: &Tensor,
    mask: &Tensor,
    eps: (f64, f64),
    norm: LossNorm,
) -> (Tensor, Diagnostics) {
    // logp, old_logp, advantages, mask: [B, T]
    let per_token = clipped_surrogate(logp, old_logp, advantages, eps); // [B, T]
    let loss = -aggregate(&per_token, mask, norm);
    (
        loss,
        diagnostics(logp, old_logp, mask, 1.0 - eps.0, 1.0 + eps.1),
    )
}
// ANCHOR_END: loss

// ANCHOR: groups
/// The groups (runs of `g` consecutive episodes) whose rewards are not all
/// equal. A group that all failed or all succeeded has zero advantage for
/// every baseline, so it carries no signal, only weight in the averages.
pub fn informative_groups(rewards: &[f64], g: usize) -> Vec<usize> {
    rewards
        .chunks(g)
        .enumerate()
        .filter(|(_, group)| group.iter().any(|r| *r != group[0]))
        .map(|(i, _)| i)
        .collect()
}
// ANCHOR_END: groups

// ANCHOR: config
/// Everything a training run depends on. Serialised next to its metrics and
/// checkpoints, so a run can be read back and repeated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// A name for tables and figures.
    pub name: String,
    pub iterations: usize,
    /// Tasks drawn per iteration, and episodes (a group) played on each.
    pub tasks: usize,
    pub group: usize,
    /// The learning rate of the first iteration, and of the last: it moves linearly in between.
    pub lr: f64,
    pub lr_end: f64,
    /// Passes over each iteration's episodes, and minibatches (optimiser steps) per pass.
    pub epochs: usize,
    pub minibatches: usize,
    pub baseline: GroupBaseline,
    pub norm: LossNorm,
    /// The clip range [1 − low, 1 + high] of the ratio.
    pub clip_low: f64,
    pub clip_high: f64,
    /// Drop groups whose rewards are all equal before the update (DAPO).
    pub filter_zero_variance: bool,
    /// Give no loss to episodes that ran out of turns (DeepSWE's compact filtering).
    pub compact_filtering: bool,
    /// Evaluate on the held-out tasks every this many iterations and after
    /// the last (0: only after the last), with this many episodes per task
    /// (0: never).
    pub eval_every: usize,
    pub eval_episodes: usize,
    /// Save the weights every this many iterations (0: only at the end).
    pub checkpoint_every: usize,
    pub seed: u64,
    /// Clip the gradient to this global L2 norm before each step (None:
    /// never), and AdamW's weight decay: see [`Schedule`]'s fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_grad_norm: Option<f64>,
    #[serde(
        default = "crate::pg::default_weight_decay",
        skip_serializing_if = "crate::pg::is_default_weight_decay"
    )]
    pub weight_decay: f64,
}

/// The number the constant normalisation divides by: the most action tokens
/// an episode can hold (8 turns of at most 16 tokens).
pub const MAX_ACTION_TOKENS: f64 = (crate::gym::MAX_TURNS * 16) as f64;

impl TrainConfig {
    /// GRPO as DeepSeekMath wrote it (without its KL term, Chapter 10):
    /// mean/std advantages, per-sequence means, a symmetric clip.
    pub fn grpo() -> TrainConfig {
        TrainConfig {
            name: "GRPO".into(),
            iterations: 16,
            tasks: 8,
            group: 8,
            lr: 1e-3,
            lr_end: 1e-3,
            epochs: 1,
            minibatches: 4,
            baseline: GroupBaseline::MeanStd,
            norm: LossNorm::SequenceMean,
            clip_low: 0.2,
            clip_high: 0.2,
            filter_zero_variance: false,
            compact_filtering: false,
            eval_every: 4,
            eval_episodes: 4,
            checkpoint_every: 0,
            seed: 0,
            max_grad_norm: None,
            weight_decay: WEIGHT_DECAY,
        }
    }

    /// Dr. GRPO: no std division, a constant in place of the length.
    pub fn dr_grpo() -> TrainConfig {
        TrainConfig {
            name: "Dr. GRPO".into(),
            baseline: GroupBaseline::Mean,
            norm: LossNorm::Constant(MAX_ACTION_TOKENS),
            ..TrainConfig::grpo()
        }
    }

    /// DAPO: clip-higher, token-level mean, groups without variance filtered out.
    pub fn dapo() -> TrainConfig {
        TrainConfig {
            name: "DAPO".into(),
            norm: LossNorm::TokenMean,
            clip_high: 0.28,
            filter_zero_variance: true,
            ..TrainConfig::grpo()
        }
    }

    /// RLOO: the leave-one-out baseline, otherwise GRPO.
    pub fn rloo() -> TrainConfig {
        TrainConfig {
            name: "RLOO".into(),
            baseline: GroupBaseline::LeaveOneOut,
            ..TrainConfig::grpo()
        }
    }

    /// DeepSWE's GRPO++: clip-higher, no std, constant normalisation,
    /// leave-one-out, compact filtering (and no KL or entropy term).
    pub fn grpo_plus_plus() -> TrainConfig {
        TrainConfig {
            name: "GRPO++".into(),
            baseline: GroupBaseline::LeaveOneOut,
            norm: LossNorm::Constant(MAX_ACTION_TOKENS),
            clip_high: 0.28,
            compact_filtering: true,
            ..TrainConfig::grpo()
        }
    }

    /// What the training loop is told: the schedule part of the configuration.
    pub fn schedule(&self) -> Schedule {
        Schedule {
            name: self.name.clone(),
            iterations: self.iterations,
            tasks: self.tasks,
            group: self.group,
            lr: self.lr,
            lr_end: self.lr_end,
            epochs: self.epochs,
            minibatches: self.minibatches,
            eval_every: self.eval_every,
            eval_episodes: self.eval_episodes,
            checkpoint_every: self.checkpoint_every,
            seed: self.seed,
            staleness: 0,
            max_grad_norm: self.max_grad_norm,
            weight_decay: self.weight_decay,
            ends: crate::pg::ENDS,
        }
    }

    /// The same configuration under another name and seed.
    pub fn seeded(&self, seed: u64) -> TrainConfig {
        TrainConfig {
            name: format!("{} seed {seed}", self.name),
            seed,
            ..self.clone()
        }
    }

    /// A run of the training loop with this configuration and `regularizer`.
    pub fn run(&self, regularizer: Box<dyn Regularizer + Send>) -> Run {
        (
            self.schedule(),
            Box::new(Grpo {
                config: self.clone(),
                regularizer,
            }),
        )
    }

    /// The configuration as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a config serialises")
    }

    /// Read a configuration written by [`train`] (or by hand) as JSON.
    pub fn load(path: &Path) -> Result<TrainConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|err| format!("{} is not a training config: {err}", path.display()))
    }
}
// ANCHOR_END: config

// ANCHOR: hook
/// What a regulariser may add to the loop (Chapter 10 writes them): a change
/// to the rewards before advantages are computed, and a term added to each
/// minibatch's loss. Each returns named numbers for the metrics.
pub trait Regularizer {
    /// Adjust `rewards` (one per trajectory) in place.
    fn shape_rewards(
        &mut self,
        _trajectories: &[Trajectory],
        _rewards: &mut [f64],
    ) -> Vec<(String, f64)> {
        Vec::new()
    }
    /// A loss term from the minibatch's log-probs and entropies [B, T] on
    /// `mask` [B, T], averaged like the policy loss (`norm`).
    fn loss(
        &mut self,
        _batch: &Batch,
        _logp: &Tensor,
        _entropy: &Tensor,
        _mask: &Tensor,
        _norm: LossNorm,
    ) -> Option<(Tensor, Vec<(String, f64)>)> {
        None
    }
}

/// No regulariser: the loop as Chapter 9 runs it.
pub struct Plain;
impl Regularizer for Plain {}
// ANCHOR_END: hook

// ANCHOR: algorithm
/// The GRPO family as an algorithm of the training loop (Chapter 6): group
/// advantages, the two filters, the clipped loss under a normalisation, and a
/// regulariser's reward change and loss term.
pub struct Grpo {
    pub config: TrainConfig,
    pub regularizer: Box<dyn Regularizer + Send>,
}

impl Algorithm for Grpo {
    fn config_json(&self) -> Option<String> {
        Some(self.config.to_json())
    }

    fn rewards(
        &mut self,
        played: &[Played],
        trajectories: &[Trajectory],
        report: &mut Report,
    ) -> Vec<f64> {
        let mut rewards: Vec<f64> = played.iter().map(|p| p.reward).collect();
        report.extend(self.regularizer.shape_rewards(trajectories, &mut rewards));
        rewards
    }

    fn advantages(
        &mut self,
        _model: &TinyAgent,
        _trajectories: &[Trajectory],
        rollout: &Batch,
        rewards: &[f64],
        group: usize,
        _report: &mut Report,
    ) -> Tensor {
        let advantages: Vec<f64> = rewards
            .chunks(group)
            .flat_map(|g| group_advantages(g, self.config.baseline))
            .collect();
        per_token(&advantages, &rollout.mask) // [N, T]
    }

    fn keep(&mut self, played: &[Played], group: usize, report: &mut Report) -> Vec<usize> {
        let raw: Vec<f64> = played.iter().map(|p| p.reward).collect();
        let informative = informative_groups(&raw, group);
        report.insert("informative_groups".into(), informative.len() as f64);
        let groups: Vec<usize> = if self.config.filter_zero_variance {
            informative
        } else {
            (0..raw.len() / group).collect()
        };
        let mut chosen: Vec<usize> = groups
            .iter()
            .flat_map(|&g| g * group..(g + 1) * group)
            .collect();
        if self.config.compact_filtering {
            chosen.retain(|&i| !played[i].info.truncated);
        }
        chosen
    }

    fn loss(
        &mut self,
        forward: &Forward,
        minibatch: &Batch,
        advantages: &Tensor,
        _rows: &[usize],
        report: &mut Report,
    ) -> Tensor {
        let eps = (self.config.clip_low, self.config.clip_high);
        let (mut loss, diagnostics) = grpo_loss(
            &forward.logp,
            &minibatch.logprobs,
            advantages,
            &minibatch.mask,
            eps,
            self.config.norm,
        );
        diagnostics.report(report);
        if let Some((term, numbers)) = self.regularizer.loss(
            minibatch,
            &forward.logp,
            &forward.entropy,
            &minibatch.mask,
            self.config.norm,
        ) {
            loss += term;
            report.extend(numbers);
        }
        loss
    }
}

/// Plain runs (no regulariser) of several configurations.
pub fn plain_runs(configs: &[TrainConfig]) -> Vec<Run> {
    configs
        .iter()
        .map(|config| config.run(Box::new(Plain)))
        .collect()
}
// ANCHOR_END: algorithm

#[cfg(test)]
mod tests {
    use super::*;

    /// d loss / d log π at every token of two sequences, lengths 2 and 6 in a
    /// row of 8, advantages +1 and −1, under `norm`.
    fn token_weights(norm: LossNorm) -> Vec<f64> {
        let logp = Tensor::zeros([2, 8], (REAL, tch::Device::Cpu)).set_requires_grad(true);
        let mask = Tensor::from_slice(&[
            0f64, 1., 1., 0., 0., 0., 0., 0., 0., 1., 1., 1., 1., 1., 1., 0.,
        ])
        .view([2, 8]);
        let advantages = per_token(&[1.0, -1.0], &mask);
        let (loss, _) = grpo_loss(&logp, &logp.detach(), &advantages, &mask, (0.2, 0.2), norm);
        loss.backward();
        Vec::<f64>::try_from(logp.grad().view([-1])).unwrap()
    }

    #[test]
    fn each_normalisation_weights_tokens_as_its_formula_says() {
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        // Per-sequence mean: a token of the short sequence weighs 1/(2·2), of the long one 1/(2·6).
        let w = token_weights(LossNorm::SequenceMean);
        assert!(
            close(&w[1..3], &[-0.25, -0.25]) && close(&w[9..15], &[1.0 / 12.0; 6]),
            "{w:?}"
        );
        // Per-token mean: every token weighs 1/8.
        let w = token_weights(LossNorm::TokenMean);
        assert!(
            close(&w[1..3], &[-0.125; 2]) && close(&w[9..15], &[0.125; 6]),
            "{w:?}"
        );
        // Constant: every token weighs 1/(B·C).
        let w = token_weights(LossNorm::Constant(10.0));
        assert!(
            close(&w[1..3], &[-0.05; 2]) && close(&w[9..15], &[0.05; 6]),
            "{w:?}"
        );
        // Tokens off the mask get nothing under any of them.
        for norm in [
            LossNorm::SequenceMean,
            LossNorm::TokenMean,
            LossNorm::Constant(10.0),
        ] {
            let w = token_weights(norm);
            assert!(
                [0, 3, 4, 5, 6, 7, 8, 15].iter().all(|&i| w[i] == 0.0),
                "{w:?}"
            );
        }
    }

    #[test]
    fn clip_higher_lets_good_tokens_rise_further_than_bad_ones_fall() {
        let slope = |ratio: f64, advantage: f64| -> f64 {
            let logp = Tensor::from_slice(&[ratio.ln()]).set_requires_grad(true);
            clipped_surrogate(
                &logp,
                &Tensor::from_slice(&[0f64]),
                &Tensor::from_slice(&[advantage]),
                (0.2, 0.28),
            )
            .sum(REAL)
            .backward();
            logp.grad().double_value(&[0])
        };
        // A > 0: still pushed at ρ = 1.25 (a symmetric 0.2 clip would stop at 1.2), not at 1.3.
        assert!(slope(1.25, 1.0) > 0.0);
        assert_eq!(slope(1.3, 1.0), 0.0);
        // A < 0: the lower edge is unchanged at 0.8.
        assert!(slope(0.85, -1.0) < 0.0);
        assert_eq!(slope(0.75, -1.0), 0.0);
    }

    #[test]
    fn only_groups_with_different_rewards_are_informative() {
        let rewards = [0., 0., 0., 1., 0., 1., 1., 1., 1., 0., 0., 1.];
        assert_eq!(informative_groups(&rewards, 3), vec![1, 3]);
        // And those are exactly the groups with a nonzero advantage under every baseline.
        for baseline in [
            GroupBaseline::Mean,
            GroupBaseline::LeaveOneOut,
            GroupBaseline::MeanStd,
        ] {
            let nonzero: Vec<usize> = rewards
                .chunks(3)
                .enumerate()
                .filter(|(_, g)| {
                    group_advantages(g, baseline)
                        .iter()
                        .any(|a| a.abs() > 1e-12)
                })
                .map(|(i, _)| i)
                .collect();
            assert_eq!(nonzero, vec![1, 3]);
        }
    }

    #[test]
    fn configs_round_trip_through_json() {
        for config in [
            TrainConfig::grpo(),
            TrainConfig::dr_grpo(),
            TrainConfig::dapo(),
            TrainConfig::rloo(),
            TrainConfig::grpo_plus_plus(),
        ] {
            let text = serde_json::to_string(&config).unwrap();
            assert_eq!(serde_json::from_str::<TrainConfig>(&text).unwrap(), config);
        }
        let dir = std::env::temp_dir().join(format!("agentrl-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("bad.json"), "{\"name\": 3}").unwrap();
        let err = TrainConfig::load(&dir.join("bad.json")).unwrap_err();
        assert!(err.contains("is not a training config"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
