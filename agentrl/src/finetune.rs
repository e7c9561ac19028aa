//! Chapter 15: learning from demonstrations and from the policy's own
//! successes. Supervised fine-tuning (SFT) on the oracle's transcripts with
//! the loss on the policy's tokens only; rejection-sampling fine-tuning (RFT,
//! expert iteration) as an algorithm of the one training loop; and the view
//! that makes them one method: a weighted log-likelihood whose weights differ.
//!
//! Shapes in comments: `B` rows, `T` positions.

use crate::episode::Owner;
use crate::gym::Task;
use crate::pg::{per_token, reinforce_loss, Algorithm, Forward, Report};
use crate::policies::Oracle;
use crate::pretrain::{
    corpus_of, load_model, pretrain, save_model, PretrainConfig, Sequence, BASE,
};
use crate::rollout::Played;
use crate::tinyagent::TinyAgent;
use crate::tokenizer::Bpe;
use crate::trajectory::{Batch, Trajectory};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use std::path::Path;
use tch::Tensor;

// ANCHOR: sft
/// The settings of an SFT run: Chapter 4's next-token training with weight 0
/// on every token the policy did not write (Chapter 5's mask), 60 AdamW
/// steps of 8 transcripts at a peak learning rate of 10⁻³.
pub const SFT: PretrainConfig = PretrainConfig {
    episodes: 0,
    steps: 60,
    batch: 8,
    lr: 1e-3,
    context_weight: 0.0,
    seed: 0,
    ..BASE
};

/// `n` transcripts of the oracle (read, test, the fix, test, submit), on
/// training tasks taken in an order shuffled by `rng`: a first pass over
/// the shuffled tasks, then a second, and so on.
pub fn oracle_transcripts(tasks: &[Task], n: usize, rng: &mut StdRng) -> Vec<Vec<(Owner, String)>> {
    let chosen: Vec<Task> = shuffled_passes(tasks.len(), n, rng)
        .into_iter()
        .map(|t| tasks[t].clone())
        .collect();
    corpus_of(&chosen, n, &mut Oracle)
}

/// `n` indices below `count`: passes over one shuffled order of them.
pub fn shuffled_passes(count: usize, n: usize, rng: &mut StdRng) -> Vec<usize> {
    let mut order: Vec<usize> = (0..count).collect();
    order.shuffle(rng);
    order.into_iter().cycle().take(n).collect()
}

/// Fine-tune `model` on `transcripts`, the loss on the policy's own tokens
/// only (`config.context_weight` = 0 for SFT). Returns the loss of every step.
pub fn sft(
    model: &mut TinyAgent,
    bpe: &Bpe,
    transcripts: &[Vec<(Owner, String)>],
    config: &PretrainConfig,
) -> Vec<f64> {
    let sequences: Vec<Sequence> = transcripts
        .iter()
        .map(|t| Sequence::new(bpe, t, config.context_weight))
        .collect();
    pretrain(model, &sequences, config)
}
// ANCHOR_END: sft

// ANCHOR: rft
/// Rejection-sampling fine-tuning as an algorithm of the training loop:
/// every episode the hidden tests pass is kept, every other one dropped, and
/// the kept ones are imitated, each action token with weight 1 (the loss of
/// Chapter 6 with a constant weight: a token mean of −log π). Several epochs
/// per iteration make each round a short fine-tuning on the round's successes.
pub struct Rft;

impl Algorithm for Rft {
    fn advantages(
        &mut self,
        _model: &TinyAgent,
        _trajectories: &[Trajectory],
        rollout: &Batch,
        rewards: &[f64],
        _group: usize,
        _report: &mut Report,
    ) -> Tensor {
        per_token(&vec![1.0; rewards.len()], &rollout.mask) // [N, T]
    }

    fn keep(&mut self, played: &[Played], _group: usize, report: &mut Report) -> Vec<usize> {
        let kept: Vec<usize> = (0..played.len())
            .filter(|&i| played[i].reward > 0.5)
            .collect();
        report.insert(
            "kept".into(),
            kept.len() as f64 / played.len().max(1) as f64,
        );
        kept
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

    fn config_json(&self) -> Option<String> {
        Some(r#"{"algorithm":"RFT"}"#.into())
    }
}
// ANCHOR_END: rft

// ANCHOR: weights
/// What each method of the chapter multiplies an episode's log-likelihood
/// by, as the weight w of the loss −Σ w log π(a_t | s_t) / (action tokens):
/// SFT 1 on a demonstration; RFT 1 on a success of its own, 0 otherwise;
/// REINFORCE the reward; and DPO, for a pair whose implicit rewards differ
/// by h = r_w − r_l, β σ(−h) on the chosen episode and −β σ(−h) on the
/// rejected one (the weights that give DPO's gradient, Section 15.4).
pub fn dpo_weights(beta: f64, h: f64) -> (f64, f64) {
    let w = beta / (1.0 + h.exp()); // β σ(−h)
    (w, -w)
}
// ANCHOR_END: weights

/// The held-out evaluation that the chapters from 15 on compare methods
/// with: the shares of solved and of hacked episodes among 4 on each of
/// `held_out`, from the stream "final evaluation" of `seed`, so that every
/// method trained with a seed is judged on the same draws.
pub fn held_out_rates(model: &TinyAgent, bpe: &Bpe, held_out: &[Task], seed: u64) -> (f64, f64) {
    crate::reward::outcome_rates(
        model,
        bpe,
        held_out,
        4,
        &mut crate::stats::Streams::new(seed).stream("final evaluation", 0),
    )
}

/// Store in `dir` a model whose weights are the file `weights` (a run's
/// `final.safetensors`), with `bpe`, so that [`crate::pg::train_from`] can start from it.
pub fn save_start(dir: &Path, bpe: &Bpe, weights: &Path) -> Result<(), String> {
    let model = TinyAgent::load(
        crate::tinyagent::Config {
            vocab: bpe.vocab_size() as i64,
            ..BASE.model
        },
        weights,
        crate::tinyagent::device(),
    )?;
    save_model(dir, bpe, &model)?;
    load_model(dir).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gym::Gym;
    use crate::stats::Streams;

    #[test]
    fn oracle_transcripts_cover_distinct_tasks_before_repeating_and_solve_each() {
        let gym = Gym::standard();
        let n = gym.train.len();
        let order = shuffled_passes(n, n + 3, &mut Streams::new(0).tasks(0));
        let first: std::collections::HashSet<usize> = order[..n].iter().copied().collect();
        assert_eq!(first.len(), n, "the first pass visits every task once");
        assert_eq!(order[n..], order[..3], "then starts the same order again");
        assert_ne!(
            shuffled_passes(n, 5, &mut Streams::new(1).tasks(0)),
            order[..5].to_vec(),
            "another seed, another order"
        );
        let transcripts = oracle_transcripts(&gym.train, 12, &mut Streams::new(0).tasks(0));
        assert_eq!(transcripts.len(), 12);
        for (transcript, &t) in transcripts.iter().zip(&order) {
            assert_eq!(transcript[0].1, gym.train[t].prompt(), "task {t}");
            let edit = format!("<call> edit {} </call>", gym.train[t].fix_op());
            assert_eq!(
                transcript
                    .iter()
                    .filter(|(o, m)| *o == Owner::Policy && *m == edit)
                    .count(),
                1,
                "{transcript:?}"
            );
            assert_eq!(
                transcript
                    .iter()
                    .filter(|(o, m)| *o == Owner::Policy && m.contains("edit"))
                    .count(),
                1,
                "{transcript:?}"
            );
        }
    }

    #[test]
    fn rft_keeps_the_successes_and_imitates_them_with_weight_one() {
        let played: Vec<Played> = [1.0, 0.0, 1.0, 0.0]
            .iter()
            .map(|&reward| Played {
                task: 0,
                segments: Vec::new(),
                actions: Vec::new(),
                reward,
                info: Default::default(),
                parse_errors: 0,
            })
            .collect();
        let mut report = Report::new();
        assert_eq!(Rft.keep(&played, 4, &mut report), vec![0, 2]);
        assert_eq!(report["kept"], 0.5);
        // The loss of a minibatch is the token mean of −log π over its action tokens.
        let logp = Tensor::from_slice(&[-1.0, -2.0, -3.0, -4.0]).view([1, 4]);
        let mask = Tensor::from_slice(&[0.0, 1.0, 1.0, 0.0]).view([1, 4]);
        let forward = Forward {
            logp: logp.shallow_clone(),
            entropy: logp.zeros_like(),
            hidden: logp.zeros_like(),
            log_probs: logp.zeros_like(),
        };
        let batch = Batch {
            ids: mask.zeros_like(),
            valid: mask.ones_like(),
            mask: mask.shallow_clone(),
            logprobs: mask.zeros_like(),
            rewards: Tensor::from_slice(&[1.0]),
        };
        let loss = Rft.loss(&forward, &batch, &mask, &[0], &mut report);
        assert_eq!(loss.double_value(&[]), 2.5);
    }

    #[test]
    fn the_dpo_weights_are_beta_times_the_sigmoid_of_minus_the_margin() {
        let (w, l) = dpo_weights(0.1, 0.2);
        assert!((w - 0.1 * 0.450166003).abs() < 1e-9 && (w + l).abs() < 1e-15);
        assert!((dpo_weights(1.0, 0.0).0 - 0.5).abs() < 1e-15);
    }

    /// The claim of Section 15.1: DPO's gradient is the gradient of the
    /// weighted log-likelihood with the weights of `dpo_weights`, held fixed.
    #[test]
    fn the_dpo_gradient_is_a_weighted_log_likelihood_gradient() {
        use crate::pg::forward;
        use crate::preference::{sequence_logp, Dpo};
        use crate::tinyagent::Config;
        use crate::trajectory::collate;
        let config = Config {
            vocab: 16,
            n_ctx: 16,
            d_model: 16,
            n_layer: 1,
            n_head: 2,
        };
        let policy = {
            let _turn = crate::book::seeded(1);
            TinyAgent::new(config, tch::Device::Cpu)
        };
        let reference = {
            let _turn = crate::book::seeded(2);
            TinyAgent::new(config, tch::Device::Cpu)
        };
        let episode = crate::trajectory::toy;
        // Two pairs: chosen rows 0 and 1, rejected rows 2 and 3.
        let batch = collate(
            &[
                episode([4, 5, 6]),
                episode([7, 8, 9]),
                episode([10, 11, 12]),
                episode([13, 14, 15]),
            ],
            tch::Device::Cpu,
        );
        let beta = 0.5;
        let gradient = |loss: &Tensor| -> Vec<f64> {
            for v in policy.vs.trainable_variables() {
                let mut g = v.grad();
                if g.defined() {
                    let _ = g.zero_();
                }
            }
            loss.backward();
            policy
                .vs
                .trainable_variables()
                .iter()
                .flat_map(|v| Vec::<f64>::try_from(v.grad().reshape([-1])).unwrap())
                .collect()
        };
        let logp = sequence_logp(&forward(&policy, &batch).logp, &batch.mask); // [4]
        let fixed = tch::no_grad(|| sequence_logp(&forward(&reference, &batch).logp, &batch.mask)); // [4]
        let out = Dpo {
            beta,
            label_smoothing: 0.0,
        }
        .loss(
            &logp.narrow(0, 0, 2),
            &logp.narrow(0, 2, 2),
            &fixed.narrow(0, 0, 2),
            &fixed.narrow(0, 2, 2),
        );
        let h: Vec<f64> = Vec::try_from(&out.chosen_rewards - &out.rejected_rewards).unwrap();
        assert!(
            h.iter().all(|h| h.abs() > 1e-3),
            "a pair the policy and the reference rank differently: {h:?}"
        );
        let dpo = gradient(&out.loss);
        let w: Vec<f64> = h
            .iter()
            .map(|&h| dpo_weights(beta, h).0)
            .chain(h.iter().map(|&h| dpo_weights(beta, h).1))
            .collect();
        // The one weighted log-likelihood, w on every action token of its episode, over the 2 pairs.
        let logp = forward(&policy, &batch).logp; // [4, T], a fresh graph
        let weights = crate::pg::per_token(&w, &batch.mask); // [4, T]
        let pairs = Tensor::from(2.0);
        let nll = gradient(&crate::pretrain::weighted_log_likelihood(
            &logp, &weights, &pairs,
        ));
        let norm = dpo.iter().map(|g| g * g).sum::<f64>().sqrt();
        let gap = dpo
            .iter()
            .zip(&nll)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f64>()
            .sqrt();
        assert!(
            norm > 1e-6 && gap < 1e-12 * norm.max(1.0),
            "gradient gap {gap} against a norm of {norm}"
        );
    }
}
