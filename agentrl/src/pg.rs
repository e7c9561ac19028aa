//! Chapter 6: policy gradients. The score-function (REINFORCE) estimator on
//! a softmax bandit, checked against the exact gradient; REINFORCE on the
//! tabular repair MDP; and REINFORCE for TinyAgent in the gym with the
//! masked token-level loss. Also the book's one training loop, [`train`]:
//! rollout → reward → advantage → filter → masked update → evaluation, with
//! the parts an [`Algorithm`] supplies, named random streams, JSONL metrics
//! and checkpoints; later chapters add algorithms, not loops.
//!
//! Shapes: `B` trajectories, `T` positions, `K` arms.

use crate::agent::LmPolicy;
use crate::book::REAL;
use crate::gym::Task;
use crate::mdp::{evaluate_policy, sample_episode, Mdp, Policy};
use crate::pretrain::weighted_log_likelihood;
use crate::rollout::{play_until, progress, Ends, PlayTime, Played, View};
use crate::stats::Streams;
use crate::tinyagent::{KvCache, Sampling, TinyAgent};
use crate::tokenizer::Bpe;
use crate::trajectory::{collate, Batch, Trajectory};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Instant;
use tch::nn::OptimizerConfig;
use tch::{nn, Kind, Tensor};

// ANCHOR: bandit
/// The exact objective of a softmax policy over K arms whose rewards are
/// Bernoulli with means `p`: J(θ) = Σ_a π_θ(a) p_a.
pub fn exact_objective(theta: &Tensor, p: &Tensor) -> Tensor {
    (theta.softmax(-1, Kind::Double) * p).sum(Kind::Double) // scalar
}

/// ∇J(θ) by automatic differentiation of the exact objective.
pub fn exact_gradient(theta: &[f64], p: &[f64]) -> Vec<f64> {
    let theta = Tensor::from_slice(theta).set_requires_grad(true); // [K]
    exact_objective(&theta, &Tensor::from_slice(p)).backward();
    Vec::<f64>::try_from(theta.grad()).expect("a gradient per arm")
}

/// The REINFORCE estimate from `n` samples: draw a_i ~ π_θ and R_i ~
/// Bernoulli(p_{a_i}), then differentiate the surrogate (1/n) Σ_i R_i log π_θ(a_i),
/// whose gradient is (1/n) Σ_i R_i ∇ log π_θ(a_i).
pub fn reinforce_gradient(theta: &[f64], p: &[f64], n: usize, rng: &mut StdRng) -> Vec<f64> {
    let theta = Tensor::from_slice(theta).set_requires_grad(true); // [K]
    let probs =
        Vec::<f64>::try_from(theta.softmax(-1, Kind::Double).detach()).expect("probabilities");
    let mut actions = Vec::with_capacity(n);
    let mut rewards = Vec::with_capacity(n);
    for _ in 0..n {
        let a = crate::mdp::sample_action(&probs, rng);
        actions.push(a as i64);
        rewards.push(f64::from(rng.random::<f64>() < p[a]));
    }
    let logp = theta
        .log_softmax(-1, Kind::Double)
        .index_select(0, &Tensor::from_slice(&actions)); // [N]
    let surrogate = (Tensor::from_slice(&rewards) * logp).mean(Kind::Double);
    surrogate.backward();
    Vec::<f64>::try_from(theta.grad()).expect("a gradient per arm")
}
// ANCHOR_END: bandit

// ANCHOR: tabular
/// A tabular softmax policy: one vector of logits per state.
#[derive(Clone, Debug, PartialEq)]
pub struct TabularSoftmax {
    pub theta: Vec<Vec<f64>>,
}

impl TabularSoftmax {
    pub fn new(states: usize, actions: usize) -> Self {
        TabularSoftmax {
            theta: vec![vec![0.0; actions]; states],
        }
    }

    pub fn policy(&self) -> Policy {
        self.theta
            .iter()
            .map(|row| {
                let top = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = row.iter().map(|x| (x - top).exp()).collect();
                let z: f64 = e.iter().sum();
                e.iter().map(|x| x / z).collect()
            })
            .collect()
    }

    /// One REINFORCE step from a batch of episodes (state, action, reward):
    /// θ_s ← θ_s + α (1/B) Σ_episodes Σ_t γ^t G_t ∇_θ log π(a_t | s_t), with
    /// G_t the return from t and ∇ log π(a | s) = e_a − π(· | s) for a softmax.
    pub fn reinforce_step(&mut self, episodes: &[Vec<(usize, usize, f64)>], gamma: f64, lr: f64) {
        self.weighted_step(episodes, None, gamma, lr);
    }

    /// [`Self::reinforce_step`] with each step's term multiplied by its weight
    /// `weights[episode][t]` (Chapter 13's importance weights); none is all ones.
    pub fn weighted_step(
        &mut self,
        episodes: &[Vec<(usize, usize, f64)>],
        weights: Option<&[Vec<f64>]>,
        gamma: f64,
        lr: f64,
    ) {
        let pi = self.policy();
        let scale = lr / episodes.len() as f64;
        for (e, episode) in episodes.iter().enumerate() {
            let mut g = 0.0;
            let returns: Vec<f64> = episode
                .iter()
                .rev()
                .map(|&(_, _, r)| {
                    g = r + gamma * g;
                    g
                })
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            for (t, (&(s, a, _), g)) in episode.iter().zip(returns).enumerate() {
                let weight = scale * gamma.powi(t as i32) * g * weights.map_or(1.0, |w| w[e][t]);
                for (b, theta) in self.theta[s].iter_mut().enumerate() {
                    *theta += weight * (f64::from(b == a) - pi[s][b]);
                }
            }
        }
    }
}

/// Run tabular REINFORCE on `mdp` from state `start`; returns the exact value
/// of `start` under the policy after every step.
pub fn tabular_reinforce(
    mdp: &Mdp,
    start: usize,
    gamma: f64,
    lr: f64,
    batch: usize,
    steps: usize,
    seed: u64,
) -> Vec<f64> {
    let mut policy = TabularSoftmax::new(mdp.n_states(), mdp.n_actions());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut values = Vec::with_capacity(steps + 1);
    values.push(evaluate_policy(mdp, &policy.policy(), gamma)[start]);
    for _ in 0..steps {
        let pi = policy.policy();
        let episodes: Vec<_> = (0..batch)
            .map(|_| sample_episode(mdp, &pi, start, 50, &mut rng))
            .collect();
        policy.reinforce_step(&episodes, gamma, lr);
        values.push(evaluate_policy(mdp, &policy.policy(), gamma)[start]);
    }
    values
}
// ANCHOR_END: tabular

// ANCHOR: loss
/// REINFORCE for a language model, per token: the weight A_{b,t} (the
/// episode's return in this chapter, an advantage from Chapter 7 on)
/// multiplies the log-prob of every token the policy sampled, and nothing
/// else; the mean is over the batch's action tokens.
///
/// loss = −Σ_{b,t} m_{b,t} A_{b,t} log π_θ(x_{b,t} | x_{b,<t}) / Σ_{b,t} m_{b,t}
pub fn reinforce_loss(logp: &Tensor, mask: &Tensor, weights: &Tensor) -> Tensor {
    // logp, mask, weights: [B, T]; Chapter 4's weighted log-likelihood with w = m·A
    let tokens = mask.sum(REAL).clamp_min(1.0);
    weighted_log_likelihood(logp, &(mask * weights), &tokens)
}

/// One number per episode, `values` [B], spread over its action tokens: [B, T].
pub fn per_token(values: &[f64], mask: &Tensor) -> Tensor {
    Tensor::from_slice(values)
        .to_device(mask.device())
        .unsqueeze(1)
        * mask // [B, T]
}
// ANCHOR_END: loss

// ANCHOR: algorithm
/// Named numbers an algorithm reports for the metrics.
pub type Report = BTreeMap<String, f64>;

/// One forward pass over a minibatch: log π_θ and the entropy of π_θ at the
/// action tokens ([B, T], 0 elsewhere), the final hidden states [B, T, D],
/// and log π_θ(· | x_<t) over the whole vocabulary at the N action tokens,
/// [N, V], in row-major order of the mask (Chapter 16 compares it with a teacher's).
pub struct Forward {
    pub logp: Tensor,
    pub entropy: Tensor,
    pub hidden: Tensor,
    pub log_probs: Tensor,
}

/// The parts of the training loop that an algorithm chooses. The loop plays
/// the episodes, calls these in order, steps the optimiser and evaluates.
pub trait Algorithm {
    /// The reward of each episode (default: the environment's).
    fn rewards(
        &mut self,
        played: &[Played],
        _trajectories: &[Trajectory],
        _report: &mut Report,
    ) -> Vec<f64> {
        played.iter().map(|p| p.reward).collect()
    }
    /// The advantage of every action token of the iteration's episodes,
    /// [N, T] for `rollout` (all N episodes, groups of `group` consecutive),
    /// computed once, before any update.
    fn advantages(
        &mut self,
        model: &TinyAgent,
        trajectories: &[Trajectory],
        rollout: &Batch,
        rewards: &[f64],
        group: usize,
        report: &mut Report,
    ) -> Tensor;
    /// The algorithm's own settings as JSON, written next to the schedule (default: none).
    fn config_json(&self) -> Option<String> {
        None
    }
    /// The training tasks of iteration `iteration`, each repeated `group`
    /// times (default: [`draw_tasks`], uniform; Chapter 14's curricula choose).
    /// Called on the loop's thread before the rollout, with the tasks stream.
    fn draw(
        &mut self,
        n: usize,
        tasks: usize,
        group: usize,
        _iteration: usize,
        rng: &mut StdRng,
    ) -> Vec<usize> {
        draw_tasks(n, tasks, group, rng)
    }
    /// The token streams the loss is computed on, one per played episode
    /// (default: the episodes exactly as played). Chapter 18 rewrites them to
    /// inject bugs.
    fn trajectories(
        &mut self,
        _model: &TinyAgent,
        trajectories: Vec<Trajectory>,
        _report: &mut Report,
    ) -> Vec<Trajectory> {
        trajectories
    }
    /// The episodes that get a loss (default: all).
    fn keep(&mut self, played: &[Played], _group: usize, _report: &mut Report) -> Vec<usize> {
        (0..played.len()).collect()
    }
    /// The loss of one minibatch, the episodes `rows` of the iteration, with
    /// their advantages [b, T].
    fn loss(
        &mut self,
        forward: &Forward,
        minibatch: &Batch,
        advantages: &Tensor,
        rows: &[usize],
        report: &mut Report,
    ) -> Tensor;
    /// What the algorithm carries from one iteration to the next, as JSON, for
    /// the checkpoint of a resumable run (default: nothing).
    fn state(&self) -> Option<String> {
        None
    }
    /// Take up a state that [`Algorithm::state`] returned.
    fn restore(&mut self, _state: &str) -> Result<(), String> {
        Ok(())
    }
}

/// REINFORCE: each episode's weight comes from the rewards of its group
/// through `returns` (the rewards themselves here; Chapter 7's baselines).
pub struct Reinforce {
    pub returns: Box<dyn Fn(&[f64]) -> Vec<f64> + Send>,
}

impl Reinforce {
    /// Plain REINFORCE: the reward is the return.
    pub fn plain() -> Reinforce {
        Reinforce::with(|group| group.to_vec())
    }

    /// REINFORCE with the group's rewards mapped to weights by `returns`.
    pub fn with(returns: impl Fn(&[f64]) -> Vec<f64> + Send + 'static) -> Reinforce {
        Reinforce {
            returns: Box::new(returns),
        }
    }
}

impl Algorithm for Reinforce {
    fn advantages(
        &mut self,
        _model: &TinyAgent,
        _trajectories: &[Trajectory],
        rollout: &Batch,
        rewards: &[f64],
        group: usize,
        _report: &mut Report,
    ) -> Tensor {
        let weights: Vec<f64> = rewards
            .chunks(group)
            .flat_map(|g| (self.returns)(g))
            .collect();
        per_token(&weights, &rollout.mask) // [N, T]
    }

    fn loss(
        &mut self,
        forward: &Forward,
        minibatch: &Batch,
        advantages: &Tensor,
        _rows: &[usize],
        _report: &mut Report,
    ) -> Tensor {
        reinforce_loss(&forward.logp, &minibatch.mask, advantages)
    }
}
// ANCHOR_END: algorithm

/// The settings of an algorithm that wraps `inner`: its own `fields` (a JSON
/// object) and, under `"inner"`, the inner algorithm's.
pub fn wrapper_config(inner: &dyn Algorithm, mut fields: serde_json::Value) -> Option<String> {
    let nested: serde_json::Value = inner
        .config_json()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or_default();
    fields["inner"] = nested;
    Some(fields.to_string())
}

// ANCHOR: forward
/// log π_θ(x_t | x_<t) and the entropy of π_θ(· | x_<t) at the positions
/// `batch.mask` selects, [B, T] each and 0 elsewhere. The transformer runs
/// on micro-batches of rows of similar length, each cut to its longest row
/// ([`length_buckets`]), so it does not compute on the batch's padding; the
/// output layer and the softmax over the vocabulary run only on the N action
/// positions (a seventh of the tokens in the gym). The pieces are put back
/// in the batch's order and shape, so the loss is computed once, over the
/// whole batch, exactly as defined: no algorithm needs to know.
pub fn forward(model: &TinyAgent, batch: &Batch) -> Forward {
    forward_in(model, batch, &length_buckets(&row_lengths(batch)))
}

/// [`forward`] over the micro-batches `buckets`: each the rows it takes and
/// the width it cuts them to (at least its longest row).
pub fn forward_in(model: &TinyAgent, batch: &Batch, buckets: &[(Vec<usize>, usize)]) -> Forward {
    let (b, t) = batch.ids.size2().unwrap();
    if buckets.len() == 1 && buckets[0].1 as i64 == t {
        return padded_forward(model, batch);
    }
    let device = batch.ids.device();
    let mut order = Vec::with_capacity(b as usize); // the batch's rows, bucket by bucket
    let (mut logp, mut entropy, mut hidden, mut log_probs, mut keys) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (rows, width) in buckets {
        let index = Tensor::from_slice(&rows.iter().map(|&r| r as i64).collect::<Vec<_>>())
            .to_device(device);
        let cut = |x: &Tensor| x.index_select(0, &index).narrow(1, 0, *width as i64); // [b, W]
        let part = padded_forward(
            model,
            &Batch {
                ids: cut(&batch.ids),
                valid: cut(&batch.valid),
                mask: cut(&batch.mask),
                logprobs: cut(&batch.logprobs),
                rewards: batch.rewards.index_select(0, &index),
            },
        );
        let widen = |x: &Tensor| x.constant_pad_nd([0, t - *width as i64]); // [b, W] -> [b, T]
        logp.push(widen(&part.logp));
        entropy.push(widen(&part.entropy));
        hidden.push(part.hidden.constant_pad_nd([0, 0, 0, t - *width as i64])); // [b, T, D]
        log_probs.push(part.log_probs);
        // Each action position's place in the whole batch's row-major order.
        let at = Vec::<i64>::try_from(
            cut(&batch.mask)
                .narrow(1, 1, *width as i64 - 1)
                .nonzero()
                .to_device(tch::Device::Cpu)
                .reshape([-1]),
        )
        .expect("positions"); // [n, 2] flat
        keys.extend(at.chunks(2).map(|p| rows[p[0] as usize] as i64 * t + p[1]));
        order.extend(rows.iter().map(|&r| r as i64));
    }
    // Row r of the batch is row inverse[r] of the buckets' rows stacked.
    let mut inverse = vec![0i64; b as usize];
    for (place, &row) in order.iter().enumerate() {
        inverse[row as usize] = place as i64;
    }
    let inverse = Tensor::from_slice(&inverse).to_device(device);
    let mut by_key: Vec<usize> = (0..keys.len()).collect();
    by_key.sort_by_key(|&i| keys[i]);
    let by_key =
        Tensor::from_slice(&by_key.iter().map(|&i| i as i64).collect::<Vec<_>>()).to_device(device);
    Forward {
        logp: Tensor::cat(&logp, 0).index_select(0, &inverse), // [B, T]
        entropy: Tensor::cat(&entropy, 0).index_select(0, &inverse), // [B, T]
        hidden: Tensor::cat(&hidden, 0).index_select(0, &inverse), // [B, T, D]
        log_probs: Tensor::cat(&log_probs, 0).index_select(0, &by_key), // [N, V]
    }
}

/// [`forward`] on the batch as it is, padding and all: one pass over [B, T].
pub fn padded_forward(model: &TinyAgent, batch: &Batch) -> Forward {
    let hidden = model.hidden(&batch.ids, &batch.valid, &mut KvCache::default()); // [B, T, D]
    at_actions(model, hidden, &batch.ids, &batch.mask)
}

/// The number of real tokens in each row of `batch`.
pub fn row_lengths(batch: &Batch) -> Vec<usize> {
    let lengths = batch
        .valid
        .to_kind(Kind::Int64)
        .sum_dim_intlist(1, false, Kind::Int64)
        .to_device(tch::Device::Cpu); // [B]
    Vec::<i64>::try_from(lengths)
        .expect("lengths")
        .into_iter()
        .map(|l| l as usize)
        .collect()
}

/// Rows of lengths `lengths` in micro-batches of similar length, each with
/// the width it is cut to (its longest row). Rows go longest first; a
/// micro-batch takes the next row while at most an eighth of its slots
/// would be padding. One bucket of every row when that already holds.
pub fn length_buckets(lengths: &[usize]) -> Vec<(Vec<usize>, usize)> {
    let mut rows: Vec<usize> = (0..lengths.len()).collect();
    rows.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
    let mut buckets: Vec<(Vec<usize>, usize)> = Vec::new();
    let mut tokens = 0; // real tokens in the last bucket
    for row in rows {
        match buckets.last_mut() {
            Some((members, width))
                if 8 * (tokens + lengths[row]) >= 7 * (members.len() + 1) * *width =>
            {
                members.push(row);
                tokens += lengths[row];
            }
            _ => {
                buckets.push((vec![row], lengths[row].max(1)));
                tokens = lengths[row];
            }
        }
    }
    buckets
}

/// The head, log π_θ and the entropy at the action tokens `mask` [B, T]
/// selects, from the final hidden states [B, T, D] of the rows `ids` [B, T].
pub fn at_actions(model: &TinyAgent, hidden: Tensor, ids: &Tensor, mask: &Tensor) -> Forward {
    let (b, t) = ids.size2().unwrap();
    let at = mask.narrow(1, 1, t - 1).nonzero(); // [N, 2]: (row, position before an action token)
    let (rows, before) = (at.select(1, 0), at.select(1, 1)); // [N], [N]
    let token = &before + 1; // [N]
    let log_probs = model
        .head(&hidden.index(&[Some(&rows), Some(&before)]))
        .log_softmax(-1, REAL); // [N, V]
    let next = ids.index(&[Some(&rows), Some(&token)]).unsqueeze(-1); // [N, 1]
    let logp = log_probs.gather(-1, &next, false).squeeze_dim(-1); // [N]
    let entropy = -(log_probs.exp() * &log_probs).sum_dim_intlist(-1, false, REAL); // [N]
    let zeros = Tensor::zeros([b, t], (REAL, logp.device()));
    let place = |values: &Tensor| zeros.index_put(&[Some(&rows), Some(&token)], values, false); // [B, T]
    Forward {
        logp: place(&logp),
        entropy: place(&entropy),
        hidden,
        log_probs,
    }
}
// ANCHOR_END: forward

// ANCHOR: train
/// What every run of the loop is told, whatever its algorithm: how much to
/// play, how to step, when to evaluate and save. Written next to the metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// A name for tables, figures and the run's folder.
    pub name: String,
    pub iterations: usize,
    /// Tasks drawn per iteration, and episodes (a group) played on each.
    pub tasks: usize,
    pub group: usize,
    /// The learning rate of the first iteration and of the last, linear in between.
    pub lr: f64,
    pub lr_end: f64,
    /// Passes over each iteration's episodes, and minibatches (optimiser steps) per pass.
    pub epochs: usize,
    pub minibatches: usize,
    /// Evaluate every this many iterations (and after the last; 0: only
    /// after the last), with this many episodes per held-out task (0: never).
    pub eval_every: usize,
    pub eval_episodes: usize,
    /// Save the weights every this many iterations (0: only at the end).
    pub checkpoint_every: usize,
    pub seed: u64,
    /// Policy versions between the weights that sample an iteration's
    /// episodes and the weights that learn from them (Chapter 13): iteration
    /// i (counted from 0) plays with the weights as they were after
    /// i − staleness iterations, version i − staleness (the first iterations
    /// with the initial ones). 0 is on-policy.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub staleness: usize,
    /// Gradient clipping: before each step, a gradient whose L2 norm over all
    /// weights exceeds this is scaled down to it (None: never clipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_grad_norm: Option<f64>,
    /// AdamW's decoupled weight decay λ: each step also multiplies every
    /// weight by 1 − lr·λ. 0.01 is libtorch's default and the book's.
    #[serde(
        default = "default_weight_decay",
        skip_serializing_if = "is_default_weight_decay"
    )]
    pub weight_decay: f64,
    /// What ends an episode besides `submit` (Chapter 4's `play_until`): the
    /// gym's turn budget by default; tasks of a longer budget, or episodes
    /// that end when the model's window is full, say so here.
    #[serde(default = "default_ends", skip_serializing_if = "is_default_ends")]
    pub ends: Ends,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The episodes of every chapter's runs: the gym's 8 turns, read through the window.
pub const ENDS: Ends = Ends {
    max_turns: crate::gym::MAX_TURNS,
    at_window: false,
};

fn default_ends() -> Ends {
    ENDS
}

fn is_default_ends(ends: &Ends) -> bool {
    *ends == ENDS
}

/// The weight decay of every run of the book, libtorch's AdamW default.
pub const WEIGHT_DECAY: f64 = 0.01;

pub(crate) fn default_weight_decay() -> f64 {
    WEIGHT_DECAY
}

pub(crate) fn is_default_weight_decay(decay: &f64) -> bool {
    *decay == WEIGHT_DECAY
}

impl Schedule {
    /// Chapter 6's REINFORCE run: 24 iterations of 16 tasks × 4 episodes, one
    /// AdamW step each at 10⁻³; 2 episodes per held-out task every 4 iterations.
    pub fn reinforce() -> Schedule {
        Schedule {
            name: "REINFORCE".into(),
            iterations: 24,
            tasks: 16,
            group: 4,
            lr: 1e-3,
            lr_end: 1e-3,
            epochs: 1,
            minibatches: 1,
            eval_every: 4,
            eval_episodes: 2,
            checkpoint_every: 0,
            seed: 0,
            staleness: 0,
            max_grad_norm: None,
            weight_decay: WEIGHT_DECAY,
            ends: ENDS,
        }
    }

    /// The learning rate of `iteration`: linear from `lr` at the first to `lr_end` at the last.
    pub fn learning_rate(&self, iteration: usize) -> f64 {
        self.lr + (self.lr_end - self.lr) * iteration as f64 / self.iterations.max(1) as f64
    }

    /// The same schedule under another name and seed.
    pub fn seeded(&self, seed: u64) -> Schedule {
        Schedule {
            name: format!("{} seed {seed}", self.name),
            seed,
            ..self.clone()
        }
    }
}

/// Where one iteration's wall-clock time went, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTime {
    pub generation: f64,
    pub environment: f64,
    pub learning: f64,
}

/// One line of a run's metrics.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainRecord {
    pub iteration: usize,
    /// Episodes played before this line's evaluation.
    pub episodes: usize,
    /// The training tasks drawn, one per group.
    pub tasks: Option<Vec<usize>>,
    pub train_success: Option<f64>,
    /// Success on the held-out tasks, when evaluated.
    pub held_out_success: Option<f64>,
    /// Episodes that got a loss.
    pub trained_episodes: Option<usize>,
    /// Mean over the iteration's minibatches.
    pub loss: Option<f64>,
    /// Mean entropy (nats) of the policy at the action tokens it sampled.
    pub entropy: Option<f64>,
    /// Tokens sampled by the policy; action tokens trained on (over all
    /// epochs); all tokens of the trained sequences (one epoch); all tokens
    /// of the episodes played, trained on or not.
    pub generated_tokens: Option<usize>,
    pub trained_tokens: Option<usize>,
    pub sequence_tokens: Option<usize>,
    #[serde(default)]
    pub played_tokens: Option<usize>,
    /// The share of the iteration's turns whose action did not parse as a call.
    #[serde(default)]
    pub malformed_turns: Option<f64>,
    pub time: Option<StepTime>,
    /// Mean over the iteration's optimiser steps of the gradient's L2 norm
    /// over all weights, before the step.
    #[serde(default)]
    pub grad_norm: Option<f64>,
    /// What the algorithm reported (last minibatch for per-step numbers).
    pub extra: Report,
    /// With more than one epoch: what the algorithm had reported after the
    /// last minibatch of each epoch, so that a per-step number (the clip
    /// fraction, the approximate KL) can be followed from pass to pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_epoch: Vec<Report>,
}

/// The training tasks of one iteration: `tasks` draws from `n` tasks, each
/// repeated `group` times (groups consecutive).
pub fn draw_tasks(n: usize, tasks: usize, group: usize, rng: &mut StdRng) -> Vec<usize> {
    (0..tasks)
        .map(|_| rng.random_range(0..n))
        .flat_map(|t| std::iter::repeat_n(t, group))
        .collect()
}

/// The held-out success of `model`: `per_task` sampled episodes on each task.
pub fn success_rate(
    model: &TinyAgent,
    bpe: &Bpe,
    tasks: &[Task],
    per_task: usize,
    rng: &mut StdRng,
) -> f64 {
    let played = evaluation_episodes(model, bpe, tasks, per_task, rng);
    played.iter().map(|p| p.reward).sum::<f64>() / played.len() as f64
}

/// `per_task` episodes on each of `tasks`, sampled at temperature 1.
pub fn evaluation_episodes(
    model: &TinyAgent,
    bpe: &Bpe,
    tasks: &[Task],
    per_task: usize,
    rng: &mut StdRng,
) -> Vec<Played> {
    evaluation_until(model, bpe, tasks, per_task, ENDS, None, rng)
}

/// [`evaluation_episodes`], the episodes ending as `ends` says and the policy
/// reading `view` of each (Chapter 4's `play_until`).
pub fn evaluation_until(
    model: &TinyAgent,
    bpe: &Bpe,
    tasks: &[Task],
    per_task: usize,
    ends: Ends,
    view: Option<View>,
    rng: &mut StdRng,
) -> Vec<Played> {
    let policy = LmPolicy {
        model,
        bpe,
        sampling: Sampling::PURE,
        max_action_tokens: 16,
    };
    let which: Vec<usize> = (0..tasks.len())
        .flat_map(|t| std::iter::repeat_n(t, per_task))
        .collect();
    play_until(&policy, tasks, &which, ends, view, rng).0
}

/// What the training loop asks of an optimiser.
pub trait Optimiser {
    fn set_lr(&mut self, lr: f64);
    fn zero_grad(&mut self);
    fn step(&mut self);
}

/// libtorch's AdamW, the loop's optimiser in Chapters 6 to 18.
impl Optimiser for nn::Optimizer {
    fn set_lr(&mut self, lr: f64) {
        nn::Optimizer::set_lr(self, lr)
    }
    fn zero_grad(&mut self) {
        nn::Optimizer::zero_grad(self)
    }
    fn step(&mut self) {
        nn::Optimizer::step(self)
    }
}

/// The book's one training loop. Each iteration plays a group of episodes on
/// each of `schedule.tasks` training tasks (rollout), asks `algorithm` for
/// rewards, advantages and the episodes to keep, and takes `epochs ×
/// minibatches` AdamW steps on its loss (update); every `eval_every`
/// iterations it measures held-out success (evaluation). Tasks, sampling,
/// minibatch order and evaluation each draw from their own stream of the
/// seed. Writes `schedule.json` (and the algorithm's `config.json`, if it has
/// one), `metrics.jsonl` and `final.safetensors` (and checkpoints
/// `iteration-NNNN.safetensors`) to `run_dir`.
pub fn train(
    model: &mut TinyAgent,
    bpe: &Bpe,
    tasks: (&[Task], &[Task]),
    schedule: &Schedule,
    algorithm: &mut dyn Algorithm,
    run_dir: &Path,
) -> Result<Vec<TrainRecord>, String> {
    let mut opt = nn::AdamW {
        wd: schedule.weight_decay,
        ..Default::default()
    }
    .build(&model.vs, schedule.lr)
    .map_err(|err| err.to_string())?;
    run_loop(
        model,
        bpe,
        tasks,
        schedule,
        algorithm,
        run_dir,
        &mut opt,
        Vec::new(),
        &mut |_, _, _, _| Ok(false),
    )
}

/// After each iteration's metrics line: the iterations done, the model, the
/// optimiser and the algorithm; `Ok(true)` stops the run there (Chapter 19's
/// resumable run saves its state here).
type AfterIteration<'a, O> =
    dyn FnMut(usize, &TinyAgent, &O, &dyn Algorithm) -> Result<bool, String> + 'a;

/// The loop itself (Algorithm 9.3), from the iteration after `done` (the
/// records of the iterations already done), with `opt` stepping the weights.
#[allow(clippy::too_many_arguments)]
fn run_loop<O: Optimiser>(
    model: &mut TinyAgent,
    bpe: &Bpe,
    tasks: (&[Task], &[Task]),
    schedule: &Schedule,
    algorithm: &mut dyn Algorithm,
    run_dir: &Path,
    opt: &mut O,
    done: Vec<TrainRecord>,
    after: &mut AfterIteration<'_, O>,
) -> Result<Vec<TrainRecord>, String> {
    let (train_tasks, held_out) = tasks;
    let streams = Streams::new(schedule.seed);
    // 1. The schedule and the metrics file (`train` made the optimiser).
    let mut metrics = start_run(run_dir, schedule, &*algorithm, done.len())?;
    let player = Player {
        bpe,
        tasks: train_tasks,
        streams: &streams,
        schedule,
    };
    let bar = progress(schedule.iterations as u64, &schedule.name);
    bar.set_position(done.len() as u64);
    let mut records = done;
    std::thread::scope(|scope| -> Result<(), String> {
        // π_old: the learner's own weights, or a copy `staleness` versions behind (Chapter 13).
        let mut samplers = Samplers::new(schedule.staleness);
        for iteration in records.len()..=schedule.iterations {
            let last = iteration == schedule.iterations;
            // 2a. Held-out success, on the evaluation stream of this iteration.
            let evaluate = schedule.eval_episodes > 0
                && ((schedule.eval_every > 0 && iteration % schedule.eval_every == 0) || last);
            let mut record = TrainRecord {
                iteration,
                episodes: iteration * schedule.tasks * schedule.group,
                held_out_success: evaluate.then(|| {
                    let mut rng = streams.evaluation(iteration);
                    let (per_task, ends) = (schedule.eval_episodes, schedule.ends);
                    let played =
                        evaluation_until(model, bpe, held_out, per_task, ends, None, &mut rng);
                    played.iter().map(|p| p.reward).sum::<f64>() / played.len() as f64
                }),
                ..TrainRecord::default()
            };
            // 2b. After the last iteration only its metrics line is written.
            if !last {
                // 2c. The learning rate α_n.
                opt.set_lr(schedule.learning_rate(iteration));
                // 2d. Rollout: K tasks × G episodes.
                let (picks, played, time) =
                    samplers.rollout(scope, &player, model, &mut *algorithm, iteration)?;
                // 2e–h. Rewards, advantages, filters and E × M optimiser steps.
                let learning = Instant::now();
                let shuffle = streams.shuffle(iteration);
                update(
                    model,
                    opt,
                    &mut *algorithm,
                    schedule,
                    &played,
                    shuffle,
                    &mut record,
                );
                // 2i. What the rollout was, and where the time went.
                describe_rollout(&mut record, &picks, &played, schedule.group);
                record.time = Some(StepTime {
                    generation: time.generation,
                    environment: time.environment,
                    learning: learning.elapsed().as_secs_f64(),
                });
                let completed = iteration + 1;
                if schedule.checkpoint_every > 0 && completed % schedule.checkpoint_every == 0 {
                    let name = format!("iteration-{completed:04}.safetensors");
                    model.save(&run_dir.join(name))?;
                }
                bar.inc(1);
            }
            let line = serde_json::to_string(&record).map_err(|err| err.to_string())?;
            writeln!(metrics, "{line}").map_err(|err| format!("cannot write metrics: {err}"))?;
            records.push(record);
            if !last && after(iteration + 1, model, opt, &*algorithm)? {
                bar.abandon();
                return Ok(());
            }
        }
        model.save(&run_dir.join("final.safetensors")) // 3.
    })?;
    bar.finish_and_clear();
    Ok(records)
}

/// Steps 2e–2h of Algorithm 9.3 on one iteration's episodes: rewards,
/// advantages and the episodes kept, then `epochs × minibatches` optimiser
/// steps on the algorithm's loss. What it measured goes into `record`.
fn update<O: Optimiser>(
    model: &TinyAgent,
    opt: &mut O,
    algorithm: &mut dyn Algorithm,
    schedule: &Schedule,
    played: &[Played],
    mut shuffle: StdRng,
    record: &mut TrainRecord,
) {
    let device = model.device();
    let trajectories: Vec<Trajectory> = played.iter().map(Trajectory::from_played).collect();
    let trajectories = algorithm.trajectories(model, trajectories, &mut record.extra);
    // 2e. Rewards R_b, [B].
    let rewards = algorithm.rewards(played, &trajectories, &mut record.extra);
    // 2f. Advantages, [B, T].
    let rollout = collate(&trajectories, device);
    let (group, report) = (schedule.group, &mut record.extra);
    let advantages = algorithm.advantages(model, &trajectories, &rollout, &rewards, group, report);
    // 2g. The episodes the filters keep.
    let mut chosen = algorithm.keep(played, schedule.group, &mut record.extra);
    let (mut loss_sum, mut entropy_sum, mut norm_sum, mut steps, mut tokens_sum) =
        (0.0, 0.0, 0.0, 0, 0);
    // 2h. E epochs of M minibatches.
    for _ in 0..schedule.epochs {
        chosen.shuffle(&mut shuffle);
        for rows in chosen.chunks(chosen.len().div_ceil(schedule.minibatches).max(1)) {
            let picked: Vec<Trajectory> = rows.iter().map(|&i| trajectories[i].clone()).collect();
            let minibatch = collate(&picked, device);
            let index = Tensor::from_slice(&rows.iter().map(|&i| i as i64).collect::<Vec<_>>());
            let length = minibatch.ids.size()[1];
            let adv = advantages
                .index_select(0, &index.to_device(device))
                .narrow(1, 0, length); // [B', T]
            let forward = forward(model, &minibatch); // i.   log π_θ and entropy, [B', T]
            let loss = algorithm.loss(&forward, &minibatch, &adv, rows, &mut record.extra); // ii–iv.
            opt.zero_grad();
            loss.backward();
            let norm = gradient_norm(model); // v.   ‖g‖, recorded before clipping
            if let Some(max) = schedule.max_grad_norm {
                clip_gradient(model, norm, max);
            }
            opt.step(); // vi.  AdamW
            let tokens = minibatch.mask.sum(REAL).double_value(&[]);
            let entropy = (forward.entropy.detach() * &minibatch.mask).sum(REAL);
            entropy_sum += entropy.double_value(&[]) / tokens.max(1.0);
            loss_sum += loss.double_value(&[]);
            norm_sum += norm;
            (steps, tokens_sum) = (steps + 1, tokens_sum + tokens as usize);
        }
        if schedule.epochs > 1 {
            record.per_epoch.push(record.extra.clone());
        }
    }
    let per_step = |sum: f64| (steps > 0).then(|| sum / steps as f64);
    record.loss = per_step(loss_sum);
    record.entropy = per_step(entropy_sum);
    record.grad_norm = per_step(norm_sum);
    record.trained_episodes = Some(chosen.len());
    record.trained_tokens = Some(tokens_sum);
    record.sequence_tokens = Some(chosen.iter().map(|&i| trajectories[i].ids.len()).sum());
    record.played_tokens = Some(trajectories.iter().map(|t| t.ids.len()).sum());
}

/// One iteration's rollout: the tasks drawn, the episodes played, and the time spent.
type Rollout = (Vec<usize>, Vec<Played>, PlayTime);

/// What a rollout needs besides the weights that sample: the training tasks,
/// the tokenizer and the run's streams (which tasks and which tokens come
/// from separate streams, so variants of a run draw the same tasks).
struct Player<'a> {
    bpe: &'a Bpe,
    tasks: &'a [Task],
    streams: &'a Streams,
    schedule: &'a Schedule,
}

impl Player<'_> {
    /// The training tasks of `iteration`, one per episode, groups consecutive.
    fn draw(&self, algorithm: &mut dyn Algorithm, iteration: usize) -> Vec<usize> {
        let (tasks, group) = (self.schedule.tasks, self.schedule.group);
        let mut rng = self.streams.tasks(iteration);
        algorithm.draw(self.tasks.len(), tasks, group, iteration, &mut rng)
    }

    /// `picks`' episodes played by `sampler` at temperature 1 on the sampling stream of `iteration`.
    fn play(&self, sampler: &TinyAgent, iteration: usize, picks: Vec<usize>) -> Rollout {
        let policy = LmPolicy {
            model: sampler,
            bpe: self.bpe,
            sampling: Sampling::PURE,
            max_action_tokens: 16,
        };
        let mut rng = self.streams.sampling(iteration);
        let ends = self.schedule.ends;
        let (played, time) = play_until(&policy, self.tasks, &picks, ends, None, &mut rng);
        (picks, played, time)
    }
}

/// Writes the schedule (and the algorithm's configuration) to `run_dir` and
/// opens its metrics file: new, or appended to after `resumed` iterations.
fn start_run(
    run_dir: &Path,
    schedule: &Schedule,
    algorithm: &dyn Algorithm,
    resumed: usize,
) -> Result<std::fs::File, String> {
    std::fs::create_dir_all(run_dir)
        .map_err(|err| format!("cannot create {}: {err}", run_dir.display()))?;
    let json = serde_json::to_string_pretty(schedule).map_err(|err| err.to_string())?;
    std::fs::write(run_dir.join("schedule.json"), json)
        .map_err(|err| format!("cannot write the schedule: {err}"))?;
    if let Some(config) = algorithm.config_json() {
        std::fs::write(run_dir.join("config.json"), config)
            .map_err(|err| format!("cannot write the config: {err}"))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(resumed > 0)
        .truncate(resumed == 0)
        .open(run_dir.join("metrics.jsonl"))
        .map_err(|err| format!("cannot write metrics: {err}"))
}

/// The rollout's part of a metrics line: tasks, training success, tokens sampled, malformed turns.
fn describe_rollout(record: &mut TrainRecord, picks: &[usize], played: &[Played], group: usize) {
    record.tasks = Some(picks.iter().step_by(group.max(1)).copied().collect());
    record.train_success = Some(played.iter().map(|p| p.reward).sum::<f64>() / played.len() as f64);
    let sampled = |p: &Played| p.segments.iter().map(|s| s.logprobs.len()).sum::<usize>();
    record.generated_tokens = Some(played.iter().map(sampled).sum());
    let turns: usize = played.iter().map(|p| p.actions.len()).sum();
    let malformed: usize = played.iter().map(|p| p.parse_errors).sum();
    record.malformed_turns = Some(malformed as f64 / turns.max(1) as f64);
}

/// The L2 norm of the gradient over all of `model`'s weights (0 for weights without one).
pub fn gradient_norm(model: &TinyAgent) -> f64 {
    let squares: f64 = model
        .vs
        .trainable_variables()
        .iter()
        .map(|v| {
            let g = v.grad();
            if g.defined() {
                g.square().sum(REAL).double_value(&[])
            } else {
                0.0
            }
        })
        .sum();
    squares.sqrt()
}

/// Gradient clipping by the global norm: every gradient of `model` scaled by
/// max / norm when the L2 norm over all weights, `norm` (from
/// [`gradient_norm`]), exceeds `max`; left alone otherwise. The direction of
/// the step is kept; only its length is bounded.
pub fn clip_gradient(model: &TinyAgent, norm: f64, max: f64) {
    if norm > max {
        let scale = max / norm;
        for v in model.vs.trainable_variables() {
            let mut g = v.grad();
            if g.defined() {
                let _ = g.g_mul_scalar_(scale);
            }
        }
    }
}

/// The records of a run, read back from its metrics file.
pub fn read_records(path: &Path) -> Result<Vec<TrainRecord>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    text.lines()
        .map(|line| {
            serde_json::from_str(line)
                .map_err(|err| format!("{}: bad line {line:?}: {err}", path.display()))
        })
        .collect()
}
// ANCHOR_END: train

// ANCHOR: stale
/// A number format for the sampler's copy of the weights: 32-bit floats, or
/// weights rounded to bfloat16 (an 8-bit significand) and computed in 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Precision {
    F32,
    BF16,
}

impl Precision {
    pub fn kind(self) -> Kind {
        match self {
            Precision::F32 => Kind::Float,
            Precision::BF16 => Kind::BFloat16,
        }
    }
}

/// A copy of `model`'s weights, in `precision` if one is given (see [`Precision`]).
pub fn copy_model(model: &TinyAgent, precision: Option<Precision>) -> TinyAgent {
    let mut copy = {
        let _turn = crate::book::generator_turn(); // its random initialisation is overwritten; don't interleave with a seeded stretch
        TinyAgent::new(model.config, model.device())
    };
    copy.vs.copy(&model.vs).expect("the same shapes");
    if let Some(precision) = precision {
        copy.vs.set_kind(precision.kind());
        // bfloat16 weights compute in 32 bits: libtorch's bfloat16 matrix products
        // take different code paths on different processors, 32-bit ones do not.
        if precision == Precision::BF16 {
            copy.vs.set_kind(Kind::Float);
        }
    }
    copy
}

/// The weights that sample each iteration's episodes, π_old (Chapter 13).
/// On-policy (`staleness` 0) they are the learner's own. Otherwise iteration
/// i samples with a copy of the weights as they were after i − staleness
/// iterations, version i − staleness (the first iterations with the initial
/// ones), and since the
/// next iteration's sampler exists already, its episodes are played on a
/// second thread while this iteration learns: the same episodes a sequential
/// loop would play later, sooner.
struct Samplers<'scope> {
    staleness: usize,
    /// Copies of the versions still needed, oldest first, each tagged with
    /// the iterations completed when it was copied.
    versions: VecDeque<(usize, TinyAgent)>,
    /// The next iteration's rollout, running on the second thread.
    pending: Option<ScopedJoinHandle<'scope, Rollout>>,
}

impl<'scope> Samplers<'scope> {
    fn new(staleness: usize) -> Self {
        Samplers {
            staleness,
            versions: VecDeque::new(),
            pending: None,
        }
    }

    /// The copy that samples iteration j: version j − staleness.
    fn version(&self, j: usize) -> &TinyAgent {
        let wanted = j.saturating_sub(self.staleness);
        let kept = self.versions.iter().find(|(v, _)| *v == wanted);
        &kept.expect("a kept version").1
    }

    /// Iteration `iteration`'s rollout (`model` holds the learner's weights
    /// after `iteration` iterations).
    fn rollout<'env>(
        &mut self,
        scope: &'scope Scope<'scope, 'env>,
        player: &'scope Player<'_>,
        model: &TinyAgent,
        algorithm: &mut dyn Algorithm,
        iteration: usize,
    ) -> Result<Rollout, String> {
        if self.staleness == 0 {
            return Ok(player.play(model, iteration, player.draw(algorithm, iteration)));
        }
        self.versions
            .push_back((iteration, copy_model(model, None)));
        let oldest = iteration.saturating_sub(self.staleness);
        while self.versions.front().is_some_and(|(v, _)| *v < oldest) {
            self.versions.pop_front();
        }
        let rollout = match self.pending.take() {
            Some(thread) => thread
                .join()
                .map_err(|_| "the rollout thread panicked".to_string())?,
            None => player.play(
                self.version(iteration),
                iteration,
                player.draw(algorithm, iteration),
            ),
        };
        let next = iteration + 1;
        if next < player.schedule.iterations {
            let sampler = copy_model(self.version(next), None); // the thread's own copy (a tensor is not Sync)
            let picks = player.draw(algorithm, next);
            self.pending = Some(scope.spawn(move || player.play(&sampler, next, picks)));
        }
        Ok(rollout)
    }
}
// ANCHOR_END: stale

// ANCHOR: adamw
/// AdamW written out (Loshchilov and Hutter's decoupled weight decay, with
/// libtorch's defaults: β = (0.9, 0.999), ε = 10⁻⁸, decay 0.01), whose state,
/// the two moments and the step count of every weight, a checkpoint can hold.
/// libtorch keeps its own optimiser's state where tch cannot reach it.
pub struct AdamW {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
    /// The trainable weights by name (sorted), and per weight: m, v, steps taken.
    names: Vec<String>,
    weights: Vec<Tensor>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    steps: Vec<i64>,
}

impl AdamW {
    pub fn new(vs: &nn::VarStore, lr: f64) -> AdamW {
        let mut named: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, w)| w.requires_grad())
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let (names, weights): (Vec<String>, Vec<Tensor>) = named.into_iter().unzip();
        let zeros = || weights.iter().map(|w| w.zeros_like()).collect::<Vec<_>>();
        AdamW {
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.01,
            m: zeros(),
            v: zeros(),
            steps: vec![0; weights.len()],
            names,
            weights,
        }
    }

    /// The moments as named tensors (`m.<weight>`, `v.<weight>`) and the step counts.
    pub fn save(&self, dir: &Path) -> Result<(), String> {
        let named: Vec<(String, &Tensor)> = self
            .names
            .iter()
            .zip(&self.m)
            .map(|(n, t)| (format!("m.{n}"), t))
            .chain(
                self.names
                    .iter()
                    .zip(&self.v)
                    .map(|(n, t)| (format!("v.{n}"), t)),
            )
            .collect();
        Tensor::write_safetensors(&named, dir.join("adamw.safetensors"))
            .map_err(|err| format!("cannot save the optimiser: {err}"))?;
        let steps: BTreeMap<&str, i64> = self
            .names
            .iter()
            .map(String::as_str)
            .zip(self.steps.iter().copied())
            .collect();
        std::fs::write(
            dir.join("adamw.json"),
            serde_json::to_string_pretty(&steps).map_err(|err| err.to_string())?,
        )
        .map_err(|err| format!("cannot save the optimiser: {err}"))
    }

    /// Read back what [`AdamW::save`] wrote; every weight must be there, with its shape.
    pub fn load(&mut self, dir: &Path) -> Result<(), String> {
        let tensors: BTreeMap<String, Tensor> =
            Tensor::read_safetensors(dir.join("adamw.safetensors"))
                .map_err(|err| format!("cannot read the optimiser: {err}"))?
                .into_iter()
                .collect();
        let text = std::fs::read_to_string(dir.join("adamw.json"))
            .map_err(|err| format!("cannot read the optimiser: {err}"))?;
        let steps: BTreeMap<String, i64> = serde_json::from_str(&text)
            .map_err(|err| format!("cannot read the optimiser's steps: {err}"))?;
        for (i, name) in self.names.iter().enumerate() {
            for (moment, target) in [("m", &mut self.m[i]), ("v", &mut self.v[i])] {
                let stored = tensors
                    .get(&format!("{moment}.{name}"))
                    .ok_or_else(|| format!("the optimiser state has no {moment}.{name}"))?;
                if stored.size() != target.size() {
                    return Err(format!(
                        "{moment}.{name} has shape {:?}, the model {:?}",
                        stored.size(),
                        target.size()
                    ));
                }
                tch::no_grad(|| target.copy_(stored));
            }
            self.steps[i] = *steps
                .get(name)
                .ok_or_else(|| format!("the optimiser state has no step count for {name}"))?;
        }
        Ok(())
    }
}

impl Optimiser for AdamW {
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    fn zero_grad(&mut self) {
        for w in &mut self.weights {
            w.zero_grad();
        }
    }

    /// One step for every weight with a gradient g (t counts its steps):
    /// w ← w(1 − η λ);  m ← β₁ m + (1 − β₁) g;  v ← β₂ v + (1 − β₂) g²;
    /// w ← w − η/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε).
    fn step(&mut self) {
        let ((b1, b2), lr, eps) = (self.betas, self.lr, self.eps);
        tch::no_grad(|| {
            for i in 0..self.weights.len() {
                let g = self.weights[i].grad();
                if !g.defined() {
                    continue;
                }
                self.steps[i] += 1;
                let t = self.steps[i] as i32;
                let w = &mut self.weights[i];
                let _ = w.g_mul_scalar_(1.0 - lr * self.weight_decay);
                let m = &mut self.m[i];
                let _ = m.g_mul_scalar_(b1);
                let _ = m.g_add_(&(&g * (1.0 - b1)));
                let v = &mut self.v[i];
                let _ = v.g_mul_scalar_(b2);
                let _ = v.g_add_(&(&g * &g * (1.0 - b2)));
                let denom = v.sqrt() / (1.0 - b2.powi(t)).sqrt() + eps;
                let _ = w.g_sub_(&(&*m / denom * (lr / (1.0 - b1.powi(t)))));
            }
        });
    }
}
// ANCHOR_END: adamw

// ANCHOR: resumable
/// How a resumable run keeps its state (Chapter 19).
#[derive(Clone, Copy, Debug, Default)]
pub struct Resumable {
    /// Save the run's state after every this many iterations.
    pub every: usize,
    /// Stop once the state after this many iterations is saved, as a run
    /// killed there would (for tests).
    pub stop_after: Option<usize>,
}

/// Everything a resumed run needs besides the weights and the optimiser:
/// the loop's random streams are functions of (seed, name, iteration), so the
/// seed and the next iteration restore all of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub next_iteration: usize,
    pub seed: u64,
    pub streams: Vec<String>,
    pub algorithm: Option<String>,
    /// A fingerprint of the training and held-out task ids, which a resumed run must share.
    pub tasks: String,
    /// libtorch's threads and CPU kernels, which a resumed run must share.
    pub threads: i32,
    pub cpu_capability: String,
}

fn tasks_fingerprint(tasks: (&[Task], &[Task])) -> String {
    let ids = tasks
        .0
        .iter()
        .chain(tasks.1)
        .map(|t| t.id.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        "{:016x}",
        crate::book::fnv1a(ids.as_bytes(), 0xcbf2_9ce4_8422_2325)
    )
}

fn libtorch_setting() -> (i32, String) {
    (
        tch::get_num_threads(),
        std::env::var("ATEN_CPU_CAPABILITY").unwrap_or_else(|_| "default of the processor".into()),
    )
}

/// The newest complete state in `run_dir` (`state-NNNN/`, NNNN iterations done).
pub fn latest_state(run_dir: &Path) -> Option<(usize, PathBuf)> {
    let entries = std::fs::read_dir(run_dir).ok()?;
    entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            entry
                .file_name()
                .to_str()?
                .strip_prefix("state-")?
                .parse::<usize>()
                .ok()
                .map(|n| (n, entry.path()))
        })
        .max_by_key(|(n, _)| *n)
}

/// [`train`] with the written-out [`AdamW`], saving the weights, the
/// optimiser's moments and steps, the algorithm's state and the iteration
/// every `resumable.every` iterations (into `state-NNNN/`, complete or not at
/// all; older states are then removed), and starting from the newest saved
/// state in `run_dir` if there is one. A run stopped after any saved iteration and started again ends with
/// the same weights and metrics, bit for bit, as a run never stopped.
pub fn train_resumable(
    model: &mut TinyAgent,
    bpe: &Bpe,
    tasks: (&[Task], &[Task]),
    schedule: &Schedule,
    algorithm: &mut dyn Algorithm,
    run_dir: &Path,
    resumable: &Resumable,
) -> Result<Vec<TrainRecord>, String> {
    if schedule.staleness > 0 {
        return Err("a resumable run samples on-policy (staleness 0)".into());
    }
    let mut opt = AdamW::new(&model.vs, schedule.lr);
    opt.weight_decay = schedule.weight_decay;
    let mut done = Vec::new();
    if let Some((next, dir)) = latest_state(run_dir) {
        let stored: Schedule = serde_json::from_str(
            &std::fs::read_to_string(run_dir.join("schedule.json"))
                .map_err(|err| format!("cannot read the schedule: {err}"))?,
        )
        .map_err(|err| err.to_string())?;
        if &stored != schedule {
            return Err(format!("{} holds a run of another schedule; resume it with that one or start in a new folder", run_dir.display()));
        }
        let state: RunState = serde_json::from_str(
            &std::fs::read_to_string(dir.join("state.json"))
                .map_err(|err| format!("cannot read the run state: {err}"))?,
        )
        .map_err(|err| err.to_string())?;
        if state.tasks != tasks_fingerprint(tasks) {
            return Err(format!(
                "{} holds a run on other tasks; start in a new folder",
                run_dir.display()
            ));
        }
        if (state.threads, state.cpu_capability.clone()) != libtorch_setting() {
            return Err(format!("the run was saved with {} libtorch threads and CPU kernels {}; resume it under the same setting", state.threads, state.cpu_capability));
        }
        model
            .vs
            .load(dir.join("model.safetensors"))
            .map_err(|err| format!("cannot load the saved weights: {err}"))?;
        opt.load(&dir)?;
        if let Some(algorithm_state) = &state.algorithm {
            algorithm.restore(algorithm_state)?;
        }
        // The metrics of the iterations done (one line per pass of the loop), and nothing after them.
        let text = std::fs::read_to_string(run_dir.join("metrics.jsonl"))
            .map_err(|err| format!("cannot read the metrics: {err}"))?;
        let lines: Vec<&str> = text.lines().take(next).collect();
        if lines.len() < next {
            return Err(format!(
                "the metrics hold {} lines, the state {next} iterations",
                lines.len()
            ));
        }
        std::fs::write(
            run_dir.join("metrics.jsonl"),
            lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
        )
        .map_err(|err| format!("cannot write the metrics: {err}"))?;
        done = lines
            .iter()
            .map(|l| serde_json::from_str(l).map_err(|err| format!("a metrics line: {err}")))
            .collect::<Result<_, String>>()?;
    }
    let (seed, task_ids) = (schedule.seed, tasks_fingerprint(tasks));
    let mut after = |iterations: usize,
                     model: &TinyAgent,
                     opt: &AdamW,
                     algorithm: &dyn Algorithm|
     -> Result<bool, String> {
        if resumable.every == 0 || !iterations.is_multiple_of(resumable.every) {
            return Ok(false);
        }
        let (threads, cpu_capability) = libtorch_setting();
        let state = RunState {
            next_iteration: iterations,
            seed,
            streams: ["tasks", "sampling", "shuffle", "evaluation"]
                .map(String::from)
                .to_vec(),
            algorithm: algorithm.state(),
            tasks: task_ids.clone(),
            threads,
            cpu_capability,
        };
        // Written beside, then renamed: a kill leaves a whole state or none.
        let part = run_dir.join(format!("state-{iterations:04}.part"));
        let _ = std::fs::remove_dir_all(&part);
        std::fs::create_dir_all(&part)
            .map_err(|err| format!("cannot create {}: {err}", part.display()))?;
        model.save(&part.join("model.safetensors"))?;
        opt.save(&part)?;
        crate::book::kill_point(&format!("saving state {iterations}"));
        std::fs::write(
            part.join("state.json"),
            serde_json::to_string_pretty(&state).map_err(|err| err.to_string())?,
        )
        .map_err(|err| format!("cannot write the run state: {err}"))?;
        std::fs::rename(&part, run_dir.join(format!("state-{iterations:04}")))
            .map_err(|err| format!("cannot complete the state: {err}"))?;
        // Only the newest state is needed (about three copies of the weights each).
        for entry in std::fs::read_dir(run_dir)
            .map_err(|err| err.to_string())?
            .filter_map(|entry| entry.ok())
        {
            let older = entry
                .file_name()
                .to_str()
                .and_then(|name| name.strip_prefix("state-")?.parse::<usize>().ok())
                .is_some_and(|n| n < iterations);
            if older {
                std::fs::remove_dir_all(entry.path())
                    .map_err(|err| format!("cannot remove an old state: {err}"))?;
            }
        }
        Ok(resumable.stop_after == Some(iterations))
    };
    run_loop(
        model, bpe, tasks, schedule, algorithm, run_dir, &mut opt, done, &mut after,
    )
}
// ANCHOR_END: resumable

// ANCHOR: parallel
/// A run to make: its schedule and its algorithm.
pub type Run = (Schedule, Box<dyn Algorithm + Send>);

/// Train a fresh copy of the base model for each run, `threads` runs at a
/// time. Each run is single-threaded inside libtorch and has its own streams,
/// so two at a time use two cores and print what one after the other would.
/// Run `name` writes to `root/name` (spaces and dots become `_`). Within one
/// test command, a notebook reuses its chapter's finished runs ([`train_or_reuse`]).
pub fn train_from_base(
    gym: &crate::gym::Gym,
    runs: Vec<Run>,
    threads: usize,
    root: &Path,
) -> Vec<Vec<TrainRecord>> {
    crate::pretrain::base_model(&gym.train); // on disk before the threads load it
    train_from(&crate::pretrain::base_dir(), gym, runs, threads, root)
}

/// [`train_from_base`], starting every run from the model stored in `start`
/// (by [`crate::pretrain::save_model`]) instead of the base model.
pub fn train_from(
    start: &Path,
    gym: &crate::gym::Gym,
    runs: Vec<Run>,
    threads: usize,
    root: &Path,
) -> Vec<Vec<TrainRecord>> {
    train_from_each(
        gym,
        runs.into_iter()
            .map(|run| (start.to_path_buf(), run))
            .collect(),
        threads,
        root,
    )
}

/// [`train_from`] with a starting model of its own for each run (Chapter 15
/// starts RL from models fine-tuned in different ways).
pub fn train_from_each(
    gym: &crate::gym::Gym,
    runs: Vec<(PathBuf, Run)>,
    threads: usize,
    root: &Path,
) -> Vec<Vec<TrainRecord>> {
    side_by_side(runs, threads, |(start, (schedule, mut algorithm))| {
        let dir: PathBuf = root.join(schedule.name.replace([' ', '.'], "_"));
        let outcome = crate::pretrain::load_model(&start).and_then(|(bpe, mut model)| {
            train_or_reuse(
                &mut model,
                &bpe,
                (&gym.train, &gym.held_out),
                &schedule,
                algorithm.as_mut(),
                &dir,
            )
        });
        outcome.unwrap_or_else(|err| panic!("run {}: {err}", schedule.name))
    })
}

/// `job` applied to every item, `threads` items at a time on threads of
/// their own; the results in the items' order. With libtorch on one thread
/// per job and a seed per item, the results do not depend on `threads`.
pub fn side_by_side<I: Send, O: Send>(
    items: Vec<I>,
    threads: usize,
    job: impl Fn(I) -> O + Sync,
) -> Vec<O> {
    let count = items.len();
    let queue = std::sync::Mutex::new(items.into_iter().enumerate().rev().collect::<Vec<_>>()); // popped in order
    let results = std::sync::Mutex::new(Vec::with_capacity(count));
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let next = queue.lock().expect("the queue").pop();
                let Some((i, item)) = next else { break };
                let out = job(item);
                results.lock().expect("the results").push((i, out));
            });
        }
    });
    let mut results = results.into_inner().expect("the results");
    assert_eq!(results.len(), count, "a job did not finish");
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, out)| out).collect()
}

/// The held-out success of every run at `iteration`.
pub fn held_out_at(runs: &[Vec<TrainRecord>], iteration: usize) -> Vec<f64> {
    runs.iter()
        .map(|run| {
            run[iteration]
                .held_out_success
                .expect("an evaluation at that iteration")
        })
        .collect()
}
// ANCHOR_END: parallel

/// A finished run stored in `cache` under `key` is copied back into `dir`
/// instead of training again (see [`crate::book::reuse`]); otherwise `train`
/// runs and what it wrote to `dir` is stored.
fn reuse_or(
    cache: Option<&Path>,
    key: &str,
    dir: &Path,
    train: impl FnOnce() -> Result<Vec<TrainRecord>, String>,
) -> Result<Vec<TrainRecord>, String> {
    let write = |made: &Result<Vec<TrainRecord>, String>, stored: &Path| match made {
        Ok(_) => copy_dir(dir, &stored.join("run")),
        Err(err) => Err(err.clone()),
    };
    let read = |stored: &Path| {
        let _ = std::fs::remove_dir_all(dir);
        copy_dir(&stored.join("run"), dir)?;
        read_records(&dir.join("metrics.jsonl")).map(Ok)
    };
    crate::book::reuse(cache, key, train, write, read)?
}

/// What names a run of [`train`]: its folder, its schedule, the algorithm's
/// settings and the weights it starts from.
fn run_key(
    model: &TinyAgent,
    schedule: &Schedule,
    algorithm: &dyn Algorithm,
    run_dir: &Path,
) -> Result<String, String> {
    let schedule_json = serde_json::to_string(schedule).map_err(|err| err.to_string())?;
    Ok(format!(
        "train\n{}\n{schedule_json}\n{}\n{:016x}",
        run_dir.display(),
        algorithm.config_json().unwrap_or_default(),
        model.fingerprint()
    ))
}

/// [`train`], or, within the test command, the same run read back: the
/// notebook stage reads the chapter stage's finished runs instead of training
/// them again (see [`crate::book::reuse`]); the model ends with the run's final weights either way.
pub fn train_or_reuse(
    model: &mut TinyAgent,
    bpe: &Bpe,
    tasks: (&[Task], &[Task]),
    schedule: &Schedule,
    algorithm: &mut dyn Algorithm,
    run_dir: &Path,
) -> Result<Vec<TrainRecord>, String> {
    let key = run_key(model, schedule, algorithm, run_dir)?;
    let mut trained = false;
    let records = reuse_or(crate::book::run_cache().as_deref(), &key, run_dir, || {
        trained = true;
        train(model, bpe, tasks, schedule, algorithm, run_dir)
    })?;
    if !trained {
        model
            .vs
            .load(run_dir.join("final.safetensors"))
            .map_err(|err| format!("cannot load the stored run's final weights: {err}"))?;
    }
    Ok(records)
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|err| format!("cannot create {}: {err}", to.display()))?;
    for entry in
        std::fs::read_dir(from).map_err(|err| format!("cannot read {}: {err}", from.display()))?
    {
        let path = entry.map_err(|err| err.to_string())?.path();
        let target = to.join(path.file_name().expect("a file name"));
        if path.is_dir() {
            copy_dir(&path, &target)?;
        } else {
            std::fs::copy(&path, &target)
                .map_err(|err| format!("cannot copy {}: {err}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mdp::{repair_mdp, value_iteration, Verifier, BUGGY};
    use crate::rollout::play;

    #[test]
    fn reinforce_is_unbiased_and_its_error_shrinks_like_one_over_root_n() {
        let (theta, p) = ([0.5, -0.2, 0.1, 0.0], [0.9, 0.2, 0.5, 0.1]);
        let exact = exact_gradient(&theta, &p);
        // Closed form: dJ/dθ_a = π_a (p_a − J).
        let pi = crate::bandit::softmax(&theta);
        let j: f64 = pi.iter().zip(&p).map(|(a, b)| a * b).sum();
        for a in 0..4 {
            assert!((exact[a] - pi[a] * (p[a] - j)).abs() < 1e-12);
        }
        let mut rng = StdRng::seed_from_u64(0);
        let rmse = |n: usize, rng: &mut StdRng| -> f64 {
            let reps = 400;
            let total: f64 = (0..reps)
                .map(|_| {
                    reinforce_gradient(&theta, &p, n, rng)
                        .iter()
                        .zip(&exact)
                        .map(|(g, e)| (g - e).powi(2))
                        .sum::<f64>()
                })
                .sum();
            (total / reps as f64).sqrt()
        };
        let (small, large) = (rmse(16, &mut rng), rmse(256, &mut rng));
        // 16 times the samples: a quarter of the error, within sampling noise.
        assert!((small / large - 4.0).abs() < 0.6, "{small} / {large}");
        // Unbiased: the mean of many estimates approaches the exact gradient.
        let mean: Vec<f64> = (0..4)
            .map(|a| {
                (0..2000)
                    .map(|_| reinforce_gradient(&theta, &p, 8, &mut rng)[a])
                    .sum::<f64>()
                    / 2000.0
            })
            .collect();
        for a in 0..4 {
            assert!((mean[a] - exact[a]).abs() < 0.02, "{mean:?} vs {exact:?}");
        }
    }

    #[test]
    fn tabular_reinforce_approaches_the_optimal_value() {
        let mdp = repair_mdp(Verifier::Hidden);
        let (v_star, _, _) = value_iteration(&mdp, 0.9, 1e-12);
        let values = tabular_reinforce(&mdp, BUGGY, 0.9, 0.5, 16, 300, 0);
        assert!(
            values[300] > values[0] + 0.3,
            "{} -> {}",
            values[0],
            values[300]
        );
        assert!(
            v_star[BUGGY] - values[300] < 0.05,
            "{} vs V* {}",
            values[300],
            v_star[BUGGY]
        );
    }

    #[test]
    fn the_masked_loss_gives_tool_tokens_no_gradient() {
        let logp = Tensor::from_slice(&[-1.0f64, -2.0, -0.5, -0.1, -3.0, -0.2, -0.7, -1.5])
            .view([2, 4])
            .set_requires_grad(true);
        let mask = Tensor::from_slice(&[0.0f64, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]).view([2, 4]);
        let weights = per_token(&[1.0, 0.5], &mask);
        reinforce_loss(&logp, &mask, &weights).backward();
        let grad = Vec::<f64>::try_from(logp.grad().view([-1])).unwrap();
        let expected = [0.0, -1.0 / 3.0, -1.0 / 3.0, 0.0, 0.0, 0.0, -0.5 / 3.0, 0.0];
        for (g, e) in grad.iter().zip(expected) {
            assert!((g - e).abs() < 1e-7, "{grad:?}");
        }
    }

    #[test]
    fn forward_agrees_with_the_model_and_chapter_3() {
        let _turn = crate::book::seeded(0);
        let config = crate::tinyagent::Config {
            vocab: 32,
            n_ctx: 16,
            d_model: 16,
            n_layer: 1,
            n_head: 2,
        };
        let model = TinyAgent::new(config, tch::Device::Cpu);
        use crate::episode::Owner;
        let trajectory = Trajectory {
            task: 0,
            ids: vec![3, 5, 7, 2, 9, 4],
            owners: vec![
                Owner::Prompt,
                Owner::Prompt,
                Owner::Policy,
                Owner::Policy,
                Owner::Env,
                Owner::Policy,
            ],
            logprobs: vec![0.0; 6],
            reward: 1.0,
            info: Default::default(),
        };
        let batch = collate(&[trajectory], tch::Device::Cpu);
        let Forward {
            logp,
            entropy,
            hidden,
            ..
        } = forward(&model, &batch);
        let expected = crate::trajectory::policy_logprobs(&model, &batch) * &batch.mask;
        assert!((logp - expected).abs().max().double_value(&[]) < 1e-6);
        let logits = model.logits(&batch.ids, &batch.valid); // [1, 6, V]
        let h = Tensor::cat(
            &[
                Tensor::zeros([1, 1], (REAL, tch::Device::Cpu)),
                crate::tinyagent::entropy(&logits.narrow(1, 0, 5)),
            ],
            1,
        ); // [1, 6]
        assert!((entropy - h * &batch.mask).abs().max().double_value(&[]) < 1e-6);
        assert_eq!(hidden.size(), vec![1, 6, 16]);
    }

    #[test]
    fn a_stored_run_is_copied_back_only_for_the_same_folder_schedule_config_and_start() {
        let root = std::env::temp_dir().join(format!("agentrl-reuse-{}", std::process::id()));
        let (cache, dir) = (root.join("cache"), root.join("runs/a"));
        let trained = std::cell::Cell::new(0);
        let fake = |dir: &Path, value: f64| {
            trained.set(trained.get() + 1);
            std::fs::create_dir_all(dir).unwrap();
            let record = TrainRecord {
                iteration: 0,
                held_out_success: Some(value),
                ..TrainRecord::default()
            };
            std::fs::write(
                dir.join("metrics.jsonl"),
                serde_json::to_string(&record).unwrap() + "\n",
            )
            .unwrap();
            std::fs::write(dir.join("final.safetensors"), b"weights").unwrap();
            Ok(vec![record])
        };
        let gym = crate::gym::Gym::standard();
        let bpe = small_tokenizer(&gym.train[..4]);
        let model = small_model(&bpe);
        let schedule = Schedule::reinforce();
        let key = |schedule: &Schedule, model: &TinyAgent| {
            run_key(model, schedule, &Reinforce::plain(), &dir).unwrap()
        };
        let first = reuse_or(Some(&cache), &key(&schedule, &model), &dir, || {
            fake(&dir, 0.1 + 0.2)
        })
        .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let again = reuse_or(Some(&cache), &key(&schedule, &model), &dir, || {
            fake(&dir, 9.0)
        })
        .unwrap();
        assert_eq!(
            (trained.get(), &again),
            (1, &first),
            "the same run is copied back, exactly"
        );
        assert_eq!(
            std::fs::read(dir.join("final.safetensors")).unwrap(),
            b"weights"
        );
        let other = reuse_or(
            Some(&cache),
            &key(&schedule.clone().seeded(1), &model),
            &dir,
            || fake(&dir, 0.5),
        )
        .unwrap();
        assert_eq!(
            (trained.get(), other[0].held_out_success),
            (2, Some(0.5)),
            "another seed trains"
        );
        let other_start = small_model(&bpe);
        let _ = tch::no_grad(|| other_start.vs.trainable_variables()[0].get(0).fill_(0.25));
        let moved = reuse_or(Some(&cache), &key(&schedule, &other_start), &dir, || {
            fake(&dir, 0.6)
        })
        .unwrap();
        assert_eq!(
            (trained.get(), moved[0].held_out_success),
            (3, Some(0.6)),
            "other starting weights train"
        );
        let uncached = reuse_or(None, &key(&schedule, &model), &dir, || fake(&dir, 0.7)).unwrap();
        assert_eq!(
            (trained.get(), uncached[0].held_out_success),
            (4, Some(0.7)),
            "without a cache every run trains"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// An algorithm that shuffles its own way: it keeps only the first half of each group.
    struct HalfGroups;
    impl Algorithm for HalfGroups {
        fn advantages(
            &mut self,
            _model: &TinyAgent,
            _trajectories: &[Trajectory],
            rollout: &Batch,
            rewards: &[f64],
            _group: usize,
            _report: &mut Report,
        ) -> Tensor {
            per_token(
                &rewards.iter().map(|r| r - 0.5).collect::<Vec<_>>(),
                &rollout.mask,
            )
        }
        fn keep(&mut self, played: &[Played], group: usize, _report: &mut Report) -> Vec<usize> {
            (0..played.len())
                .filter(|i| i % group < group / 2)
                .collect()
        }
        fn loss(
            &mut self,
            forward: &Forward,
            minibatch: &Batch,
            advantages: &Tensor,
            _rows: &[usize],
            _report: &mut Report,
        ) -> Tensor {
            reinforce_loss(&forward.logp, &minibatch.mask, advantages)
        }
    }

    /// A tokenizer for `tasks` (20 scripted episodes each).
    fn small_tokenizer(tasks: &[crate::gym::Task]) -> Bpe {
        let transcripts = crate::pretrain::corpus(tasks, 20, 0);
        Bpe::train(transcripts.iter().map(|t| crate::tokenizer::render(t)), 400).unwrap()
    }

    /// The same small untrained model every time.
    fn small_model(bpe: &Bpe) -> TinyAgent {
        let _turn = crate::book::seeded(0);
        TinyAgent::new(
            crate::tinyagent::Config {
                vocab: bpe.vocab_size() as i64,
                n_ctx: 768,
                d_model: 16,
                n_layer: 1,
                n_head: 2,
            },
            tch::Device::Cpu,
        )
    }

    #[test]
    fn with_a_constant_learning_rate_a_shorter_run_is_a_prefix_of_a_longer_one() {
        let gym = crate::gym::Gym::standard();
        let (train_tasks, held_out) = (&gym.train[..12], &gym.held_out[..3]);
        let bpe = small_tokenizer(train_tasks);
        let fresh = || small_model(&bpe);
        let root = std::env::temp_dir().join(format!("agentrl-prefix-{}", std::process::id()));
        let long = Schedule {
            name: "long".into(),
            iterations: 4,
            tasks: 3,
            group: 2,
            lr: 1e-2,
            lr_end: 1e-2,
            eval_every: 2,
            eval_episodes: 1,
            seed: 7,
            ..Schedule::reinforce()
        };
        // Half the iterations, evaluated on another schedule: evaluation draws from its own stream.
        let short = Schedule {
            name: "short".into(),
            iterations: 2,
            eval_every: 1,
            ..long.clone()
        };
        let run_long = train(
            &mut fresh(),
            &bpe,
            (train_tasks, held_out),
            &long,
            &mut Reinforce::plain(),
            &root.join("long"),
        )
        .unwrap();
        let run_short = train(
            &mut fresh(),
            &bpe,
            (train_tasks, held_out),
            &short,
            &mut Reinforce::plain(),
            &root.join("short"),
        )
        .unwrap();
        for (a, b) in run_long.iter().zip(&run_short).take(2) {
            assert_eq!(
                (&a.tasks, a.train_success, a.loss, a.generated_tokens),
                (&b.tasks, b.train_success, b.loss, b.generated_tokens),
                "iteration {}",
                a.iteration
            );
        }
        assert_eq!(run_long[2].held_out_success, run_short[2].held_out_success);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_written_out_adamw_follows_libtorchs_and_its_state_round_trips() {
        let bpe = small_tokenizer(&crate::gym::Gym::standard().train[..4]);
        let (ours, theirs) = (small_model(&bpe), small_model(&bpe));
        let ids = Tensor::from_slice(&[1i64, 5, 9, 3, 7, 2]).view([1, 6]);
        let valid = Tensor::ones([1, 6], (Kind::Bool, tch::Device::Cpu));
        let loss = |m: &TinyAgent| m.token_logprobs(&ids, &valid).sum(REAL).neg();
        let mut adamw = AdamW::new(&ours.vs, 1e-2);
        let mut libtorch = nn::AdamW::default().build(&theirs.vs, 1e-2).unwrap();
        for _ in 0..20 {
            Optimiser::zero_grad(&mut adamw);
            loss(&ours).backward();
            Optimiser::step(&mut adamw);
            Optimiser::zero_grad(&mut libtorch);
            loss(&theirs).backward();
            Optimiser::step(&mut libtorch);
        }
        // Not bit for bit (libtorch fuses some multiply-adds): within 10⁻¹⁰, a
        // hundred-millionth of one step's size (about the learning rate).
        let ours_w = ours.vs.variables();
        for (name, theirs_w) in theirs.vs.variables() {
            let gap = (&ours_w[&name] - &theirs_w).abs().max().double_value(&[]);
            assert!(gap < 1e-10, "{name}: {gap:e} after 20 steps");
        }
        // The state written and read back gives the same next step.
        let dir = std::env::temp_dir().join(format!("agentrl-adamw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        adamw.save(&dir).unwrap();
        let copy = copy_model(&ours, None);
        let mut restored = AdamW::new(&copy.vs, 1e-2);
        restored.load(&dir).unwrap();
        for (model, opt) in [(&ours, &mut adamw), (&copy, &mut restored)] {
            Optimiser::zero_grad(opt);
            loss(model).backward();
            Optimiser::step(opt);
        }
        let copy_w = copy.vs.variables();
        for (name, w) in ours.vs.variables() {
            assert!(w.equal(&copy_w[&name]), "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An algorithm that kills its process (SIGKILL) at its `at`-th call of
    /// `advantages`: in the middle of an iteration, after the rollout and
    /// before the update.
    struct KilledMidIteration {
        inner: Reinforce,
        calls: usize,
        at: Option<usize>,
    }

    impl Algorithm for KilledMidIteration {
        fn advantages(
            &mut self,
            model: &TinyAgent,
            trajectories: &[Trajectory],
            rollout: &Batch,
            rewards: &[f64],
            group: usize,
            report: &mut Report,
        ) -> Tensor {
            self.calls += 1;
            if self.at == Some(self.calls) {
                // SAFETY: getpid and kill have no preconditions.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
            }
            self.inner
                .advantages(model, trajectories, rollout, rewards, group, report)
        }

        fn loss(
            &mut self,
            forward: &Forward,
            minibatch: &Batch,
            advantages: &Tensor,
            rows: &[usize],
            report: &mut Report,
        ) -> Tensor {
            self.inner
                .loss(forward, minibatch, advantages, rows, report)
        }

        fn rewards(
            &mut self,
            played: &[Played],
            trajectories: &[Trajectory],
            report: &mut Report,
        ) -> Vec<f64> {
            self.inner.rewards(played, trajectories, report)
        }
    }

    /// Every episode weighted ±½ (an untrained model rarely succeeds, and zero
    /// rewards would leave the weights, and so the resume tests, where they started).
    fn half_weighted() -> Reinforce {
        Reinforce::with(|rewards| rewards.iter().map(|r| r - 0.5).collect())
    }

    /// The small run of the resume tests: its tokenizer, tasks and schedule.
    fn small_run() -> (Bpe, Vec<Task>, Vec<Task>, Schedule) {
        let gym = crate::gym::Gym::standard();
        let (train_tasks, held_out) = (gym.train[..12].to_vec(), gym.held_out[..3].to_vec());
        let bpe = small_tokenizer(&train_tasks);
        let schedule = Schedule {
            name: "resume".into(),
            iterations: 5,
            tasks: 3,
            group: 2,
            lr: 3e-2,
            lr_end: 1e-2,
            epochs: 2,
            minibatches: 2,
            eval_every: 2,
            eval_episodes: 1,
            seed: 11,
            ..Schedule::reinforce()
        };
        (bpe, train_tasks, held_out, schedule)
    }

    /// The process that the kill test starts (and kills): the small run in the
    /// folder `AGENTRL_RESUME_CHILD` names, saving every iteration; killed at
    /// the `AGENTRL_KILL_ITERATION`-th rollout of this process if that is set,
    /// and wherever `AGENTRL_KILL_AT` names (`crate::book::kill_point`). A
    /// finished run writes its final weights' fingerprint.
    #[test]
    #[ignore = "started by a_run_killed_mid_save_and_mid_iteration_resumes_bit_for_bit"]
    fn resume_child() {
        let Ok(dir) = std::env::var("AGENTRL_RESUME_CHILD") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        let (bpe, train_tasks, held_out, schedule) = small_run();
        if std::env::var("AGENTRL_RESUME_SAVE").is_ok() {
            // A model of the base architecture, as the warm starts are.
            let _turn = crate::book::seeded(0);
            let model = TinyAgent::new(
                crate::tinyagent::Config {
                    vocab: bpe.vocab_size() as i64,
                    ..crate::pretrain::BASE.model
                },
                tch::Device::Cpu,
            );
            crate::pretrain::save_model(&dir, &bpe, &model).unwrap();
            return;
        }
        let mut algorithm = KilledMidIteration {
            inner: half_weighted(),
            calls: 0,
            at: std::env::var("AGENTRL_KILL_ITERATION")
                .ok()
                .and_then(|v| v.parse().ok()),
        };
        let mut model = small_model(&bpe);
        train_resumable(
            &mut model,
            &bpe,
            (&train_tasks, &held_out),
            &schedule,
            &mut algorithm,
            &dir,
            &Resumable {
                every: 1,
                stop_after: None,
            },
        )
        .unwrap();
        std::fs::write(
            dir.join("fingerprint.txt"),
            format!("{:016x}", model.fingerprint()),
        )
        .unwrap();
    }

    #[test]
    fn a_run_killed_mid_save_and_mid_iteration_resumes_bit_for_bit() {
        use std::os::unix::process::ExitStatusExt;
        let root = std::env::temp_dir().join(format!("agentrl-kill-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // One process of the small run in `dir`, with these variables; how it ended.
        let child = |dir: &Path, vars: &[(&str, &str)]| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--ignored",
                    "--exact",
                    "pg::tests::resume_child",
                    "--test-threads=1",
                ])
                .env("AGENTRL_RESUME_CHILD", dir)
                .envs(vars.iter().copied())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap()
        };
        let whole = root.join("whole");
        assert!(child(&whole, &[]).success());
        // Killed while saving the state after iteration 2 (weights and
        // moments written, the run state not): the half-written state is not taken.
        let killed = root.join("killed");
        let status = child(&killed, &[("AGENTRL_KILL_AT", "saving state 2")]);
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        assert!(killed.join("state-0002.part").exists());
        assert_eq!(latest_state(&killed).map(|(n, _)| n), Some(1));
        // Resumed from iteration 1, and killed in the middle of its second
        // rollout (iteration 3, after the rollout, before the update).
        let status = child(&killed, &[("AGENTRL_KILL_ITERATION", "2")]);
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        assert_eq!(latest_state(&killed).map(|(n, _)| n), Some(2));
        // Resumed again, to the end: the same weights and metrics, bit for bit.
        assert!(child(&killed, &[]).success());
        let read = |dir: &Path, name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(
            read(&killed, "fingerprint.txt"),
            read(&whole, "fingerprint.txt")
        );
        let untimed = |dir: &Path| {
            read_records(&dir.join("metrics.jsonl"))
                .unwrap()
                .into_iter()
                .map(|r| TrainRecord { time: None, ..r })
                .collect::<Vec<_>>()
        };
        assert_eq!(untimed(&killed), untimed(&whole));
        assert_eq!(
            untimed(&whole).len(),
            6,
            "five iterations and the last evaluation"
        );
        // A model killed while being saved (both files written beside their
        // places, nothing renamed) is not taken for a saved one; saved again, it is.
        let saved = root.join("saved");
        let status = child(
            &saved,
            &[
                ("AGENTRL_RESUME_SAVE", "1"),
                ("AGENTRL_KILL_AT", "saving a model"),
            ],
        );
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        assert!(crate::pretrain::saved_model(&saved).is_err());
        assert!(child(&saved, &[("AGENTRL_RESUME_SAVE", "1")]).success());
        assert!(crate::pretrain::saved_model(&saved).is_ok());
        // A whole model whose weights were changed afterwards is not taken either.
        std::fs::write(
            saved.join(crate::pretrain::FINGERPRINT_FILE),
            "0000000000000000\n",
        )
        .unwrap();
        assert!(crate::pretrain::saved_model(&saved).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn clipping_and_weight_decay_are_settings_of_the_loop() {
        // Clipping keeps the gradient's direction and bounds its length.
        let (bpe, train_tasks, held_out, schedule) = small_run();
        let model = small_model(&bpe);
        let ids = Tensor::from_slice(&[1i64, 2, 3, 4]).view([1, 4]);
        let valid = Tensor::ones([1, 4], (Kind::Bool, tch::Device::Cpu));
        model.logits(&ids, &valid).square().sum(REAL).backward();
        let before: Vec<Tensor> = model
            .vs
            .trainable_variables()
            .iter()
            .map(|v| v.grad().copy())
            .collect();
        let norm = gradient_norm(&model);
        clip_gradient(&model, norm, norm / 4.0);
        assert!((gradient_norm(&model) - norm / 4.0).abs() < 1e-9 * norm);
        for (v, g) in model.vs.trainable_variables().iter().zip(&before) {
            assert!((v.grad() * 4.0 - g).abs().max().double_value(&[]) < 1e-6);
        }
        clip_gradient(&model, norm / 4.0, norm); // below the bound: left alone
        assert!((gradient_norm(&model) - norm / 4.0).abs() < 1e-9 * norm);

        // In the loop: a bound below the gradients' norms changes the run, a bound above them
        // changes nothing, and so does the weight decay; the recorded norm is the one before clipping.
        let root = std::env::temp_dir().join(format!("agentrl-clip-{}", std::process::id()));
        let tasks = (&train_tasks[..], &held_out[..]);
        let run = |schedule: &Schedule, name: &str| {
            let mut model = small_model(&bpe);
            let records = train(
                &mut model,
                &bpe,
                tasks,
                schedule,
                &mut half_weighted(),
                &root.join(name),
            )
            .unwrap();
            (records, model.fingerprint())
        };
        let one = Schedule {
            iterations: 1,
            ..schedule.clone()
        };
        let (plain, plain_weights) = run(&one, "plain");
        let bound = plain[0].grad_norm.unwrap() / 10.0;
        let (clipped, clipped_weights) = run(
            &Schedule {
                max_grad_norm: Some(bound),
                ..one.clone()
            },
            "clipped",
        );
        assert_ne!(clipped_weights, plain_weights);
        assert!(
            clipped[0].grad_norm.unwrap() > bound,
            "the norm before clipping is recorded"
        );
        let (_, loose_weights) = run(
            &Schedule {
                max_grad_norm: Some(1e9),
                ..one.clone()
            },
            "loose",
        );
        assert_eq!(
            loose_weights, plain_weights,
            "a bound never reached changes nothing"
        );
        let (_, undecayed) = run(
            &Schedule {
                weight_decay: 0.0,
                ..one.clone()
            },
            "undecayed",
        );
        assert_ne!(undecayed, plain_weights);
        // With two epochs, each training line keeps the report as it stood after each epoch.
        assert_eq!(one.epochs, 2);
        assert_eq!(plain[0].per_epoch.len(), 2);
        for (key, value) in &plain[0].per_epoch[1] {
            assert_eq!(plain[0].extra.get(key), Some(value), "{key}");
        }
        assert!(
            plain[1].per_epoch.is_empty(),
            "the last line only evaluates"
        );
        assert!(!serde_json::to_string(&plain[1])
            .unwrap()
            .contains("per_epoch"));
        // Both are written with the schedule only when they differ from the book's defaults.
        let json = serde_json::to_string(&one).unwrap();
        assert!(!json.contains("max_grad_norm") && !json.contains("weight_decay"));
        let back: Schedule = serde_json::from_str(&json).unwrap();
        assert_eq!(
            (back.max_grad_norm, back.weight_decay),
            (None, WEIGHT_DECAY)
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_run_stopped_and_resumed_ends_with_the_weights_and_metrics_of_one_never_stopped() {
        let algorithm = half_weighted;
        let (bpe, train_tasks, held_out, schedule) = small_run();
        let root = std::env::temp_dir().join(format!("agentrl-resume-{}", std::process::id()));
        let tasks = (&train_tasks[..], &held_out[..]);
        let mut whole = small_model(&bpe);
        let never = train_resumable(
            &mut whole,
            &bpe,
            tasks,
            &schedule,
            &mut algorithm(),
            &root.join("whole"),
            &Resumable {
                every: 1,
                stop_after: None,
            },
        )
        .unwrap();
        // Killed after 3 iterations, then started again from fresh weights in the same folder.
        let dir = root.join("stopped");
        let stopped = train_resumable(
            &mut small_model(&bpe),
            &bpe,
            tasks,
            &schedule,
            &mut algorithm(),
            &dir,
            &Resumable {
                every: 1,
                stop_after: Some(3),
            },
        )
        .unwrap();
        assert_eq!(
            stopped.len(),
            3,
            "three metrics lines when stopped after three iterations"
        );
        assert_eq!(latest_state(&dir).map(|(n, _)| n), Some(3));
        assert!(!dir.join("final.safetensors").exists());
        let mut resumed_model = small_model(&bpe);
        drop(crate::book::seeded(12345)); // libtorch's generator elsewhere: the loop must not depend on it
        let resumed = train_resumable(
            &mut resumed_model,
            &bpe,
            tasks,
            &schedule,
            &mut algorithm(),
            &dir,
            &Resumable {
                every: 1,
                stop_after: None,
            },
        )
        .unwrap();
        let untimed = |records: &[TrainRecord]| {
            records
                .iter()
                .map(|r| TrainRecord {
                    time: None,
                    ..r.clone()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(untimed(&resumed), untimed(&never));
        let start_w = small_model(&bpe).vs.variables();
        let whole_w = whole.vs.variables();
        assert!(
            whole_w.iter().any(|(name, w)| !w.equal(&start_w[name])),
            "training moved no weight"
        );
        for (name, w) in resumed_model.vs.variables() {
            assert!(w.equal(&whole_w[&name]), "{name} differs after resuming");
        }
        let lines = |d: &Path| {
            std::fs::read_to_string(d.join("metrics.jsonl"))
                .unwrap()
                .lines()
                .count()
        };
        assert_eq!(lines(&dir), lines(&root.join("whole")));
        // Another schedule in the same folder is refused, not mixed in.
        let other = Schedule {
            lr: 1e-3,
            ..schedule.clone()
        };
        assert!(train_resumable(
            &mut small_model(&bpe),
            &bpe,
            tasks,
            &other,
            &mut algorithm(),
            &dir,
            &Resumable::default()
        )
        .is_err());
        // So is the same schedule on other tasks.
        assert!(train_resumable(
            &mut small_model(&bpe),
            &bpe,
            (&train_tasks[1..], &held_out[..]),
            &schedule,
            &mut algorithm(),
            &dir,
            &Resumable::default()
        )
        .is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_stale_run_plays_iteration_i_with_the_weights_of_version_i_minus_staleness() {
        let gym = crate::gym::Gym::standard();
        let (train_tasks, held_out) = (&gym.train[..12], &gym.held_out[..3]);
        let bpe = small_tokenizer(train_tasks);
        let root = std::env::temp_dir().join(format!("agentrl-stale-{}", std::process::id()));
        let schedule = Schedule {
            name: "stale".into(),
            iterations: 5,
            tasks: 3,
            group: 2,
            lr: 3e-2,
            lr_end: 3e-2,
            eval_every: 5,
            eval_episodes: 1,
            checkpoint_every: 1,
            seed: 3,
            staleness: 2,
            ..Schedule::reinforce()
        };
        // Every episode gets a non-zero weight (failures push down), so the weights move every iteration.
        let mut algorithm = Reinforce::with(|group| group.iter().map(|r| r - 0.5).collect());
        let run = train(
            &mut small_model(&bpe),
            &bpe,
            (train_tasks, held_out),
            &schedule,
            &mut algorithm,
            &root,
        )
        .unwrap();
        // Replay each iteration's rollout by hand with the weights saved after `version` iterations.
        let streams = Streams::new(schedule.seed);
        let replay = |iteration: usize, version: usize| {
            let mut model = small_model(&bpe);
            if version > 0 {
                model
                    .vs
                    .load(root.join(format!("iteration-{version:04}.safetensors")))
                    .unwrap();
            }
            let picks = draw_tasks(
                train_tasks.len(),
                schedule.tasks,
                schedule.group,
                &mut streams.tasks(iteration),
            );
            let policy = LmPolicy {
                model: &model,
                bpe: &bpe,
                sampling: Sampling::PURE,
                max_action_tokens: 16,
            };
            let played = play(
                &policy,
                train_tasks,
                &picks,
                crate::gym::MAX_TURNS,
                &mut streams.sampling(iteration),
            );
            let tokens: Vec<u32> = played.iter().flat_map(|p| p.ids()).collect();
            let success = played.iter().map(|p| p.reward).sum::<f64>() / played.len() as f64;
            (
                played
                    .iter()
                    .map(|p| p.segments.iter().map(|s| s.logprobs.len()).sum::<usize>())
                    .sum::<usize>(),
                tokens,
                success,
            )
        };
        for i in 0..schedule.iterations {
            let (generated, _, success) = replay(i, i.saturating_sub(2));
            assert_eq!(
                (run[i].generated_tokens, run[i].train_success),
                (Some(generated), Some(success)),
                "iteration {i}"
            );
        }
        // The check can fail: the newest weights would have played other episodes.
        assert_ne!(
            replay(4, 2).1,
            replay(4, 4).1,
            "versions 2 and 4 play the same episodes: the test would prove nothing"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn two_variants_with_one_seed_draw_the_same_tasks_and_are_evaluated_on_the_same_episodes() {
        let gym = crate::gym::Gym::standard();
        let (train_tasks, held_out) = (&gym.train[..12], &gym.held_out[..3]);
        let bpe = small_tokenizer(train_tasks);
        let fresh = || small_model(&bpe);
        let root = std::env::temp_dir().join(format!("agentrl-streams-{}", std::process::id()));
        let a = Schedule {
            name: "a".into(),
            iterations: 3,
            tasks: 3,
            group: 2,
            lr: 1e-2,
            lr_end: 1e-2,
            eval_every: 1,
            eval_episodes: 1,
            seed: 5,
            ..Schedule::reinforce()
        };
        // Another algorithm, step size and update shape; and a learning rate of 0, so its model stays the initial one.
        let b = Schedule {
            name: "b".into(),
            lr: 0.0,
            lr_end: 0.0,
            epochs: 2,
            minibatches: 2,
            ..a.clone()
        };
        let run_a = train(
            &mut fresh(),
            &bpe,
            (train_tasks, held_out),
            &a,
            &mut Reinforce::plain(),
            &root.join("a"),
        )
        .unwrap();
        let run_b = train(
            &mut fresh(),
            &bpe,
            (train_tasks, held_out),
            &b,
            &mut HalfGroups,
            &root.join("b"),
        )
        .unwrap();
        let tasks = |run: &[TrainRecord]| run.iter().map(|r| r.tasks.clone()).collect::<Vec<_>>();
        assert_eq!(tasks(&run_a), tasks(&run_b));
        assert!(tasks(&run_a)[..3]
            .iter()
            .all(|t| t.as_ref().is_some_and(|t| t.len() == 3)));
        // Evaluation depends on the model, the seed and the iteration only: the
        // unchanged model of run b scores what the initial model scores on each
        // iteration's evaluation stream, whatever run b drew for its updates.
        let streams = Streams::new(a.seed);
        let initial = fresh();
        for record in &run_b {
            let alone = success_rate(
                &initial,
                &bpe,
                held_out,
                1,
                &mut streams.evaluation(record.iteration),
            );
            assert_eq!(
                record.held_out_success,
                Some(alone),
                "iteration {}",
                record.iteration
            );
        }
        assert_eq!(run_a[0].held_out_success, run_b[0].held_out_success);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn episodes_that_end_at_the_window_fit_it_and_are_trained_as_they_were_sampled() {
        let gym = crate::gym::Gym::standard();
        let tasks = &gym.train[..16];
        let bpe = small_tokenizer(tasks);
        let mut model = {
            let _turn = crate::book::seeded(0);
            TinyAgent::new(
                crate::tinyagent::Config {
                    vocab: bpe.vocab_size() as i64,
                    n_ctx: 4096,
                    d_model: 16,
                    n_layer: 1,
                    n_head: 2,
                },
                tch::Device::Cpu,
            )
        };
        let picks: Vec<usize> = (0..tasks.len()).flat_map(|t| [t, t]).collect();
        let rng = || StdRng::seed_from_u64(5);
        fn policy<'a>(model: &'a TinyAgent, bpe: &'a Bpe) -> LmPolicy<'a> {
            LmPolicy {
                model,
                bpe,
                sampling: Sampling::PURE,
                max_action_tokens: 16,
            }
        }
        // With a window longer than any episode, eight turns of the untrained model's actions;
        // then a window that about half of the episodes fill before their last action.
        let mut ends = Ends {
            max_turns: crate::gym::MAX_TURNS,
            at_window: false,
        };
        let longer = play_until(&policy(&model, &bpe), tasks, &picks, ends, None, &mut rng()).0;
        // The context each episode's last action was sampled after: all but its last two segments.
        let mut lengths: Vec<usize> = longer
            .iter()
            .map(|p| {
                p.segments[..p.segments.len() - 2]
                    .iter()
                    .map(|s| s.ids.len())
                    .sum()
            })
            .collect();
        lengths.sort();
        let n_ctx = lengths[lengths.len() / 2] + 16;
        model.config.n_ctx = n_ctx as i64;
        let policy = policy(&model, &bpe);
        ends.at_window = true;
        let played = play_until(&policy, tasks, &picks, ends, None, &mut rng()).0;
        let at_window = |p: &Played| p.info.truncated && p.actions.len() < ends.max_turns;
        let ended = played.iter().filter(|p| at_window(p)).count();
        assert!(
            ended > 0 && ended < played.len(),
            "{ended} of {} episodes reached the window: the test would prove little",
            played.len()
        );
        for p in &played {
            let length = p.ids().len();
            assert!(length <= n_ctx, "an episode of {length} tokens");
            if at_window(p) {
                // Its context had no room for another action, and it earns nothing.
                assert!(length > n_ctx - policy.max_action_tokens && p.reward == 0.0);
            }
        }
        // The learner recomputes exactly the log-probs the sampler had: every action was
        // sampled after the whole episode so far, nothing clipped.
        let trajectories: Vec<Trajectory> = played.iter().map(Trajectory::from_played).collect();
        let batch = collate(&trajectories, tch::Device::Cpu);
        let recomputed = forward(&model, &batch).logp; // [B, T]
        let gap = ((recomputed - &batch.logprobs) * &batch.mask)
            .abs()
            .max()
            .double_value(&[]);
        assert!(gap < 1e-4, "log-probs differ by {gap}");
    }
}
