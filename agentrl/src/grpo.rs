//! Chapter 9: GRPO and the critic-free family, and the book's main training
//! loop. Group-relative advantages (from Chapter 7), the clipped surrogate with
//! a separate lower and upper range (clip-higher), the three ways of averaging
//! token losses (per sequence, per token, by a constant), filtering groups
//! whose rewards do not vary and masking episodes cut off by the turn budget;
//! named configurations (GRPO, Dr. GRPO, DAPO, RLOO, DeepSWE's GRPO++); and
//! [`train`]: rollout → reward → advantage → masked update → evaluation, with
//! JSONL metrics, checkpoints and a hook for the regularisers of Chapter 10.
//!
//! Shapes: `B` trajectories, `T` positions, `V` the vocabulary, `G` episodes in a group.

use crate::book::REAL;
use crate::advantage::{group_advantages, GroupBaseline};
use crate::gym::Task;
use crate::pg::{play_groups, success_rate};
use crate::ppo::{diagnostics, Diagnostics};
use crate::pretrain::{progress, PlayTime};
use crate::tinyagent::{KvCache, TinyAgent};
use crate::tokenizer::Bpe;
use crate::trajectory::{collate, Batch, Trajectory};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tch::nn::OptimizerConfig;
use tch::{nn, Tensor};

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
/// The clipped surrogate with its own lower and upper range:
/// min(ρ A, clip(ρ, 1 − ε_low, 1 + ε_high) A) per token. ε_high > ε_low is clip-higher.
pub fn clip_range_surrogate(logp: &Tensor, old_logp: &Tensor, advantages: &Tensor, eps_low: f64, eps_high: f64) -> Tensor {
    let ratio = (logp - old_logp).exp(); // [B, T]
    let clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high);
    (&ratio * advantages).minimum(&(clipped * advantages)) // [B, T]
}

/// The GRPO-family policy loss: one advantage per sequence spread over its
/// action tokens, the clipped surrogate per token, averaged by `norm`.
pub fn grpo_loss(logp: &Tensor, old_logp: &Tensor, advantages: &Tensor, mask: &Tensor, eps: (f64, f64), norm: LossNorm) -> (Tensor, Diagnostics) {
    // logp, old_logp, mask: [B, T]; advantages: [B]
    let per_token = clip_range_surrogate(logp, old_logp, &advantages.unsqueeze(1), eps.0, eps.1); // [B, T]
    let loss = -aggregate(&per_token, mask, norm);
    (loss, diagnostics(logp, old_logp, mask, 1.0 - eps.0, 1.0 + eps.1))
}
// ANCHOR_END: loss

// ANCHOR: groups
/// The groups (runs of `g` consecutive episodes) whose rewards are not all
/// equal. A group that all failed or all succeeded has zero advantage for
/// every baseline, so it carries no signal, only weight in the averages.
pub fn informative_groups(rewards: &[f64], g: usize) -> Vec<usize> {
    rewards.chunks(g).enumerate().filter(|(_, group)| group.iter().any(|r| *r != group[0])).map(|(i, _)| i).collect()
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
    /// Evaluate on the held-out tasks every this many iterations, with this many episodes per task.
    pub eval_every: usize,
    pub eval_episodes: usize,
    /// Save the weights every this many iterations (0: only at the end).
    pub checkpoint_every: usize,
    pub seed: u64,
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
        }
    }

    /// Dr. GRPO: no std division, a constant in place of the length.
    pub fn dr_grpo() -> TrainConfig {
        TrainConfig { name: "Dr. GRPO".into(), baseline: GroupBaseline::Mean, norm: LossNorm::Constant(MAX_ACTION_TOKENS), ..TrainConfig::grpo() }
    }

    /// DAPO: clip-higher, token-level mean, groups without variance filtered out.
    pub fn dapo() -> TrainConfig {
        TrainConfig { name: "DAPO".into(), norm: LossNorm::TokenMean, clip_high: 0.28, filter_zero_variance: true, ..TrainConfig::grpo() }
    }

    /// RLOO: the leave-one-out baseline, otherwise GRPO.
    pub fn rloo() -> TrainConfig {
        TrainConfig { name: "RLOO".into(), baseline: GroupBaseline::LeaveOneOut, ..TrainConfig::grpo() }
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

    /// The configuration as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a config serialises")
    }

    /// Read a configuration written by [`train`] (or by hand) as JSON.
    pub fn load(path: &Path) -> Result<TrainConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        serde_json::from_str(&text).map_err(|err| format!("{} is not a training config: {err}", path.display()))
    }
}
// ANCHOR_END: config

// ANCHOR: hook
/// What a regulariser may add to the loop (Chapter 10 writes them): a change
/// to the rewards before advantages are computed, and a term added to each
/// minibatch's loss. Each returns named numbers for the metrics.
pub trait Regularizer {
    /// Adjust `rewards` (one per trajectory) in place.
    fn shape_rewards(&mut self, _trajectories: &[Trajectory], _rewards: &mut [f64]) -> Vec<(String, f64)> {
        Vec::new()
    }
    /// A loss term from the minibatch's log-probs and entropies [B, T] on
    /// `mask` [B, T], averaged like the policy loss (`norm`).
    fn loss(&mut self, _batch: &Batch, _logp: &Tensor, _entropy: &Tensor, _mask: &Tensor, _norm: LossNorm) -> Option<(Tensor, Vec<(String, f64)>)> {
        None
    }
}

/// No regulariser: the loop as Chapter 9 runs it.
pub struct Plain;
impl Regularizer for Plain {}
// ANCHOR_END: hook

/// Where one iteration's wall-clock time went, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTime {
    pub generation: f64,
    pub environment: f64,
    pub learning: f64,
}

/// One line of a run's metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainRecord {
    pub iteration: usize,
    /// Episodes played before this line's evaluation.
    pub episodes: usize,
    pub train_success: Option<f64>,
    pub held_out_success: Option<f64>,
    /// Groups whose rewards varied, of `tasks`.
    pub informative_groups: Option<usize>,
    /// Episodes that got a loss (after both filters).
    pub trained_episodes: Option<usize>,
    pub loss: Option<f64>,
    /// Mean entropy (nats) of the policy at the action tokens it sampled.
    pub entropy: Option<f64>,
    /// Of the last minibatch.
    pub last: Option<Diagnostics>,
    /// Tokens sampled by the policy this iteration; action tokens trained on
    /// (over all epochs); all tokens of the trained sequences (one epoch).
    pub generated_tokens: Option<usize>,
    pub trained_tokens: Option<usize>,
    pub sequence_tokens: Option<usize>,
    pub time: Option<StepTime>,
    /// What the regulariser reported (last minibatch).
    pub extra: BTreeMap<String, f64>,
}

/// The records of a run, read back from its metrics file.
pub fn read_records(path: &Path) -> Result<Vec<TrainRecord>, String> {
    let text = std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    text.lines().map(|line| serde_json::from_str(line).map_err(|err| format!("{}: bad line {line:?}: {err}", path.display()))).collect()
}

// ANCHOR: logprobs
/// log π_θ(x_t | x_<t) and the entropy of π_θ(· | x_<t) at the positions
/// `batch.mask` selects, [B, T] each and 0 elsewhere. The transformer runs on
/// the whole batch, but the output layer and the softmax over the vocabulary
/// only on the N action positions (a seventh of the tokens in the gym).
pub fn logprobs_and_entropy(model: &TinyAgent, batch: &Batch) -> (Tensor, Tensor) {
    let (b, t) = batch.ids.size2().unwrap();
    let hidden = model.hidden(&batch.ids, &batch.valid, &mut KvCache::default()); // [B, T, D]
    let at = batch.mask.narrow(1, 1, t - 1).nonzero(); // [N, 2]: (row, position before an action token)
    let (rows, before) = (at.select(1, 0), at.select(1, 1)); // [N], [N]
    let token = &before + 1; // [N]
    let log_probs = model.head(&hidden.index(&[Some(&rows), Some(&before)])).log_softmax(-1, REAL); // [N, V]
    let next = batch.ids.index(&[Some(&rows), Some(&token)]).unsqueeze(-1); // [N, 1]
    let logp = log_probs.gather(-1, &next, false).squeeze_dim(-1); // [N]
    let entropy = -(log_probs.exp() * &log_probs).sum_dim_intlist(-1, false, REAL); // [N]
    let zeros = Tensor::zeros([b, t], (REAL, logp.device()));
    let place = |values: &Tensor| zeros.index_put(&[Some(&rows), Some(&token)], values, false); // [B, T]
    (place(&logp), place(&entropy))
}
// ANCHOR_END: logprobs

// ANCHOR: train
/// Train `model` with `config`: each iteration plays a group of episodes on
/// each of `config.tasks` training tasks (rollout, reward), turns the group's
/// rewards into advantages, filters, and takes `epochs × minibatches` steps on
/// the masked clipped loss (update); every `eval_every` iterations it measures
/// held-out success (eval). Writes `config.json`, `metrics.jsonl` and
/// checkpoints (`iteration-NNNN.safetensors`, `final.safetensors`) to `run_dir`.
pub fn train(
    model: &mut TinyAgent,
    bpe: &Bpe,
    tasks: (&[Task], &[Task]),
    config: &TrainConfig,
    regularizer: &mut dyn Regularizer,
    run_dir: &Path,
) -> Result<Vec<TrainRecord>, String> {
    let (train_tasks, held_out) = tasks;
    std::fs::create_dir_all(run_dir).map_err(|err| format!("cannot create {}: {err}", run_dir.display()))?;
    std::fs::write(run_dir.join("config.json"), config.to_json()).map_err(|err| format!("cannot write the config: {err}"))?;
    let mut metrics = std::fs::File::create(run_dir.join("metrics.jsonl")).map_err(|err| format!("cannot write metrics: {err}"))?;
    let mut opt = nn::AdamW::default().build(&model.vs, config.lr).map_err(|err| err.to_string())?;
    let mut rng = StdRng::seed_from_u64(config.seed);
    let bar = progress(config.iterations as u64, &config.name);
    let mut records = Vec::new();
    for iteration in 0..=config.iterations {
        let last_line = iteration == config.iterations;
        let evaluate = iteration % config.eval_every == 0 || last_line;
        let held_out_success = evaluate.then(|| success_rate(model, bpe, held_out, config.eval_episodes, 1_000 + iteration as u64));
        let mut record = TrainRecord {
            iteration,
            episodes: iteration * config.tasks * config.group,
            train_success: None,
            held_out_success,
            informative_groups: None,
            trained_episodes: None,
            loss: None,
            entropy: None,
            last: None,
            generated_tokens: None,
            trained_tokens: None,
            sequence_tokens: None,
            time: None,
            extra: BTreeMap::new(),
        };
        if !last_line {
            opt.set_lr(config.lr + (config.lr_end - config.lr) * iteration as f64 / config.iterations.max(1) as f64);
            // Rollout and reward.
            let (played, PlayTime { generation, environment }) = play_groups(model, bpe, train_tasks, config.tasks, config.group, &mut rng);
            let learning = Instant::now();
            let trajectories: Vec<Trajectory> = played.iter().map(Trajectory::from_played).collect();
            let raw: Vec<f64> = played.iter().map(|p| p.reward).collect();
            let mut rewards = raw.clone();
            record.extra.extend(regularizer.shape_rewards(&trajectories, &mut rewards));
            // Advantage, one per episode, and the filters.
            let advantages: Vec<f64> = rewards.chunks(config.group).flat_map(|g| group_advantages(g, config.baseline)).collect();
            let informative = informative_groups(&raw, config.group);
            let groups: Vec<usize> = if config.filter_zero_variance { informative.clone() } else { (0..config.tasks).collect() };
            let mut chosen: Vec<usize> = groups.iter().flat_map(|&g| g * config.group..(g + 1) * config.group).collect();
            if config.compact_filtering {
                chosen.retain(|&i| !played[i].info.truncated);
            }
            // Masked update.
            let (mut loss_sum, mut entropy_sum, mut steps, mut trained_tokens) = (0.0, 0.0, 0, 0);
            for _ in 0..config.epochs {
                chosen.shuffle(&mut rng);
                for chunk in chosen.chunks(chosen.len().div_ceil(config.minibatches).max(1)) {
                    let picked: Vec<Trajectory> = chunk.iter().map(|&i| trajectories[i].clone()).collect();
                    let batch = collate(&picked, model.device());
                    let adv: Vec<f64> = chunk.iter().map(|&i| advantages[i] as f64).collect();
                    let adv = Tensor::from_slice(&adv).to_device(model.device()); // [b]
                    let (logp, entropy) = logprobs_and_entropy(model, &batch); // [b, T]
                    let (mut loss, last) = grpo_loss(&logp, &batch.logprobs, &adv, &batch.mask, (config.clip_low, config.clip_high), config.norm);
                    if let Some((term, numbers)) = regularizer.loss(&batch, &logp, &entropy, &batch.mask, config.norm) {
                        loss += term;
                        record.extra.extend(numbers);
                    }
                    opt.backward_step(&loss);
                    let tokens = batch.mask.sum(REAL).double_value(&[]);
                    entropy_sum += (entropy.detach() * &batch.mask).sum(REAL).double_value(&[]) / tokens.max(1.0);
                    loss_sum += loss.double_value(&[]);
                    (steps, trained_tokens, record.last) = (steps + 1, trained_tokens + tokens as usize, Some(last));
                }
            }
            let generated: usize = played.iter().map(|p| p.segments.iter().map(|s| s.logprobs.len()).sum::<usize>()).sum();
            record.train_success = Some(raw.iter().sum::<f64>() / raw.len() as f64);
            record.informative_groups = Some(informative.len());
            record.trained_episodes = Some(chosen.len());
            record.loss = (steps > 0).then(|| loss_sum / steps as f64);
            record.entropy = (steps > 0).then(|| entropy_sum / steps as f64);
            record.generated_tokens = Some(generated);
            record.trained_tokens = Some(trained_tokens);
            record.sequence_tokens = Some(chosen.iter().map(|&i| trajectories[i].ids.len()).sum());
            record.time = Some(StepTime { generation, environment, learning: learning.elapsed().as_secs_f64() });
            if config.checkpoint_every > 0 && (iteration + 1) % config.checkpoint_every == 0 {
                model.save(&run_dir.join(format!("iteration-{:04}.safetensors", iteration + 1)))?;
            }
            bar.inc(1);
        }
        writeln!(metrics, "{}", serde_json::to_string(&record).map_err(|err| err.to_string())?).map_err(|err| format!("cannot write metrics: {err}"))?;
        records.push(record);
    }
    model.save(&run_dir.join("final.safetensors"))?;
    bar.finish_and_clear();
    Ok(records)
}
// ANCHOR_END: train

// ANCHOR: parallel
/// A run to make: its configuration and its regulariser.
pub type Run = (TrainConfig, Box<dyn Regularizer + Send>);

/// Plain runs of several configurations.
pub fn plain_runs(configs: &[TrainConfig]) -> Vec<Run> {
    configs.iter().map(|config| (config.clone(), Box::new(Plain) as Box<dyn Regularizer + Send>)).collect()
}

/// Train a fresh copy of the base model for each run, `threads` runs at a
/// time. Each run is single-threaded inside libtorch and has its own seeds,
/// so two at a time use two cores and print what one after the other would.
/// Run `name` writes to `root/name` (spaces and dots become `_`).
pub fn train_from_base(gym: &crate::gym::Gym, runs: Vec<Run>, threads: usize, root: &Path) -> Vec<Result<Vec<TrainRecord>, String>> {
    crate::pretrain::base_model(&gym.train); // on disk before the threads load it
    let count = runs.len();
    let queue = std::sync::Mutex::new(runs.into_iter().enumerate().rev().collect::<Vec<_>>()); // popped in order
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let next = queue.lock().expect("the queue").pop();
                let Some((i, (config, mut regularizer))) = next else { break };
                let (bpe, mut model) = crate::pretrain::base_model(&gym.train);
                let dir: PathBuf = root.join(config.name.replace([' ', '.'], "_"));
                let outcome = train(&mut model, &bpe, (&gym.train, &gym.held_out), &config, regularizer.as_mut(), &dir);
                results.lock().expect("the results").push((i, outcome));
            });
        }
    });
    let mut results = results.into_inner().expect("the results");
    assert_eq!(results.len(), count, "a run did not finish");
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, outcome)| outcome).collect()
}
// ANCHOR_END: parallel

#[cfg(test)]
mod tests {
    use super::*;

    /// d loss / d log π at every token of two sequences, lengths 2 and 6 in a
    /// row of 8, advantages +1 and −1, under `norm`.
    fn token_weights(norm: LossNorm) -> Vec<f64> {
        let logp = Tensor::zeros([2, 8], (REAL, tch::Device::Cpu)).set_requires_grad(true);
        let mask = Tensor::from_slice(&[0f64, 1., 1., 0., 0., 0., 0., 0., 0., 1., 1., 1., 1., 1., 1., 0.]).view([2, 8]);
        let advantages = Tensor::from_slice(&[1f64, -1.]);
        let (loss, _) = grpo_loss(&logp, &logp.detach(), &advantages, &mask, (0.2, 0.2), norm);
        loss.backward();
        Vec::<f64>::try_from(logp.grad().view([-1])).unwrap()
    }

    #[test]
    fn each_normalisation_weights_tokens_as_its_formula_says() {
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        // Per-sequence mean: a token of the short sequence weighs 1/(2·2), of the long one 1/(2·6).
        let w = token_weights(LossNorm::SequenceMean);
        assert!(close(&w[1..3], &[-0.25, -0.25]) && close(&w[9..15], &[1.0 / 12.0; 6]), "{w:?}");
        // Per-token mean: every token weighs 1/8.
        let w = token_weights(LossNorm::TokenMean);
        assert!(close(&w[1..3], &[-0.125; 2]) && close(&w[9..15], &[0.125; 6]), "{w:?}");
        // Constant: every token weighs 1/(B·C).
        let w = token_weights(LossNorm::Constant(10.0));
        assert!(close(&w[1..3], &[-0.05; 2]) && close(&w[9..15], &[0.05; 6]), "{w:?}");
        // Tokens off the mask get nothing under any of them.
        for norm in [LossNorm::SequenceMean, LossNorm::TokenMean, LossNorm::Constant(10.0)] {
            let w = token_weights(norm);
            assert!([0, 3, 4, 5, 6, 7, 8, 15].iter().all(|&i| w[i] == 0.0), "{w:?}");
        }
    }

    #[test]
    fn clip_higher_lets_good_tokens_rise_further_than_bad_ones_fall() {
        let slope = |ratio: f64, advantage: f64| -> f64 {
            let logp = Tensor::from_slice(&[ratio.ln() as f64]).set_requires_grad(true);
            clip_range_surrogate(&logp, &Tensor::from_slice(&[0f64]), &Tensor::from_slice(&[advantage as f64]), 0.2, 0.28).sum(REAL).backward();
            logp.grad().double_value(&[0])
        };
        // A > 0: still pushed at ρ = 1.25 (a symmetric 0.2 clip would stop at 1.2), not at 1.3.
        assert!(slope(1.25, 1.0) > 0.0);
        assert_eq!(slope(1.3, 1.0), 0.0);
        // A < 0: the lower edge is unchanged at 0.8.
        assert!(slope(0.85, -1.0) < 0.0);
        assert_eq!(slope(0.75, -1.0), 0.0);
        // With ε_low = ε_high it is Chapter 8's surrogate.
        let logp = Tensor::from_slice(&[-0.5f64, 0.1, 0.3, -0.05]);
        let old = Tensor::zeros([4], (REAL, tch::Device::Cpu));
        let adv = Tensor::from_slice(&[1f64, -1., 0.5, -2.]);
        let ours = clip_range_surrogate(&logp, &old, &adv, 0.2, 0.2);
        let ppo = crate::ppo::clipped_surrogate(&logp, &old, &adv, 0.2);
        assert_eq!(Vec::<f64>::try_from(ours).unwrap(), Vec::<f64>::try_from(ppo).unwrap());
    }

    #[test]
    fn only_groups_with_different_rewards_are_informative() {
        let rewards = [0., 0., 0., 1., 0., 1., 1., 1., 1., 0., 0., 1.];
        assert_eq!(informative_groups(&rewards, 3), vec![1, 3]);
        // And those are exactly the groups with a nonzero advantage under every baseline.
        for baseline in [GroupBaseline::Mean, GroupBaseline::LeaveOneOut, GroupBaseline::MeanStd] {
            let nonzero: Vec<usize> = rewards.chunks(3).enumerate().filter(|(_, g)| group_advantages(g, baseline).iter().any(|a| a.abs() > 1e-12)).map(|(i, _)| i).collect();
            assert_eq!(nonzero, vec![1, 3]);
        }
    }

    #[test]
    fn configs_round_trip_through_json() {
        for config in [TrainConfig::grpo(), TrainConfig::dr_grpo(), TrainConfig::dapo(), TrainConfig::rloo(), TrainConfig::grpo_plus_plus()] {
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

    #[test]
    fn logprobs_and_entropy_agree_with_the_model_and_chapter_3() {
        let _turn = crate::book::seeded(0);
        let config = crate::tinyagent::Config { vocab: 32, n_ctx: 16, d_model: 16, n_layer: 1, n_head: 2 };
        let model = TinyAgent::new(config, tch::Device::Cpu);
        use crate::episode::Owner;
        let trajectory = Trajectory { task: 0, ids: vec![3, 5, 7, 2, 9, 4], owners: vec![Owner::Prompt, Owner::Prompt, Owner::Policy, Owner::Policy, Owner::Env, Owner::Policy], logprobs: vec![0.0; 6], reward: 1.0, info: Default::default() };
        let batch = collate(&[trajectory], tch::Device::Cpu);
        let (logp, entropy) = logprobs_and_entropy(&model, &batch);
        let expected = crate::trajectory::policy_logprobs(&model, &batch) * &batch.mask;
        assert!((logp - expected).abs().max().double_value(&[]) < 1e-6);
        let logits = model.logits(&batch.ids, &batch.valid); // [1, 6, V]
        let h = Tensor::cat(&[Tensor::zeros([1, 1], (REAL, tch::Device::Cpu)), crate::tinyagent::entropy(&logits.narrow(1, 0, 5))], 1); // [1, 6]
        assert!((entropy - h * &batch.mask).abs().max().double_value(&[]) < 1e-6);
    }
}
