//! Chapter 17: evaluation that another lab could repeat. A task set is frozen
//! by a fingerprint of its tasks ([`task_set_fingerprint`]); each task is
//! sampled `n` times and scored by its count of successes `c`; pass@k and
//! pass^k are estimated without bias from (n, c) ([`pass_at_k`],
//! [`pass_hat_k`]); their intervals come from a bootstrap over tasks, not over
//! samples ([`bootstrap_over_tasks`]), because the tasks are what a benchmark
//! draws; two checkpoints are compared task by task ([`compare`]); the number
//! of tasks needed to see a difference follows from the spread of the paired
//! differences ([`tasks_needed`]); and held-out text is checked against the
//! training data for exact and near copies ([`leaks`]). One report format,
//! [`Report`], is written as JSON and printed as a table.

use crate::book::{fnv1a, FNV_START};
use crate::episode::parse_call;
use crate::exchange::Provenance;
use crate::gym::Task;
use crate::pg::evaluation_episodes;
use crate::rollout::Played;
use crate::stats::Streams;
use crate::stats::{paired_bootstrap, percentile, wilson_interval_of_mean};
use crate::tinyagent::{Sampling, TinyAgent};
use crate::tokenizer::Bpe;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;

// ANCHOR: pass_at_k
/// The unbiased estimate of pass@k from `n` samples of which `c` succeeded:
/// the chance that k samples drawn without replacement from the n contain at
/// least one success, 1 − C(n−c, k) / C(n, k). The ratio of binomials is
/// computed as the product ∏_{i=n−c+1}^{n} (1 − k/i), which stays between 0
/// and 1 (the binomials themselves overflow once n passes about a thousand). When
/// fewer than k samples failed, every draw of k holds a success: 1.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    assert!(
        c <= n && (1..=n).contains(&k),
        "pass@k needs 0 <= c <= n and 1 <= k <= n (got n = {n}, c = {c}, k = {k})"
    );
    if n - c < k {
        return 1.0;
    }
    1.0 - (n - c + 1..=n)
        .map(|i| 1.0 - k as f64 / i as f64)
        .product::<f64>()
}

/// The unbiased estimate of pass^k: the chance that k samples drawn without
/// replacement are all successes, C(c, k) / C(n, k) = ∏_{i=0}^{k−1} (c−i)/(n−i).
/// It asks for reliability (every attempt works) where pass@k asks for
/// coverage (some attempt works).
pub fn pass_hat_k(n: usize, c: usize, k: usize) -> f64 {
    assert!(
        c <= n && (1..=n).contains(&k),
        "pass^k needs 0 <= c <= n and 1 <= k <= n (got n = {n}, c = {c}, k = {k})"
    );
    if c < k {
        return 0.0;
    }
    (0..k).map(|i| (c - i) as f64 / (n - i) as f64).product()
}
// ANCHOR_END: pass_at_k

// ANCHOR: report
/// One task's result: `successes` of `samples` episodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskScore {
    pub task: String,
    pub samples: usize,
    pub successes: usize,
}

/// A metric over the task set with its 95 % interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub k: usize,
    pub mean: f64,
    pub low: f64,
    pub high: f64,
}

/// The report of one evaluation: what was evaluated (the policy's name and
/// the frozen task set's fingerprint), with which seed, every task's counts,
/// and pass@k and pass^k with bootstrap intervals over the tasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub policy: String,
    pub task_set: String,
    pub seed: u64,
    pub scores: Vec<TaskScore>,
    pub pass_at_k: Vec<Estimate>,
    pub pass_hat_k: Vec<Estimate>,
}

/// Resamples of the task set behind every interval of a report.
pub const RESAMPLES: usize = 2_000;

impl Report {
    /// Build the report from per-task counts; the intervals come from
    /// [`bootstrap_over_tasks`] with `seed`.
    pub fn new(
        policy: &str,
        task_set: &str,
        seed: u64,
        scores: Vec<TaskScore>,
        ks: &[usize],
    ) -> Report {
        let estimates = |metric: fn(usize, usize, usize) -> f64| -> Vec<Estimate> {
            ks.iter()
                .map(|&k| {
                    let per_task: Vec<f64> = scores
                        .iter()
                        .map(|s| metric(s.samples, s.successes, k))
                        .collect();
                    let (mean, low, high) = bootstrap_over_tasks(&per_task, RESAMPLES, seed);
                    Estimate { k, mean, low, high }
                })
                .collect()
        };
        let (pass_at_k, pass_hat_k) = (estimates(pass_at_k), estimates(pass_hat_k));
        Report {
            policy: policy.into(),
            task_set: task_set.into(),
            seed,
            scores,
            pass_at_k,
            pass_hat_k,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serialises")
    }

    pub fn from_json(text: &str) -> Result<Report, String> {
        serde_json::from_str(text).map_err(|err| format!("not an evaluation report: {err}"))
    }

    /// The report as a table: one row per k.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{} on {} tasks (set {}, seed {})\n",
            self.policy,
            self.scores.len(),
            self.task_set,
            self.seed
        );
        out.push_str(&format!(
            "{:>4}  {:>22}  {:>22}\n",
            "k", "pass@k [95% interval]", "pass^k [95% interval]"
        ));
        for (at, hat) in self.pass_at_k.iter().zip(&self.pass_hat_k) {
            let cell = |e: &Estimate| format!("{:.3} [{:.3}, {:.3}]", e.mean, e.low, e.high);
            out.push_str(&format!(
                "{:>4}  {:>22}  {:>22}\n",
                at.k,
                cell(at),
                cell(hat)
            ));
        }
        out.trim_end().to_string()
    }
}
// ANCHOR_END: report

// ANCHOR: bootstrap_over_tasks
/// The mean of per-task values and its 95 % percentile-bootstrap interval:
/// `resamples` times, draw as many tasks as there are with replacement and
/// average their values. Samples of one task share that task's difficulty, so
/// they are not independent draws; resampling whole tasks keeps each task's
/// samples together and measures how the score would move on another draw of
/// tasks from the same distribution.
///
/// The bootstrap knows only the tasks it was given: when all but a few
/// tasks sit at 0 (or at 1), most resamples repeat them, and when all do the
/// interval has zero width. So within [`NEAR_BOUNDARY`] tasks' worth of a
/// boundary (n·mean or n·(1 − mean) below it) the interval is widened to hold
/// Chapter 2's Wilson interval over the n tasks as well
/// ([`wilson_interval_of_mean`]): a score of 0 on 39 tasks then reads
/// [0, 0.090], not [0, 0].
pub fn bootstrap_over_tasks(per_task: &[f64], resamples: usize, seed: u64) -> (f64, f64, f64) {
    assert!(
        !per_task.is_empty() && resamples >= 100,
        "need some tasks and at least 100 resamples"
    );
    let n = per_task.len();
    let mean = per_task.iter().sum::<f64>() / n as f64;
    let mut rng = StdRng::seed_from_u64(seed);
    let means: Vec<f64> = (0..resamples)
        .map(|_| {
            (0..n)
                .map(|_| per_task[rng.random_range(0..n)])
                .sum::<f64>()
                / n as f64
        })
        .collect();
    let (mut low, mut high) = (percentile(&means, 0.025), percentile(&means, 0.975));
    let bounded = per_task.iter().all(|v| (0.0..=1.0).contains(v));
    if bounded && n as f64 * mean.min(1.0 - mean) < NEAR_BOUNDARY {
        let (wilson_low, wilson_high) = wilson_interval_of_mean(mean.clamp(0.0, 1.0), n);
        (low, high) = (low.min(wilson_low), high.max(wilson_high));
    }
    (mean, low, high)
}

/// Tasks' worth of successes (or failures) below which a rate counts as near
/// its boundary: the usual condition n·p ≥ 5 for a normal approximation.
pub const NEAR_BOUNDARY: f64 = 5.0;
// ANCHOR_END: bootstrap_over_tasks

// ANCHOR: compare
/// Two checkpoints scored on the same tasks (in the same order): the mean of
/// the per-task differences `b − a` in pass@k, with the paired bootstrap's
/// 95 % interval over tasks (Chapter 2's [`paired_bootstrap`]).
pub fn compare(a: &Report, b: &Report, k: usize, seed: u64) -> (f64, f64, f64) {
    assert_eq!(
        a.task_set, b.task_set,
        "a paired comparison needs the same task set"
    );
    let ids = |r: &Report| r.scores.iter().map(|s| s.task.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(a),
        ids(b),
        "a paired comparison needs the same tasks in the same order"
    );
    let per_task = |r: &Report| {
        r.scores
            .iter()
            .map(|s| pass_at_k(s.samples, s.successes, k))
            .collect::<Vec<f64>>()
    };
    let (difference, low, high) = paired_bootstrap(&per_task(a), &per_task(b), RESAMPLES, seed);
    if low < high {
        return (difference, low, high);
    }
    // Every task moved by the same amount (most often: none moved, both
    // checkpoints at 0 or at 1), so every resample repeats it. The paired
    // design has nothing to say; what the two scores allow still bounds the
    // difference: from b's lowest minus a's highest to b's highest minus
    // a's lowest, each end from its own report's interval.
    let (a_at, b_at) = (&a.pass_at_k, &b.pass_at_k);
    let find = |e: &[Estimate]| e.iter().find(|e| e.k == k).cloned();
    match (find(a_at), find(b_at)) {
        (Some(ea), Some(eb)) => (difference, eb.low - ea.high, eb.high - ea.low),
        _ => (difference, low, high),
    }
}

/// Tasks needed for a paired comparison to show a true mean difference
/// `delta` when per-task differences spread with standard deviation `sd`: the
/// smallest n with (z₁ + z₂) · sd / √n ≤ delta, where z₁ = 1.96 makes the
/// interval 95 % and z₂ = 0.84 finds the difference in 80 % of experiments.
pub fn tasks_needed(delta: f64, sd: f64) -> usize {
    assert!(
        delta > 0.0 && sd >= 0.0,
        "need a positive difference and a spread (got delta = {delta}, sd = {sd})"
    );
    ((1.96 + 0.84) * sd / delta).powi(2).ceil().max(1.0) as usize
}
// ANCHOR_END: compare

// ANCHOR: frozen
/// The fingerprint of a task set: a hash of every task as JSON, in order, so
/// that a report names exactly which tasks (sources, tests, menus) it scored.
pub fn task_set_fingerprint(tasks: &[Task]) -> String {
    let hash = tasks
        .iter()
        .fold(FNV_START, |h, task| fnv1a(task.to_json().as_bytes(), h));
    format!("{hash:016x}")
}
// ANCHOR_END: frozen

/// `per_task` episodes of `model` on each of `tasks`, sampled at temperature 1
/// ([`crate::pg::evaluation_episodes`]) with the stream "evaluation" of `seed`
/// at iteration 0. Within the test command ([`crate::book::reuse`]) a second
/// call with the same weights, tokenizer, tasks, count and seed (the chapter's
/// notebook after the chapter) reads the stored episodes back instead of
/// playing them again; a reader's call always plays them.
pub fn evaluation_played(
    model: &TinyAgent,
    bpe: &Bpe,
    tasks: &[Task],
    per_task: usize,
    seed: u64,
) -> Vec<Played> {
    played_with_cache(
        crate::book::run_cache().as_deref(),
        model,
        bpe,
        tasks,
        per_task,
        seed,
    )
}

fn played_with_cache(
    cache: Option<&Path>,
    model: &TinyAgent,
    bpe: &Bpe,
    tasks: &[Task],
    per_task: usize,
    seed: u64,
) -> Vec<Played> {
    let key = format!(
        "evaluation episodes\n{:016x}\n{}\n{}\n{per_task}\n{seed}",
        model.fingerprint(),
        serde_json::to_string(&Provenance::new(bpe, Sampling::PURE, 16))
            .expect("provenance serialises"),
        task_set_fingerprint(tasks),
    );
    let play = || {
        evaluation_episodes(
            model,
            bpe,
            tasks,
            per_task,
            &mut Streams::new(seed).evaluation(0),
        )
    };
    let write = |played: &Vec<Played>, dir: &Path| {
        let text = serde_json::to_string(played).map_err(|err| err.to_string())?;
        std::fs::write(dir.join("played.json"), text).map_err(|err| err.to_string())
    };
    let read = |dir: &Path| {
        let text =
            std::fs::read_to_string(dir.join("played.json")).map_err(|err| err.to_string())?;
        serde_json::from_str(&text).map_err(|err| err.to_string())
    };
    crate::book::reuse(cache, &key, play, write, read)
        .unwrap_or_else(|err| panic!("cannot store evaluation episodes: {err}"))
}

// ANCHOR: leaks
/// A held-out text found in the training data.
#[derive(Clone, Debug, PartialEq)]
pub struct Leak {
    /// Index of the held-out text and of the training text it matches.
    pub held_out: usize,
    pub train: usize,
    /// 1 for an exact copy (after normalising white space), else the Jaccard
    /// similarity of their word 5-grams.
    pub similarity: f64,
}

/// White space collapsed to single spaces, ends trimmed.
fn normalised(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The set of hashed word 5-grams of a text (words split at white space and
/// punctuation, punctuation kept as words); a text of fewer than five words is
/// one gram.
fn shingles(text: &str) -> HashSet<u64> {
    let mut words = Vec::new();
    let mut word = String::new();
    for ch in text.chars() {
        if ch.is_alphanumeric() || ch == '_' {
            word.push(ch);
        } else {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            if !ch.is_whitespace() {
                words.push(ch.to_string());
            }
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let gram = |ws: &[String]| fnv1a(ws.join(" ").as_bytes(), FNV_START);
    if words.len() < 5 {
        return HashSet::from([gram(&words)]);
    }
    words.windows(5).map(gram).collect()
}

/// Every held-out text that occurs in the training texts exactly (after
/// normalising white space) or nearly (word 5-gram Jaccard similarity at least
/// `threshold`), with the most similar training text for each.
pub fn leaks(train: &[String], held_out: &[String], threshold: f64) -> Vec<Leak> {
    let exact: std::collections::HashMap<String, usize> = train
        .iter()
        .enumerate()
        .map(|(i, t)| (normalised(t), i))
        .collect();
    let train_grams: Vec<HashSet<u64>> = train.iter().map(|t| shingles(t)).collect();
    let mut found = Vec::new();
    for (h, text) in held_out.iter().enumerate() {
        if let Some(&t) = exact.get(&normalised(text)) {
            found.push(Leak {
                held_out: h,
                train: t,
                similarity: 1.0,
            });
            continue;
        }
        let grams = shingles(text);
        let best = train_grams
            .iter()
            .enumerate()
            .map(|(t, other)| {
                (
                    t,
                    grams.intersection(other).count() as f64 / grams.union(other).count() as f64,
                )
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((t, similarity)) = best.filter(|(_, s)| *s >= threshold) {
            found.push(Leak {
                held_out: h,
                train: t,
                similarity,
            });
        }
    }
    found
}
// ANCHOR_END: leaks

// ANCHOR: conduct
/// How a policy's episodes went, beside whether they succeeded. Each share is
/// NaN when its denominator is empty.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conduct {
    /// Turns whose message was not exactly one well-formed call.
    pub malformed_turns: f64,
    /// Well-formed `edit` calls that named an edit on the task's menu.
    pub edits_on_menu: f64,
    /// Episodes that ended with `submit` (the others ran out of turns).
    pub submitted: f64,
    /// Episodes whose token stream outgrew `window`, the most the policy can
    /// read: from then on it saw only the latest `window` tokens.
    pub over_window: f64,
}

/// The [`Conduct`] of `played`, episodes of `tasks`.
pub fn conduct(played: &[Played], tasks: &[Task], window: usize) -> Conduct {
    let share = |count: usize, of: usize| count as f64 / of as f64;
    let turns: usize = played.iter().map(|p| p.actions.len()).sum();
    let malformed: usize = played.iter().map(|p| p.parse_errors).sum();
    let edits: Vec<bool> = played
        .iter()
        .flat_map(|p| {
            let menu = &tasks[p.task].menu;
            p.actions
                .iter()
                .filter_map(|a| parse_call(a))
                .filter(|c| c.tool == "edit")
                .map(move |c| menu.iter().any(|e| Some(&e.name) == c.arg.as_ref()))
        })
        .collect();
    Conduct {
        malformed_turns: share(malformed, turns),
        edits_on_menu: share(edits.iter().filter(|&&on| on).count(), edits.len()),
        submitted: share(
            played.iter().filter(|p| p.info.submitted).count(),
            played.len(),
        ),
        over_window: share(
            played.iter().filter(|p| p.ids().len() > window).count(),
            played.len(),
        ),
    }
}
// ANCHOR_END: conduct

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_evaluation_episodes_read_back_bit_for_bit_and_only_for_the_same_key() {
        let gym = crate::gym::Gym::standard();
        let tasks = &gym.held_out[..3];
        let transcripts = crate::pretrain::corpus(tasks, 20, 0);
        let bpe = Bpe::train(transcripts.iter().map(|t| crate::tokenizer::render(t)), 400).unwrap();
        let model = {
            let _turn = crate::book::seeded(0);
            let config = crate::tinyagent::Config {
                vocab: bpe.vocab_size() as i64,
                n_ctx: 512,
                d_model: 16,
                n_layer: 1,
                n_head: 2,
            };
            TinyAgent::new(config, tch::Device::Cpu)
        };
        let cache = std::env::temp_dir().join(format!("agentrl-eval-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        std::fs::create_dir_all(&cache).unwrap();
        let played = played_with_cache(Some(&cache), &model, &bpe, tasks, 2, 5);
        assert_eq!(
            played,
            played_with_cache(None, &model, &bpe, tasks, 2, 5),
            "the store plays what a reader plays"
        );
        assert!(played
            .iter()
            .any(|p| p.segments.iter().any(|s| !s.logprobs.is_empty())));
        // Only the first call of a key plays: mark the stored entry, and the second call returns the mark.
        let entry = std::fs::read_dir(&cache)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let mut marked = played.clone();
        marked[0].reward = 42.0;
        std::fs::write(
            entry.join("played.json"),
            serde_json::to_string(&marked).unwrap(),
        )
        .unwrap();
        assert_eq!(
            played_with_cache(Some(&cache), &model, &bpe, tasks, 2, 5),
            marked
        );
        // Another seed is another key, played afresh.
        assert_eq!(
            played_with_cache(Some(&cache), &model, &bpe, tasks, 2, 6),
            played_with_cache(None, &model, &bpe, tasks, 2, 6)
        );
        let _ = std::fs::remove_dir_all(&cache);
    }

    fn binomial(n: u64, k: u64) -> f64 {
        (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
    }

    #[test]
    fn pass_at_k_matches_hand_checked_values_and_the_binomial_formula() {
        // n = 4, c = 1, k = 2: draws of two from four hold the success in 3 of 6.
        assert!((pass_at_k(4, 1, 2) - 0.5).abs() < 1e-12);
        // n = 5, c = 2, k = 2: 1 − C(3,2)/C(5,2) = 1 − 3/10.
        assert!((pass_at_k(5, 2, 2) - 0.7).abs() < 1e-12);
        // k = 1 is the success rate.
        assert!((pass_at_k(10, 3, 1) - 0.3).abs() < 1e-12);
        // n − c < k: every draw holds a success.
        assert_eq!(pass_at_k(5, 4, 2), 1.0);
        assert_eq!(pass_at_k(3, 3, 3), 1.0);
        assert_eq!(pass_at_k(8, 0, 4), 0.0);
        for (n, c, k) in [(20, 3, 5), (64, 10, 16), (30, 29, 2), (12, 0, 1)] {
            let direct = 1.0 - binomial((n - c) as u64, k as u64) / binomial(n as u64, k as u64);
            assert!(
                (pass_at_k(n, c, k) - direct).abs() < 1e-12,
                "n {n} c {c} k {k}"
            );
        }
        // Large n, where the binomials overflow f64 but the product does not.
        let p = pass_at_k(2_000, 1, 1_000);
        assert!((p - 0.5).abs() < 1e-12, "{p}");
    }

    #[test]
    fn pass_hat_k_matches_hand_checked_values() {
        // n = 4, c = 2, k = 2: one of the six pairs is both successes.
        assert!((pass_hat_k(4, 2, 2) - 1.0 / 6.0).abs() < 1e-12);
        assert!((pass_hat_k(10, 3, 1) - 0.3).abs() < 1e-12);
        assert_eq!(pass_hat_k(5, 1, 2), 0.0);
        assert_eq!(pass_hat_k(6, 6, 4), 1.0);
        for (n, c, k) in [(20, 12, 5), (64, 40, 8)] {
            let direct = binomial(c as u64, k as u64) / binomial(n as u64, k as u64);
            assert!((pass_hat_k(n, c, k) - direct).abs() < 1e-12);
        }
    }

    #[test]
    #[should_panic(expected = "1 <= k <= n")]
    fn pass_at_k_refuses_more_draws_than_samples() {
        pass_at_k(4, 1, 5);
    }

    #[test]
    fn the_bootstrap_over_tasks_is_wider_when_tasks_differ_and_zero_when_they_agree() {
        let same = vec![0.5; 40];
        let (mean, low, high) = bootstrap_over_tasks(&same, 1_000, 7);
        assert_eq!((mean, low, high), (0.5, 0.5, 0.5));
        // Half the tasks always solved, half never: the mean is 0.5 but the
        // interval is about ±1.96·0.5/√40 ≈ ±0.155 wide.
        let split: Vec<f64> = (0..40).map(|i| (i % 2) as f64).collect();
        let (mean, low, high) = bootstrap_over_tasks(&split, 2_000, 7);
        assert_eq!(mean, 0.5);
        assert!(
            (0.30..0.40).contains(&low) && (0.60..0.70).contains(&high),
            "{low} {high}"
        );
    }

    #[test]
    fn near_a_boundary_the_interval_over_tasks_holds_wilsons_and_never_collapses() {
        // No task solved: the bootstrap alone gives [0, 0]; Wilson over 39 tasks 0.090.
        let (mean, low, high) = bootstrap_over_tasks(&[0.0; 39], 2_000, 7);
        assert_eq!((mean, low), (0.0, 0.0));
        assert!((high - 0.0897).abs() < 5e-4, "{high}");
        let (_, low, high) = bootstrap_over_tasks(&[1.0; 39], 2_000, 7);
        assert!((low - 0.9103).abs() < 5e-4 && high == 1.0, "{low} {high}");
        // One task of 78 solved: 1 < 5 tasks' worth, so Wilson's [0.002, 0.069]
        // is held, where the bootstrap alone reads about [0, 0.038].
        let one: Vec<f64> = (0..78).map(|i| if i == 0 { 1.0 } else { 0.0 }).collect();
        let (_, low, high) = bootstrap_over_tasks(&one, 2_000, 7);
        assert!(low == 0.0 && (0.06..0.075).contains(&high), "{low} {high}");
        // Twenty of forty: far from the boundaries, the bootstrap alone.
        let split: Vec<f64> = (0..40).map(|i| (i % 2) as f64).collect();
        assert_eq!(bootstrap_over_tasks(&split, 2_000, 7).1, {
            let (_, low, _) = crate::stats::paired_bootstrap(&[0.0; 40], &split, 2_000, 7);
            low
        });
    }

    #[test]
    fn a_comparison_in_which_no_task_moved_still_has_a_width() {
        let zeros = |policy: &str| {
            let scores = (0..39)
                .map(|i| TaskScore {
                    task: format!("t{i}"),
                    samples: 4,
                    successes: 0,
                })
                .collect();
            Report::new(policy, "set", 1, scores, &[1])
        };
        let (d, low, high) = compare(&zeros("a"), &zeros("b"), 1, 3);
        assert_eq!(d, 0.0);
        assert!(
            (low + 0.0897).abs() < 5e-4 && (high - 0.0897).abs() < 5e-4,
            "{low} {high}"
        );
    }

    #[test]
    fn a_report_round_trips_through_json_and_tabulates_every_k() {
        let scores = (0..10)
            .map(|i| TaskScore {
                task: format!("t{i}"),
                samples: 8,
                successes: i % 5,
            })
            .collect();
        let report = Report::new("base", "0123", 3, scores, &[1, 4, 8]);
        assert_eq!(Report::from_json(&report.to_json()).unwrap(), report);
        assert_eq!(report.table().lines().count(), 2 + 3);
        // pass@k grows with k, pass^k shrinks.
        assert!(report.pass_at_k[0].mean < report.pass_at_k[2].mean);
        assert!(report.pass_hat_k[0].mean > report.pass_hat_k[2].mean);
        assert!((report.pass_at_k[0].mean - 0.25).abs() < 1e-12);
        assert!(Report::from_json("{}")
            .unwrap_err()
            .starts_with("not an evaluation report"));
    }

    #[test]
    fn compare_takes_per_task_differences_and_refuses_other_tasks() {
        let scores = |c: [usize; 4]| {
            (0..4)
                .map(|i| TaskScore {
                    task: format!("t{i}"),
                    samples: 4,
                    successes: c[i],
                })
                .collect::<Vec<_>>()
        };
        let a = Report::new("a", "set", 0, scores([0, 1, 2, 4]), &[1]);
        let b = Report::new("b", "set", 0, scores([1, 2, 3, 4]), &[1]);
        // pass@1 rises by 1/4 on three tasks and not at all on the fourth: mean 3/16.
        let (mean, low, high) = compare(&a, &b, 1, 5);
        assert!(
            (mean - 3.0 / 16.0).abs() < 1e-12
                && low <= mean
                && mean <= high
                && low >= 0.0
                && high <= 0.25,
            "{mean} {low} {high}"
        );
        let other = Report::new("c", "other set", 0, scores([1, 2, 3, 4]), &[1]);
        assert!(std::panic::catch_unwind(|| compare(&a, &other, 1, 5)).is_err());
    }

    #[test]
    fn a_task_set_fingerprint_changes_with_any_task() {
        let gym = crate::gym::Gym::standard();
        let tasks = &gym.held_out[..5];
        // The same tasks, borrowed or owned, give the same fingerprint.
        #[allow(clippy::unnecessary_to_owned)]
        let owned = task_set_fingerprint(&tasks.to_vec());
        assert_eq!(task_set_fingerprint(tasks), owned);
        let mut changed = tasks.to_vec();
        changed[3].hidden_tests[0].expected.push('0');
        assert_ne!(task_set_fingerprint(tasks), task_set_fingerprint(&changed));
        assert_ne!(
            task_set_fingerprint(tasks),
            task_set_fingerprint(&tasks[..4])
        );
    }

    #[test]
    fn tasks_needed_follows_the_normal_approximation() {
        // (2.8 · 0.5 / 0.1)² = 196.
        assert_eq!(tasks_needed(0.1, 0.5), 196);
        assert_eq!(tasks_needed(0.2, 0.5), 49);
    }

    #[test]
    fn leaks_finds_exact_and_near_copies_and_nothing_else() {
        let train = vec![
            "fn add(a, b) {\n    a + b\n}".to_string(),
            "fn clamp(value, lower, upper) { min(max(value, lower), upper) }".to_string(),
        ];
        let held_out = vec![
            "fn add(a,   b) {  a + b }".to_string(), // exact after normalising
            "fn add(a, b) {\n a + b\n}".to_string(), // exact after normalising
            "fn clamp(value, lower, upper) { min(max(value, lower), upper) + 0 }".to_string(), // near
            "fn add(x, y) { x - y }".to_string(), // shares words, not a copy
            "fn gcd(a, b) { if b == 0 { a } else { gcd(b, a % b) } }".to_string(), // new
        ];
        let found = leaks(&train, &held_out, 0.7);
        let exact: Vec<usize> = found
            .iter()
            .filter(|l| l.similarity == 1.0)
            .map(|l| l.held_out)
            .collect();
        assert_eq!(exact, vec![0, 1]);
        let near: Vec<(usize, usize)> = found
            .iter()
            .filter(|l| l.similarity < 1.0)
            .map(|l| (l.held_out, l.train))
            .collect();
        assert!(near.contains(&(2, 1)), "{found:?}");
        assert!(!found.iter().any(|l| l.held_out >= 3), "{found:?}");
    }

    #[test]
    fn conduct_counts_malformed_turns_edits_off_the_menu_submissions_and_long_streams() {
        use crate::episode::Owner;
        use crate::gym::Info;
        use crate::rollout::Segment;
        let task = crate::gym::Gym::standard().held_out[0].clone();
        let on_menu = format!("<call> edit {} </call>", task.menu[0].name);
        let episode = |actions: Vec<&str>, submitted: bool, tokens: usize| Played {
            task: 0,
            segments: vec![Segment {
                owner: Owner::Env,
                ids: vec![7; tokens],
                logprobs: vec![],
            }],
            parse_errors: actions.iter().filter(|a| parse_call(a).is_none()).count(),
            actions: actions.into_iter().map(String::from).collect(),
            reward: 0.0,
            info: Info {
                submitted,
                ..Info::default()
            },
        };
        let played = vec![
            episode(
                vec!["<call> read </call>", &on_menu, "<call> submit </call>"],
                true,
                100,
            ),
            episode(
                vec!["<call> edit no_such_edit </call>", "garbage", "<call> edit"],
                false,
                900,
            ),
        ];
        let seen = conduct(&played, std::slice::from_ref(&task), 752);
        assert_eq!(seen.malformed_turns, 2.0 / 6.0);
        assert_eq!(seen.edits_on_menu, 0.5);
        assert_eq!(seen.submitted, 0.5);
        assert_eq!(seen.over_window, 0.5);
        assert!(conduct(&played[..1], std::slice::from_ref(&task), 50).over_window == 1.0);
        assert!(conduct(&[], &[], 752).submitted.is_nan());
    }
}
