//! Chapter 18: debugging RL runs. The dashboard (any run's metrics file as
//! one figure of panels), bugs injected into the one training loop by a
//! config switch ([`Bug`], [`Injected`]), and the trajectory viewer (saved
//! episodes as one self-contained HTML page, [`viewer_html`]).
//!
//! Shapes: `N` episodes of an iteration, `B` in a minibatch, `T` positions.

use crate::advantage::group_advantages;
use crate::book::REAL;
use crate::episode::Owner;
use crate::grpo::{aggregate, Grpo, LossNorm, Regularizer, TrainConfig, MAX_ACTION_TOKENS};
use crate::pg::{
    copy_model, length_buckets, per_token, row_lengths, Algorithm, Forward, Report, Run,
    TrainRecord,
};
use crate::plot::{LineChart, Series};
use crate::regularization::{Estimator, KlPenalty, Placement};
use crate::rollout::Played;
use crate::tinyagent::TinyAgent;
use crate::tokenizer::Bpe;
use crate::trajectory::{collate, policy_logprobs, retokenized_action, Batch, Trajectory};
use serde::{Deserialize, Serialize};
use tch::Tensor;

// ANCHOR: bug
/// A bug that a switch in the run's configuration puts into the one training
/// loop. Each is a mistake that real RL code has shipped with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Bug {
    /// The loss covers every token (prompt and tool output too), not only the
    /// policy's; the old log-probs of the extra tokens are recomputed.
    MaskOff,
    /// The advantages enter the loss with the wrong sign.
    AdvantageSignFlipped,
    /// The old log-probs in the ratio are the previous iteration's batch's,
    /// row for row: other episodes' numbers on this iteration's tokens.
    MisalignedLogprobs,
    /// The old log-probs are recomputed on this iteration's tokens with a
    /// copy of the weights that is one iteration behind the sampler's.
    StaleWeights,
    /// Group ids off by one episode: every advantage is computed against a
    /// group holding one episode of the next task.
    GroupShift,
    /// Each sequence's loss is divided by its length in all tokens (prompt,
    /// tool output, padding mask) instead of the constant of GRPO++.
    LossDenominator,
    /// The actions are decoded and encoded again before training, with the
    /// sampled log-probs kept position by position.
    Retokenized,
    /// The KL reference is the policy itself (an alias, not a frozen copy).
    ReferenceAliased,
    /// Gradient accumulation that averages the micro-batches' losses, each
    /// normalised over its own micro-batch, instead of over the minibatch.
    AccumulationDenominator,
}

impl Bug {
    pub const ALL: [Bug; 9] = [
        Bug::MaskOff,
        Bug::AdvantageSignFlipped,
        Bug::MisalignedLogprobs,
        Bug::GroupShift,
        Bug::LossDenominator,
        Bug::Retokenized,
        Bug::ReferenceAliased,
        Bug::StaleWeights,
        Bug::AccumulationDenominator,
    ];

    /// A short name for tables and run folders.
    pub fn name(self) -> &'static str {
        match self {
            Bug::MaskOff => "mask off",
            Bug::AdvantageSignFlipped => "advantage sign flipped",
            Bug::MisalignedLogprobs => "misaligned old log-probs",
            Bug::StaleWeights => "old log-probs one version stale",
            Bug::GroupShift => "group ids shifted",
            Bug::LossDenominator => "loss denominator",
            Bug::Retokenized => "retokenized actions",
            Bug::ReferenceAliased => "reference aliased",
            Bug::AccumulationDenominator => "micro-batch means averaged",
        }
    }
}
// ANCHOR_END: bug

// ANCHOR: injected
/// GRPO with an optional bug: every part of the loop the bug does not touch
/// is the inner algorithm's, so a run with `bug: None` is the healthy run.
pub struct Injected {
    pub bug: Option<Bug>,
    pub inner: Grpo,
    /// For [`Bug::Retokenized`]: the tokenizer the actions are re-encoded with.
    pub bpe: Option<Bpe>,
    /// For [`Bug::MisalignedLogprobs`]: the sampling log-probs of this
    /// iteration's episodes and of the previous iteration's, [N, T] each.
    current: Option<Tensor>,
    previous: Option<Tensor>,
    /// For [`Bug::StaleWeights`]: the weights the sampler had one iteration ago.
    behind: Option<TinyAgent>,
}

impl Injected {
    pub fn new(bug: Option<Bug>, inner: Grpo, bpe: Option<Bpe>) -> Injected {
        Injected {
            bug,
            inner,
            bpe,
            current: None,
            previous: None,
            behind: None,
        }
    }
}

/// Every token after the first becomes the policy's, and its old log-prob
/// the current weights' (the one the sampler would have given it).
fn mask_off(model: &TinyAgent, trajectories: Vec<Trajectory>) -> Vec<Trajectory> {
    let widened: Vec<Trajectory> = trajectories
        .into_iter()
        .map(|mut t| {
            t.owners.iter_mut().skip(1).for_each(|o| *o = Owner::Policy);
            t
        })
        .collect();
    with_logprobs_of(model, widened, |old| old == 0.0)
}

/// The policy tokens' old log-probs replaced by `model`'s on the same
/// tokens, where `replace` says so of the stored one.
fn with_logprobs_of(
    model: &TinyAgent,
    trajectories: Vec<Trajectory>,
    replace: impl Fn(f64) -> bool,
) -> Vec<Trajectory> {
    let batch = collate(&trajectories, model.device());
    let old = tch::no_grad(|| policy_logprobs(model, &batch)); // [N, T]
    trajectories
        .into_iter()
        .enumerate()
        .map(|(row, mut t)| {
            let recomputed =
                Vec::<f64>::try_from(old.get(row as i64)).expect("one row of log-probs");
            for (i, owner) in t.owners.iter().enumerate().skip(1) {
                if *owner == Owner::Policy && replace(t.logprobs[i]) {
                    t.logprobs[i] = recomputed[i];
                }
            }
            t
        })
        .collect()
}

/// Each action re-encoded from its text; the sampled log-probs stay where
/// they were (missing ones 0), as a text pipeline would keep them.
fn retokenize(bpe: &Bpe, t: Trajectory) -> (Trajectory, bool) {
    let (mut ids, mut owners, mut logprobs, mut changed) =
        (Vec::new(), Vec::new(), Vec::new(), false);
    let mut i = 0;
    while i < t.ids.len() {
        let end = (i..t.ids.len())
            .find(|&j| t.owners[j] != t.owners[i])
            .unwrap_or(t.ids.len());
        if t.owners[i] == Owner::Policy {
            let again = retokenized_action(bpe, &t.ids[i..end]);
            changed |= again[..] != t.ids[i..end];
            logprobs.extend((0..again.len()).map(|k| {
                if i + k < end {
                    t.logprobs[i + k]
                } else {
                    0.0
                }
            }));
            owners.extend(std::iter::repeat_n(Owner::Policy, again.len()));
            ids.extend(again);
        } else {
            ids.extend(&t.ids[i..end]);
            owners.extend(&t.owners[i..end]);
            logprobs.extend(&t.logprobs[i..end]);
        }
        i = end;
    }
    (
        Trajectory {
            ids,
            owners,
            logprobs,
            ..t
        },
        changed,
    )
}

/// `x` [N, T'] cut or padded with zero columns to [N, t].
fn fit_columns(x: &Tensor, t: i64) -> Tensor {
    let (n, width) = x.size2().unwrap();
    if width >= t {
        x.narrow(1, 0, t)
    } else {
        Tensor::cat(
            &[
                x.shallow_clone(),
                Tensor::zeros([n, t - width], (x.kind(), x.device())),
            ],
            1,
        )
    }
}

impl Algorithm for Injected {
    fn config_json(&self) -> Option<String> {
        crate::pg::wrapper_config(&self.inner, serde_json::json!({ "bug": self.bug }))
    }

    fn rewards(
        &mut self,
        played: &[Played],
        trajectories: &[Trajectory],
        report: &mut Report,
    ) -> Vec<f64> {
        self.inner.rewards(played, trajectories, report)
    }

    fn trajectories(
        &mut self,
        model: &TinyAgent,
        played: Vec<Trajectory>,
        report: &mut Report,
    ) -> Vec<Trajectory> {
        let trained = match (self.bug, &self.bpe) {
            (Some(Bug::MaskOff), _) => mask_off(model, played.clone()),
            (Some(Bug::Retokenized), Some(bpe)) => played
                .iter()
                .map(|t| retokenize(bpe, t.clone()).0)
                .collect(),
            (Some(Bug::Retokenized), None) => {
                panic!("the retokenization bug needs the tokenizer (Injected::new(.., Some(bpe)))")
            }
            (Some(Bug::StaleWeights), _) => {
                // π_old from last iteration's weights, on the tokens this iteration's weights sampled.
                let trained = match &self.behind {
                    Some(behind) => with_logprobs_of(behind, played.clone(), |_| true),
                    None => played.clone(), // the first iteration has no older copy
                };
                self.behind = Some(copy_model(model, None));
                trained
            }
            _ => played.clone(),
        };
        // Monitor: episodes whose trained ids are not the ids the policy sampled (Chapter 5's check).
        report.insert(
            "ids_differ".into(),
            played
                .iter()
                .zip(&trained)
                .filter(|(p, t)| p.ids != t.ids)
                .count() as f64,
        );
        trained
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
        self.previous = self.current.replace(rollout.logprobs.shallow_clone());
        let advantages =
            self.advantages_with_bug(model, trajectories, rollout, rewards, group, report); // [N, T]

        // Monitor: a group-relative advantage averages to 0 over each group of the same task.
        let per_episode = (&advantages * &rollout.mask).sum_dim_intlist(1, false, REAL)
            / rollout.mask.sum_dim_intlist(1, false, REAL).clamp_min(1.0); // [N]
        let per_episode = Vec::<f64>::try_from(per_episode).expect("one advantage per episode");
        // Grouped by the task each episode was sampled for, not by position:
        // a loop that lost track of where its groups start still knows its tasks.
        let mut by_task: std::collections::BTreeMap<usize, (f64, usize)> = Default::default();
        for (trajectory, advantage) in trajectories.iter().zip(&per_episode) {
            let entry = by_task.entry(trajectory.task).or_default();
            (entry.0, entry.1) = (entry.0 + advantage, entry.1 + 1);
        }
        let worst = by_task
            .values()
            .map(|(sum, count)| (sum / *count as f64).abs())
            .fold(0.0, f64::max);
        report.insert("group_advantage_mean".into(), (worst * 1e12).round() / 1e12); // 0 up to rounding is 0

        advantages
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
        self.loss_with_bug(forward, minibatch, advantages, rows, report)
    }
}

impl Injected {
    fn advantages_with_bug(
        &mut self,
        model: &TinyAgent,
        trajectories: &[Trajectory],
        rollout: &Batch,
        rewards: &[f64],
        group: usize,
        report: &mut Report,
    ) -> Tensor {
        match self.bug {
            Some(Bug::AdvantageSignFlipped) => {
                -self
                    .inner
                    .advantages(model, trajectories, rollout, rewards, group, report)
            }
            Some(Bug::GroupShift) => {
                // Groups start one episode late: episode j is scored in the group of j − 1.
                let n = rewards.len();
                let shifted: Vec<f64> = (0..n).map(|j| rewards[(j + 1) % n]).collect(); // shifted[j] = r[j + 1]
                let scored: Vec<f64> = shifted
                    .chunks(group)
                    .flat_map(|g| group_advantages(g, self.inner.config.baseline))
                    .collect();
                let advantages: Vec<f64> = (0..n).map(|j| scored[(j + n - 1) % n]).collect(); // each episode gets its own reward's score
                per_token(&advantages, &rollout.mask) // [N, T]
            }
            _ => self
                .inner
                .advantages(model, trajectories, rollout, rewards, group, report),
        }
    }

    fn loss_with_bug(
        &mut self,
        forward: &Forward,
        minibatch: &Batch,
        advantages: &Tensor,
        rows: &[usize],
        report: &mut Report,
    ) -> Tensor {
        match self.bug {
            Some(Bug::MisalignedLogprobs) if self.previous.is_some() => {
                let previous = self.previous.as_ref().unwrap();
                let index = Tensor::from_slice(&rows.iter().map(|&i| i as i64).collect::<Vec<_>>())
                    .to_device(previous.device());
                let stale = fit_columns(&previous.index_select(0, &index), minibatch.ids.size()[1])
                    * &minibatch.mask; // [B, T]
                let batch = Batch {
                    ids: minibatch.ids.shallow_clone(),
                    valid: minibatch.valid.shallow_clone(),
                    mask: minibatch.mask.shallow_clone(),
                    logprobs: stale,
                    rewards: minibatch.rewards.shallow_clone(),
                };
                self.inner.loss(forward, &batch, advantages, rows, report)
            }
            Some(Bug::LossDenominator) => {
                // Σ_t loss_t / |sequence| in place of Σ_t loss_t / C: the same as scaling row i's advantages by C / |sequence_i|.
                let lengths = minibatch.valid.to_kind(REAL).sum_dim_intlist(1, true, REAL); // [B, 1]
                let scale = match self.inner.config.norm {
                    LossNorm::Constant(c) => c,
                    _ => MAX_ACTION_TOKENS,
                };
                self.inner.loss(
                    forward,
                    minibatch,
                    &(advantages * scale / lengths),
                    rows,
                    report,
                )
            }
            Some(Bug::AccumulationDenominator) => {
                // The minibatch in the k micro-batches the forward pass runs on (Chapter 6's length
                // buckets), each one's loss normalised over its own rows (its own tokens under a
                // token mean) and the k losses averaged: row i of micro-batch j weighs
                // (minibatch's count) / (k · micro-batch j's count) times its due.
                let buckets = length_buckets(&row_lengths(minibatch));
                let tokens = Vec::<f64>::try_from(minibatch.mask.sum_dim_intlist(1, false, REAL))
                    .expect("tokens per row"); // [B]
                let count = |members: &[usize]| match self.inner.config.norm {
                    LossNorm::TokenMean => members.iter().map(|&r| tokens[r]).sum::<f64>(),
                    LossNorm::SequenceMean | LossNorm::Constant(_) => members.len() as f64,
                };
                let all: Vec<usize> = (0..tokens.len()).collect();
                let mut weights = vec![0.0; tokens.len()];
                for (members, _) in &buckets {
                    for &r in members {
                        weights[r] = count(&all) / (buckets.len() as f64 * count(members));
                    }
                }
                let weights = Tensor::from_slice(&weights)
                    .to_device(advantages.device())
                    .unsqueeze(1); // [B, 1]
                self.inner
                    .loss(forward, minibatch, &(advantages * weights), rows, report)
            }
            _ => self
                .inner
                .loss(forward, minibatch, advantages, rows, report),
        }
    }
}

/// The KL penalty of Chapter 10 with the reference aliased to the policy:
/// its log-probs are the policy's own, so the penalty and its gradient are 0.
pub struct AliasedReference {
    pub beta: f64,
}

impl Regularizer for AliasedReference {
    fn loss(
        &mut self,
        _batch: &Batch,
        logp: &Tensor,
        _entropy: &Tensor,
        mask: &Tensor,
        norm: LossNorm,
    ) -> Option<(Tensor, Vec<(String, f64)>)> {
        let k3 = Estimator::K3.tensor(&(logp.detach() - logp)); // [B, T]: the "reference" is the policy
        let kl = aggregate(&k3.detach(), mask, LossNorm::TokenMean).double_value(&[]);
        Some((
            aggregate(&k3, mask, norm) * self.beta,
            vec![("kl".to_string(), kl)],
        ))
    }
}

/// The chapter's healthy recipe: GRPO++ with Chapter 10's KL penalty in the
/// loss (β = 0.1) towards `reference`; with `bug`, the same run with the bug in.
pub fn injected_run(
    config: &TrainConfig,
    bug: Option<Bug>,
    reference: TinyAgent,
    bpe: &Bpe,
) -> Run {
    const BETA: f64 = 0.1;
    let regularizer: Box<dyn Regularizer + Send> = match bug {
        Some(Bug::ReferenceAliased) => Box::new(AliasedReference { beta: BETA }),
        _ => Box::new(KlPenalty {
            reference,
            beta: BETA,
            placement: Placement::Loss,
        }),
    };
    let inner = Grpo {
        config: config.clone(),
        regularizer,
    };
    (
        config.schedule(),
        Box::new(Injected::new(bug, inner, Some(bpe.clone()))),
    )
}
// ANCHOR_END: injected

// ANCHOR: dashboard
/// One panel of the dashboard: what it plots from an iteration's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Panel {
    Reward,
    HeldOut,
    Entropy,
    Kl,
    ClipFraction,
    ApproxKl,
    GradNorm,
    Length,
    MaskCoverage,
    InformativeGroups,
    GroupAdvantageMean,
    IdsDiffer,
}

impl Panel {
    pub const ALL: [Panel; 12] = [
        Panel::Reward,
        Panel::HeldOut,
        Panel::Entropy,
        Panel::Kl,
        Panel::ClipFraction,
        Panel::ApproxKl,
        Panel::GradNorm,
        Panel::Length,
        Panel::MaskCoverage,
        Panel::InformativeGroups,
        Panel::GroupAdvantageMean,
        Panel::IdsDiffer,
    ];

    /// The panel's title and its y axis.
    pub fn label(self) -> (&'static str, &'static str) {
        match self {
            Panel::Reward => ("reward (training success)", "mean reward"),
            Panel::HeldOut => ("held-out success", "success"),
            Panel::Entropy => ("entropy at the action tokens", "nats"),
            Panel::Kl => ("KL to the reference (k3, per token)", "nats"),
            Panel::ClipFraction => ("clip fraction", "share of tokens"),
            Panel::ApproxKl => ("approx KL(old || new), last minibatch", "nats"),
            Panel::GradNorm => ("gradient norm", "L2 norm"),
            Panel::Length => ("sampled tokens per episode", "tokens"),
            Panel::MaskCoverage => ("mask coverage", "trained / all tokens"),
            Panel::InformativeGroups => ("informative groups", "share of groups"),
            Panel::GroupAdvantageMean => ("largest |mean advantage| of a group", "advantage"),
            Panel::IdsDiffer => ("episodes trained on other ids than sampled", "episodes"),
        }
    }

    /// The panel's value at `records[i]`, if the run recorded it there.
    /// `epochs` passes over each iteration's episodes (from the schedule).
    pub fn value(self, records: &[TrainRecord], i: usize, epochs: usize) -> Option<f64> {
        let r = &records[i];
        let episodes = records
            .get(i + 1)
            .map(|next| (next.episodes - r.episodes) as f64);
        match self {
            Panel::Reward => r.train_success,
            Panel::HeldOut => r.held_out_success,
            Panel::Entropy => r.entropy,
            Panel::Kl => r.extra.get("kl").copied(),
            Panel::ClipFraction => r.extra.get("clip_fraction").copied(),
            Panel::ApproxKl => r.extra.get("approx_kl").copied(),
            Panel::GradNorm => r.grad_norm,
            Panel::Length => Some(r.generated_tokens? as f64 / episodes?),
            Panel::MaskCoverage => {
                Some(r.trained_tokens? as f64 / (epochs.max(1) * r.sequence_tokens?) as f64)
            }
            Panel::InformativeGroups => {
                Some(r.extra.get("informative_groups")? / r.tasks.as_ref()?.len() as f64)
            }
            Panel::GroupAdvantageMean => r.extra.get("group_advantage_mean").copied(),
            Panel::IdsDiffer => r.extra.get("ids_differ").copied(),
        }
    }
}

/// A run as the dashboard draws it: a label and the records of one or more
/// seeds (a band over the seeds when there are several).
#[derive(Clone)]
pub struct DashboardRun<'a> {
    pub label: String,
    pub seeds: Vec<&'a [TrainRecord]>,
    pub epochs: usize,
}

/// One chart per panel; each run is a line (the mean over its seeds, with
/// the 95 % band of Chapter 2 when it has three or more).
pub fn dashboard(runs: &[DashboardRun]) -> Vec<LineChart> {
    // One x axis for every panel: up to the last line of the longest run.
    let x_max = runs
        .iter()
        .flat_map(|run| {
            run.seeds
                .iter()
                .filter_map(|r| r.last().map(|l| l.iteration as f64))
        })
        .fold(1.0, f64::max);
    Panel::ALL
        .iter()
        .map(|&panel| {
            let (title, y_label) = panel.label();
            let mut chart = LineChart::new(title, "iteration", y_label);
            let mut y_max = 0.0f64;
            for run in runs {
                let length = run.seeds.iter().map(|r| r.len()).min().unwrap_or(0);
                let at: Vec<usize> = (0..length)
                    .filter(|&i| {
                        run.seeds
                            .iter()
                            .all(|r| panel.value(r, i, run.epochs).is_some())
                    })
                    .collect();
                if at.is_empty() {
                    continue;
                }
                let xs: Vec<f64> = at
                    .iter()
                    .map(|&i| run.seeds[0][i].iteration as f64)
                    .collect();
                let values: Vec<Vec<f64>> = run
                    .seeds
                    .iter()
                    .map(|r| {
                        at.iter()
                            .map(|&i| panel.value(r, i, run.epochs).unwrap())
                            .collect()
                    })
                    .collect(); // [seed][point]
                                // (mean, low, high) per point; one seed is its own mean.
                let band = if values.len() >= 2 {
                    crate::stats::band(&values)
                } else {
                    values[0].iter().map(|&v| (v, v, v)).collect()
                };
                y_max = y_max.max(band.iter().map(|b| b.2.max(b.0)).fold(0.0, f64::max));
                let series = if values.len() >= 3 {
                    Series::banded(run.label.clone(), &xs, &band)
                } else {
                    Series::new(
                        run.label.clone(),
                        xs.iter().zip(&band).map(|(&x, b)| (x, b.0)).collect(),
                    )
                };
                chart = chart.with_series(series.with_markers());
            }
            let top = match panel {
                Panel::Reward
                | Panel::HeldOut
                | Panel::ClipFraction
                | Panel::MaskCoverage
                | Panel::InformativeGroups => 1.0,
                _ => {
                    if y_max > 0.0 {
                        y_max * 1.15
                    } else {
                        1.0
                    }
                }
            };
            chart.with_ranges((0.0, x_max), (0.0, top))
        })
        .collect()
}

/// For each bug run, the one panel where its bug shows, beside the healthy
/// run; each chart is titled "bug: panel".
pub fn signature_charts(healthy: &DashboardRun, bugs: &[(DashboardRun, Panel)]) -> Vec<LineChart> {
    bugs.iter()
        .map(|(run, panel)| {
            let both = [healthy.clone(), run.clone()];
            let index = Panel::ALL
                .iter()
                .position(|p| p == panel)
                .expect("a panel of the dashboard");
            let mut chart = dashboard(&both).swap_remove(index);
            chart.title = format!("{}: {}", run.label, chart.title);
            chart
        })
        .collect()
}

/// The charts side by side, `columns` to a row, as one SVG document.
pub fn grid_svg(charts: &[LineChart], columns: usize) -> Result<String, String> {
    let (w, h) = crate::plot::CHART_SIZE;
    let rows = charts.len().div_ceil(columns.max(1));
    let mut svg = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\">\n", w as usize * columns, h as usize * rows, w as usize * columns, h as usize * rows);
    for (k, chart) in charts.iter().enumerate() {
        let panel = chart.to_svg()?;
        let start = panel
            .find("<svg")
            .ok_or("a chart without an <svg> element")?;
        let (x, y) = ((k % columns) as u32 * w, (k / columns) as u32 * h);
        svg.push_str(&panel[start..].replacen("<svg", &format!("<svg x=\"{x}\" y=\"{y}\""), 1));
        svg.push('\n');
    }
    svg.push_str("</svg>\n");
    Ok(svg)
}

/// A run's metrics as JSON lines to share or keep in a repository: every
/// number rounded to 4 decimals and the wall-clock times left out, so that
/// the same run writes the same file on every processor.
pub fn shareable_metrics(records: &[TrainRecord]) -> String {
    fn round(value: serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Number(n) if n.is_f64() => {
                serde_json::json!(round4(n.as_f64().unwrap()))
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.into_iter().map(round).collect())
            }
            serde_json::Value::Object(fields) => {
                serde_json::Value::Object(fields.into_iter().map(|(k, v)| (k, round(v))).collect())
            }
            other => other,
        }
    }
    records
        .iter()
        .map(|r| {
            round(
                serde_json::to_value(TrainRecord {
                    time: None,
                    ..r.clone()
                })
                .expect("a record serialises"),
            )
            .to_string()
                + "\n"
        })
        .collect()
}

/// The dashboard of the run in `run_dir` (its `metrics.jsonl` and
/// `schedule.json`), written as one SVG to `out`.
pub fn render_run(run_dir: &std::path::Path, out: &std::path::Path) -> Result<(), String> {
    let records = crate::pg::read_records(&run_dir.join("metrics.jsonl"))?;
    let schedule_path = run_dir.join("schedule.json");
    let text = std::fs::read_to_string(&schedule_path)
        .map_err(|err| format!("cannot read {}: {err}", schedule_path.display()))?;
    let schedule: crate::pg::Schedule = serde_json::from_str(&text)
        .map_err(|err| format!("{} is not a schedule: {err}", schedule_path.display()))?;
    let run = DashboardRun {
        label: schedule.name.clone(),
        seeds: vec![&records],
        epochs: schedule.epochs,
    };
    let svg = grid_svg(&dashboard(&[run]), 2)?;
    std::fs::write(out, svg).map_err(|err| format!("cannot write {}: {err}", out.display()))
}
// ANCHOR_END: dashboard

// ANCHOR: viewer
/// One token as the viewer shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewedToken {
    /// The token's text (its bytes decoded on their own).
    pub text: String,
    /// "prompt", "policy" or "env".
    pub owner: String,
    /// In the loss (the action mask).
    pub mask: bool,
    /// The sampling log-prob (0 off the mask).
    pub logprob: f64,
    /// The advantage the loss gives the token (0 off the mask).
    pub advantage: f64,
}

/// `x` to 4 decimals: the page shows 3, and a page written on one processor
/// must equal the page written on another, whose last bits may differ.
fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// One episode as the viewer shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewedEpisode {
    pub title: String,
    pub reward: f64,
    pub tokens: Vec<ViewedToken>,
}

impl ViewedEpisode {
    /// `trajectory` with its per-token `advantages` (one per id).
    pub fn new(
        bpe: &Bpe,
        title: impl Into<String>,
        trajectory: &Trajectory,
        advantages: &[f64],
    ) -> ViewedEpisode {
        assert_eq!(
            advantages.len(),
            trajectory.ids.len(),
            "one advantage per token"
        );
        let mask = trajectory.action_mask();
        let tokens = trajectory
            .ids
            .iter()
            .enumerate()
            .map(|(i, &id)| ViewedToken {
                text: bpe.decode(&[id]),
                owner: match trajectory.owners[i] {
                    Owner::Prompt => "prompt",
                    Owner::Policy => "policy",
                    Owner::Env => "env",
                }
                .to_string(),
                mask: mask[i],
                logprob: if mask[i] {
                    round4(trajectory.logprobs[i])
                } else {
                    0.0
                },
                advantage: if mask[i] { round4(advantages[i]) } else { 0.0 },
            })
            .collect();
        ViewedEpisode {
            title: title.into(),
            reward: trajectory.reward,
            tokens,
        }
    }

    /// An episode saved in Chapter 13's exchange format, every action token
    /// with the episode's `advantage`. The prompt is the first `prompt_len`
    /// tokens; the other tokens off the mask are tool output.
    pub fn from_line(
        bpe: &Bpe,
        title: impl Into<String>,
        line: &crate::exchange::Line,
        advantage: f64,
    ) -> ViewedEpisode {
        let trajectory = line.trajectory();
        let advantages: Vec<f64> = line
            .action_mask
            .iter()
            .map(|&m| if m == 1 { advantage } else { 0.0 })
            .collect();
        ViewedEpisode::new(bpe, title, &trajectory, &advantages)
    }

    /// (tokens, tokens the policy wrote, tokens in the loss).
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.tokens.len(),
            self.tokens.iter().filter(|t| t.owner == "policy").count(),
            self.tokens.iter().filter(|t| t.mask).count(),
        )
    }
}

/// The episodes as one self-contained HTML page (no network: styles, script
/// and data inline): every token a span coloured by owner, mask, log-prob or
/// advantage, buttons and the arrow keys to move between episodes, and the
/// episode's counts. The page's `#counts` element reads
/// "episode i of n · reward r · T tokens · P by the policy · M in the loss".
pub fn viewer_html(title: &str, episodes: &[ViewedEpisode]) -> String {
    // `</` would end the script element early; JSON allows `<\/` for it.
    let data = serde_json::to_string(episodes)
        .expect("episodes serialise")
        .replace("</", "<\\/");
    let escaped_title = title
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    VIEWER_TEMPLATE
        .replace("{{title}}", &escaped_title)
        .replace("{{data}}", &data)
}

const VIEWER_TEMPLATE: &str = r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>{{title}}</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #222; }
#tokens { font-family: monospace; white-space: pre-wrap; line-height: 1.7; border: 1px solid #ddd; padding: 0.8em; }
#tokens span { border-radius: 2px; }
.bar { margin: 0.6em 0; }
button, label { margin-right: 0.6em; }
#legend span { display: inline-block; padding: 0 0.5em; margin-right: 0.4em; font-family: monospace; }
#detail { font-family: monospace; min-height: 1.4em; color: #555; }
</style></head>
<body>
<h1>{{title}}</h1>
<div class="bar"><button id="prev">&larr; previous</button><button id="next">next &rarr;</button><span id="counts"></span></div>
<div class="bar">colour by:
<label><input type="radio" name="mode" value="owner" checked> owner</label>
<label><input type="radio" name="mode" value="mask"> mask</label>
<label><input type="radio" name="mode" value="logprob"> log-prob</label>
<label><input type="radio" name="mode" value="advantage"> advantage</label></div>
<div class="bar" id="legend"></div>
<div id="detail">hover over a token for its owner, mask, log-prob and advantage</div>
<div id="tokens"></div>
<script type="application/json" id="episodes">{{data}}</script>
<script>
const episodes = JSON.parse(document.getElementById('episodes').textContent);
let current = 0;
const owners = { prompt: '#e0e0e0', env: '#cfe3f5', policy: '#f6c98f' };
const maxAdv = Math.max(1e-9, ...episodes.flatMap(e => e.tokens.map(t => Math.abs(t.advantage))));
function mode() { return document.querySelector('input[name=mode]:checked').value; }
function colour(t) {
  switch (mode()) {
    case 'owner': return owners[t.owner];
    case 'mask': return t.mask ? '#9fd8a4' : 'transparent';
    case 'logprob': {
      if (!t.mask) return 'transparent';
      const a = Math.min(1, -t.logprob / 5);
      return `rgba(213, 94, 0, ${a.toFixed(3)})`;
    }
    case 'advantage': {
      if (!t.mask) return 'transparent';
      const a = Math.min(1, Math.abs(t.advantage) / maxAdv);
      return t.advantage >= 0 ? `rgba(0, 158, 115, ${a.toFixed(3)})` : `rgba(204, 60, 60, ${a.toFixed(3)})`;
    }
  }
}
const legends = {
  owner: [['prompt', owners.prompt], ['tool output', owners.env], ['policy', owners.policy]],
  mask: [['in the loss', '#9fd8a4'], ['not in the loss', 'transparent']],
  logprob: [['log-prob 0', 'rgba(213,94,0,0)'], ['-2.5', 'rgba(213,94,0,0.5)'], ['-5 or less', 'rgba(213,94,0,1)']],
  advantage: [['positive', 'rgba(0,158,115,0.8)'], ['0', 'transparent'], ['negative', 'rgba(204,60,60,0.8)']],
};
function show() {
  const e = episodes[current];
  const box = document.getElementById('tokens');
  box.replaceChildren();
  for (const t of e.tokens) {
    const span = document.createElement('span');
    span.textContent = t.text;
    span.style.background = colour(t);
    span.dataset.owner = t.owner;
    span.dataset.mask = t.mask ? '1' : '0';
    span.onmouseenter = () => { document.getElementById('detail').textContent =
      `${JSON.stringify(t.text)}  owner ${t.owner}  mask ${t.mask ? 1 : 0}  log-prob ${t.logprob.toFixed(3)}  advantage ${t.advantage.toFixed(3)}`; };
    box.appendChild(span);
  }
  const policy = e.tokens.filter(t => t.owner === 'policy').length;
  const masked = e.tokens.filter(t => t.mask).length;
  document.getElementById('counts').textContent =
    `episode ${current + 1} of ${episodes.length} · ${e.title} · reward ${e.reward} · ${e.tokens.length} tokens · ${policy} by the policy · ${masked} in the loss`;
  document.getElementById('legend').replaceChildren(...legends[mode()].map(([name, c]) => {
    const s = document.createElement('span'); s.textContent = name; s.style.background = c; s.style.border = '1px solid #ccc'; return s; }));
  document.getElementById('prev').disabled = current === 0;
  document.getElementById('next').disabled = current === episodes.length - 1;
}
function go(step) { current = Math.max(0, Math.min(episodes.length - 1, current + step)); show(); }
document.getElementById('prev').onclick = () => go(-1);
document.getElementById('next').onclick = () => go(1);
document.addEventListener('keydown', ev => { if (ev.key === 'ArrowLeft') go(-1); if (ev.key === 'ArrowRight') go(1); });
document.querySelectorAll('input[name=mode]').forEach(r => r.onchange = show);
show();
</script>
</body></html>
"#;
// ANCHOR_END: viewer

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advantage::GroupBaseline;
    use crate::grpo::Plain;

    fn grpo() -> Grpo {
        Grpo {
            config: TrainConfig::grpo_plus_plus(),
            regularizer: Box::new(Plain),
        }
    }

    fn rollout(rows: usize, t: usize) -> Batch {
        let trajectories: Vec<Trajectory> = (0..rows)
            .map(|r| Trajectory {
                task: r,
                ids: (0..t as u32).map(|i| 3 + i).collect(),
                owners: (0..t)
                    .map(|i| {
                        if i % 2 == 1 {
                            Owner::Policy
                        } else {
                            Owner::Env
                        }
                    })
                    .collect(),
                logprobs: (0..t)
                    .map(|i| {
                        if i % 2 == 1 {
                            -0.1 * (r + 1) as f64
                        } else {
                            0.0
                        }
                    })
                    .collect(),
                reward: 0.0,
                info: Default::default(),
            })
            .collect();
        collate(&trajectories, tch::Device::Cpu)
    }

    fn model() -> TinyAgent {
        let _turn = crate::book::seeded(18);
        TinyAgent::new(
            crate::tinyagent::Config {
                vocab: 32,
                n_ctx: 16,
                d_model: 16,
                n_layer: 1,
                n_head: 2,
            },
            tch::Device::Cpu,
        )
    }

    fn row_advantages(a: &Tensor) -> Vec<f64> {
        Vec::<f64>::try_from(a.select(1, 1)).unwrap() // position 1 is an action in every row
    }

    /// Episodes of `tasks` (one per entry), with their rewards, for the monitor.
    fn sampled_for(tasks: &[usize], rewards: &[f64]) -> Vec<Trajectory> {
        tasks
            .iter()
            .zip(rewards)
            .map(|(&task, &reward)| Trajectory {
                task,
                ids: Vec::new(),
                owners: Vec::new(),
                logprobs: Vec::new(),
                reward,
                info: Default::default(),
            })
            .collect()
    }

    #[test]
    fn the_sign_bug_negates_and_the_group_bug_scores_against_the_wrong_group() {
        let (m, batch) = (model(), rollout(6, 6));
        let rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        // Two groups of three, sampled for tasks 7 and 2.
        let episodes = sampled_for(&[7, 7, 7, 2, 2, 2], &rewards);
        let mut report = Report::new();
        let healthy = row_advantages(&Injected::new(None, grpo(), None).advantages(
            &m,
            &episodes,
            &batch,
            &rewards,
            3,
            &mut report,
        ));
        assert!(report["group_advantage_mean"] < 1e-12, "{report:?}");
        let flipped = row_advantages(
            &Injected::new(Some(Bug::AdvantageSignFlipped), grpo(), None).advantages(
                &m,
                &episodes,
                &batch,
                &rewards,
                3,
                &mut report,
            ),
        );
        assert!(
            healthy
                .iter()
                .zip(&flipped)
                .all(|(h, f)| (h + f).abs() < 1e-12),
            "{healthy:?} {flipped:?}"
        );
        // Healthy: the second group is all successes, so its advantages are 0.
        assert!(healthy[3..].iter().all(|a| a.abs() < 1e-12));
        // Shifted: groups are (episodes 1, 2, 3) and (4, 5, 0); episode 3 (reward 1) is scored against 0 and 0.
        let shifted = row_advantages(
            &Injected::new(Some(Bug::GroupShift), grpo(), None).advantages(
                &m,
                &episodes,
                &batch,
                &rewards,
                3,
                &mut report,
            ),
        );
        assert!(
            report["group_advantage_mean"] > 0.1,
            "the monitor sees the shift: {report:?}"
        );
        let expected = |g: &[f64], k: usize| group_advantages(g, GroupBaseline::LeaveOneOut)[k];
        assert!(
            (shifted[3] - expected(&[0.0, 0.0, 1.0], 2)).abs() < 1e-12,
            "{shifted:?}"
        );
        assert!(
            (shifted[0] - expected(&[1.0, 1.0, 1.0], 2)).abs() < 1e-12 && shifted[0].abs() < 1e-12,
            "{shifted:?}"
        );
        assert!(
            (shifted[4] - expected(&[1.0, 1.0, 1.0], 0)).abs() < 1e-12,
            "{shifted:?}"
        );
        assert!(shifted[3] > 0.5 && healthy[3].abs() < 1e-12);
    }

    #[test]
    fn mask_off_trains_on_every_token_and_retokenization_keeps_canonical_ids() {
        let m = model();
        let batch_rows = vec![Trajectory {
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
            logprobs: vec![0.0, 0.0, -1.5, -0.25, 0.0, -2.0],
            reward: 1.0,
            info: Default::default(),
        }];
        let mut report = Report::new();
        let widened = Injected::new(Some(Bug::MaskOff), grpo(), None).trajectories(
            &m,
            batch_rows.clone(),
            &mut report,
        );
        assert_eq!(report["ids_differ"], 0.0);
        assert_eq!(
            widened[0].action_mask(),
            vec![false, true, true, true, true, true]
        );
        // The sampled log-probs stay; the new ones are the model's.
        assert_eq!(&widened[0].logprobs[2..4], &[-1.5, -0.25]);
        let recomputed =
            Vec::<f64>::try_from(policy_logprobs(&m, &collate(&widened, tch::Device::Cpu)).get(0))
                .unwrap();
        assert!(
            (widened[0].logprobs[1] - recomputed[1]).abs() < 1e-9
                && (widened[0].logprobs[4] - recomputed[4]).abs() < 1e-9
        );
        // A canonical action re-encodes to itself: the bug changes nothing then.
        let gym = crate::gym::Gym::standard();
        let bpe = crate::pretrain::base_model(&gym.train).0;
        let action = bpe.encode("<call>run_tests()</call>");
        let t = Trajectory {
            task: 0,
            ids: [vec![1u32], action.clone()].concat(),
            owners: [vec![Owner::Prompt], vec![Owner::Policy; action.len()]].concat(),
            logprobs: vec![-0.5; action.len() + 1],
            reward: 0.0,
            info: Default::default(),
        };
        let (again, changed) = retokenize(&bpe, t.clone());
        assert!(!changed && again == t);
        // A split one re-encodes to fewer ids, and the log-probs stay where they were.
        let text = bpe.decode(&action);
        let bytes: Vec<u32> = text
            .chars()
            .flat_map(|c| bpe.encode(&c.to_string()))
            .collect();
        assert!(bytes.len() > action.len());
        let split = Trajectory {
            ids: [vec![1u32], bytes.clone()].concat(),
            owners: [vec![Owner::Prompt], vec![Owner::Policy; bytes.len()]].concat(),
            logprobs: [vec![0.0], (0..bytes.len()).map(|i| -(i as f64)).collect()].concat(),
            ..t
        };
        let (again, changed) = retokenize(&bpe, split.clone());
        assert!(changed);
        let mut buggy = Injected::new(Some(Bug::Retokenized), grpo(), Some(bpe.clone()));
        let _ = buggy.trajectories(&m, vec![split, t], &mut report);
        assert_eq!(report["ids_differ"], 1.0);
        assert_eq!(again.ids[1..], action[..]);
        assert_eq!(
            again.logprobs[1..],
            (0..action.len()).map(|i| -(i as f64)).collect::<Vec<_>>()[..]
        );
    }

    #[test]
    fn misaligned_logprobs_come_from_the_previous_iteration_and_the_denominator_bug_reweights_rows()
    {
        let m = model();
        let mut injected = Injected::new(Some(Bug::MisalignedLogprobs), grpo(), None);
        let mut report = Report::new();
        let (first, second) = (rollout(4, 6), rollout(4, 6));
        let second = Batch {
            logprobs: &second.logprobs * 2.0,
            ..second
        };
        let _ = injected.advantages(&m, &[], &first, &[0.0; 4], 2, &mut report);
        assert!(injected.previous.is_none());
        let _ = injected.advantages(&m, &[], &second, &[0.0; 4], 2, &mut report);
        let previous = injected.previous.as_ref().unwrap();
        assert!(previous.equal(&first.logprobs));
        assert_eq!(fit_columns(previous, 4).size(), vec![4, 4]);
        assert_eq!(fit_columns(previous, 9).size(), vec![4, 9]);
        // The denominator bug: a constant C becomes the sequence's length, row by row.
        let batch = rollout(2, 6);
        let logp = batch.logprobs.shallow_clone().set_requires_grad(true);
        let forward = Forward {
            logp: logp.shallow_clone(),
            entropy: logp.zeros_like(),
            hidden: Tensor::zeros([1], (REAL, tch::Device::Cpu)),
            log_probs: Tensor::zeros([1], (REAL, tch::Device::Cpu)),
        };
        let advantages = per_token(&[1.0, 1.0], &batch.mask);
        let mut buggy = Injected::new(Some(Bug::LossDenominator), grpo(), None);
        let healthy = Injected::new(None, grpo(), None)
            .loss(&forward, &batch, &advantages, &[0, 1], &mut report)
            .double_value(&[]);
        let bugged = buggy
            .loss(&forward, &batch, &advantages, &[0, 1], &mut report)
            .double_value(&[]);
        assert!(
            (bugged / healthy - MAX_ACTION_TOKENS / 6.0).abs() < 1e-9,
            "{bugged} vs {healthy}"
        );
    }

    #[test]
    fn stale_weights_score_this_iterations_tokens_with_last_iterations_weights() {
        let rows = vec![Trajectory {
            task: 0,
            ids: vec![3, 5, 7, 2, 9, 4],
            owners: vec![
                Owner::Prompt,
                Owner::Policy,
                Owner::Policy,
                Owner::Env,
                Owner::Env,
                Owner::Policy,
            ],
            logprobs: vec![0.0, -1.5, -0.25, 0.0, 0.0, -2.0],
            reward: 1.0,
            info: Default::default(),
        }];
        let old_weights = model();
        let new_weights = {
            let _turn = crate::book::seeded(19);
            TinyAgent::new(old_weights.config, tch::Device::Cpu)
        };
        let logprobs_of = |m: &TinyAgent| {
            Vec::<f64>::try_from(policy_logprobs(m, &collate(&rows, tch::Device::Cpu)).get(0))
                .unwrap()
        };
        let mut report = Report::new();
        let mut injected = Injected::new(Some(Bug::StaleWeights), grpo(), None);
        // The first iteration has no older weights: the sampled log-probs stay.
        assert_eq!(
            injected.trajectories(&old_weights, rows.clone(), &mut report),
            rows
        );
        // The next one scores its own tokens with the first iteration's weights.
        let trained = injected.trajectories(&new_weights, rows.clone(), &mut report);
        assert_eq!(trained[0].ids, rows[0].ids);
        let (behind, now) = (logprobs_of(&old_weights), logprobs_of(&new_weights));
        for i in [1, 2, 5] {
            assert!((trained[0].logprobs[i] - behind[i]).abs() < 1e-12);
            assert!((trained[0].logprobs[i] - now[i]).abs() > 1e-6);
        }
        assert_eq!(trained[0].logprobs[3], 0.0, "tool output keeps no log-prob");
        assert_eq!(report["ids_differ"], 0.0, "the ids are the sampled ones");
    }

    #[test]
    fn averaging_micro_batch_means_reweights_rows_by_their_micro_batch() {
        // Rows of 8, 8 and 3 tokens: the forward pass runs them as two micro-batches, {0, 1} and {2}.
        let lengths = [8usize, 8, 3];
        let trajectories: Vec<Trajectory> = lengths
            .iter()
            .enumerate()
            .map(|(r, &t)| Trajectory {
                task: r,
                ids: (0..t as u32).map(|i| 3 + i).collect(),
                owners: (0..t)
                    .map(|i| if i == 0 { Owner::Prompt } else { Owner::Policy })
                    .collect(),
                logprobs: (0..t).map(|i| if i == 0 { 0.0 } else { -0.5 }).collect(),
                reward: 0.0,
                info: Default::default(),
            })
            .collect();
        let batch = collate(&trajectories, tch::Device::Cpu);
        assert_eq!(length_buckets(&row_lengths(&batch)).len(), 2);
        let row_gradients = |bug: Option<Bug>, norm: LossNorm| {
            let logp = batch.logprobs.copy().set_requires_grad(true); // π_θ = π_old, a tensor of its own
            let forward = Forward {
                logp: logp.shallow_clone(),
                entropy: logp.zeros_like(),
                hidden: Tensor::zeros([1], (REAL, tch::Device::Cpu)),
                log_probs: Tensor::zeros([1], (REAL, tch::Device::Cpu)),
            };
            let mut injected = Injected::new(
                bug,
                Grpo {
                    config: TrainConfig {
                        norm,
                        ..TrainConfig::grpo_plus_plus()
                    },
                    regularizer: Box::new(Plain),
                },
                None,
            );
            let advantages = per_token(&[1.0, 1.0, 1.0], &batch.mask);
            injected
                .loss(
                    &forward,
                    &batch,
                    &advantages,
                    &[0, 1, 2],
                    &mut Report::new(),
                )
                .backward();
            Vec::<f64>::try_from(logp.grad().sum_dim_intlist(1, false, REAL)).unwrap()
            // [B]
        };
        // Each micro-batch's mean over its own rows (tokens, under a token mean), then the mean of the two.
        for (norm, weights) in [
            (LossNorm::Constant(MAX_ACTION_TOKENS), [0.75, 0.75, 1.5]),
            (LossNorm::SequenceMean, [0.75, 0.75, 1.5]),
            (LossNorm::TokenMean, [16.0 / 28.0, 16.0 / 28.0, 16.0 / 4.0]),
        ] {
            let (healthy, bugged) = (
                row_gradients(None, norm),
                row_gradients(Some(Bug::AccumulationDenominator), norm),
            );
            for r in 0..3 {
                assert!(
                    (bugged[r] - weights[r] * healthy[r]).abs() < 1e-12 && healthy[r] != 0.0,
                    "{norm:?}, row {r}: {bugged:?} vs {healthy:?}"
                );
            }
        }
    }

    #[test]
    fn the_aliased_reference_reports_zero_kl_and_gives_no_gradient() {
        let logp = Tensor::from_slice(&[-0.5f64, -1.0, -2.0])
            .view([1, 3])
            .set_requires_grad(true);
        let mask = Tensor::from_slice(&[0f64, 1., 1.]).view([1, 3]);
        let (term, numbers) = AliasedReference { beta: 0.1 }
            .loss(
                &collate(&[], tch::Device::Cpu),
                &logp,
                &logp,
                &mask,
                LossNorm::TokenMean,
            )
            .unwrap();
        term.backward();
        assert_eq!(numbers[0].1, 0.0);
        assert!(Vec::<f64>::try_from(logp.grad().view([-1]))
            .unwrap()
            .iter()
            .all(|g| *g == 0.0));
    }

    #[test]
    fn the_dashboard_has_a_panel_per_metric_and_skips_what_a_run_did_not_record() {
        let record = |i: usize, success: f64| TrainRecord {
            iteration: i,
            episodes: i * 8,
            tasks: Some(vec![0, 1]),
            train_success: Some(success),
            held_out_success: i.is_multiple_of(2).then_some(0.5),
            entropy: Some(1.0 - 0.1 * i as f64),
            generated_tokens: Some(80),
            trained_tokens: Some(40),
            sequence_tokens: Some(200),
            grad_norm: Some(2.0),
            extra: [
                ("informative_groups".to_string(), 1.0),
                ("kl".to_string(), 0.01),
            ]
            .into_iter()
            .collect(),
            ..TrainRecord::default()
        };
        let records: Vec<TrainRecord> = (0..5).map(|i| record(i, 0.1 * i as f64)).collect();
        assert_eq!(Panel::Length.value(&records, 1, 1), Some(10.0));
        assert_eq!(Panel::MaskCoverage.value(&records, 1, 2), Some(0.1));
        assert_eq!(Panel::InformativeGroups.value(&records, 0, 1), Some(0.5));
        assert_eq!(Panel::ClipFraction.value(&records, 0, 1), None);
        assert_eq!(Panel::Length.value(&records, 4, 1), None); // the last line has no next one to count episodes
        let charts = dashboard(&[DashboardRun {
            label: "run".into(),
            seeds: vec![&records, &records, &records],
            epochs: 1,
        }]);
        assert_eq!(charts.len(), Panel::ALL.len());
        let held_out = &charts[1].series[0];
        assert_eq!(
            held_out.points.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![0.0, 2.0, 4.0]
        );
        assert!(charts[4].series.is_empty()); // no clip fraction recorded
        let shared = shareable_metrics(&records);
        let back: Vec<TrainRecord> = shared
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back.len(), records.len());
        assert_eq!(back[3].train_success, Some(0.3)); // 0.30000000000000004 rounded
        assert!(back.iter().all(|r| r.time.is_none()));
        let svg = grid_svg(&charts, 2).unwrap();
        assert_eq!(svg.matches("<svg").count(), 1 + charts.len());
        assert!(svg.contains("x=\"640\" y=\"2000\""));
    }

    #[test]
    fn the_viewer_page_is_self_contained_and_holds_every_token() {
        let gym = crate::gym::Gym::standard();
        let bpe = crate::pretrain::base_model(&gym.train).0;
        let action = bpe.encode("<call>run_tests()</call>");
        let t = Trajectory {
            task: 0,
            ids: [bpe.encode("fix </script> & <b>"), action.clone()].concat(),
            owners: [
                vec![Owner::Prompt; bpe.encode("fix </script> & <b>").len()],
                vec![Owner::Policy; action.len()],
            ]
            .concat(),
            logprobs: vec![-0.5; 0],
            reward: 1.0,
            info: Default::default(),
        };
        let t = Trajectory {
            logprobs: vec![-0.5; t.ids.len()],
            ..t
        };
        let episode = ViewedEpisode::new(&bpe, "task 0", &t, &vec![0.75; t.ids.len()]);
        assert_eq!(episode.counts(), (t.ids.len(), action.len(), action.len()));
        assert!(episode
            .tokens
            .iter()
            .all(|k| (k.mask && k.advantage == 0.75)
                || (!k.mask && k.advantage == 0.0 && k.logprob == 0.0)));
        let html = viewer_html("a <test>", &[episode.clone(), episode]);
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "the page must not load anything"
        );
        assert_eq!(
            html.matches("</script>").count(),
            2,
            "the data cannot close its script element"
        );
        assert!(html.contains("<title>a &lt;test&gt;</title>"));
        let start = html.find("id=\"episodes\">").unwrap() + "id=\"episodes\">".len();
        let end = start + html[start..].find("</script>").unwrap();
        let back: Vec<ViewedEpisode> = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(
            back[0]
                .tokens
                .iter()
                .map(|k| k.text.as_str())
                .collect::<String>(),
            bpe.decode(&t.ids)
        );
    }
}
