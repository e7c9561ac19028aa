//! Chapter 13: learning from episodes that another policy sampled. When the
//! sampler's weights lag the learner's by a few versions (asynchronous
//! rollout) or compute in another precision (a separate inference engine),
//! the sampling log-probs belong to a behaviour policy μ, not to the
//! learner's weights π_old at the start of the iteration. [`OffPolicy`] wraps
//! any algorithm of the loop and corrects for the gap with importance weights
//! π_old / μ: truncated per token, truncated per sequence, or masking tokens
//! whose weight is extreme; it also reports how far apart the two policies are.
//!
//! Shapes: `N` episodes of an iteration, `B` of a minibatch, `T` positions.

use crate::book::REAL;
use crate::mdp::{evaluate_policy, sample_episode, Mdp, Policy};
use crate::pg::{forward, Algorithm, Forward, Report, TabularSoftmax};
use crate::rollout::Played;
use crate::tinyagent::TinyAgent;
use crate::trajectory::{Batch, Trajectory};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use tch::Tensor;

// ANCHOR: correction
/// How the learner treats the gap between the behaviour policy μ that
/// sampled the episodes and its own weights π_old when the iteration starts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Correction {
    /// The clipped ratio π_θ / μ against the sampling log-probs, as the loop
    /// does by default: the clip sees the whole gap and silences the tokens
    /// whose ratio already left the range.
    Behaviour,
    /// The clipped ratio π_θ / π_old, μ ignored: stale episodes treated as fresh.
    Ignore,
    /// The ratio π_θ / π_old, each token's loss weighted by w_t = π_old / μ
    /// truncated at `c` (token-level truncated importance sampling).
    TokenTis(f64),
    /// The same with one weight per episode, the product of its tokens'
    /// weights, truncated at `c` (sequence-level).
    SequenceTis(f64),
    /// The ratio π_θ / π_old, and no loss on tokens whose w_t lies outside
    /// [1/c, c] (masked importance sampling).
    TokenMask(f64),
}

/// The importance weights of one iteration's episodes, [N, T], from the
/// learner's log-probs `old` and the sampling log-probs `behaviour` on the
/// action tokens `mask` (all [N, T]); 0 off the mask.
pub fn importance_weights(
    old: &Tensor,
    behaviour: &Tensor,
    mask: &Tensor,
    correction: Correction,
) -> Tensor {
    let log_w = (old - behaviour) * mask; // [N, T]: log π_old/μ per action token
    let weights = match correction {
        Correction::Behaviour | Correction::Ignore => mask.ones_like(),
        Correction::TokenTis(c) => log_w.exp().clamp_max(c),
        Correction::SequenceTis(c) => log_w
            .sum_dim_intlist(1, true, REAL)
            .exp()
            .clamp_max(c)
            .expand_as(mask), // [N, 1] -> [N, T]
        Correction::TokenMask(c) => log_w.abs().le(c.ln()).to_kind(REAL),
    };
    weights * mask // [N, T]
}
// ANCHOR_END: correction

// ANCHOR: tabular
/// The weight of each step of `episode` (sampled by `behaviour`) for a
/// REINFORCE step of `current`: the tabular version of [`importance_weights`].
pub fn step_weights(
    episode: &[(usize, usize, f64)],
    current: &Policy,
    behaviour: &Policy,
    correction: Correction,
) -> Vec<f64> {
    let log_w: Vec<f64> = episode
        .iter()
        .map(|&(s, a, _)| (current[s][a] / behaviour[s][a]).ln())
        .collect();
    match correction {
        Correction::Behaviour | Correction::Ignore => vec![1.0; episode.len()],
        Correction::TokenTis(c) => log_w.iter().map(|l| l.exp().min(c)).collect(),
        Correction::SequenceTis(c) => vec![log_w.iter().sum::<f64>().exp().min(c); episode.len()],
        Correction::TokenMask(c) => log_w
            .iter()
            .map(|l| if l.abs() <= c.ln() { 1.0 } else { 0.0 })
            .collect(),
    }
}

/// Chapter 6's tabular REINFORCE on `mdp`, with every batch sampled by the
/// policy of `staleness` steps earlier and corrected by `correction`; the
/// exact value of `start` after every step.
pub fn stale_reinforce(
    mdp: &Mdp,
    start: usize,
    gamma: f64,
    lr: f64,
    batch: usize,
    steps: usize,
    staleness: usize,
    correction: Correction,
    seed: u64,
) -> Vec<f64> {
    let mut learner = TabularSoftmax::new(mdp.n_states(), mdp.n_actions());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut past: VecDeque<Policy> = VecDeque::new(); // the last staleness + 1 policies, oldest first
    let mut values = vec![evaluate_policy(mdp, &learner.policy(), gamma)[start]];
    for _ in 0..steps {
        let current = learner.policy();
        past.push_back(current.clone());
        if past.len() > staleness + 1 {
            past.pop_front();
        }
        let behaviour = &past[0];
        let episodes: Vec<_> = (0..batch)
            .map(|_| sample_episode(mdp, behaviour, start, 50, &mut rng))
            .collect();
        let weights: Vec<Vec<f64>> = episodes
            .iter()
            .map(|e| step_weights(e, &current, behaviour, correction))
            .collect();
        learner.weighted_step(&episodes, Some(&weights), gamma, lr);
        values.push(evaluate_policy(mdp, &learner.policy(), gamma)[start]);
    }
    values
}
// ANCHOR_END: tabular

// ANCHOR: offpolicy
/// Any algorithm of the loop, corrected for episodes sampled by μ ≠ π_old.
pub struct OffPolicy {
    pub inner: Box<dyn Algorithm + Send>,
    pub correction: Correction,
    /// log π_old of the iteration's episodes, [N, T], computed once before the update.
    old: Option<Tensor>,
}

impl OffPolicy {
    pub fn new(inner: Box<dyn Algorithm + Send>, correction: Correction) -> OffPolicy {
        OffPolicy {
            inner,
            correction,
            old: None,
        }
    }
}

impl Algorithm for OffPolicy {
    fn draw(
        &mut self,
        n: usize,
        tasks: usize,
        group: usize,
        iteration: usize,
        rng: &mut StdRng,
    ) -> Vec<usize> {
        self.inner.draw(n, tasks, group, iteration, rng)
    }

    fn rewards(
        &mut self,
        played: &[Played],
        trajectories: &[Trajectory],
        report: &mut Report,
    ) -> Vec<f64> {
        self.inner.rewards(played, trajectories, report)
    }

    fn advantages(
        &mut self,
        model: &TinyAgent,
        trajectories: &[Trajectory],
        rollout: &Batch,
        rewards: &[f64],
        group: usize,
        report: &mut Report,
    ) -> Tensor {
        let advantages =
            self.inner
                .advantages(model, trajectories, rollout, rewards, group, report); // [N, T]
        let old = tch::no_grad(|| forward(model, rollout).logp); // [N, T]
        let tokens = rollout.mask.sum(REAL).clamp_min(1.0);
        let mean = |x: &Tensor| ((x * &rollout.mask).sum(REAL) / &tokens).double_value(&[]);
        let log_w = (&old - &rollout.logprobs) * &rollout.mask; // [N, T]
        let w = log_w.exp();
        // KL(μ ‖ π_old) from μ's own samples: the k3 estimator of Chapter 10, (w − 1) − log w.
        report.insert("behaviour_kl".into(), mean(&((&w - 1.0) - &log_w)));
        report.insert("abs_log_weight".into(), mean(&log_w.abs()));
        let weights = importance_weights(&old, &rollout.logprobs, &rollout.mask, self.correction); // [N, T]
        report.insert("weight_mean".into(), mean(&weights));
        // The share of action tokens whose weight the truncation or the mask changed.
        let changed = match self.correction {
            Correction::Behaviour | Correction::Ignore => None,
            Correction::TokenTis(c) => Some(w.gt(c).to_kind(REAL)),
            Correction::SequenceTis(c) => Some(
                log_w
                    .sum_dim_intlist(1, true, REAL)
                    .exp()
                    .gt(c)
                    .to_kind(REAL)
                    .expand_as(&w),
            ),
            Correction::TokenMask(_) => Some(1.0 - &weights),
        };
        if let Some(changed) = changed {
            report.insert("weight_changed".into(), mean(&changed));
        }
        self.old = Some(old);
        advantages * weights // [N, T]
    }

    fn config_json(&self) -> Option<String> {
        let inner = self.inner.config_json().unwrap_or_else(|| "null".into());
        Some(format!(
            "{{\"correction\": {},\n\"inner\": {inner}}}",
            serde_json::to_string(&self.correction).expect("a correction serialises")
        ))
    }

    fn keep(&mut self, played: &[Played], group: usize, report: &mut Report) -> Vec<usize> {
        self.inner.keep(played, group, report)
    }

    fn loss(
        &mut self,
        forward: &Forward,
        minibatch: &Batch,
        advantages: &Tensor,
        rows: &[usize],
        report: &mut Report,
    ) -> Tensor {
        if self.correction == Correction::Behaviour {
            return self
                .inner
                .loss(forward, minibatch, advantages, rows, report);
        }
        // The inner loss takes its ratio against π_old instead of μ.
        let old = self.old.as_ref().expect("advantages before the loss");
        let index = Tensor::from_slice(&rows.iter().map(|&i| i as i64).collect::<Vec<_>>())
            .to_device(old.device());
        let t = minibatch.ids.size()[1];
        let proximal = Batch {
            ids: minibatch.ids.shallow_clone(),
            valid: minibatch.valid.shallow_clone(),
            mask: minibatch.mask.shallow_clone(),
            logprobs: old.index_select(0, &index).narrow(1, 0, t), // [B, T]
            rewards: minibatch.rewards.shallow_clone(),
        };
        self.inner
            .loss(forward, &proximal, advantages, rows, report)
    }
}
// ANCHOR_END: offpolicy

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_correction_weights_tokens_as_its_formula_says() {
        // Two episodes, three action tokens each (the last column is padding).
        let mask = Tensor::from_slice(&[1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0]).view([2, 4]);
        let behaviour = Tensor::zeros([2, 4], (REAL, tch::Device::Cpu));
        let ratios = [0.6f64, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let old = Tensor::from_slice(&ratios.map(f64::ln)).view([2, 4]) * &mask;
        let weights = |c| {
            Vec::<f64>::try_from(importance_weights(&old, &behaviour, &mask, c).view([-1])).unwrap()
        };
        let close = |a: Vec<f64>, b: [f64; 8]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
        assert!(close(
            weights(Correction::Ignore),
            [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
        ));
        // Truncated at 2: only the token with weight 4 changes.
        assert!(close(
            weights(Correction::TokenTis(2.0)),
            [0.6, 1.0, 2.0, 0.0, 1.0, 1.0, 1.0, 0.0]
        ));
        // One weight per episode: 0.6 · 1 · 4 = 2.4, below 3; the second episode's is 1.
        assert!(close(
            weights(Correction::SequenceTis(3.0)),
            [2.4, 2.4, 2.4, 0.0, 1.0, 1.0, 1.0, 0.0]
        ));
        assert!(close(
            weights(Correction::SequenceTis(1.5)),
            [1.5, 1.5, 1.5, 0.0, 1.0, 1.0, 1.0, 0.0]
        ));
        // Masked outside [1/2, 2]: 0.6 stays, 4 goes.
        assert!(close(
            weights(Correction::TokenMask(2.0)),
            [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
        ));
    }
}
