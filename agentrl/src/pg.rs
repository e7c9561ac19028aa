//! Chapter 6: policy gradients. The score-function (REINFORCE) estimator on
//! a softmax bandit, checked against the exact gradient; REINFORCE on the
//! tabular repair MDP; and REINFORCE for TinyAgent in the gym with the
//! masked token-level loss. Also the book's one training loop, [`train`]:
//! rollout → reward → advantage → filter → masked update → evaluation, with
//! the parts an [`Algorithm`] supplies, named random streams, JSONL metrics
//! and checkpoints; later chapters add algorithms, not loops.
//!
//! Shapes: `B` trajectories, `T` positions, `K` arms.

use crate::book::REAL;
use crate::agent::LmPolicy;
use crate::gym::Task;
use crate::mdp::{evaluate_policy, sample_episode, Mdp, Policy};
use crate::rollout::{play, play_timed, progress, PlayTime, Played};
use crate::stats::Streams;
use crate::tinyagent::{KvCache, Sampling, TinyAgent};
use crate::tokenizer::Bpe;
use crate::trajectory::{collate, Batch, Trajectory};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
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
    let probs = Vec::<f64>::try_from(theta.softmax(-1, Kind::Double).detach()).expect("probabilities");
    let mut actions = Vec::with_capacity(n);
    let mut rewards = Vec::with_capacity(n);
    for _ in 0..n {
        let a = crate::mdp::sample_action(&probs, rng);
        actions.push(a as i64);
        rewards.push(f64::from(rng.random::<f64>() < p[a]));
    }
    let logp = theta.log_softmax(-1, Kind::Double).index_select(0, &Tensor::from_slice(&actions)); // [N]
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
        TabularSoftmax { theta: vec![vec![0.0; actions]; states] }
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
    pub fn weighted_step(&mut self, episodes: &[Vec<(usize, usize, f64)>], weights: Option<&[Vec<f64>]>, gamma: f64, lr: f64) {
        let pi = self.policy();
        let scale = lr / episodes.len() as f64;
        for (e, episode) in episodes.iter().enumerate() {
            let mut g = 0.0;
            let returns: Vec<f64> = episode.iter().rev().map(|&(_, _, r)| {
                g = r + gamma * g;
                g
            }).collect::<Vec<_>>().into_iter().rev().collect();
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
pub fn tabular_reinforce(mdp: &Mdp, start: usize, gamma: f64, lr: f64, batch: usize, steps: usize, seed: u64) -> Vec<f64> {
    let mut policy = TabularSoftmax::new(mdp.n_states(), mdp.n_actions());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut values = Vec::with_capacity(steps + 1);
    values.push(evaluate_policy(mdp, &policy.policy(), gamma)[start]);
    for _ in 0..steps {
        let pi = policy.policy();
        let episodes: Vec<_> = (0..batch).map(|_| sample_episode(mdp, &pi, start, 50, &mut rng)).collect();
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
    // logp, mask, weights: [B, T]
    let weighted = logp * mask * weights; // [B, T]
    -weighted.sum(REAL) / mask.sum(REAL).clamp_min(1.0)
}

/// One number per episode, `values` [B], spread over its action tokens: [B, T].
pub fn per_token(values: &[f64], mask: &Tensor) -> Tensor {
    Tensor::from_slice(values).to_device(mask.device()).unsqueeze(1) * mask // [B, T]
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
    fn rewards(&mut self, played: &[Played], _trajectories: &[Trajectory], _report: &mut Report) -> Vec<f64> {
        played.iter().map(|p| p.reward).collect()
    }
    /// The advantage of every action token of the iteration's episodes,
    /// [N, T] for `rollout` (all N episodes, groups of `group` consecutive),
    /// computed once, before any update.
    fn advantages(&mut self, model: &TinyAgent, trajectories: &[Trajectory], rollout: &Batch, rewards: &[f64], group: usize, report: &mut Report) -> Tensor;
    /// The algorithm's own settings as JSON, written next to the schedule (default: none).
    fn config_json(&self) -> Option<String> {
        None
    }
    /// The training tasks of iteration `iteration`, each repeated `group`
    /// times (default: [`draw_tasks`], uniform; Chapter 14's curricula choose).
    /// Called on the loop's thread before the rollout, with the tasks stream.
    fn draw(&mut self, n: usize, tasks: usize, group: usize, _iteration: usize, rng: &mut StdRng) -> Vec<usize> {
        draw_tasks(n, tasks, group, rng)
    }
    /// The token streams the loss is computed on, one per played episode
    /// (default: the episodes exactly as played). Chapter 18 rewrites them to
    /// inject bugs.
    fn trajectories(&mut self, _model: &TinyAgent, trajectories: Vec<Trajectory>, _report: &mut Report) -> Vec<Trajectory> {
        trajectories
    }
    /// The episodes that get a loss (default: all).
    fn keep(&mut self, played: &[Played], _group: usize, _report: &mut Report) -> Vec<usize> {
        (0..played.len()).collect()
    }
    /// The loss of one minibatch, the episodes `rows` of the iteration, with
    /// their advantages [b, T].
    fn loss(&mut self, forward: &Forward, minibatch: &Batch, advantages: &Tensor, rows: &[usize], report: &mut Report) -> Tensor;
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
        Reinforce { returns: Box::new(returns) }
    }
}

impl Algorithm for Reinforce {
    fn advantages(&mut self, _model: &TinyAgent, _trajectories: &[Trajectory], rollout: &Batch, rewards: &[f64], group: usize, _report: &mut Report) -> Tensor {
        let weights: Vec<f64> = rewards.chunks(group).flat_map(|g| (self.returns)(g)).collect();
        per_token(&weights, &rollout.mask) // [N, T]
    }

    fn loss(&mut self, forward: &Forward, minibatch: &Batch, advantages: &Tensor, _rows: &[usize], _report: &mut Report) -> Tensor {
        reinforce_loss(&forward.logp, &minibatch.mask, advantages)
    }
}
// ANCHOR_END: algorithm

/// The settings of an algorithm that wraps `inner`: its own `fields` (a JSON
/// object) and, under `"inner"`, the inner algorithm's.
pub fn wrapper_config(inner: &dyn Algorithm, mut fields: serde_json::Value) -> Option<String> {
    let nested: serde_json::Value = inner.config_json().and_then(|c| serde_json::from_str(&c).ok()).unwrap_or_default();
    fields["inner"] = nested;
    Some(fields.to_string())
}

// ANCHOR: forward
/// log π_θ(x_t | x_<t) and the entropy of π_θ(· | x_<t) at the positions
/// `batch.mask` selects, [B, T] each and 0 elsewhere. The transformer runs on
/// the whole batch, but the output layer and the softmax over the vocabulary
/// only on the N action positions (a seventh of the tokens in the gym).
pub fn forward(model: &TinyAgent, batch: &Batch) -> Forward {
    let hidden = model.hidden(&batch.ids, &batch.valid, &mut KvCache::default()); // [B, T, D]
    at_actions(model, hidden, &batch.ids, &batch.mask)
}

/// The head, log π_θ and the entropy at the action tokens `mask` [B, T]
/// selects, from the final hidden states [B, T, D] of the rows `ids` [B, T].
pub fn at_actions(model: &TinyAgent, hidden: Tensor, ids: &Tensor, mask: &Tensor) -> Forward {
    let (b, t) = ids.size2().unwrap();
    let at = mask.narrow(1, 1, t - 1).nonzero(); // [N, 2]: (row, position before an action token)
    let (rows, before) = (at.select(1, 0), at.select(1, 1)); // [N], [N]
    let token = &before + 1; // [N]
    let log_probs = model.head(&hidden.index(&[Some(&rows), Some(&before)])).log_softmax(-1, REAL); // [N, V]
    let next = ids.index(&[Some(&rows), Some(&token)]).unsqueeze(-1); // [N, 1]
    let logp = log_probs.gather(-1, &next, false).squeeze_dim(-1); // [N]
    let entropy = -(log_probs.exp() * &log_probs).sum_dim_intlist(-1, false, REAL); // [N]
    let zeros = Tensor::zeros([b, t], (REAL, logp.device()));
    let place = |values: &Tensor| zeros.index_put(&[Some(&rows), Some(&token)], values, false); // [B, T]
    Forward { logp: place(&logp), entropy: place(&entropy), hidden, log_probs }
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
    /// Evaluate every this many iterations (and after the last), with this many episodes per held-out task.
    pub eval_every: usize,
    pub eval_episodes: usize,
    /// Save the weights every this many iterations (0: only at the end).
    pub checkpoint_every: usize,
    pub seed: u64,
    /// Policy versions between the weights that sample an iteration's
    /// episodes and the weights that learn from them (Chapter 13): iteration
    /// i plays with the weights as they were after iteration i − staleness
    /// (the first iterations with the initial ones). 0 is on-policy.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub staleness: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

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
        }
    }

    /// The same schedule under another name and seed.
    pub fn seeded(&self, seed: u64) -> Schedule {
        Schedule { name: format!("{} seed {seed}", self.name), seed, ..self.clone() }
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
    pub time: Option<StepTime>,
    /// Mean over the iteration's optimiser steps of the gradient's L2 norm
    /// over all weights, before the step.
    #[serde(default)]
    pub grad_norm: Option<f64>,
    /// What the algorithm reported (last minibatch for per-step numbers).
    pub extra: Report,
}

/// The training tasks of one iteration: `tasks` draws from `n` tasks, each
/// repeated `group` times (groups consecutive).
pub fn draw_tasks(n: usize, tasks: usize, group: usize, rng: &mut StdRng) -> Vec<usize> {
    (0..tasks).map(|_| rng.random_range(0..n)).flat_map(|t| std::iter::repeat_n(t, group)).collect()
}

/// The held-out success of `model`: `per_task` sampled episodes on each task.
pub fn success_rate(model: &TinyAgent, bpe: &Bpe, tasks: &[Task], per_task: usize, rng: &mut StdRng) -> f64 {
    let played = evaluation_episodes(model, bpe, tasks, per_task, rng);
    played.iter().map(|p| p.reward).sum::<f64>() / played.len() as f64
}

/// `per_task` episodes on each of `tasks`, sampled at temperature 1.
pub fn evaluation_episodes(model: &TinyAgent, bpe: &Bpe, tasks: &[Task], per_task: usize, rng: &mut StdRng) -> Vec<Played> {
    let policy = LmPolicy { model, bpe, sampling: Sampling::PURE, max_action_tokens: 16 };
    let which: Vec<usize> = (0..tasks.len()).flat_map(|t| std::iter::repeat_n(t, per_task)).collect();
    play(&policy, tasks, &which, crate::gym::MAX_TURNS, rng)
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
    let (train_tasks, held_out) = tasks;
    let streams = Streams::new(schedule.seed);
    let device = model.device();
    std::fs::create_dir_all(run_dir).map_err(|err| format!("cannot create {}: {err}", run_dir.display()))?;
    let json = serde_json::to_string_pretty(schedule).map_err(|err| err.to_string())?;
    std::fs::write(run_dir.join("schedule.json"), json).map_err(|err| format!("cannot write the schedule: {err}"))?;
    if let Some(config) = algorithm.config_json() {
        std::fs::write(run_dir.join("config.json"), config).map_err(|err| format!("cannot write the config: {err}"))?;
    }
    let mut metrics = std::fs::File::create(run_dir.join("metrics.jsonl")).map_err(|err| format!("cannot write metrics: {err}"))?;
    let mut opt = nn::AdamW::default().build(&model.vs, schedule.lr).map_err(|err| err.to_string())?;
    let bar = progress(schedule.iterations as u64, &schedule.name);
    let mut records = Vec::new();
    // The weights that sample (Chapter 13): the learner's own, or copies of
    // the versions still needed (`staleness` behind),
    // oldest first, each tagged with the iterations completed when copied.
    let copies = schedule.staleness > 0;
    let mut versions: std::collections::VecDeque<(usize, TinyAgent)> = std::collections::VecDeque::new();
    // Rollout: which tasks and which tokens come from separate streams.
    let play_with = |sampler: &TinyAgent, iteration: usize, picks: Vec<usize>| {
        let policy = LmPolicy { model: sampler, bpe, sampling: Sampling::PURE, max_action_tokens: 16 };
        let (played, time) = play_timed(&policy, train_tasks, &picks, crate::gym::MAX_TURNS, &mut streams.sampling(iteration));
        (picks, played, time)
    };
    std::thread::scope(|scope| -> Result<(), String> {
        // The next iteration's rollout, when it runs on a second thread while this iteration learns.
        let mut pending = None;
        for iteration in 0..=schedule.iterations {
            let last_line = iteration == schedule.iterations;
            let evaluate = iteration % schedule.eval_every == 0 || last_line;
            let held_out_success = evaluate.then(|| success_rate(model, bpe, held_out, schedule.eval_episodes, &mut streams.evaluation(iteration)));
            let mut record = TrainRecord { iteration, episodes: iteration * schedule.tasks * schedule.group, held_out_success, ..TrainRecord::default() };
            if !last_line {
                opt.set_lr(schedule.lr + (schedule.lr_end - schedule.lr) * iteration as f64 / schedule.iterations.max(1) as f64);
                if copies {
                    versions.push_back((iteration, copy_model(model, None)));
                    while versions.front().is_some_and(|(v, _)| *v < iteration.saturating_sub(schedule.staleness)) {
                        versions.pop_front();
                    }
                }
                // Iteration j samples with the weights of version j − staleness (the first ones with version 0).
                let sampler_for = |j: usize| versions.iter().find(|(v, _)| *v == j.saturating_sub(schedule.staleness)).map(|(_, m)| m).expect("a kept version");
                let draw = |algorithm: &mut dyn Algorithm, j: usize| algorithm.draw(train_tasks.len(), schedule.tasks, schedule.group, j, &mut streams.tasks(j));
                let (picks, played, PlayTime { generation, environment }) = match pending.take() {
                    Some(rollout) => std::thread::ScopedJoinHandle::join(rollout).map_err(|_| "the rollout thread panicked".to_string())?,
                    None if copies => play_with(sampler_for(iteration), iteration, draw(&mut *algorithm, iteration)),
                    None => play_with(model, iteration, draw(&mut *algorithm, iteration)),
                };
                // With stale weights the next iteration's sampler exists already, so
                // its episodes are played on a second thread while this iteration
                // learns: the same episodes as playing them later, sooner.
                if schedule.staleness > 0 && iteration + 1 < schedule.iterations {
                    let sampler = copy_model(sampler_for(iteration + 1), None); // a thread's own copy (a tensor is not Sync)
                    let picks = draw(&mut *algorithm, iteration + 1);
                    pending = Some(scope.spawn(move || play_with(&sampler, iteration + 1, picks)));
                }
                let learning = Instant::now();
                let trajectories = algorithm.trajectories(model, played.iter().map(Trajectory::from_played).collect(), &mut record.extra);
                // Reward, advantage (once per rollout), and the episodes that get a loss.
                let rewards = algorithm.rewards(&played, &trajectories, &mut record.extra);
                let rollout = collate(&trajectories, device);
                let advantages = algorithm.advantages(model, &trajectories, &rollout, &rewards, schedule.group, &mut record.extra); // [N, T]
                let mut chosen = algorithm.keep(&played, schedule.group, &mut record.extra);
                // Update: epochs × minibatches steps on the masked loss.
                let (mut shuffle, mut loss_sum, mut entropy_sum, mut grad_norm_sum, mut steps, mut trained_tokens) = (streams.shuffle(iteration), 0.0, 0.0, 0.0, 0, 0);
                for _ in 0..schedule.epochs {
                    chosen.shuffle(&mut shuffle);
                    for rows in chosen.chunks(chosen.len().div_ceil(schedule.minibatches).max(1)) {
                        let picked: Vec<Trajectory> = rows.iter().map(|&i| trajectories[i].clone()).collect();
                        let minibatch = collate(&picked, device);
                        let index = Tensor::from_slice(&rows.iter().map(|&i| i as i64).collect::<Vec<_>>()).to_device(device);
                        let adv = advantages.index_select(0, &index).narrow(1, 0, minibatch.ids.size()[1]); // [b, T]
                        let forward = forward(model, &minibatch);
                        let loss = algorithm.loss(&forward, &minibatch, &adv, rows, &mut record.extra);
                        // AdamW's step, with the gradient's norm read before it is applied.
                        opt.zero_grad();
                        loss.backward();
                        grad_norm_sum += gradient_norm(model);
                        opt.step();
                        let tokens = minibatch.mask.sum(REAL).double_value(&[]);
                        entropy_sum += (forward.entropy.detach() * &minibatch.mask).sum(REAL).double_value(&[]) / tokens.max(1.0);
                        loss_sum += loss.double_value(&[]);
                        (steps, trained_tokens) = (steps + 1, trained_tokens + tokens as usize);
                    }
                }
                record.tasks = Some(picks.iter().step_by(schedule.group.max(1)).copied().collect());
                record.train_success = Some(played.iter().map(|p| p.reward).sum::<f64>() / played.len() as f64);
                record.trained_episodes = Some(chosen.len());
                record.loss = (steps > 0).then(|| loss_sum / steps as f64);
                record.entropy = (steps > 0).then(|| entropy_sum / steps as f64);
                record.grad_norm = (steps > 0).then(|| grad_norm_sum / steps as f64);
                record.generated_tokens = Some(played.iter().map(|p| p.segments.iter().map(|s| s.logprobs.len()).sum::<usize>()).sum());
                record.trained_tokens = Some(trained_tokens);
                record.sequence_tokens = Some(chosen.iter().map(|&i| trajectories[i].ids.len()).sum());
                record.played_tokens = Some(trajectories.iter().map(|t| t.ids.len()).sum());
                record.time = Some(StepTime { generation, environment, learning: learning.elapsed().as_secs_f64() });
                if schedule.checkpoint_every > 0 && (iteration + 1) % schedule.checkpoint_every == 0 {
                    model.save(&run_dir.join(format!("iteration-{:04}.safetensors", iteration + 1)))?;
                }
                bar.inc(1);
            }
            writeln!(metrics, "{}", serde_json::to_string(&record).map_err(|err| err.to_string())?).map_err(|err| format!("cannot write metrics: {err}"))?;
            records.push(record);
        }
        Ok(())
    })?;
    model.save(&run_dir.join("final.safetensors"))?;
    bar.finish_and_clear();
    Ok(records)
}

/// The L2 norm of the gradient over all of `model`'s weights (0 for weights without one).
pub fn gradient_norm(model: &TinyAgent) -> f64 {
    let squares: f64 = model.vs.trainable_variables().iter().map(|v| {
        let g = v.grad();
        if g.defined() { g.square().sum(REAL).double_value(&[]) } else { 0.0 }
    }).sum();
    squares.sqrt()
}

/// The records of a run, read back from its metrics file.
pub fn read_records(path: &Path) -> Result<Vec<TrainRecord>, String> {
    let text = std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    text.lines().map(|line| serde_json::from_str(line).map_err(|err| format!("{}: bad line {line:?}: {err}", path.display()))).collect()
}
// ANCHOR_END: train

// ANCHOR: parallel
/// A run to make: its schedule and its algorithm.
pub type Run = (Schedule, Box<dyn Algorithm + Send>);

/// Train a fresh copy of the base model for each run, `threads` runs at a
/// time. Each run is single-threaded inside libtorch and has its own streams,
/// so two at a time use two cores and print what one after the other would.
/// Run `name` writes to `root/name` (spaces and dots become `_`). Within one
/// test command, a notebook reuses its chapter's finished runs ([`train_or_reuse`]).
pub fn train_from_base(gym: &crate::gym::Gym, runs: Vec<Run>, threads: usize, root: &Path) -> Vec<Vec<TrainRecord>> {
    crate::pretrain::base_model(&gym.train); // on disk before the threads load it
    train_from(&crate::pretrain::base_dir(), gym, runs, threads, root)
}

/// [`train_from_base`], starting every run from the model stored in `start`
/// (by [`crate::pretrain::save_model`]) instead of the base model.
pub fn train_from(start: &Path, gym: &crate::gym::Gym, runs: Vec<Run>, threads: usize, root: &Path) -> Vec<Vec<TrainRecord>> {
    train_from_each(gym, runs.into_iter().map(|run| (start.to_path_buf(), run)).collect(), threads, root)
}

/// [`train_from`] with a starting model of its own for each run (Chapter 15
/// starts RL from models fine-tuned in different ways).
pub fn train_from_each(gym: &crate::gym::Gym, runs: Vec<(PathBuf, Run)>, threads: usize, root: &Path) -> Vec<Vec<TrainRecord>> {
    side_by_side(runs, threads, |(start, (schedule, mut algorithm))| {
        let dir: PathBuf = root.join(schedule.name.replace([' ', '.'], "_"));
        let outcome = crate::pretrain::load_model(&start)
            .and_then(|(bpe, mut model)| train_or_reuse(&mut model, &bpe, (&gym.train, &gym.held_out), &schedule, algorithm.as_mut(), &dir));
        outcome.unwrap_or_else(|err| panic!("run {}: {err}", schedule.name))
    })
}

/// `job` applied to every item, `threads` items at a time on threads of
/// their own; the results in the items' order. With libtorch on one thread
/// per job and a seed per item, the results do not depend on `threads`.
pub fn side_by_side<I: Send, O: Send>(items: Vec<I>, threads: usize, job: impl Fn(I) -> O + Sync) -> Vec<O> {
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
    runs.iter().map(|run| run[iteration].held_out_success.expect("an evaluation at that iteration")).collect()
}
// ANCHOR_END: parallel

/// A finished run stored in `cache` under `key` is copied back into `dir`
/// instead of training again (see [`crate::book::reuse`]); otherwise `train`
/// runs and what it wrote to `dir` is stored.
fn reuse_or(cache: Option<&Path>, key: &str, dir: &Path, train: impl FnOnce() -> Result<Vec<TrainRecord>, String>) -> Result<Vec<TrainRecord>, String> {
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
fn run_key(model: &TinyAgent, schedule: &Schedule, algorithm: &dyn Algorithm, run_dir: &Path) -> Result<String, String> {
    let schedule_json = serde_json::to_string(schedule).map_err(|err| err.to_string())?;
    Ok(format!("train\n{}\n{schedule_json}\n{}\n{:016x}", run_dir.display(), algorithm.config_json().unwrap_or_default(), model.fingerprint()))
}

/// [`train`], or, within the test command, the same run read back: the
/// notebook stage reads the chapter stage's finished runs instead of training
/// them again (see [`crate::book::reuse`]); the model ends with the run's final weights either way.
pub fn train_or_reuse(model: &mut TinyAgent, bpe: &Bpe, tasks: (&[Task], &[Task]), schedule: &Schedule, algorithm: &mut dyn Algorithm, run_dir: &Path) -> Result<Vec<TrainRecord>, String> {
    let key = run_key(model, schedule, algorithm, run_dir)?;
    let mut trained = false;
    let records = reuse_or(crate::book::run_cache().as_deref(), &key, run_dir, || {
        trained = true;
        train(model, bpe, tasks, schedule, algorithm, run_dir)
    })?;
    if !trained {
        model.vs.load(run_dir.join("final.safetensors")).map_err(|err| format!("cannot load the stored run's final weights: {err}"))?;
    }
    Ok(records)
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|err| format!("cannot create {}: {err}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|err| format!("cannot read {}: {err}", from.display()))? {
        let path = entry.map_err(|err| err.to_string())?.path();
        let target = to.join(path.file_name().expect("a file name"));
        if path.is_dir() {
            copy_dir(&path, &target)?;
        } else {
            std::fs::copy(&path, &target).map_err(|err| format!("cannot copy {}: {err}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mdp::{repair_mdp, value_iteration, Verifier, BUGGY};

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
            let total: f64 = (0..reps).map(|_| reinforce_gradient(&theta, &p, n, rng).iter().zip(&exact).map(|(g, e)| (g - e).powi(2)).sum::<f64>()).sum();
            (total / reps as f64).sqrt()
        };
        let (small, large) = (rmse(16, &mut rng), rmse(256, &mut rng));
        // 16 times the samples: a quarter of the error, within sampling noise.
        assert!((small / large - 4.0).abs() < 0.6, "{small} / {large}");
        // Unbiased: the mean of many estimates approaches the exact gradient.
        let mean: Vec<f64> = (0..4).map(|a| (0..2000).map(|_| reinforce_gradient(&theta, &p, 8, &mut rng)[a]).sum::<f64>() / 2000.0).collect();
        for a in 0..4 {
            assert!((mean[a] - exact[a]).abs() < 0.02, "{mean:?} vs {exact:?}");
        }
    }

    #[test]
    fn tabular_reinforce_approaches_the_optimal_value() {
        let mdp = repair_mdp(Verifier::Hidden);
        let (v_star, _, _) = value_iteration(&mdp, 0.9, 1e-12);
        let values = tabular_reinforce(&mdp, BUGGY, 0.9, 0.5, 16, 300, 0);
        assert!(values[300] > values[0] + 0.3, "{} -> {}", values[0], values[300]);
        assert!(v_star[BUGGY] - values[300] < 0.05, "{} vs V* {}", values[300], v_star[BUGGY]);
    }

    #[test]
    fn the_masked_loss_gives_tool_tokens_no_gradient() {
        let logp = Tensor::from_slice(&[-1.0f64, -2.0, -0.5, -0.1, -3.0, -0.2, -0.7, -1.5]).view([2, 4]).set_requires_grad(true);
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
        let config = crate::tinyagent::Config { vocab: 32, n_ctx: 16, d_model: 16, n_layer: 1, n_head: 2 };
        let model = TinyAgent::new(config, tch::Device::Cpu);
        use crate::episode::Owner;
        let trajectory = Trajectory { task: 0, ids: vec![3, 5, 7, 2, 9, 4], owners: vec![Owner::Prompt, Owner::Prompt, Owner::Policy, Owner::Policy, Owner::Env, Owner::Policy], logprobs: vec![0.0; 6], reward: 1.0, info: Default::default() };
        let batch = collate(&[trajectory], tch::Device::Cpu);
        let Forward { logp, entropy, hidden, .. } = forward(&model, &batch);
        let expected = crate::trajectory::policy_logprobs(&model, &batch) * &batch.mask;
        assert!((logp - expected).abs().max().double_value(&[]) < 1e-6);
        let logits = model.logits(&batch.ids, &batch.valid); // [1, 6, V]
        let h = Tensor::cat(&[Tensor::zeros([1, 1], (REAL, tch::Device::Cpu)), crate::tinyagent::entropy(&logits.narrow(1, 0, 5))], 1); // [1, 6]
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
            let record = TrainRecord { iteration: 0, held_out_success: Some(value), ..TrainRecord::default() };
            std::fs::write(dir.join("metrics.jsonl"), serde_json::to_string(&record).unwrap() + "\n").unwrap();
            std::fs::write(dir.join("final.safetensors"), b"weights").unwrap();
            Ok(vec![record])
        };
        let gym = crate::gym::Gym::standard();
        let bpe = small_tokenizer(&gym.train[..4]);
        let model = small_model(&bpe);
        let schedule = Schedule::reinforce();
        let key = |schedule: &Schedule, model: &TinyAgent| run_key(model, schedule, &Reinforce::plain(), &dir).unwrap();
        let first = reuse_or(Some(&cache), &key(&schedule, &model), &dir, || fake(&dir, 0.1 + 0.2)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let again = reuse_or(Some(&cache), &key(&schedule, &model), &dir, || fake(&dir, 9.0)).unwrap();
        assert_eq!((trained.get(), &again), (1, &first), "the same run is copied back, exactly");
        assert_eq!(std::fs::read(dir.join("final.safetensors")).unwrap(), b"weights");
        let other = reuse_or(Some(&cache), &key(&schedule.clone().seeded(1), &model), &dir, || fake(&dir, 0.5)).unwrap();
        assert_eq!((trained.get(), other[0].held_out_success), (2, Some(0.5)), "another seed trains");
        let other_start = small_model(&bpe);
        let _ = tch::no_grad(|| other_start.vs.trainable_variables()[0].get(0).fill_(0.25));
        let moved = reuse_or(Some(&cache), &key(&schedule, &other_start), &dir, || fake(&dir, 0.6)).unwrap();
        assert_eq!((trained.get(), moved[0].held_out_success), (3, Some(0.6)), "other starting weights train");
        let uncached = reuse_or(None, &key(&schedule, &model), &dir, || fake(&dir, 0.7)).unwrap();
        assert_eq!((trained.get(), uncached[0].held_out_success), (4, Some(0.7)), "without a cache every run trains");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// An algorithm that shuffles its own way: it keeps only the first half of each group.
    struct HalfGroups;
    impl Algorithm for HalfGroups {
        fn advantages(&mut self, _model: &TinyAgent, _trajectories: &[Trajectory], rollout: &Batch, rewards: &[f64], _group: usize, _report: &mut Report) -> Tensor {
            per_token(&rewards.iter().map(|r| r - 0.5).collect::<Vec<_>>(), &rollout.mask)
        }
        fn keep(&mut self, played: &[Played], group: usize, _report: &mut Report) -> Vec<usize> {
            (0..played.len()).filter(|i| i % group < group / 2).collect()
        }
        fn loss(&mut self, forward: &Forward, minibatch: &Batch, advantages: &Tensor, _rows: &[usize], _report: &mut Report) -> Tensor {
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
        TinyAgent::new(crate::tinyagent::Config { vocab: bpe.vocab_size() as i64, n_ctx: 768, d_model: 16, n_layer: 1, n_head: 2 }, tch::Device::Cpu)
    }

    #[test]
    fn with_a_constant_learning_rate_a_shorter_run_is_a_prefix_of_a_longer_one() {
        let gym = crate::gym::Gym::standard();
        let (train_tasks, held_out) = (&gym.train[..12], &gym.held_out[..3]);
        let bpe = small_tokenizer(train_tasks);
        let fresh = || small_model(&bpe);
        let root = std::env::temp_dir().join(format!("agentrl-prefix-{}", std::process::id()));
        let long = Schedule { name: "long".into(), iterations: 4, tasks: 3, group: 2, lr: 1e-2, lr_end: 1e-2, eval_every: 2, eval_episodes: 1, seed: 7, ..Schedule::reinforce() };
        // Half the iterations, evaluated on another schedule: evaluation draws from its own stream.
        let short = Schedule { name: "short".into(), iterations: 2, eval_every: 1, ..long.clone() };
        let run_long = train(&mut fresh(), &bpe, (train_tasks, held_out), &long, &mut Reinforce::plain(), &root.join("long")).unwrap();
        let run_short = train(&mut fresh(), &bpe, (train_tasks, held_out), &short, &mut Reinforce::plain(), &root.join("short")).unwrap();
        for (a, b) in run_long.iter().zip(&run_short).take(2) {
            assert_eq!((&a.tasks, a.train_success, a.loss, a.generated_tokens), (&b.tasks, b.train_success, b.loss, b.generated_tokens), "iteration {}", a.iteration);
        }
        assert_eq!(run_long[2].held_out_success, run_short[2].held_out_success);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_stale_run_plays_iteration_i_with_the_weights_of_version_i_minus_staleness() {
        let gym = crate::gym::Gym::standard();
        let (train_tasks, held_out) = (&gym.train[..12], &gym.held_out[..3]);
        let bpe = small_tokenizer(train_tasks);
        let root = std::env::temp_dir().join(format!("agentrl-stale-{}", std::process::id()));
        let schedule = Schedule { name: "stale".into(), iterations: 5, tasks: 3, group: 2, lr: 3e-2, lr_end: 3e-2, eval_every: 5, eval_episodes: 1, checkpoint_every: 1, seed: 3, staleness: 2, ..Schedule::reinforce() };
        // Every episode gets a non-zero weight (failures push down), so the weights move every iteration.
        let mut algorithm = Reinforce::with(|group| group.iter().map(|r| r - 0.5).collect());
        let run = train(&mut small_model(&bpe), &bpe, (train_tasks, held_out), &schedule, &mut algorithm, &root).unwrap();
        // Replay each iteration's rollout by hand with the weights saved after `version` iterations.
        let streams = Streams::new(schedule.seed);
        let replay = |iteration: usize, version: usize| {
            let mut model = small_model(&bpe);
            if version > 0 {
                model.vs.load(root.join(format!("iteration-{version:04}.safetensors"))).unwrap();
            }
            let picks = draw_tasks(train_tasks.len(), schedule.tasks, schedule.group, &mut streams.tasks(iteration));
            let policy = LmPolicy { model: &model, bpe: &bpe, sampling: Sampling::PURE, max_action_tokens: 16 };
            let played = play(&policy, train_tasks, &picks, crate::gym::MAX_TURNS, &mut streams.sampling(iteration));
            let tokens: Vec<u32> = played.iter().flat_map(|p| p.ids()).collect();
            let success = played.iter().map(|p| p.reward).sum::<f64>() / played.len() as f64;
            (played.iter().map(|p| p.segments.iter().map(|s| s.logprobs.len()).sum::<usize>()).sum::<usize>(), tokens, success)
        };
        for i in 0..schedule.iterations {
            let (generated, _, success) = replay(i, i.saturating_sub(2));
            assert_eq!((run[i].generated_tokens, run[i].train_success), (Some(generated), Some(success)), "iteration {i}");
        }
        // The check can fail: the newest weights would have played other episodes.
        assert_ne!(replay(4, 2).1, replay(4, 4).1, "versions 2 and 4 play the same episodes: the test would prove nothing");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn two_variants_with_one_seed_draw_the_same_tasks_and_are_evaluated_on_the_same_episodes() {
        let gym = crate::gym::Gym::standard();
        let (train_tasks, held_out) = (&gym.train[..12], &gym.held_out[..3]);
        let bpe = small_tokenizer(train_tasks);
        let fresh = || small_model(&bpe);
        let root = std::env::temp_dir().join(format!("agentrl-streams-{}", std::process::id()));
        let a = Schedule { name: "a".into(), iterations: 3, tasks: 3, group: 2, lr: 1e-2, lr_end: 1e-2, eval_every: 1, eval_episodes: 1, seed: 5, ..Schedule::reinforce() };
        // Another algorithm, step size and update shape; and a learning rate of 0, so its model stays the initial one.
        let b = Schedule { name: "b".into(), lr: 0.0, lr_end: 0.0, epochs: 2, minibatches: 2, ..a.clone() };
        let run_a = train(&mut fresh(), &bpe, (train_tasks, held_out), &a, &mut Reinforce::plain(), &root.join("a")).unwrap();
        let run_b = train(&mut fresh(), &bpe, (train_tasks, held_out), &b, &mut HalfGroups, &root.join("b")).unwrap();
        let tasks = |run: &[TrainRecord]| run.iter().map(|r| r.tasks.clone()).collect::<Vec<_>>();
        assert_eq!(tasks(&run_a), tasks(&run_b));
        assert!(tasks(&run_a)[..3].iter().all(|t| t.as_ref().is_some_and(|t| t.len() == 3)));
        // Evaluation depends on the model, the seed and the iteration only: the
        // unchanged model of run b scores what the initial model scores on each
        // iteration's evaluation stream, whatever run b drew for its updates.
        let streams = Streams::new(a.seed);
        let initial = fresh();
        for record in &run_b {
            let alone = success_rate(&initial, &bpe, held_out, 1, &mut streams.evaluation(record.iteration));
            assert_eq!(record.held_out_success, Some(alone), "iteration {}", record.iteration);
        }
        assert_eq!(run_a[0].held_out_success, run_b[0].held_out_success);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
