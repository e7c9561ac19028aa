//! Chapter 15: learning from preferences. Direct preference optimisation
//! (DPO) on pairs of episodes of one task, one preferred (chosen) over the
//! other (rejected): the sigmoid loss on the difference of implicit rewards,
//! with label smoothing; the implicit rewards themselves, their accuracy and
//! margin; and the pairing of a group's successes with its failures.
//!
//! Shapes in comments: `P` pairs, `B` rows, `T` positions.

use crate::book::REAL;
use crate::pg::forward;
use crate::rollout::progress;
use crate::tinyagent::TinyAgent;
use crate::trajectory::{collate, Trajectory};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use tch::nn::OptimizerConfig;
use tch::{nn, Tensor};

// ANCHOR: sequence
/// log π(y | x) of each row's actions: the per-token log-probs `logp` [B, T]
/// summed over the action tokens `mask` [B, T] selects. [B].
pub fn sequence_logp(logp: &Tensor, mask: &Tensor) -> Tensor {
    (logp * mask).sum_dim_intlist(-1, false, REAL)
}
// ANCHOR_END: sequence

// ANCHOR: dpo
/// The DPO objective's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dpo {
    /// β: how far from the reference a unit of implicit reward lets the policy move.
    pub beta: f64,
    /// ζ: the share of pairs whose label is assumed flipped (0 is plain DPO).
    pub label_smoothing: f64,
}

/// The loss of a batch of pairs and what it says about them.
#[derive(Debug)]
pub struct DpoLoss {
    /// The mean over pairs of −(1 − ζ) log σ(h) − ζ log σ(−h), h = R_w − R_l: a scalar.
    pub loss: Tensor,
    /// R_w = β (log π(y_w) − log π_ref(y_w)) and R_l likewise, detached: [P] each.
    pub chosen_rewards: Tensor,
    pub rejected_rewards: Tensor,
}

impl Dpo {
    /// The loss for pairs whose chosen and rejected sequences have summed
    /// action log-probs `chosen`, `rejected` [P] under the policy (with
    /// gradients) and `ref_chosen`, `ref_rejected` [P] under the frozen
    /// reference (no gradient flows into them).
    pub fn loss(
        &self,
        chosen: &Tensor,
        rejected: &Tensor,
        ref_chosen: &Tensor,
        ref_rejected: &Tensor,
    ) -> DpoLoss {
        let chosen_ratio = chosen - ref_chosen.detach(); // [P]: log π(y_w)/π_ref(y_w)
        let rejected_ratio = rejected - ref_rejected.detach(); // [P]
        let h = (&chosen_ratio - &rejected_ratio) * self.beta; // [P]: R_w − R_l
        let eps = self.label_smoothing;
        let per_pair = -h.log_sigmoid() * (1.0 - eps) - (-&h).log_sigmoid() * eps; // [P]
        DpoLoss {
            loss: per_pair.mean(REAL),
            chosen_rewards: (chosen_ratio * self.beta).detach(),
            rejected_rewards: (rejected_ratio * self.beta).detach(),
        }
    }
}

impl DpoLoss {
    /// The share of pairs whose chosen episode earns the larger implicit reward.
    pub fn accuracy(&self) -> f64 {
        self.chosen_rewards
            .gt_tensor(&self.rejected_rewards)
            .to_kind(REAL)
            .mean(REAL)
            .double_value(&[])
    }

    /// The mean of R_w − R_l over pairs.
    pub fn margin(&self) -> f64 {
        (&self.chosen_rewards - &self.rejected_rewards)
            .mean(REAL)
            .double_value(&[])
    }
}
// ANCHOR_END: dpo

// ANCHOR: pairs
/// Pairs (chosen, rejected) of episodes of one task: `rewards` holds groups of
/// `group` consecutive episodes of the same task; within each group every
/// episode with reward above `threshold` is matched with a different one at or
/// below it, both picked at random (`rng`), until one side runs out. Groups
/// that are all successes or all failures give no pair.
pub fn success_failure_pairs(
    rewards: &[f64],
    group: usize,
    threshold: f64,
    rng: &mut StdRng,
) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for (g, rewards) in rewards.chunks(group.max(1)).enumerate() {
        let base = g * group.max(1);
        let (mut won, mut lost): (Vec<usize>, Vec<usize>) = (0..rewards.len())
            .map(|i| base + i)
            .partition(|&i| rewards[i - base] > threshold);
        won.shuffle(rng);
        lost.shuffle(rng);
        pairs.extend(won.into_iter().zip(lost));
    }
    pairs
}
// ANCHOR_END: pairs

// ANCHOR: train
/// The settings of a DPO run: the objective, AdamW steps at a constant
/// learning rate, and pairs per step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DpoConfig {
    pub dpo: Dpo,
    pub steps: usize,
    pub pairs: usize,
    pub lr: f64,
}

/// One step of a DPO run: its loss, and the accuracy and margin of the
/// implicit rewards on the step's pairs (before the step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DpoRecord {
    pub loss: f64,
    pub accuracy: f64,
    pub margin: f64,
}

/// Train `model` with DPO on `pairs` (chosen, rejected) against the frozen
/// `reference`. Each step takes the next `config.pairs` pairs of an order
/// shuffled by `rng` (reshuffled after each pass), puts chosen and rejected
/// episodes in one batch, and sums each episode's action log-probs.
pub fn train_dpo(
    model: &mut TinyAgent,
    reference: &TinyAgent,
    pairs: &[(Trajectory, Trajectory)],
    config: &DpoConfig,
    rng: &mut StdRng,
) -> Vec<DpoRecord> {
    assert!(!pairs.is_empty(), "DPO needs at least one pair");
    let mut opt = nn::AdamW::default()
        .build(&model.vs, config.lr)
        .expect("an optimiser for the model");
    let (mut order, mut next) = ((0..pairs.len()).collect::<Vec<usize>>(), pairs.len());
    let bar = progress(config.steps as u64, "DPO");
    let mut records = Vec::with_capacity(config.steps);
    for _ in 0..config.steps {
        let mut picked = Vec::with_capacity(config.pairs);
        while picked.len() < config.pairs.min(pairs.len()) {
            if next == order.len() {
                order.shuffle(rng);
                next = 0;
            }
            picked.push(order[next]);
            next += 1;
        }
        let p = picked.len() as i64;
        let rows: Vec<Trajectory> = picked
            .iter()
            .map(|&i| pairs[i].0.clone())
            .chain(picked.iter().map(|&i| pairs[i].1.clone()))
            .collect();
        let batch = collate(&rows, model.device()); // [2P, T]: the chosen episodes, then the rejected ones
        let policy = sequence_logp(&forward(model, &batch).logp, &batch.mask); // [2P]
        let fixed = tch::no_grad(|| sequence_logp(&forward(reference, &batch).logp, &batch.mask)); // [2P]
        let out = config.dpo.loss(
            &policy.narrow(0, 0, p),
            &policy.narrow(0, p, p),
            &fixed.narrow(0, 0, p),
            &fixed.narrow(0, p, p),
        );
        opt.backward_step(&out.loss);
        records.push(DpoRecord {
            loss: out.loss.double_value(&[]),
            accuracy: out.accuracy(),
            margin: out.margin(),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    records
}
// ANCHOR_END: train

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn scalar(values: &[f64]) -> Tensor {
        Tensor::from_slice(values)
    }

    /// Hand-worked pair: β = 0.1, policy log-probs −10 (chosen) and −12
    /// (rejected), reference −11 for both, so h = 0.1 · (1 − (−1)) = 0.2.
    /// −log σ(0.2) = ln(1 + e^(−0.2)) = 0.598138869; dL/dh = −σ(−0.2) = −0.450166003,
    /// so the gradient is −0.0450166003 for the chosen log-prob and +0.0450166003
    /// for the rejected one. With ζ = 0.1: 0.9 · 0.598138869 + 0.1 · ln(1 + e^0.2)
    /// = 0.9 · 0.598138869 + 0.1 · 0.798138869 = 0.618138869, and
    /// dL/dh = −0.9 σ(−0.2) + 0.1 σ(0.2) = −0.405149403 + 0.054983400 = −0.350166003.
    #[test]
    fn the_dpo_loss_and_its_gradient_match_hand_worked_values() {
        for (eps, loss_by_hand, dh_by_hand) in [
            (0.0, 0.598138869, -0.450166003),
            (0.1, 0.618138869, -0.350166003),
        ] {
            let chosen = scalar(&[-10.0]).set_requires_grad(true);
            let rejected = scalar(&[-12.0]).set_requires_grad(true);
            let reference = scalar(&[-11.0]).set_requires_grad(true);
            let out = Dpo {
                beta: 0.1,
                label_smoothing: eps,
            }
            .loss(&chosen, &rejected, &reference, &reference);
            assert!(
                (out.loss.double_value(&[]) - loss_by_hand).abs() < 1e-8,
                "ζ = {eps}: loss {}",
                out.loss.double_value(&[])
            );
            out.loss.backward();
            assert!((chosen.grad().double_value(&[0]) - 0.1 * dh_by_hand).abs() < 1e-9);
            assert!((rejected.grad().double_value(&[0]) + 0.1 * dh_by_hand).abs() < 1e-9);
            assert!(
                !reference.grad().defined(),
                "no gradient reaches the reference"
            );
            assert!((out.chosen_rewards.double_value(&[0]) - 0.1).abs() < 1e-12);
            assert!((out.rejected_rewards.double_value(&[0]) + 0.1).abs() < 1e-12);
        }
    }

    #[test]
    fn accuracy_and_margin_average_over_pairs() {
        // Implicit rewards (β = 1): pair 0 R_w − R_l = 2 − 0 = 2; pair 1: 0 − 1 = −1.
        let out = Dpo {
            beta: 1.0,
            label_smoothing: 0.0,
        }
        .loss(
            &scalar(&[-1.0, -3.0]),
            &scalar(&[-3.0, -2.0]),
            &scalar(&[-3.0, -3.0]),
            &scalar(&[-3.0, -3.0]),
        );
        assert_eq!(out.accuracy(), 0.5);
        assert!((out.margin() - 0.5).abs() < 1e-12);
        // Mean of ln(1 + e^−2) and ln(1 + e^1).
        let by_hand = ((1.0 + (-2.0f64).exp()).ln() + (1.0 + 1.0f64.exp()).ln()) / 2.0;
        assert!((out.loss.double_value(&[]) - by_hand).abs() < 1e-12);
    }

    #[test]
    fn a_sequence_log_prob_sums_the_action_tokens_only() {
        let logp =
            Tensor::from_slice(&[-1.0, -2.0, -4.0, -8.0, -0.5, -0.25, -0.125, -9.0]).view([2, 4]);
        let mask = Tensor::from_slice(&[0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]).view([2, 4]);
        assert_eq!(
            Vec::<f64>::try_from(sequence_logp(&logp, &mask)).unwrap(),
            vec![-6.0, -0.625]
        );
    }

    #[test]
    fn pairs_match_successes_with_failures_of_the_same_task() {
        let rewards = [
            1.0, 0.0, 0.0, 1.0, /* all fail */ 0.0, 0.0, 0.0, 0.0, /* one win */ 0.0,
            1.0, 0.0, 0.0,
        ];
        let pairs = success_failure_pairs(&rewards, 4, 0.5, &mut StdRng::seed_from_u64(0));
        assert_eq!(pairs.len(), 3, "{pairs:?}");
        for &(w, l) in &pairs {
            assert_eq!(w / 4, l / 4, "both episodes of one task");
            assert!(rewards[w] > 0.5 && rewards[l] <= 0.5);
        }
        let mut used: Vec<usize> = pairs.iter().flat_map(|&(w, l)| [w, l]).collect();
        used.sort();
        used.dedup();
        assert_eq!(used.len(), 6, "no episode is used twice");
    }

    #[test]
    fn dpo_starts_at_ln_2_and_learns_to_prefer_the_chosen_episode() {
        use crate::pg::copy_model;
        use crate::tinyagent::Config;
        let model_of = || {
            let _turn = crate::book::seeded(0);
            TinyAgent::new(
                Config {
                    vocab: 16,
                    n_ctx: 16,
                    d_model: 16,
                    n_layer: 1,
                    n_head: 2,
                },
                tch::Device::Cpu,
            )
        };
        let pairs = vec![(
            crate::trajectory::toy([4, 5, 6]),
            crate::trajectory::toy([7, 8, 9]),
        )];
        let reference = model_of();
        let mut model = copy_model(&reference, None);
        let config = DpoConfig {
            dpo: Dpo {
                beta: 0.5,
                label_smoothing: 0.0,
            },
            steps: 20,
            pairs: 4,
            lr: 1e-2,
        };
        let records = train_dpo(
            &mut model,
            &reference,
            &pairs,
            &config,
            &mut StdRng::seed_from_u64(0),
        );
        assert_eq!(records.len(), 20);
        // The policy starts as the reference: h = 0, loss ln 2, no pair ranked yet.
        assert!(
            (records[0].loss - std::f64::consts::LN_2).abs() < 1e-9,
            "{:?}",
            records[0]
        );
        assert_eq!((records[0].accuracy, records[0].margin), (0.0, 0.0));
        let last = records[19];
        assert!(
            last.loss < 0.5 * std::f64::consts::LN_2 && last.accuracy == 1.0 && last.margin > 0.0,
            "{last:?}"
        );
        // The reference did not move.
        let logp = |m: &TinyAgent| {
            sequence_logp(
                &forward(m, &collate(&[pairs[0].0.clone()], tch::Device::Cpu)).logp,
                &collate(&[pairs[0].0.clone()], tch::Device::Cpu).mask,
            )
            .double_value(&[0])
        };
        assert_eq!(logp(&reference), logp(&model_of()));
        assert!(
            logp(&model) > logp(&reference),
            "the chosen episode became more likely"
        );
    }
}
