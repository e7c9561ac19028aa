//! Chapter 19: the capstone, a coding agent trained end to end.
//!
//! One run: the task sets (training families, a validation set for choosing
//! settings, held-out instances, held-out families, QuixBugs), a warm start by
//! supervised fine-tuning on the oracle's transcripts, GRPO++ on the
//! hidden-test reward with an exploit monitor, resumable checkpoints, and an
//! evaluation of every seed's warm start and trained agent on the three
//! held-out sets with pass@k and intervals, checked against the chapter's
//! goals. [`CapstoneConfig::full`] is the run `cargo xtask capstone` makes;
//! [`CapstoneConfig::short`] the one the chapter makes.

use crate::evaluation::{compare, task_set_fingerprint, Report, TaskScore};
use crate::finetune::{oracle_transcripts, sft, SFT};
use crate::grpo::{Plain, TrainConfig};
use crate::gym::{generate, Family, Gym, Task};
use crate::horizon::HELD_OUT_FAMILIES;
use crate::pg::{
    evaluation_episodes, side_by_side, train_resumable, Algorithm, Forward, Report as Extra,
    Resumable, TrainRecord,
};
use crate::pretrain::{base_dir, base_model, load_model, save_model, saved_model, PretrainConfig};
use crate::reward::{final_source, monitor};
use crate::rollout::Played;
use crate::stats::{mean_interval, plus_minus, wilson_interval, Streams};
use crate::tinyagent::TinyAgent;
use crate::trajectory::{Batch, Trajectory};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tch::Tensor;

// ANCHOR: split
/// The capstone's task sets. Training and validation come from the six
/// families of Chapter 12's split; the held-out families are its other two.
pub struct Split {
    /// The gym's training tasks of the six families (named ops, exploits on
    /// the menus) and [`EXTRA_PER_FAMILY`] new instances of each.
    pub train: Vec<Task>,
    /// Five new instances per training family, for choosing settings; never reported as a result.
    pub validation: Vec<Task>,
    /// The gym's held-out instances of the six families: the goal is measured here.
    pub instances: Vec<Task>,
    /// The gym's held-out instances of the two held-out families.
    pub families: Vec<Task>,
    /// QuixBugs as Chapter 17 froze it.
    pub quixbugs: Vec<Task>,
}

/// Validation instances are drawn from seeds at and above this one, extra
/// training instances from seeds at and above [`EXTRA_SEEDS`].
pub const VALIDATION_SEEDS: u64 = 2_000_000;
pub const EXTRA_SEEDS: u64 = 3_000_000;
/// New training instances per family on top of the gym's 20, where the family has that many sources.
pub const EXTRA_PER_FAMILY: usize = 80;

/// Seeds tried per family for new instances: some families have only a few
/// dozen distinct sources, and the search stops here rather than run forever.
pub const SEEDS_TRIED: u64 = 5_000;

/// Up to `count` instances of `family` from the [`SEEDS_TRIED`] seeds at and
/// above `first`, each with a source not in `seen`.
fn fresh(
    family: Family,
    first: u64,
    count: usize,
    split: &str,
    seen: &mut HashSet<String>,
) -> Vec<Task> {
    (first..first + SEEDS_TRIED)
        .map(|seed| generate(family, seed, format!("{split}-{family}-{seed}")))
        .filter(|t| seen.insert(t.source.clone()))
        .take(count)
        .collect()
}

impl Split {
    /// The fingerprints of the five sets (Chapter 17), in the order of the fields.
    pub fn fingerprints(&self) -> Vec<String> {
        [
            &self.train,
            &self.validation,
            &self.instances,
            &self.families,
            &self.quixbugs,
        ]
        .iter()
        .map(|t| task_set_fingerprint(t))
        .collect()
    }
}

pub fn split(gym: &Gym) -> Split {
    let held = |task: &Task| HELD_OUT_FAMILIES.contains(&task.family);
    let mut seen: HashSet<String> = gym
        .train
        .iter()
        .chain(&gym.held_out)
        .map(|t| t.source.clone())
        .collect();
    let trained: Vec<Family> = Family::ALL
        .into_iter()
        .filter(|f| !HELD_OUT_FAMILIES.contains(f))
        .collect();
    let validation: Vec<Task> = trained
        .iter()
        .flat_map(|&f| fresh(f, VALIDATION_SEEDS, 5, "validation", &mut seen))
        .collect();
    let mut train: Vec<Task> = gym.train.iter().filter(|t| !held(t)).cloned().collect();
    train.extend(
        trained
            .iter()
            .flat_map(|&f| fresh(f, EXTRA_SEEDS, EXTRA_PER_FAMILY, "extra", &mut seen)),
    );
    Split {
        train,
        validation,
        instances: gym.held_out.iter().filter(|t| !held(t)).cloned().collect(),
        families: gym.held_out.iter().filter(|t| held(t)).cloned().collect(),
        quixbugs: crate::quixbugs::tasks(17),
    }
}
// ANCHOR_END: split

// ANCHOR: config
/// Everything a capstone run is told.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapstoneConfig {
    pub name: String,
    pub seeds: Vec<u64>,
    /// Warm start: oracle transcripts, and SFT steps on them.
    pub transcripts: usize,
    pub sft_steps: usize,
    /// The RL recipe (its seed is replaced by each run's).
    pub rl: TrainConfig,
    /// Save the run's state every this many iterations.
    pub checkpoint_every: usize,
    /// Episodes per task in the final evaluation: held-out instances, held-out families, QuixBugs.
    pub samples: [usize; 3],
    /// The k of pass@k reported.
    pub ks: Vec<usize>,
    /// Models evaluated at a time (every seed's RL runs at once).
    pub threads: usize,
}

impl CapstoneConfig {
    /// The full run: three seeds, each 120 SFT steps on 512 transcripts, then
    /// 150 iterations of GRPO++ at a learning rate falling from 3·10⁻⁴ to
    /// 3·10⁻⁵; 32 episodes per held-out task, 4 per QuixBugs program.
    pub fn full() -> CapstoneConfig {
        CapstoneConfig {
            name: "capstone".into(),
            seeds: vec![0, 1, 2],
            transcripts: 512,
            sft_steps: 120,
            rl: TrainConfig {
                name: "capstone".into(),
                iterations: 150,
                lr: 3e-4,
                lr_end: 3e-5,
                eval_every: 25,
                eval_episodes: 2,
                ..TrainConfig::grpo_plus_plus()
            },
            checkpoint_every: 10,
            samples: [32, 32, 4],
            ks: vec![1, 2, 4, 8, 16, 32],
            threads: 2,
        }
    }

    /// The same pipeline, small: 30 SFT steps, 6 iterations, 4 episodes per held-out task, 2 per program.
    pub fn short() -> CapstoneConfig {
        let full = CapstoneConfig::full();
        CapstoneConfig {
            name: "capstone short".into(),
            sft_steps: 30,
            rl: TrainConfig {
                iterations: 6,
                eval_every: 3,
                ..full.rl.clone()
            },
            checkpoint_every: 2,
            samples: [4, 4, 2],
            ks: vec![1, 2, 4],
            ..full
        }
    }
}
// ANCHOR_END: config

// ANCHOR: monitored
/// The exploit monitor: the inner algorithm unchanged, plus, every iteration,
/// the share of episodes that hacked (passed the public tests, failed a
/// hidden one) and the share whose final source Chapter 11's static monitor
/// flags. The reward stays the hidden tests'; the monitor only watches.
pub struct Monitored {
    pub tasks: Vec<Task>,
    pub inner: Box<dyn Algorithm + Send>,
}

impl Algorithm for Monitored {
    fn rewards(
        &mut self,
        played: &[Played],
        trajectories: &[Trajectory],
        report: &mut Extra,
    ) -> Vec<f64> {
        let n = played.len().max(1) as f64;
        let hacked = played.iter().filter(|p| p.info.hacked).count() as f64;
        let flagged = played
            .iter()
            .filter(|p| {
                !monitor(
                    &self.tasks[p.task],
                    &final_source(&self.tasks[p.task], &p.actions),
                )
                .is_empty()
            })
            .count() as f64;
        report.insert("hacked".into(), hacked / n);
        report.insert("flagged".into(), flagged / n);
        self.inner.rewards(played, trajectories, report)
    }
    fn advantages(
        &mut self,
        model: &TinyAgent,
        trajectories: &[Trajectory],
        rollout: &Batch,
        rewards: &[f64],
        group: usize,
        report: &mut Extra,
    ) -> Tensor {
        self.inner
            .advantages(model, trajectories, rollout, rewards, group, report)
    }
    fn config_json(&self) -> Option<String> {
        self.inner.config_json()
    }
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
    fn trajectories(
        &mut self,
        model: &TinyAgent,
        trajectories: Vec<Trajectory>,
        report: &mut Extra,
    ) -> Vec<Trajectory> {
        self.inner.trajectories(model, trajectories, report)
    }
    fn keep(&mut self, played: &[Played], group: usize, report: &mut Extra) -> Vec<usize> {
        self.inner.keep(played, group, report)
    }
    fn loss(
        &mut self,
        forward: &Forward,
        minibatch: &Batch,
        advantages: &Tensor,
        rows: &[usize],
        report: &mut Extra,
    ) -> Tensor {
        self.inner
            .loss(forward, minibatch, advantages, rows, report)
    }
    fn state(&self) -> Option<String> {
        self.inner.state()
    }
    fn restore(&mut self, state: &str) -> Result<(), String> {
        self.inner.restore(state)
    }
}
// ANCHOR_END: monitored

/// One evaluated model on one task set: its report and the share of episodes that hacked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluated {
    pub report: Report,
    pub hacked: usize,
    pub episodes: usize,
    /// The evaluated model's [`TinyAgent::fingerprint`], in hex.
    #[serde(default)]
    pub model: String,
}

/// What one seed produced: the warm start's and the trained agent's
/// evaluations (instances, families, QuixBugs), and the run's training curve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedResult {
    pub seed: u64,
    pub warm: Vec<Evaluated>,
    pub trained: Vec<Evaluated>,
    /// (iteration, validation success) at every evaluation of the loop.
    pub validation: Vec<(usize, f64)>,
    /// Per iteration: training success, share hacked, share flagged by the monitor.
    pub training: Vec<(f64, f64, f64)>,
}

/// The whole run's report, written to `report.json` in the run's folder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapstoneReport {
    pub config: CapstoneConfig,
    /// Fingerprints of the sets: train, validation, instances, families, QuixBugs.
    pub task_sets: Vec<String>,
    pub seeds: Vec<SeedResult>,
    /// Wall-clock seconds of the whole run (not part of any check but the time goal).
    pub seconds: f64,
    /// The processor the run was measured on ([`crate::book::machine`]).
    pub machine: String,
    /// The commit of the code that ran, as `cargo xtask capstone` passes it in
    /// `AGENTRL_COMMIT` (with "+changes" when the work tree was not clean).
    #[serde(default)]
    pub commit: String,
}

impl CapstoneReport {
    /// A report stored as JSON (by the run, or by `cargo xtask capstone --record`).
    pub fn read(path: &Path) -> Result<CapstoneReport, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|err| format!("{} is not a capstone report: {err}", path.display()))
    }

    /// The report with every pass@k estimate and interval computed again from
    /// its per-task counts, as [`evaluate`] computed them: what a reader of a
    /// stored report can check without trusting its summary numbers.
    pub fn rederived(&self) -> CapstoneReport {
        let again = |e: &Evaluated, set: usize| {
            let ks: Vec<usize> = self
                .config
                .ks
                .iter()
                .copied()
                .filter(|&k| k <= self.config.samples[set])
                .collect();
            Evaluated {
                report: Report::new(
                    &e.report.policy,
                    &e.report.task_set,
                    e.report.seed,
                    e.report.scores.clone(),
                    &ks,
                ),
                ..e.clone()
            }
        };
        let seeds = self
            .seeds
            .iter()
            .map(|r| SeedResult {
                warm: r
                    .warm
                    .iter()
                    .enumerate()
                    .map(|(s, e)| again(e, s))
                    .collect(),
                trained: r
                    .trained
                    .iter()
                    .enumerate()
                    .map(|(s, e)| again(e, s))
                    .collect(),
                ..r.clone()
            })
            .collect();
        CapstoneReport {
            seeds,
            ..self.clone()
        }
    }
}

/// The names of the three held-out sets, in the order of every per-set vector.
pub const SETS: [&str; 3] = ["held-out instances", "held-out families", "QuixBugs"];

/// Scores of `played` per task of `tasks`.
fn scores(played: &[Played], tasks: &[Task], samples: usize) -> Vec<TaskScore> {
    tasks
        .iter()
        .enumerate()
        .map(|(t, task)| TaskScore {
            task: task.id.clone(),
            samples,
            successes: played
                .iter()
                .filter(|p| p.task == t && p.reward == 1.0)
                .count(),
        })
        .collect()
}

// ANCHOR: evaluate
/// A model on held-out set `set` (an index into [`SETS`]), on the stream named
/// after the set and the seed, so a seed's warm start and trained agent meet the same draws.
pub fn evaluate(
    model: &TinyAgent,
    bpe: &crate::tokenizer::Bpe,
    split: &Split,
    config: &CapstoneConfig,
    seed: u64,
    set: usize,
    name: &str,
) -> Evaluated {
    let tasks = [&split.instances, &split.families, &split.quixbugs][set];
    let samples = config.samples[set];
    let played = evaluation_episodes(
        model,
        bpe,
        tasks,
        samples,
        &mut Streams::new(19).stream(&format!("capstone {}", SETS[set]), seed as usize),
    );
    let ks: Vec<usize> = config
        .ks
        .iter()
        .copied()
        .filter(|&k| k <= samples)
        .collect();
    Evaluated {
        report: Report::new(
            name,
            &task_set_fingerprint(tasks),
            19 + seed,
            scores(&played, tasks, samples),
            &ks,
        ),
        hacked: played.iter().filter(|p| p.info.hacked).count(),
        episodes: played.len(),
        model: String::new(),
    }
}
// ANCHOR_END: evaluate

// ANCHOR: run
/// The capstone in `root/seed-S/`: every seed's warm start, then every seed's
/// RL at once, then the evaluations, `threads` at a time. A run stopped part
/// way (killed, or the machine restarted) picks up where it stopped: a warm
/// start is kept once whole (its weights have the fingerprint its save wrote
/// last), RL resumes from its newest saved state. `tick`
/// hears of every finished stage (warm start and RL per seed, each evaluation).
/// A finished run, whose `report.json` is there for the same configuration and
/// task sets, is read back rather than run again: delete the folder to run anew.
pub fn run(
    config: &CapstoneConfig,
    root: &Path,
    tick: &(dyn Fn(&str) + Sync),
) -> Result<CapstoneReport, String> {
    let start = Instant::now();
    let gym = Gym::standard();
    let split = split(&gym);
    let task_sets = split.fingerprints();
    if let Ok(finished) = CapstoneReport::read(&root.join("report.json")) {
        if &finished.config == config && finished.task_sets == task_sets {
            return Ok(finished);
        }
    }
    base_model(&gym.train); // on disk before the threads load it
    let warm_dir = |seed: u64| root.join(format!("seed-{seed}")).join("warm-start");
    // Warm start: SFT on the oracle's transcripts of the training tasks, in an order of each seed.
    side_by_side(
        config.seeds.clone(),
        config.threads,
        |seed| -> Result<(), String> {
            // A warm start counts once it is whole: its fingerprint matches.
            if saved_model(&warm_dir(seed)).is_err() {
                let (bpe, mut model) = load_model(&base_dir())?;
                let transcripts = oracle_transcripts(
                    &split.train,
                    config.transcripts,
                    &mut Streams::new(seed).tasks(0),
                );
                sft(
                    &mut model,
                    &bpe,
                    &transcripts,
                    &PretrainConfig {
                        seed,
                        steps: config.sft_steps,
                        ..SFT
                    },
                );
                save_model(&warm_dir(seed), &bpe, &model)?;
            }
            tick(&format!("seed {seed}: warm start"));
            Ok(())
        },
    )
    .into_iter()
    .collect::<Result<Vec<()>, String>>()?;
    // RL on the hidden-test reward, watched by the exploit monitor, resumable; all seeds at once.
    let runs = side_by_side(
        config.seeds.clone(),
        config.seeds.len(),
        |seed| -> Result<Vec<TrainRecord>, String> {
            let (bpe, mut model) = load_model(&warm_dir(seed))?;
            let (schedule, inner) = config.rl.seeded(seed).run(Box::new(Plain));
            let mut algorithm = Monitored {
                tasks: split.train.clone(),
                inner,
            };
            let dir = root.join(format!("seed-{seed}")).join("rl");
            let records = train_resumable(
                &mut model,
                &bpe,
                (&split.train, &split.validation),
                &schedule,
                &mut algorithm,
                &dir,
                &Resumable {
                    every: config.checkpoint_every,
                    stop_after: None,
                },
            )?;
            tick(&format!("seed {seed}: RL"));
            Ok(records)
        },
    )
    .into_iter()
    .collect::<Result<Vec<_>, String>>()?;
    // Every seed's warm start and trained agent on each held-out set, as separate jobs.
    let jobs: Vec<(usize, bool, usize)> = (0..config.seeds.len())
        .flat_map(|i| {
            [false, true]
                .into_iter()
                .flat_map(move |trained| (0..SETS.len()).map(move |set| (i, trained, set)))
        })
        .collect();
    let evaluated = side_by_side(
        jobs,
        config.threads,
        |(i, trained, set)| -> Result<Evaluated, String> {
            let seed = config.seeds[i];
            let (bpe, warm) = load_model(&warm_dir(seed))?;
            let model = if trained {
                TinyAgent::load(
                    warm.config,
                    &root
                        .join(format!("seed-{seed}"))
                        .join("rl")
                        .join("final.safetensors"),
                    warm.device(),
                )?
            } else {
                warm
            };
            let name = format!(
                "{}, seed {seed}",
                if trained { "trained" } else { "warm start" }
            );
            let result = Evaluated {
                model: format!("{:016x}", model.fingerprint()),
                ..evaluate(&model, &bpe, &split, config, seed, set, &name)
            };
            tick(&format!("seed {seed}: {name} on {}", SETS[set]));
            Ok(result)
        },
    )
    .into_iter()
    .collect::<Result<Vec<_>, String>>()?;
    let mut evaluated = evaluated.into_iter();
    let seeds = config
        .seeds
        .iter()
        .zip(&runs)
        .map(|(&seed, records)| SeedResult {
            seed,
            warm: evaluated.by_ref().take(SETS.len()).collect(),
            trained: evaluated.by_ref().take(SETS.len()).collect(),
            validation: records
                .iter()
                .filter_map(|r| r.held_out_success.map(|s| (r.iteration, s)))
                .collect(),
            training: records
                .iter()
                .filter_map(|r| {
                    Some((
                        r.train_success?,
                        *r.extra.get("hacked")?,
                        *r.extra.get("flagged")?,
                    ))
                })
                .collect(),
        })
        .collect();
    let report = CapstoneReport {
        config: config.clone(),
        task_sets,
        seeds,
        seconds: start.elapsed().as_secs_f64(),
        machine: crate::book::machine(),
        commit: std::env::var("AGENTRL_COMMIT").unwrap_or_default(),
    };
    std::fs::create_dir_all(root)
        .map_err(|err| format!("cannot create {}: {err}", root.display()))?;
    std::fs::write(
        root.join("report.json"),
        serde_json::to_string_pretty(&report).map_err(|err| err.to_string())?,
    )
    .map_err(|err| format!("cannot write the report: {err}"))?;
    Ok(report)
}
// ANCHOR_END: run

// ANCHOR: goals
/// The goal on held-out instances: pass@1 of the trained agents, averaged over seeds.
pub const PASS_AT_1_GOAL: f64 = 0.90;
/// The full run's time budget on the book's two-core machine, in seconds.
pub const TIME_BUDGET_SECONDS: f64 = 900.0;

/// The report as the chapter prints it: per set, pass@k of the warm starts and
/// the trained agents (mean over seeds with a t-interval, and every seed's
/// bootstrap interval over tasks), the paired gain of RL over its warm start,
/// and the hacked share with a Wilson interval.
pub fn summary(report: &CapstoneReport) -> String {
    let mut out = String::new();
    let seeds = &report.seeds;
    for (s, set) in SETS.iter().enumerate() {
        let first = &seeds[0].trained[s].report;
        out.push_str(&format!(
            "{set}: {} tasks (set {}), {} episodes per task per model\n",
            first.scores.len(),
            first.task_set,
            first.scores[0].samples
        ));
        for (i, estimate) in first.pass_at_k.iter().enumerate() {
            let k = estimate.k;
            let mean = |which: &dyn Fn(&SeedResult) -> &Evaluated| {
                plus_minus(
                    &seeds
                        .iter()
                        .map(|r| which(r).report.pass_at_k[i].mean)
                        .collect::<Vec<_>>(),
                )
            };
            let (warm, trained) = (mean(&|r| &r.warm[s]), mean(&|r| &r.trained[s]));
            let per_seed: Vec<String> = seeds
                .iter()
                .map(|r| {
                    let e = &r.trained[s].report.pass_at_k[i];
                    format!("{:.3} [{:.3}, {:.3}]", e.mean, e.low, e.high)
                })
                .collect();
            out.push_str(&format!(
                "  pass@{k:<2} warm start {warm:<13}   trained {trained:<13}   per seed {}\n",
                per_seed.join("  ")
            ));
        }
        let gains: Vec<String> = seeds
            .iter()
            .map(|r| {
                let (d, low, high) =
                    compare(&r.warm[s].report, &r.trained[s].report, 1, 19 + r.seed);
                format!("{d:+.3} [{low:+.3}, {high:+.3}]")
            })
            .collect();
        out.push_str(&format!(
            "  trained - warm start, pass@1, per seed [95% interval over tasks]: {}\n",
            gains.join("  ")
        ));
        let (hacked, episodes) = seeds.iter().fold((0, 0), |(h, n), r| {
            (h + r.trained[s].hacked, n + r.trained[s].episodes)
        });
        let (low, high) = wilson_interval(hacked, episodes);
        out.push_str(&format!("  trained agents' episodes that hacked: {hacked} of {episodes} ({:.3}, 95% interval {low:.3} to {high:.3})\n", hacked as f64 / episodes.max(1) as f64));
    }
    out.trim_end().to_string()
}

/// The goals, each with whether it was met: held-out-instance pass@1 at
/// least [`PASS_AT_1_GOAL`] (mean over seeds), intervals on the other two
/// sets, and (for the full run only) the time budget.
pub fn goals(report: &CapstoneReport, timed: bool) -> Vec<(String, bool)> {
    let pass1: Vec<f64> = report
        .seeds
        .iter()
        .map(|r| r.trained[0].report.pass_at_k[0].mean)
        .collect();
    let (mean, half) = mean_interval(&pass1);
    let mut goals = vec![
        (format!("held-out instances: pass@1 {mean:.3} ± {half:.3} (mean over {} seeds) >= {PASS_AT_1_GOAL:.2}", pass1.len()), mean >= PASS_AT_1_GOAL),
        ("held-out families and QuixBugs: pass@k with intervals over tasks for every seed".to_string(), report.seeds.iter().all(|r| r.trained[1..].iter().all(|e| e.report.pass_at_k.iter().all(|p| p.low <= p.mean && p.mean <= p.high)))),
    ];
    if timed {
        goals.push((
            format!(
                "run time {:.0} s on {} <= {TIME_BUDGET_SECONDS:.0} s",
                report.seconds, report.machine
            ),
            report.seconds <= TIME_BUDGET_SECONDS,
        ));
    }
    goals
}
// ANCHOR_END: goals

/// The folder for a run in a chapter or notebook: `name` in the run cache
/// when the test command set one ([`crate::book::run_cache`]), so that the
/// notebook resumes the run its chapter finished; otherwise `name` under
/// [`base_dir`], emptied first, so that the reader sees a run from scratch.
pub fn run_folder(name: &str) -> PathBuf {
    match crate::book::run_cache() {
        Some(cache) => cache.join(name),
        None => {
            let dir = base_dir().join(name);
            let _ = std::fs::remove_dir_all(&dir);
            dir
        }
    }
}

/// Where `cargo xtask capstone` runs: target/agentrl-capstone/NAME.
pub fn default_root(config: &CapstoneConfig) -> PathBuf {
    base_dir()
        .parent()
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join("agentrl-capstone")
        .join(config.name.replace([' ', '.'], "_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sets_are_disjoint_and_sized_as_the_chapter_says() {
        let gym = Gym::standard();
        let split = split(&gym);
        assert_eq!(
            (
                split.validation.len(),
                split.instances.len(),
                split.families.len(),
                split.quixbugs.len()
            ),
            (30, 30, 10, 39)
        );
        assert!(split.train.len() > 121 && split.train.len() <= 121 + 6 * EXTRA_PER_FAMILY);
        let sources = |tasks: &[Task]| {
            tasks
                .iter()
                .map(|t| t.source.clone())
                .collect::<HashSet<_>>()
        };
        let train = sources(&split.train);
        for other in [&split.validation, &split.instances, &split.families] {
            assert!(sources(other).is_disjoint(&train));
        }
        assert!(sources(&split.validation).is_disjoint(&sources(&split.instances)));
        assert!(split
            .families
            .iter()
            .all(|t| HELD_OUT_FAMILIES.contains(&t.family)));
        assert!(split
            .train
            .iter()
            .chain(&split.validation)
            .chain(&split.instances)
            .all(|t| !HELD_OUT_FAMILIES.contains(&t.family)));
    }

    #[test]
    fn the_stored_full_run_meets_the_goals_from_its_own_counts() {
        let stored = CapstoneReport::read(&crate::book::data_path("capstone-report.json"))
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            stored.config,
            CapstoneConfig::full(),
            "the stored report is the full configuration's"
        );
        let gym = Gym::standard();
        let split = split(&gym);
        assert_eq!(
            stored.task_sets,
            split.fingerprints(),
            "the report is about today's task sets"
        );
        let again = stored.rederived();
        let sizes = [
            split.instances.len(),
            split.families.len(),
            split.quixbugs.len(),
        ];
        for (a, b) in stored.seeds.iter().zip(&again.seeds) {
            for (set, (x, y)) in a
                .warm
                .iter()
                .zip(&b.warm)
                .chain(a.trained.iter().zip(&b.trained))
                .enumerate()
            {
                assert_eq!(
                    x.report.scores.len(),
                    sizes[set % SETS.len()],
                    "{}: one count per task",
                    x.report.policy
                );
                assert!(x
                    .report
                    .scores
                    .iter()
                    .all(|t| t.samples == stored.config.samples[set % SETS.len()]
                        && t.successes <= t.samples));
                for (p, q) in x
                    .report
                    .pass_at_k
                    .iter()
                    .chain(&x.report.pass_hat_k)
                    .zip(y.report.pass_at_k.iter().chain(&y.report.pass_hat_k))
                {
                    assert_eq!(p.k, q.k);
                    for (u, v) in [(p.mean, q.mean), (p.low, q.low), (p.high, q.high)] {
                        assert!(
                            (u - v).abs() < 1e-12,
                            "{}: stored {u}, derived {v}",
                            x.report.policy
                        );
                    }
                }
            }
        }
        // The goals from the derived numbers; the time goal is a wall-clock time, never asserted.
        let met = goals(&again, false);
        assert_eq!(met.len(), 2);
        assert!(met.iter().all(|(_, ok)| *ok), "{met:?}");
    }

    #[test]
    fn the_goals_follow_the_numbers() {
        let evaluated = |successes: usize| Evaluated {
            report: Report::new(
                "m",
                "set",
                0,
                vec![TaskScore {
                    task: "t".into(),
                    samples: 10,
                    successes,
                }],
                &[1],
            ),
            hacked: 0,
            episodes: 10,
            model: String::new(),
        };
        let seed = |s: usize| SeedResult {
            seed: 0,
            warm: vec![evaluated(5); 3],
            trained: vec![evaluated(s), evaluated(1), evaluated(0)],
            validation: vec![],
            training: vec![],
        };
        let report = |s: usize, seconds: f64| CapstoneReport {
            config: CapstoneConfig::short(),
            task_sets: vec![],
            seeds: vec![seed(s), seed(s)],
            seconds,
            machine: "test".into(),
            commit: String::new(),
        };
        assert!(goals(&report(9, 100.0), true).iter().all(|(_, met)| *met));
        assert!(
            !goals(&report(8, 100.0), true)[0].1,
            "0.8 is under the goal"
        );
        assert!(
            !goals(&report(9, 1000.0), true)[2].1,
            "over the time budget"
        );
        assert_eq!(
            goals(&report(9, 1000.0), false).len(),
            2,
            "the short run is not timed"
        );
    }
}
