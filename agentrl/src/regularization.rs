//! Chapter 10: KL and entropy regularisation. The three sample estimators of
//! KL(q ‖ p) (k1, k2, k3) with their exact bias and variance for categorical
//! distributions; a KL penalty towards a frozen reference policy, placed in the
//! reward or in the loss; and an entropy bonus. The last two plug into the
//! training loop of Chapter 9 through its `Regularizer` hook.
//!
//! Shapes: `B` trajectories, `T` positions, `K` categories.

use crate::book::REAL;
use crate::grpo::{aggregate, LossNorm, Regularizer};
use crate::mdp::sample_action;
use crate::pg::forward;
use crate::tinyagent::TinyAgent;
use crate::trajectory::{collate, Batch, Trajectory};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use tch::Tensor;

// ANCHOR: estimators
/// Exact KL(q ‖ p) = Σ_x q(x) log(q(x) / p(x)) of two categoricals.
pub fn exact_kl(q: &[f64], p: &[f64]) -> f64 {
    q.iter()
        .zip(p)
        .filter(|(qx, _)| **qx > 0.0)
        .map(|(qx, px)| qx * (qx / px).ln())
        .sum()
}

/// A one-sample estimator of KL(q ‖ p) from x ~ q, written in terms of the
/// log ratio log r = log p(x) − log q(x).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Estimator {
    /// k1 = −log r: unbiased, can be negative, high variance.
    K1,
    /// k2 = ½ (log r)²: never negative, biased, low variance.
    K2,
    /// k3 = (r − 1) − log r: never negative, unbiased, low variance.
    K3,
}

impl Estimator {
    pub const ALL: [Estimator; 3] = [Estimator::K1, Estimator::K2, Estimator::K3];

    /// The estimate from one sample's log ratio.
    pub fn value(self, log_r: f64) -> f64 {
        match self {
            Estimator::K1 => -log_r,
            Estimator::K2 => 0.5 * log_r * log_r,
            Estimator::K3 => log_r.exp() - 1.0 - log_r,
        }
    }

    /// The same, element by element on a tensor of log ratios.
    pub fn tensor(self, log_r: &Tensor) -> Tensor {
        match self {
            Estimator::K1 => -log_r,
            Estimator::K2 => log_r.square() * 0.5,
            Estimator::K3 => log_r.exp() - 1.0 - log_r,
        }
    }
}

/// The mean and standard deviation of a one-sample estimate under x ~ q,
/// computed exactly by summing over the categories.
pub fn exact_moments(q: &[f64], p: &[f64], estimator: Estimator) -> (f64, f64) {
    let values: Vec<(f64, f64)> = q
        .iter()
        .zip(p)
        .filter(|(qx, _)| **qx > 0.0)
        .map(|(qx, px)| (*qx, estimator.value((px / qx).ln())))
        .collect();
    let mean: f64 = values.iter().map(|(w, v)| w * v).sum();
    let second: f64 = values.iter().map(|(w, v)| w * v * v).sum();
    (mean, (second - mean * mean).max(0.0).sqrt())
}

/// The same moments measured from `n` samples x ~ q.
pub fn sampled_moments(
    q: &[f64],
    p: &[f64],
    estimator: Estimator,
    n: usize,
    rng: &mut StdRng,
) -> (f64, f64) {
    let values: Vec<f64> = (0..n)
        .map(|_| {
            let x = sample_action(q, rng);
            estimator.value((p[x] / q[x]).ln())
        })
        .collect();
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0);
    (mean, var.sqrt())
}
// ANCHOR_END: estimators

// ANCHOR: penalty
/// Where a KL penalty enters the objective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// Subtract β · Σ_t k1 from each episode's reward, before advantages (as in RLHF's PPO).
    Reward,
    /// Add β · k3 to the loss, averaged over the action tokens with the policy
    /// loss's own normalisation, with its own gradient (as in GRPO).
    Loss,
}

/// A penalty on the divergence from a frozen reference policy (the base model).
pub struct KlPenalty {
    pub reference: TinyAgent,
    pub beta: f64,
    pub placement: Placement,
}

impl KlPenalty {
    /// A penalty of weight 0: it changes nothing and reports the KL.
    pub fn monitor(reference: TinyAgent) -> KlPenalty {
        KlPenalty {
            reference,
            beta: 0.0,
            placement: Placement::Loss,
        }
    }

    /// log π_ref at the action tokens of `batch`, [B, T] (0 elsewhere).
    fn reference_logprobs(&self, batch: &Batch) -> Tensor {
        tch::no_grad(|| forward(&self.reference, batch).logp)
    }
}

impl Regularizer for KlPenalty {
    fn shape_rewards(
        &mut self,
        trajectories: &[Trajectory],
        rewards: &mut [f64],
    ) -> Vec<(String, f64)> {
        if self.placement != Placement::Reward {
            return Vec::new();
        }
        let batch = collate(trajectories, self.reference.device());
        // k1 with x ~ π_old: log π_old − log π_ref, summed over each episode's action tokens.
        let log_r = self.reference_logprobs(&batch) - &batch.logprobs; // [B, T]
        let per_episode =
            (Estimator::K1.tensor(&log_r) * &batch.mask).sum_dim_intlist(1, false, REAL); // [B]
        let kl = Vec::<f64>::try_from(per_episode).expect("one KL per episode");
        for (reward, k) in rewards.iter_mut().zip(&kl) {
            *reward -= self.beta * *k;
        }
        let tokens = batch.mask.sum(REAL).double_value(&[]).max(1.0);
        vec![(
            "kl_in_reward".to_string(),
            kl.iter().copied().sum::<f64>() / tokens,
        )]
    }

    fn loss(
        &mut self,
        batch: &Batch,
        logp: &Tensor,
        _entropy: &Tensor,
        mask: &Tensor,
        norm: LossNorm,
    ) -> Option<(Tensor, Vec<(String, f64)>)> {
        // k3 with x ~ π_θ (the tokens were sampled by π_old ≈ π_θ): r = π_ref / π_θ.
        let k3 = Estimator::K3.tensor(&(self.reference_logprobs(batch) - logp)); // [B, T]
        let kl = aggregate(&k3.detach(), mask, LossNorm::TokenMean).double_value(&[]); // per token, for the metrics
        let term = match self.placement {
            // Inside the per-token objective, averaged like the policy loss.
            Placement::Loss => aggregate(&k3, mask, norm) * self.beta,
            Placement::Reward => Tensor::zeros([], (REAL, logp.device())),
        };
        Some((term, vec![("kl".to_string(), kl)]))
    }
}
// ANCHOR_END: penalty

// ANCHOR: entropy
/// An entropy bonus: −c · (the policy's entropy, averaged like the policy loss) added to the loss.
pub struct EntropyBonus {
    pub coef: f64,
}

impl Regularizer for EntropyBonus {
    fn loss(
        &mut self,
        _batch: &Batch,
        _logp: &Tensor,
        entropy: &Tensor,
        mask: &Tensor,
        norm: LossNorm,
    ) -> Option<(Tensor, Vec<(String, f64)>)> {
        let bonus = aggregate(entropy, mask, norm) * self.coef;
        let value = bonus.double_value(&[]);
        Some((-bonus, vec![("entropy_bonus".to_string(), value)]))
    }
}
// ANCHOR_END: entropy

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bandit::softmax;
    use rand::SeedableRng;

    #[test]
    fn exact_kl_matches_torch_and_k1_k3_are_unbiased_k2_is_not() {
        let q = softmax(&[0.5, -1.0, 0.2, 1.5, 0.0]);
        let p = softmax(&[0.1, 0.4, -0.3, 0.2, 1.0]);
        let kl = exact_kl(&q, &p);
        // Independent: torch's kl_div(log p, q) sums q (log q − log p).
        let torch = Tensor::from_slice(&p)
            .log()
            .kl_div(&Tensor::from_slice(&q), tch::Reduction::Sum, false)
            .double_value(&[]);
        assert!((kl - torch).abs() < 1e-12, "{kl} vs {torch}");
        assert!((exact_moments(&q, &p, Estimator::K1).0 - kl).abs() < 1e-12);
        assert!((exact_moments(&q, &p, Estimator::K3).0 - kl).abs() < 1e-12);
        assert!((exact_moments(&q, &p, Estimator::K2).0 - kl).abs() > 1e-3);
        // k3's variance is below k1's for nearby distributions.
        assert!(exact_moments(&q, &p, Estimator::K3).1 < exact_moments(&q, &p, Estimator::K1).1);
        // Sampling agrees with the exact moments.
        let mut rng = StdRng::seed_from_u64(3);
        for estimator in Estimator::ALL {
            let (mean, std) = exact_moments(&q, &p, estimator);
            let (m, s) = sampled_moments(&q, &p, estimator, 200_000, &mut rng);
            assert!(
                (m - mean).abs() < 4.0 * std / (200_000f64).sqrt() + 1e-9,
                "{estimator:?}: {m} vs {mean}"
            );
            assert!(
                (s - std).abs() < 0.02 * std + 1e-9,
                "{estimator:?}: {s} vs {std}"
            );
        }
    }

    #[test]
    fn k2_and_k3_are_never_negative_and_all_vanish_when_the_policies_agree() {
        for log_r in [-3.0, -0.5, -1e-3, 0.0, 1e-3, 0.7, 2.5] {
            assert!(Estimator::K2.value(log_r) >= 0.0 && Estimator::K3.value(log_r) >= 0.0);
        }
        assert!(Estimator::K1.value(0.3) < 0.0);
        for estimator in Estimator::ALL {
            assert_eq!(estimator.value(0.0), 0.0);
            let t = estimator.tensor(&Tensor::from_slice(&[0.3f64, -0.2]));
            let v = Vec::<f64>::try_from(t).unwrap();
            assert!(
                (v[0] - estimator.value(0.3)).abs() < 1e-12
                    && (v[1] - estimator.value(-0.2)).abs() < 1e-12
            );
        }
    }

    #[test]
    fn the_kl_loss_is_zero_with_zero_gradient_at_the_reference_and_pulls_back_elsewhere() {
        use crate::episode::Owner;
        let _turn = crate::book::seeded(0);
        let config = crate::tinyagent::Config {
            vocab: 32,
            n_ctx: 16,
            d_model: 16,
            n_layer: 1,
            n_head: 2,
        };
        let policy = TinyAgent::new(config, tch::Device::Cpu);
        let mut reference = TinyAgent::new(config, tch::Device::Cpu);
        reference.vs.copy(&policy.vs).unwrap();
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
        let mut penalty = KlPenalty {
            reference,
            beta: 1.0,
            placement: Placement::Loss,
        };
        let crate::pg::Forward { logp, entropy, .. } = forward(&policy, &batch);
        let (loss, _) = penalty
            .loss(&batch, &logp, &entropy, &batch.mask, LossNorm::TokenMean)
            .unwrap();
        assert!(loss.double_value(&[]).abs() < 1e-7);
        // d k3 / d log π = 1 − r: zero at r = 1, positive where π_θ > π_ref (pushes log π down).
        let logp = Tensor::from_slice(&[0f64, 0., -1.0, -2.0, 0., -0.5])
            .view([1, 6])
            .set_requires_grad(true);
        let ref_logp = penalty.reference_logprobs(&batch);
        penalty
            .loss(&batch, &logp, &entropy, &batch.mask, LossNorm::TokenMean)
            .unwrap()
            .0
            .backward();
        let grad = Vec::<f64>::try_from(logp.grad().view([-1])).unwrap();
        let r = Vec::<f64>::try_from((ref_logp - logp.detach()).exp().view([-1])).unwrap();
        for t in [2, 3, 5] {
            assert!((grad[t] - (1.0 - r[t]) / 3.0).abs() < 1e-6, "{grad:?}");
        }
        assert!([0, 1, 4].iter().all(|&t| grad[t] == 0.0));
    }

    #[test]
    fn a_reward_penalty_subtracts_beta_times_the_summed_k1() {
        use crate::episode::Owner;
        let _turn = crate::book::seeded(1);
        let config = crate::tinyagent::Config {
            vocab: 32,
            n_ctx: 16,
            d_model: 16,
            n_layer: 1,
            n_head: 2,
        };
        let reference = TinyAgent::new(config, tch::Device::Cpu);
        let logprobs = vec![0.0, 0.0, -1.5, -0.25, 0.0, -2.0];
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
            logprobs: logprobs.clone(),
            reward: 1.0,
            info: Default::default(),
        };
        let batch = collate(std::slice::from_ref(&trajectory), tch::Device::Cpu);
        let ref_logp = Vec::<f64>::try_from(
            tch::no_grad(|| crate::trajectory::policy_logprobs(&reference, &batch)).view([-1]),
        )
        .unwrap();
        let expected_kl: f64 = [2, 3, 5]
            .iter()
            .map(|&t| logprobs[t] as f64 - ref_logp[t] as f64)
            .sum();
        let mut penalty = KlPenalty {
            reference,
            beta: 0.5,
            placement: Placement::Reward,
        };
        let mut rewards = [1.0];
        penalty.shape_rewards(&[trajectory], &mut rewards);
        assert!(
            (rewards[0] - (1.0 - 0.5 * expected_kl)).abs() < 1e-5,
            "{rewards:?} vs {expected_kl}"
        );
    }

    #[test]
    fn the_entropy_bonus_is_minus_c_times_the_mean_entropy_on_the_mask() {
        let entropy = Tensor::from_slice(&[9f64, 1.0, 2.0, 9.0, 3.0, 9.0]).view([2, 3]);
        let mask = Tensor::from_slice(&[0f64, 1., 1., 0., 1., 0.]).view([2, 3]);
        let batch = collate(&[], tch::Device::Cpu);
        let (loss, _) = EntropyBonus { coef: 0.1 }
            .loss(&batch, &entropy, &entropy, &mask, LossNorm::TokenMean)
            .unwrap();
        assert!((loss.double_value(&[]) + 0.1 * 2.0).abs() < 1e-6);
    }
}
