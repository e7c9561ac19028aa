//! An experiment that no chapter runs yet: the base model trained further on transcripts of the
//! scripted test-driven search on compact mutation tasks (the warm start), then by RL on the
//! hidden-test reward (GRPO++, watched by the exploit monitor), three seeds. Both are evaluated on
//! the held-out splits and on QuixBugs in the same format, beside chance, the random-order search,
//! the lookup by shape and the oracle; the trained agent also with the test's answers frozen,
//! which shows whether it acts on them. Episodes end when the model's window is full (scored as
//! failures), in training and in evaluation alike, so that the learner trains on exactly what the
//! policy read. With `--validation`, warm start and trained agent are compared on the validation
//! split instead, which is how the RL settings were chosen. With `--ordered`, the warm start
//! imitates the search that tries the candidates in the order of the lookup rule's rates (it reads
//! the diffs' shapes as well as the test's answers); with `--no-rl`, only the warm starts are
//! trained and evaluated.
//!
//! cargo run --example learned_search -- [--validation] [--ordered] [--no-rl] [--lr X]
//!     [--iterations N] [--compact-filtering] [folder]
//!
//! The warm starts and RL runs are kept in the folder (default `target/learned-search`) and reused
//! when they are whole and were made with the same settings from tasks written as they are now.
use agentrl::capstone::Monitored;
use agentrl::grpo::{Plain, TrainConfig};
use agentrl::gym::{Gym, Task};
use agentrl::mutation::{
    self, baselines, behaviour, compact, first_edits, frozen_tests, ordered_search,
    warm_start_search, Behaviour, FirstEdits, Lookup, FORMAT, SEARCH_WARM_START,
};
use agentrl::pg::{evaluation_until, read_records, side_by_side, train, TrainRecord};
use agentrl::pretrain::PretrainConfig;
use agentrl::pretrain::{base_dir, base_model, load_model, save_model, saved_model};
use agentrl::quixbugs;
use agentrl::rollout::{Ends, View};
use agentrl::stats::{paired_bootstrap, paired_summary, plus_minus, wilson_interval_of_mean};
use agentrl::tinyagent::TinyAgent;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::path::{Path, PathBuf};
use std::time::Instant;

const SEEDS: [u64; 3] = [0, 1, 2];

/// Episodes of the mutation format: its 12 turns, ending when the window is full.
const ENDS: Ends = Ends {
    max_turns: FORMAT.max_turns,
    at_window: true,
};

/// What a run of this example is asked: its folder, the RL stage's settings, and whether it
/// compares on the validation split (to choose the settings) or on the held-out splits.
struct Settings {
    root: PathBuf,
    validation: bool,
    lr: f64,
    iterations: usize,
    compact_filtering: bool,
    ordered: bool,
    train_rl: bool,
}

impl Settings {
    /// `[--validation] [--ordered] [--no-rl] [--lr X] [--iterations N] [--compact-filtering]
    /// [folder]`.
    fn from_args() -> Result<Settings, String> {
        let mut settings = Settings {
            root: PathBuf::from("target/learned-search"),
            validation: false,
            lr: 3e-4,
            iterations: 40,
            compact_filtering: false,
            ordered: false,
            train_rl: true,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = |name: &str| -> Result<String, String> {
                args.next().ok_or(format!("{name} needs a value"))
            };
            match arg.as_str() {
                "--validation" => settings.validation = true,
                "--compact-filtering" => settings.compact_filtering = true,
                "--ordered" => settings.ordered = true,
                "--no-rl" => settings.train_rl = false,
                "--lr" => settings.lr = value("--lr")?.parse().map_err(|e| format!("--lr: {e}"))?,
                "--iterations" => {
                    settings.iterations = value("--iterations")?
                        .parse()
                        .map_err(|e| format!("--iterations: {e}"))?
                }
                other if other.starts_with("--") => return Err(format!("unknown option {other}")),
                folder => settings.root = PathBuf::from(folder),
            }
        }
        Ok(settings)
    }

    /// The RL stage: GRPO++ from the warm start, 8 tasks × 8 episodes per iteration, the
    /// learning rate falling tenfold; with DeepSWE's compact filtering or, by default, with an
    /// episode that ran out of turns or window scored as a plain failure.
    fn rl(&self) -> TrainConfig {
        TrainConfig {
            name: "learned search RL".into(),
            iterations: self.iterations,
            tasks: 8,
            group: 8,
            lr: self.lr,
            lr_end: self.lr / 10.0,
            eval_every: 0,
            eval_episodes: 0,
            compact_filtering: self.compact_filtering,
            ..TrainConfig::grpo_plus_plus()
        }
    }

    /// The folder of one seed's warm start.
    fn warm_dir(&self, seed: u64) -> PathBuf {
        let ordered = if self.ordered { "-ordered" } else { "" };
        self.root
            .join(format!("seed-{seed}"))
            .join(format!("warm-start{ordered}"))
    }

    /// The folder of one seed's RL run with these settings.
    fn rl_dir(&self, seed: u64) -> PathBuf {
        let filter = if self.compact_filtering {
            "-compact-filtering"
        } else {
            ""
        };
        let ordered = if self.ordered { "-ordered" } else { "" };
        self.root.join(format!("seed-{seed}")).join(format!(
            "rl{ordered}-lr{}-{}{filter}",
            self.lr, self.iterations
        ))
    }
}

/// One model's episodes on one held-out set, and what it did in them.
struct Evaluated {
    behaviour: Behaviour,
    /// Per task, the share of its episodes solved.
    per_task: Vec<f64>,
    /// Episodes that ended because the window was full.
    at_window: usize,
    /// The first candidate edited, beside the lookup rule's picks.
    first: FirstEdits,
}

fn evaluate(
    model: &TinyAgent,
    bpe: &agentrl::tokenizer::Bpe,
    set: &[Task],
    per: usize,
    view: Option<View>,
    stream: u64,
    lookup: &Lookup,
) -> Evaluated {
    let mut rng = StdRng::seed_from_u64(stream);
    let played = evaluation_until(model, bpe, set, per, ENDS, view, &mut rng);
    let mut per_task = vec![0.0; set.len()];
    for p in &played {
        per_task[p.task] += p.reward / per as f64;
    }
    Evaluated {
        behaviour: behaviour(set, &played, FORMAT.max_turns),
        first: first_edits(set, &played, lookup),
        per_task,
        at_window: played
            .iter()
            .filter(|p| p.info.truncated && p.actions.len() < FORMAT.max_turns)
            .count(),
    }
}

/// Whether the model kept in `dir` was trained on these tasks as they are written now: the
/// folder keeps the first training task's prompt (a change of the compact format retrains).
fn made_from(dir: &Path, train_tasks: &[Task]) -> bool {
    std::fs::read_to_string(dir.join("first-prompt.txt")).ok() == Some(train_tasks[0].prompt())
}

fn mark_made_from(dir: &Path, train_tasks: &[Task]) -> Result<(), String> {
    std::fs::write(dir.join("first-prompt.txt"), train_tasks[0].prompt())
        .map_err(|err| format!("cannot write to {}: {err}", dir.display()))
}

fn rate(b: &Behaviour) -> f64 {
    b.solved as f64 / b.episodes as f64
}

fn main() -> Result<(), String> {
    tch::set_num_threads(1);
    let settings = Settings::from_args()?;
    let started = Instant::now();
    let programs = mutation::programs();
    let split = mutation::split(&programs, &FORMAT, 12);
    let short = |set: &[Task]| -> Vec<Task> { set.iter().map(compact).collect() };
    let train_tasks = short(&split.train);
    // QuixBugs in the same format, as Chapter 17 plays it (the programs that have one).
    let quixbugs_tasks: Vec<Task> = quixbugs::programs()
        .iter()
        .filter_map(|p| quixbugs::candidates_task(p, &FORMAT, 17))
        .map(|t| compact(&t))
        .collect();
    let sets: Vec<(&str, Vec<Task>, usize)> = if settings.validation {
        vec![("validation", short(&split.validation), 1)]
    } else {
        vec![
            ("held-out instances", short(&split.held_out_instances), 2),
            ("held-out programs", short(&split.held_out_programs), 2),
            ("held-out operators", short(&split.held_out_operators), 1),
            ("QuixBugs", quixbugs_tasks, 4),
        ]
    };
    let lookup = Lookup::fit(&train_tasks);
    println!(
        "{:<20} {:>5}  {:>6}  {:>21}  {:>21}  {:>21}  {:>6}",
        "split",
        "tasks",
        "chance",
        "random-order search",
        "lookup by shape",
        "search by lookup",
        "oracle"
    );
    for (name, set, _) in &sets {
        let b = baselines(set, &lookup, &FORMAT, 8, 12);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let cell = |v: &[f64]| {
            let (low, high) = wilson_interval_of_mean(mean(v), v.len());
            format!("{:.3} [{low:.3}, {high:.3}]", mean(v))
        };
        println!(
            "{name:<20} {:>5}  {:>6.3}  {:>21}  {:>21}  {:>21}  {:>6.3}",
            set.len(),
            mean(&b.chance),
            cell(&b.search),
            cell(&b.lookup),
            cell(&ordered_search(set, &lookup, &FORMAT)),
            mean(&b.oracle)
        );
    }
    // The base model on disk before the threads load it.
    base_model(&Gym::standard().train);
    let warm_dir = |seed: u64| settings.warm_dir(seed);
    let rl_dir = |seed: u64| settings.rl_dir(seed);
    // With --ordered, the random-order warm starts it is compared with must be current.
    let plain_dir = |seed: u64| {
        settings
            .root
            .join(format!("seed-{seed}"))
            .join("warm-start")
    };
    let stale = SEEDS
        .iter()
        .find(|&&s| settings.ordered && !made_from(&plain_dir(s), &train_tasks));
    if let Some(&seed) = stale {
        return Err(format!(
            "{} was not made from these tasks as they are written now: run once without --ordered first",
            plain_dir(seed).display()
        ));
    }
    // 1. The warm start of each seed, kept once whole.
    side_by_side(SEEDS.to_vec(), 2, |seed| -> Result<(), String> {
        if saved_model(&warm_dir(seed)).is_ok() && made_from(&warm_dir(seed), &train_tasks) {
            return Ok(());
        }
        let clock = Instant::now();
        let (bpe, mut model) = load_model(&base_dir())?;
        let config = PretrainConfig {
            seed,
            ..SEARCH_WARM_START
        };
        let order = settings.ordered.then_some(&lookup);
        let losses = warm_start_search(&mut model, &bpe, &train_tasks, order, &config, 16);
        save_model(&warm_dir(seed), &bpe, &model)?;
        mark_made_from(&warm_dir(seed), &train_tasks)?;
        eprintln!(
            "seed {seed}: warm start {:.0} s, loss {:.3} -> {:.3}",
            clock.elapsed().as_secs_f64(),
            losses[..10].iter().sum::<f64>() / 10.0,
            losses[losses.len() - 10..].iter().sum::<f64>() / 10.0
        );
        Ok(())
    })
    .into_iter()
    .collect::<Result<Vec<()>, String>>()?;
    // 2. RL from each warm start, kept when its schedule is the same and it finished.
    let seeds = if settings.train_rl {
        SEEDS.to_vec()
    } else {
        Vec::new()
    };
    let runs: Vec<Vec<TrainRecord>> = side_by_side(seeds, 2, |seed| {
        let (mut schedule, inner) = settings.rl().seeded(seed).run(Box::new(Plain));
        schedule.ends = ENDS;
        let dir = rl_dir(seed);
        // The folder names the settings; the schedule stored there must be this one.
        let same = std::fs::read_to_string(dir.join("schedule.json"))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .is_some_and(|stored: agentrl::pg::Schedule| stored == schedule);
        if same && dir.join("final.safetensors").exists() && made_from(&dir, &train_tasks) {
            return read_records(&dir.join("metrics.jsonl"));
        }
        let clock = Instant::now();
        let (bpe, mut model) = saved_model(&warm_dir(seed))?;
        let mut algorithm = Monitored {
            tasks: train_tasks.clone(),
            inner,
        };
        let tasks = (&train_tasks[..], &split.validation[..]);
        let records = train(&mut model, &bpe, tasks, &schedule, &mut algorithm, &dir)?;
        mark_made_from(&dir, &train_tasks)?;
        eprintln!("seed {seed}: RL {:.0} s", clock.elapsed().as_secs_f64());
        Ok(records)
    })
    .into_iter()
    .collect::<Result<Vec<_>, String>>()?;
    // 3. Every seed's warm start and trained agent on each held-out set, on one evaluation
    //    stream per seed and set, so that the two are paired; the trained agent (the warm start
    //    without RL) also with the test's answers frozen, on the held-out operators' stream.
    let rl = settings.train_rl;
    let jobs: Vec<(usize, usize, bool)> = (0..SEEDS.len())
        .flat_map(|i| {
            (0..sets.len())
                .flat_map(move |k| [(i, k, false), (i, k, true)])
                .filter(|&(_, _, trained)| rl || !trained)
                .chain((!settings.validation).then_some((i, sets.len(), rl)))
        })
        .collect();
    // One evaluation stream per seed and set.
    let stream =
        |seed: u64, set: usize| 1000 * seed + set as u64 + if settings.validation { 10 } else { 0 };
    let results: Vec<Evaluated> = side_by_side(jobs.clone(), 2, |(i, k, trained)| {
        let seed = SEEDS[i];
        let (bpe, warm) = saved_model(&warm_dir(seed)).expect("the warm start");
        let model = if trained {
            TinyAgent::load(
                warm.config,
                &rl_dir(seed).join("final.safetensors"),
                warm.device(),
            )
            .expect("the trained agent")
        } else {
            warm
        };
        let frozen = frozen_tests(&bpe);
        let (set, per, view) = match sets.get(k) {
            Some((_, set, per)) => (set, *per, None),
            None => (&sets[2].1, sets[2].2, Some(&frozen as View)),
        };
        // The frozen control meets the held-out operators' draws.
        let named = if k < sets.len() { k } else { 2 };
        evaluate(&model, &bpe, set, per, view, stream(seed, named), &lookup)
    });
    // 4. With --ordered, the warm start that imitates the random-order search too (kept in the
    //    same folder by a run without --ordered), on the same streams: paired by seed and draws.
    let plain_jobs: Vec<(usize, usize)> = match settings.ordered {
        true => (0..SEEDS.len())
            .flat_map(|i| (0..sets.len()).map(move |k| (i, k)))
            .collect(),
        false => Vec::new(),
    };
    let plain: Vec<Evaluated> = side_by_side(plain_jobs.clone(), 2, |(i, k)| {
        let seed = SEEDS[i];
        let dir = plain_dir(seed);
        let (bpe, model) = saved_model(&dir).expect("the warm start of the random-order search");
        let (_, set, per) = &sets[k];
        evaluate(&model, &bpe, set, *per, None, stream(seed, k), &lookup)
    });
    let found = |i: usize, k: usize, trained: bool| -> &Evaluated {
        let at = jobs.iter().position(|&j| j == (i, k, trained)).unwrap();
        &results[at]
    };
    println!();
    println!("pass@1 over seeds {SEEDS:?} (mean ± 95 % Student's t; per seed in brackets)");
    for (k, (name, set, per)) in sets.iter().enumerate() {
        let column = |trained: bool| -> Vec<f64> {
            (0..SEEDS.len())
                .map(|i| rate(&found(i, k, trained).behaviour))
                .collect()
        };
        let listed = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let warm = column(false);
        let after = if rl { column(true) } else { Vec::new() };
        println!("{name} ({} tasks × {per} episodes)", set.len());
        let ended = |trained: bool| -> String {
            let n: usize = (0..SEEDS.len())
                .map(|i| found(i, k, trained).at_window)
                .sum();
            format!("{n}/{} ended at the window", SEEDS.len() * set.len() * per)
        };
        println!(
            "   warm start       {} ({}); {}",
            plus_minus(&warm),
            listed(&warm),
            ended(false)
        );
        if !rl {
            continue;
        }
        println!(
            "   after RL         {} ({}); {}",
            plus_minus(&after),
            listed(&after),
            ended(true)
        );
        println!("   RL - warm start  {}", paired_summary(&warm, &after));
        for (i, seed) in SEEDS.iter().enumerate() {
            let (a, b) = (&found(i, k, false).per_task, &found(i, k, true).per_task);
            let (mean, low, high) = paired_bootstrap(a, b, 10_000, *seed);
            println!(
                "      seed {seed}: RL - warm start over tasks {mean:+.3} [{low:+.3}, {high:+.3}]"
            );
        }
    }
    if !settings.validation {
        let frozen: Vec<f64> = (0..SEEDS.len())
            .map(|i| rate(&found(i, sets.len(), rl).behaviour))
            .collect();
        let real: Vec<f64> = (0..SEEDS.len())
            .map(|i| rate(&found(i, 2, rl).behaviour))
            .collect();
        println!(
            "{}, held-out operators with the test's answers frozen: {}; frozen - real {}",
            if rl { "after RL" } else { "warm start" },
            plus_minus(&frozen),
            paired_summary(&real, &frozen)
        );
    }
    if settings.ordered {
        println!();
        println!("warm starts: imitating the search by lookup (ordered) and the random-order search (plain); pass@1 over seeds, paired");
        let of = |v: &[Evaluated], at: &dyn Fn(usize) -> usize| -> Vec<f64> {
            (0..SEEDS.len())
                .map(|i| rate(&v[at(i)].behaviour))
                .collect()
        };
        for (k, (name, _, _)) in sets.iter().enumerate() {
            let ordered = of(&results, &|i| {
                jobs.iter().position(|&j| j == (i, k, false)).unwrap()
            });
            let plain = of(&plain, &|i| {
                plain_jobs.iter().position(|&j| j == (i, k)).unwrap()
            });
            println!(
                "   {name:<20} plain {}  ordered {}  ordered - plain {}",
                plus_minus(&plain),
                plus_minus(&ordered),
                paired_summary(&plain, &ordered)
            );
        }
        for (i, seed) in SEEDS.iter().enumerate() {
            let (mut p, mut o) = (FirstEdits::default(), FirstEdits::default());
            for k in 0..sets.len() {
                p += plain[plain_jobs.iter().position(|&j| j == (i, k)).unwrap()].first;
                o += found(i, k, false).first;
            }
            println!(
                "   seed {seed}: first edit the lookup's pick: plain {}/{}, ordered {}/{} ({:.0} by chance); the fix: plain {}/{}, ordered {}/{}",
                p.lookups_pick, p.episodes, o.lookups_pick, o.episodes, o.lookups_pick_by_chance, p.fix, p.episodes, o.fix, o.episodes
            );
        }
    }
    println!();
    println!("what each agent did with the test's answers (pooled over the sets)");
    for (label, trained) in [("warm start", false), ("after RL", true)] {
        if trained && !rl {
            continue;
        }
        for (i, seed) in SEEDS.iter().enumerate() {
            let (mut b, mut f) = (Behaviour::default(), FirstEdits::default());
            for k in 0..sets.len() {
                b += found(i, k, trained).behaviour;
                f += found(i, k, trained).first;
            }
            println!(
                "   {label:<10} seed {seed}: undo after a failing test {}/{}, after a passing one {}/{}; submit after passing {}/{}, after failing {}/{}; repeated edits {}/{}",
                b.undo_after_failing, b.failing, b.undo_after_passing, b.passing, b.submit_after_passing, b.passing, b.submit_after_failing, b.failing, b.repeated_edits, b.edits
            );
            println!(
                "   {:<10} first edit: the fix {}/{} (one in ten by chance), the lookup's pick {}/{} ({:.0} by chance)",
                "", f.fix, f.episodes, f.lookups_pick, f.episodes, f.lookups_pick_by_chance
            );
        }
    }
    if rl {
        println!();
        println!("RL training (training tasks, 64 episodes per iteration)");
    }
    for (seed, records) in SEEDS.iter().zip(&runs) {
        let success: Vec<f64> = records.iter().filter_map(|r| r.train_success).collect();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let field = |name: &str| -> Vec<f64> {
            records
                .iter()
                .filter_map(|r| r.extra.get(name).copied())
                .collect()
        };
        let (first, last) = (&success[..5], &success[success.len() - 5..]);
        println!(
            "   seed {seed}: success first 5 iterations {:.3}, last 5 {:.3}; hacked {:.3}, flagged {:.3}",
            mean(first),
            mean(last),
            mean(&field("hacked")),
            mean(&field("flagged"))
        );
    }
    eprintln!("{:.0} s in all", started.elapsed().as_secs_f64());
    Ok(())
}
