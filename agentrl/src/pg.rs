//! Chapter 6: policy gradients. The score-function (REINFORCE) estimator on
//! a softmax bandit, checked against the exact gradient; REINFORCE on the
//! tabular repair MDP; and REINFORCE for TinyAgent in the gym with the
//! masked token-level loss.
//!
//! Shapes: `B` trajectories, `T` positions, `K` arms.

use crate::book::REAL;
use crate::agent::LmPolicy;
use crate::gym::Task;
use crate::mdp::{evaluate_policy, sample_episode, Mdp, Policy};
use crate::pretrain::{play, play_timed, progress, PlayTime, Played};
use crate::tinyagent::{Sampling, TinyAgent};
use crate::tokenizer::Bpe;
use crate::trajectory::{collate, policy_logprobs, Batch, Trajectory};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;
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
        let pi = self.policy();
        let scale = lr / episodes.len() as f64;
        for episode in episodes {
            let mut g = 0.0;
            let returns: Vec<f64> = episode.iter().rev().map(|&(_, _, r)| {
                g = r + gamma * g;
                g
            }).collect::<Vec<_>>().into_iter().rev().collect();
            for (t, (&(s, a, _), g)) in episode.iter().zip(returns).enumerate() {
                let weight = scale * gamma.powi(t as i32) * g;
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
/// REINFORCE for a language model, per token: the episode's return R_b
/// multiplies the log-prob of every token the policy sampled, and nothing
/// else; the mean is over the batch's action tokens.
///
/// loss = −Σ_{b,t} m_{b,t} R_b log π_θ(x_{b,t} | x_{b,<t}) / Σ_{b,t} m_{b,t}
pub fn reinforce_loss(logp: &Tensor, mask: &Tensor, returns: &Tensor) -> Tensor {
    // logp, mask: [B, T]; returns: [B]
    let weighted = logp * mask * returns.unsqueeze(1); // [B, T]
    -weighted.sum(REAL) / mask.sum(REAL).clamp_min(1.0)
}
// ANCHOR_END: loss

// ANCHOR: train
/// Settings of a REINFORCE run in the gym.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PgConfig {
    pub iterations: usize,
    /// Tasks drawn per iteration, and episodes played on each.
    pub tasks: usize,
    pub episodes: usize,
    pub lr: f64,
    /// Evaluate on the held-out tasks every this many iterations.
    pub eval_every: usize,
    pub seed: u64,
}

/// One line of the run's metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PgRecord {
    pub iteration: usize,
    /// Success of the episodes played for this iteration's update (none after the last update).
    pub train_success: Option<f64>,
    /// Success on the held-out tasks (two sampled episodes each), when evaluated.
    pub held_out_success: Option<f64>,
    pub loss: Option<f64>,
    pub action_tokens: usize,
}

/// The records of a run, read back from its metrics file.
pub fn read_metrics(path: &Path) -> Result<Vec<PgRecord>, String> {
    let text = std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    text.lines().map(|line| serde_json::from_str(line).map_err(|err| format!("{}: bad line {line:?}: {err}", path.display()))).collect()
}

/// One iteration's episodes: `episodes` episodes (a group) on each of `tasks`
/// training tasks drawn at random, groups consecutive; and where the time went.
pub fn play_groups(model: &TinyAgent, bpe: &Bpe, train: &[Task], tasks: usize, episodes: usize, rng: &mut StdRng) -> (Vec<Played>, PlayTime) {
    let picks: Vec<usize> = (0..tasks).map(|_| rng.random_range(0..train.len())).flat_map(|t| std::iter::repeat_n(t, episodes)).collect();
    let policy = LmPolicy { model, bpe, sampling: Sampling::PURE, max_action_tokens: 16 };
    play_timed(&policy, train, &picks, crate::gym::MAX_TURNS, rng)
}

/// The held-out success of `model`: `per_task` sampled episodes on each task.
pub fn success_rate(model: &TinyAgent, bpe: &Bpe, tasks: &[Task], per_task: usize, seed: u64) -> f64 {
    let policy = LmPolicy { model, bpe, sampling: Sampling::PURE, max_action_tokens: 16 };
    let which: Vec<usize> = (0..tasks.len()).flat_map(|t| std::iter::repeat_n(t, per_task)).collect();
    let played = play(&policy, tasks, &which, crate::gym::MAX_TURNS, &mut StdRng::seed_from_u64(seed));
    played.iter().map(|p| p.reward).sum::<f64>() / played.len() as f64
}

/// The episodes' own rewards as their returns: plain REINFORCE.
pub fn rewards_as_returns(group: &[f64]) -> Vec<f64> {
    group.to_vec()
}

/// REINFORCE in the gym: each iteration plays `episodes` episodes on each of
/// `tasks` random training tasks, and takes one AdamW step on the masked
/// token-level loss. `returns` maps the rewards of the episodes of one task
/// (a group) to the weights of their tokens: `rewards_as_returns` here,
/// baselines in Chapter 7. Metrics are written to `metrics` as JSON lines.
pub fn train_reinforce(
    model: &mut TinyAgent,
    bpe: &Bpe,
    train: &[Task],
    held_out: &[Task],
    config: &PgConfig,
    returns: fn(&[f64]) -> Vec<f64>,
    metrics: &Path,
) -> Vec<PgRecord> {
    reinforce_loop(model, bpe, (train, held_out), config, "REINFORCE", metrics, &mut |model, trajectories, batch| {
        let rewards: Vec<f64> = trajectories.iter().map(|t| t.reward).collect();
        let weights: Vec<f64> = rewards.chunks(config.episodes).flat_map(returns).map(|w| w as f64).collect();
        let weights = Tensor::from_slice(&weights).to_device(model.device()); // [B]
        reinforce_loss(&policy_logprobs(model, batch), &batch.mask, &weights)
    })
}

/// The loop of every one-step-per-batch policy gradient in the book: every
/// `eval_every` iterations the held-out success; each iteration a batch of
/// groups, and one AdamW step on the loss `loss_of` computes from it.
pub fn reinforce_loop(
    model: &mut TinyAgent,
    bpe: &Bpe,
    tasks: (&[Task], &[Task]),
    config: &PgConfig,
    what: &str,
    metrics: &Path,
    loss_of: &mut dyn FnMut(&TinyAgent, &[Trajectory], &Batch) -> Tensor,
) -> Vec<PgRecord> {
    let (train, held_out) = tasks;
    let mut opt = nn::AdamW::default().build(&model.vs, config.lr).expect("an optimiser for the model");
    let mut rng = StdRng::seed_from_u64(config.seed);
    let bar = progress(config.iterations as u64, what);
    let mut records = Vec::new();
    for iteration in 0..=config.iterations {
        let held_out_success = (iteration % config.eval_every == 0).then(|| success_rate(model, bpe, held_out, 2, 1_000 + iteration as u64));
        if iteration == config.iterations {
            records.push(PgRecord { iteration, train_success: None, held_out_success, loss: None, action_tokens: 0 });
            break;
        }
        let (played, _) = play_groups(model, bpe, train, config.tasks, config.episodes, &mut rng);
        let trajectories: Vec<Trajectory> = played.iter().map(Trajectory::from_played).collect();
        let batch = collate(&trajectories, model.device());
        let loss = loss_of(model, &trajectories, &batch);
        opt.backward_step(&loss);
        let train_success = played.iter().map(|p| p.reward).sum::<f64>() / played.len() as f64;
        let action_tokens = batch.mask.sum(REAL).double_value(&[]) as usize;
        records.push(PgRecord { iteration, train_success: Some(train_success), held_out_success, loss: Some(loss.double_value(&[])), action_tokens });
        bar.inc(1);
    }
    bar.finish_and_clear();
    write_metrics(&records, metrics);
    records
}

/// Write `records` to `path` as JSON lines.
pub fn write_metrics(records: &[PgRecord], path: &Path) {
    let mut file = std::fs::File::create(path).unwrap_or_else(|err| panic!("cannot write {}: {err}", path.display()));
    for record in records {
        writeln!(file, "{}", serde_json::to_string(record).expect("a record serialises")).expect("metrics written");
    }
}
// ANCHOR_END: train

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
        let returns = Tensor::from_slice(&[1.0f64, 0.5]);
        reinforce_loss(&logp, &mask, &returns).backward();
        let grad = Vec::<f64>::try_from(logp.grad().view([-1])).unwrap();
        let expected = [0.0, -1.0 / 3.0, -1.0 / 3.0, 0.0, 0.0, 0.0, -0.5 / 3.0, 0.0];
        for (g, e) in grad.iter().zip(expected) {
            assert!((g - e).abs() < 1e-7, "{grad:?}");
        }
    }
}
