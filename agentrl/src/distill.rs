//! Chapter 16: distillation for agents. A larger teacher grown from the
//! base model (more blocks, computing the same function until trained);
//! off-policy distillation, SFT on the teacher's own episodes; and on-policy
//! distillation, in which the student samples, the teacher scores every
//! sampled token, and the per-token reverse KL to the teacher is the loss.
//!
//! Shapes in comments: `N` episodes, `T` positions.

use crate::book::REAL;
use crate::episode::Owner;
use crate::pg::{Algorithm, Forward, Report};
use crate::pretrain::Sequence;
use crate::tinyagent::{Config, TinyAgent};
use crate::trajectory::{Batch, Trajectory};
use std::path::PathBuf;
use tch::Tensor;

// ANCHOR: grow
/// A deeper TinyAgent that computes exactly what `model` computes: the same
/// embeddings, blocks and final norm, then `extra` new blocks whose two
/// output projections (attention's `proj`, the MLP's `down`) are zero, so
/// that each adds nothing to the residual stream until training moves them.
/// The other weights of the new blocks are drawn from libtorch's generator
/// with `seed`.
pub fn grow(model: &TinyAgent, extra: i64, seed: i64) -> TinyAgent {
    let config = Config {
        n_layer: model.config.n_layer + extra,
        ..model.config
    };
    let bigger = {
        let _turn = crate::book::seeded(seed);
        TinyAgent::new(config, model.device())
    };
    let old = model.vs.variables();
    tch::no_grad(|| {
        for (name, mut weight) in bigger.vs.variables() {
            match old.get(&name) {
                Some(value) => {
                    weight.copy_(value);
                }
                None if name.contains(".proj.") || name.contains(".down.") => {
                    let _ = weight.zero_();
                }
                None => {}
            }
        }
    });
    bigger
}
// ANCHOR_END: grow

// ANCHOR: sequences
/// Episodes as next-token training data with the loss on the policy's own
/// tokens only: off-policy distillation is SFT on a teacher's episodes.
pub fn imitation_sequences(trajectories: &[Trajectory]) -> Vec<Sequence> {
    trajectories
        .iter()
        .map(|tr| Sequence {
            ids: tr.ids.clone(),
            weights: tr
                .owners
                .iter()
                .map(|&o| if o == Owner::Policy { 1.0 } else { 0.0 })
                .collect(),
        })
        .collect()
}
// ANCHOR_END: sequences

// ANCHOR: on_policy
/// On-policy distillation as an algorithm of the training loop. The loop's
/// rollout is the student's own episodes; at every action token of them,
/// the teacher's next-token distribution is compared with the student's,
/// and the loss is the mean over action tokens of the reverse KL
/// KL(π_θ(· | s_t) ‖ π_T(· | s_t)), summed over the whole vocabulary. The
/// environment's reward is not used, and no advantage either: the teacher
/// says how every token should have been distributed, in the student's own
/// states.
pub struct OnPolicyDistill {
    pub teacher: TinyAgent,
    /// Where the teacher came from, for the run's configuration.
    pub teacher_path: PathBuf,
}

/// KL(p ‖ q) at each of N positions from log-probabilities `log_p`, `log_q` [N, V]: [N].
pub fn reverse_kl(log_p: &Tensor, log_q: &Tensor) -> Tensor {
    (log_p.exp() * (log_p - log_q)).sum_dim_intlist(-1, false, REAL) // [N]
}

impl Algorithm for OnPolicyDistill {
    fn advantages(
        &mut self,
        _model: &TinyAgent,
        _trajectories: &[Trajectory],
        rollout: &Batch,
        _rewards: &[f64],
        _group: usize,
        _report: &mut Report,
    ) -> Tensor {
        rollout.mask.zeros_like() // [N, T]: unused
    }

    fn loss(
        &mut self,
        forward: &Forward,
        minibatch: &Batch,
        _advantages: &Tensor,
        _rows: &[usize],
        report: &mut Report,
    ) -> Tensor {
        let teacher = tch::no_grad(|| crate::pg::forward(&self.teacher, minibatch)).log_probs; // [N, V], the same positions
        let kl = reverse_kl(&forward.log_probs, &teacher); // [N]
        let loss = kl.mean(REAL);
        report.insert("reverse_kl".into(), loss.double_value(&[]));
        loss
    }

    fn config_json(&self) -> Option<String> {
        Some(serde_json::json!({ "algorithm": "on-policy distillation", "teacher": self.teacher_path.display().to_string(), "teacher_layers": self.teacher.config.n_layer }).to_string())
    }
}
// ANCHOR_END: on_policy

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trajectory::collate;

    fn small() -> TinyAgent {
        let _turn = crate::book::seeded(3);
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
    }

    use crate::trajectory::toy as episode;

    #[test]
    fn a_grown_model_computes_exactly_what_it_grew_from() {
        let model = small();
        let bigger = grow(&model, 2, 7);
        assert_eq!(bigger.config.n_layer, 3);
        assert!(bigger.parameter_count() > model.parameter_count());
        let batch = collate(&[episode([4, 5, 6]), episode([7, 8, 9])], tch::Device::Cpu);
        let (a, b) = (
            model.logits(&batch.ids, &batch.valid),
            bigger.logits(&batch.ids, &batch.valid),
        );
        assert_eq!(
            Vec::<f64>::try_from(a.reshape([-1])).unwrap(),
            Vec::<f64>::try_from(b.reshape([-1])).unwrap(),
            "bit for bit"
        );
    }

    #[test]
    fn the_loss_is_the_mean_reverse_kl_to_the_teacher_at_the_action_tokens() {
        let (student, teacher) = (small(), grow(&small(), 1, 5));
        let batch = collate(&[episode([4, 5, 6]), episode([7, 8, 9])], tch::Device::Cpu);
        let mut report = Report::new();
        // A teacher that computes what the student computes: no divergence.
        let mut same = OnPolicyDistill {
            teacher,
            teacher_path: PathBuf::from("teacher"),
        };
        let loss = same.loss(
            &crate::pg::forward(&student, &batch),
            &batch,
            &batch.mask,
            &[0, 1],
            &mut report,
        );
        assert!(
            loss.double_value(&[]).abs() < 1e-15,
            "{}",
            loss.double_value(&[])
        );
        // Move the teacher (not by a constant: the final LayerNorm would remove
        // it); the loss is the mean over the 6 action tokens of Σ_v p_s (log p_s − log p_T), by hand.
        tch::no_grad(|| {
            for (name, mut w) in same.teacher.vs.variables() {
                if name == "blocks.1.down.weight" {
                    let wave = Tensor::arange(w.numel() as i64, (REAL, tch::Device::Cpu))
                        .view(w.size().as_slice())
                        .sin()
                        * 0.05;
                    w.copy_(&wave);
                }
            }
        });
        let forward = crate::pg::forward(&student, &batch);
        let loss = same
            .loss(&forward, &batch, &batch.mask, &[0, 1], &mut report)
            .double_value(&[]);
        let (s, t) = (
            Vec::<Vec<f64>>::try_from(forward.log_probs.detach()).unwrap(),
            Vec::<Vec<f64>>::try_from(crate::pg::forward(&same.teacher, &batch).log_probs.detach())
                .unwrap(),
        );
        assert_eq!(s.len(), 6, "three action tokens in each of two episodes");
        let by_hand = s
            .iter()
            .zip(&t)
            .map(|(s, t)| s.iter().zip(t).map(|(a, b)| a.exp() * (a - b)).sum::<f64>())
            .sum::<f64>()
            / 6.0;
        assert!(
            loss > 1e-6 && (loss - by_hand).abs() < 1e-12,
            "{loss} against {by_hand}"
        );
        assert_eq!(report["reverse_kl"], loss);
    }

    #[test]
    fn imitation_sequences_weigh_the_policy_tokens_only() {
        let sequences = imitation_sequences(&[episode([4, 5, 6])]);
        assert_eq!(sequences[0].ids, vec![1, 2, 4, 5, 3, 6]);
        assert_eq!(sequences[0].weights, vec![0.0, 0.0, 1.0, 1.0, 0.0, 1.0]);
    }
}
