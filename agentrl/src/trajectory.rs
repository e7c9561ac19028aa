//! Chapter 5: trajectories and templates. An episode becomes one token
//! stream with, per token, who wrote it (the action mask keeps only what the
//! policy sampled) and the log-probability it was sampled with; trajectories
//! of different lengths become one padded batch; the policy's log-probs are
//! recomputed from a batch in one forward pass. These are the types Part II
//! trains on.
//!
//! Shapes: `B` trajectories, `T` positions (the longest trajectory).

use crate::book::REAL;
use crate::episode::Owner;
use crate::gym::Info;
use crate::plot::series_colour;
use crate::rollout::Played;
use crate::tinyagent::TinyAgent;
use crate::tokenizer::Bpe;
use plotters::prelude::*;
use std::path::Path;
use tch::{Device, Tensor};

// ANCHOR: trajectory
/// One episode as the model saw and wrote it.
#[derive(Clone, Debug, PartialEq)]
pub struct Trajectory {
    pub task: usize,
    /// The whole token stream, the policy's ids exactly as sampled.
    pub ids: Vec<u32>,
    /// Who wrote each id.
    pub owners: Vec<Owner>,
    /// The sampling log-prob of each id the policy wrote; 0 elsewhere.
    pub logprobs: Vec<f64>,
    pub reward: f64,
    pub info: Info,
}

impl Trajectory {
    /// Flatten a played episode, keeping its segments' ids and log-probs.
    pub fn from_played(played: &Played) -> Trajectory {
        let (mut ids, mut owners, mut logprobs) = (Vec::new(), Vec::new(), Vec::new());
        for segment in &played.segments {
            ids.extend(&segment.ids);
            owners.extend(std::iter::repeat_n(segment.owner, segment.ids.len()));
            if segment.owner == Owner::Policy {
                logprobs.extend(&segment.logprobs);
            } else {
                logprobs.extend(std::iter::repeat_n(0.0, segment.ids.len()));
            }
        }
        Trajectory {
            task: played.task,
            ids,
            owners,
            logprobs,
            reward: played.reward,
            info: played.info,
        }
    }

    /// A transcript that no model sampled (a scripted policy's, say), encoded
    /// with the chat template; its log-probs are unknown and left at 0.
    pub fn from_transcript(
        bpe: &Bpe,
        task: usize,
        transcript: &[(Owner, String)],
        reward: f64,
        info: Info,
    ) -> Trajectory {
        let (ids, owners) = bpe.encode_transcript(transcript);
        let logprobs = vec![0.0; ids.len()];
        Trajectory {
            task,
            ids,
            owners,
            logprobs,
            reward,
            info,
        }
    }

    /// 1 where the policy sampled the token: the only places a policy loss may look.
    pub fn action_mask(&self) -> Vec<bool> {
        self.owners
            .iter()
            .map(|&owner| owner == Owner::Policy)
            .collect()
    }
}
// ANCHOR_END: trajectory

// ANCHOR: batch
/// Trajectories padded on the right into tensors of one shape.
#[derive(Debug)]
pub struct Batch {
    pub ids: Tensor,      // [B, T] i64, 0 (`<|pad|>`) after the end
    pub valid: Tensor,    // [B, T] bool, real tokens
    pub mask: Tensor,     // [B, T] f64, 1 on tokens the policy sampled
    pub logprobs: Tensor, // [B, T] f64, sampling log-probs (0 off the mask)
    pub rewards: Tensor,  // [B] f64
}

/// Pad `trajectories` to the longest one.
pub fn collate(trajectories: &[Trajectory], device: Device) -> Batch {
    let (b, t) = (
        trajectories.len(),
        trajectories
            .iter()
            .map(|tr| tr.ids.len())
            .max()
            .unwrap_or(0),
    );
    let mut ids = vec![0i64; b * t];
    let mut valid = vec![false; b * t];
    let mut mask = vec![0f64; b * t];
    let mut logprobs = vec![0f64; b * t];
    for (row, tr) in trajectories.iter().enumerate() {
        for (col, ((&id, &owner), &logprob)) in
            tr.ids.iter().zip(&tr.owners).zip(&tr.logprobs).enumerate()
        {
            let at = row * t + col;
            (ids[at], valid[at], logprobs[at]) = (id as i64, true, logprob);
            mask[at] = if owner == Owner::Policy { 1.0 } else { 0.0 };
        }
    }
    let shape = [b as i64, t as i64];
    let rewards: Vec<f64> = trajectories.iter().map(|tr| tr.reward).collect();
    Batch {
        ids: Tensor::from_slice(&ids).view(shape).to_device(device),
        valid: Tensor::from_slice(&valid).view(shape).to_device(device),
        mask: Tensor::from_slice(&mask).view(shape).to_device(device),
        logprobs: Tensor::from_slice(&logprobs).view(shape).to_device(device),
        rewards: Tensor::from_slice(&rewards).to_device(device),
    }
}

/// log π(x_t | x_{<t}) at every position of the batch, [B, T], aligned with
/// `ids` (position 0 has no prediction and gets 0). One forward pass.
pub fn policy_logprobs(model: &TinyAgent, batch: &Batch) -> Tensor {
    let (b, _) = batch.ids.size2().unwrap();
    let next = model.token_logprobs(&batch.ids, &batch.valid); // [B, T-1]
    Tensor::cat(&[Tensor::zeros([b, 1], (REAL, next.device())), next], 1) // [B, T]
}
// ANCHOR_END: batch

// ANCHOR: check
/// How the recomputed log-probs compare with the sampling log-probs on the action tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogprobGap {
    /// Action tokens compared (mask 1).
    pub tokens: usize,
    /// Largest |recomputed − sampled| log-prob over those tokens.
    pub max_abs: f64,
    /// Mean |recomputed − sampled| log-prob per token.
    pub mean_abs: f64,
    /// Mean ratio exp(recomputed − sampled) per token: 1 when the two agree.
    pub mean_ratio: f64,
}

/// The check to run before the first update, when the policy is still the one
/// that sampled: on every action token the log-prob that training recomputes
/// (`recomputed`, [B, T], e.g. from `policy_logprobs`) must equal the one
/// stored at sampling time, up to `tolerance`. `Ok` carries the measured gap;
/// `Err` says how far apart the two are.
pub fn check_logprobs(
    recomputed: &Tensor,
    batch: &Batch,
    tolerance: f64,
) -> Result<LogprobGap, String> {
    let diff = (recomputed - &batch.logprobs) * &batch.mask; // [B, T], 0 off the mask
    let tokens = batch.mask.sum(REAL).double_value(&[]);
    let gap = LogprobGap {
        tokens: tokens as usize,
        max_abs: diff.abs().max().double_value(&[]),
        mean_abs: diff.abs().sum(REAL).double_value(&[]) / tokens,
        mean_ratio: (diff.exp() * &batch.mask).sum(REAL).double_value(&[]) / tokens,
    };
    if gap.max_abs <= tolerance {
        Ok(gap)
    } else {
        Err(format!(
            "recomputed log-probs are not the sampling ones: max |gap| {:.4} > {tolerance:e} (mean |gap| {:.4}, mean ratio {:.4}, {} action tokens)",
            gap.max_abs, gap.mean_abs, gap.mean_ratio, gap.tokens
        ))
    }
}
// ANCHOR_END: check

// ANCHOR: tempered

/// `policy_logprobs` with the logits divided by `temperature` first: the
/// log-probs of the distribution that `Sampling { temperature, top_p: 1.0 }`
/// draws from, [B, T] (position 0 gets 0).
pub fn policy_logprobs_at(model: &TinyAgent, batch: &Batch, temperature: f64) -> Tensor {
    let (b, t) = batch.ids.size2().unwrap();
    let logits = model.logits(&batch.ids, &batch.valid).narrow(1, 0, t - 1) / temperature; // [B, T-1, V]
    let next = batch.ids.narrow(1, 1, t - 1).unsqueeze(-1); // [B, T-1, 1]
    let logp = logits
        .log_softmax(-1, REAL)
        .gather(-1, &next, false)
        .squeeze_dim(-1); // [B, T-1]
    Tensor::cat(&[Tensor::zeros([b, 1], (REAL, logp.device())), logp], 1) // [B, T]
}
// ANCHOR_END: tempered

// ANCHOR: loss
/// The mean negative log-likelihood over the tokens `weights` selects:
/// `Σ w_t (−log π(x_t | x_<t)) / Σ w_t`. With `batch.mask` as the weights
/// this is the loss of imitating the policy's tokens; with all real tokens it
/// is the mask bug, a loss that also fits the environment's text.
pub fn weighted_nll(model: &TinyAgent, batch: &Batch, weights: &Tensor) -> Tensor {
    let logp = policy_logprobs(model, batch); // [B, T]
    -(logp * weights).sum(REAL) / weights.sum(REAL)
}
// ANCHOR_END: loss

// ANCHOR: retokenize
/// The ids a text-based pipeline would train on: decode the policy's action,
/// keep it as text, and encode the text again.
pub fn retokenized_action(bpe: &Bpe, sampled: &[u32]) -> Vec<u32> {
    bpe.encode(&bpe.decode(sampled))
}
// ANCHOR_END: retokenize

/// Figure: one trajectory as a strip of tokens, one square per token,
/// coloured by who wrote it; the policy's tokens (mask 1) are filled.
pub fn token_strip_svg(path: &Path, trajectory: &Trajectory, title: &str) -> Result<(), String> {
    const COLUMNS: usize = 40;
    const CELL: i32 = 22;
    let rows = trajectory.ids.len().div_ceil(COLUMNS) as i32;
    let (width, height) = (COLUMNS as i32 * CELL + 40, rows * CELL + 110);
    let area = SVGBackend::new(path, (width as u32, height as u32)).into_drawing_area();
    let fail = |err: &dyn std::fmt::Display| format!("cannot draw {}: {err}", path.display());
    area.fill(&WHITE).map_err(|e| fail(&e))?;
    let text = |s: &str, x: i32, y: i32| {
        Text::new(
            s.to_string(),
            (x, y),
            ("sans-serif", 15).into_font().color(&BLACK),
        )
    };
    area.draw(&text(title, 20, 10)).map_err(|e| fail(&e))?;
    let colour = |owner: Owner| match owner {
        Owner::Prompt => series_colour(0),
        Owner::Policy => series_colour(1),
        Owner::Env => series_colour(2),
    };
    for (i, &owner) in trajectory.owners.iter().enumerate() {
        let (x, y) = (
            20 + (i % COLUMNS) as i32 * CELL,
            40 + (i / COLUMNS) as i32 * CELL,
        );
        let corners = [(x + 2, y + 2), (x + CELL - 2, y + CELL - 2)];
        let style = if owner == Owner::Policy {
            colour(owner).filled()
        } else {
            colour(owner).stroke_width(2)
        };
        area.draw(&Rectangle::new(corners, style))
            .map_err(|e| fail(&e))?;
    }
    let legend_y = 40 + rows * CELL + 20;
    for (k, (owner, label)) in [
        (Owner::Prompt, "issue (mask 0)"),
        (Owner::Policy, "policy, sampled (mask 1)"),
        (Owner::Env, "tool output and role tokens (mask 0)"),
    ]
    .into_iter()
    .enumerate()
    {
        let x = 20 + k as i32 * 260;
        let style = if owner == Owner::Policy {
            colour(owner).filled()
        } else {
            colour(owner).stroke_width(2)
        };
        area.draw(&Rectangle::new(
            [(x, legend_y), (x + 16, legend_y + 16)],
            style,
        ))
        .map_err(|e| fail(&e))?;
        area.draw(&text(label, x + 24, legend_y))
            .map_err(|e| fail(&e))?;
    }
    area.present().map_err(|e| fail(&e))
}

/// A small episode for unit tests: two prompt tokens (1, 2), two action
/// tokens, a tool token (3) and one more action token.
#[cfg(test)]
pub(crate) fn toy(actions: [u32; 3]) -> Trajectory {
    Trajectory {
        task: 0,
        ids: vec![1, 2, actions[0], actions[1], 3, actions[2]],
        owners: vec![
            Owner::Prompt,
            Owner::Prompt,
            Owner::Policy,
            Owner::Policy,
            Owner::Env,
            Owner::Policy,
        ],
        logprobs: vec![0.0; 6],
        reward: 0.0,
        info: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::LmPolicy;
    use crate::gym::Gym;
    use crate::pretrain::corpus;
    use crate::rollout::play;
    use crate::tinyagent::{Config, Sampling};
    use crate::tokenizer::render;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn setup() -> (Vec<crate::gym::Task>, Bpe, TinyAgent) {
        let gym = Gym::standard();
        let tasks = gym.held_out[..6].to_vec();
        let transcripts = corpus(&tasks, 30, 0);
        let bpe = Bpe::train(transcripts.iter().map(|t| render(t)), 400).unwrap();
        let model = {
            let _turn = crate::book::seeded(1);
            TinyAgent::new(
                Config {
                    vocab: bpe.vocab_size() as i64,
                    n_ctx: 512,
                    d_model: 32,
                    n_layer: 2,
                    n_head: 4,
                },
                Device::Cpu,
            )
        };
        (tasks, bpe, model)
    }

    #[test]
    fn sampling_logprobs_equal_recomputed_logprobs_on_the_mask() {
        let (tasks, bpe, model) = setup();
        let policy = LmPolicy {
            model: &model,
            bpe: &bpe,
            sampling: Sampling::PURE,
            max_action_tokens: 5,
        };
        let played = play(
            &policy,
            &tasks,
            &[0, 1, 2, 3, 4, 5],
            3,
            &mut StdRng::seed_from_u64(0),
        );
        let trajectories: Vec<Trajectory> = played.iter().map(Trajectory::from_played).collect();
        for (tr, p) in trajectories.iter().zip(&played) {
            assert_eq!(tr.ids, p.ids());
            assert_eq!(
                tr.action_mask().iter().filter(|&&m| m).count(),
                p.segments
                    .iter()
                    .filter(|s| s.owner == Owner::Policy)
                    .map(|s| s.ids.len())
                    .sum::<usize>()
            );
        }
        let batch = collate(&trajectories, Device::Cpu);
        let recomputed = policy_logprobs(&model, &batch);
        let gap = check_logprobs(&recomputed, &batch, 1e-4).unwrap();
        assert!(
            (gap.mean_ratio - 1.0).abs() < 1e-4,
            "mean ratio {}",
            gap.mean_ratio
        );
        // Off the mask the stored log-probs are 0, and padding is not valid.
        assert_eq!(
            (&batch.logprobs * (batch.mask.ones_like() - &batch.mask))
                .abs()
                .sum(REAL)
                .double_value(&[]),
            0.0
        );
        let lengths: Vec<i64> = trajectories.iter().map(|t| t.ids.len() as i64).collect();
        assert_eq!(
            Vec::<i64>::try_from(batch.valid.sum_dim_intlist(1, false, tch::Kind::Int64)).unwrap(),
            lengths
        );
    }

    #[test]
    fn the_logprob_check_fails_on_a_temperature_mismatch_and_passes_when_scored_alike() {
        let (tasks, bpe, model) = setup();
        let cool = Sampling {
            temperature: 0.5,
            top_p: 1.0,
        };
        let policy = LmPolicy {
            model: &model,
            bpe: &bpe,
            sampling: cool,
            max_action_tokens: 5,
        };
        let played = play(
            &policy,
            &tasks,
            &[0, 1, 2, 3, 4, 5],
            3,
            &mut StdRng::seed_from_u64(0),
        );
        let trajectories: Vec<Trajectory> = played.iter().map(Trajectory::from_played).collect();
        let batch = collate(&trajectories, Device::Cpu);
        let plain = policy_logprobs(&model, &batch); // [B, T], temperature 1
        let err = check_logprobs(&plain, &batch, 1e-4).unwrap_err();
        assert!(err.contains("max |gap|"), "{err}");
        let gap = ((&plain - &batch.logprobs) * &batch.mask)
            .abs()
            .max()
            .double_value(&[]);
        assert!(
            gap > 1e-2,
            "a temperature of 0.5 should move some log-prob by more than 0.01, not {gap}"
        );
        let scored = policy_logprobs_at(&model, &batch, cool.temperature); // [B, T]
        let ok = check_logprobs(&scored, &batch, 1e-4).unwrap();
        assert!(ok.max_abs < 1e-4 && (ok.mean_ratio - 1.0).abs() < 1e-4);
        assert_eq!(
            ok.tokens,
            trajectories
                .iter()
                .map(|t| t.action_mask().iter().filter(|&&m| m).count())
                .sum::<usize>()
        );
        // At temperature 1 the scaled recompute is the plain one.
        assert!(
            (policy_logprobs_at(&model, &batch, 1.0) - &plain)
                .abs()
                .max()
                .double_value(&[])
                < 1e-12
        );
    }

    #[test]
    fn the_masked_loss_ignores_the_environment_tokens() {
        let (tasks, bpe, model) = setup();
        let transcripts = corpus(&tasks, 4, 3);
        let trajectories: Vec<Trajectory> = transcripts
            .iter()
            .map(|t| Trajectory::from_transcript(&bpe, 0, t, 0.0, Info::default()))
            .collect();
        let batch = collate(&trajectories, Device::Cpu);
        let loss = weighted_nll(&model, &batch, &batch.mask);
        // Changing an environment token after the last action cannot change the masked loss
        // (causality: no policy token sees it), but it does change the loss over all tokens.
        let mut changed = trajectories.clone();
        for tr in &mut changed {
            let last = tr.ids.len() - 2; // inside the final tool message, after every action
            assert_ne!(tr.owners[last], Owner::Policy);
            tr.ids[last] = 7;
        }
        let again = weighted_nll(
            &model,
            &collate(&changed, Device::Cpu),
            &collate(&changed, Device::Cpu).mask,
        );
        assert!((loss.double_value(&[]) - again.double_value(&[])).abs() < 1e-6);
        let everything = collate(&trajectories, Device::Cpu);
        let all = weighted_nll(&model, &everything, &everything.valid.to_kind(REAL));
        let all_changed = weighted_nll(
            &model,
            &collate(&changed, Device::Cpu),
            &collate(&changed, Device::Cpu).valid.to_kind(REAL),
        );
        assert!((all.double_value(&[]) - all_changed.double_value(&[])).abs() > 1e-6);
    }

    #[test]
    fn the_token_strip_is_drawn() {
        let (tasks, bpe, _) = setup();
        let transcripts = corpus(&tasks, 1, 0);
        let tr = Trajectory::from_transcript(&bpe, 0, &transcripts[0], 0.0, Info::default());
        let path = std::env::temp_dir().join(format!("strip-{}.svg", std::process::id()));
        token_strip_svg(&path, &tr, "test").unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(svg.matches("<rect").count(), 1 + tr.ids.len() + 3);
    }
}
