//! A probe for issue 37, not a chapter's experiment: can the book's model learn which candidate
//! to edit first on a compact mutation task? The learned-search example's warm starts did not
//! learn it from the ordered search's transcripts, so this probe isolates the choice. The base
//! model is trained only on the opening of the ordered search's episodes (the issue with its
//! menu, `test`, the failing test, and the first edit), each training task seen many times with
//! its candidates renumbered in a new random order, so that no label can be memorised. Reported
//! on 150 training tasks and on the held-out instances: the first edits of episodes the model
//! plays (against the lookup rule's picks) and, teacher-forced on the rule's opening, how often the
//! rule's label is the model's most likely label and its mean log-probability.
//!
//! cargo run --example choice_probe -- diagnose [folder] [format flags]
//! cargo run --example choice_probe -- show [format flags]
//! cargo run --example choice_probe -- train EXAMPLES STEPS [--lr X] [--seed S] [--number-only]
//!     [--model D,L] [--save DIR] [format flags]
//!
//! Format flags: `--comma` writes a label as `op 9, line 5: ...`, as compact tasks did before
//! they took a colon (the book's tokenizer merges "1," "2," "3," "7," and "0," into single tokens,
//! so several labels were not the token the action `edit 9` names); `--label-last` puts each
//! label after its diff (`line 5: ... is op 9`), where a causal model's label token can read the
//! diff it names; `--mark` marks the rule's first candidate with ` *` in the text, which leaves
//! only the copy of its label to learn. `--number-only` puts the loss on the label's token alone
//! (the model then plays no episode, and only the teacher-forced scores mean anything); `--model
//! D,L` trains a model of width D and L layers from random weights instead of the base model.
//! `diagnose` scores the warm starts kept by the learned-search example (give the format they were
//! trained with: `--comma` for those made before compact labels took a colon).
use agentrl::episode::Owner;
use agentrl::gym::{BugFixEnv, Task};
use agentrl::mutation::{self, first_edits, searcher, Lookup, FORMAT};
use agentrl::pg::{evaluation_until, side_by_side};
use agentrl::policies::run_episode;
use agentrl::pretrain::{
    base_dir, load_model, pretrain, save_model, saved_model, PretrainConfig, Sequence, BASE,
};
use agentrl::rollout::Ends;
use agentrl::tinyagent::TinyAgent;
use agentrl::tokenizer::Bpe;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::path::PathBuf;
use std::time::Instant;
use tch::{Kind, Tensor};

/// Long enough for `test` and a first edit, and for a model that does not test first.
const OPENING: Ends = Ends {
    max_turns: 4,
    at_window: true,
};

/// How the probe writes a task's menu (see the flags above).
#[derive(Clone, Copy, Default)]
struct Format {
    comma: bool,
    label_last: bool,
    mark: bool,
}

impl Format {
    /// `task` (a mutation task, not compact) as the probe shows it; without flags, as
    /// [`mutation::compact`] writes it.
    fn shown(&self, task: &Task, rule: &Lookup) -> Task {
        if !(self.comma || self.label_last || self.mark) {
            return mutation::compact(task);
        }
        let first = self.mark.then(|| rule.ranking(task)[0]);
        let head = task.issue.lines().next().unwrap_or_default();
        let menu: String = task
            .menu
            .iter()
            .enumerate()
            .map(|(i, edit)| {
                let diff = mutation::compact_diff(edit, &task.source);
                let mark = if Some(i) == first { " *" } else { "" };
                match (self.label_last, self.comma) {
                    (true, _) => format!("\n{diff}{mark} is op {}", edit.name),
                    (false, true) => format!("\nop {}, {diff}{mark}", edit.name),
                    (false, false) => format!("\nop {}: {diff}{mark}", edit.name), // compact's, marked
                }
            })
            .collect();
        Task {
            issue: format!("{head}{menu}"),
            terse: true,
            ..task.clone()
        }
    }

    /// `task` with its candidates in a new order, renumbered 1..n, then shown.
    fn renumbered(&self, task: &Task, rule: &Lookup, rng: &mut StdRng) -> Task {
        let mut t = task.clone();
        t.menu.shuffle(rng);
        for (i, e) in t.menu.iter_mut().enumerate() {
            e.name = (i + 1).to_string();
        }
        self.shown(&t, rule)
    }
}

/// The ordered search's transcript on `task`, up to and including its first edit.
fn opening(task: &Task, rule: &Lookup) -> Vec<(Owner, String)> {
    let mut env = BugFixEnv::new(vec![task.clone()], FORMAT.max_turns);
    let mut transcript = Vec::new();
    run_episode(
        &mut env,
        0,
        &mut searcher(task, Some(rule)),
        Some(&mut transcript),
    );
    let first_edit = transcript
        .iter()
        .position(|(o, text)| *o == Owner::Policy && text.contains("edit"))
        .expect("the search edits");
    transcript.truncate(first_edit + 1);
    transcript
}

/// The position of the edited label's token in `ids`, an encoded [`opening`].
fn label_at(bpe: &Bpe, ids: &[u32]) -> usize {
    let edit = bpe.id("Ġedit").expect("a token for edit");
    ids.iter().rposition(|&i| i == edit).expect("an edit") + 1
}

/// Teacher-forced on each task's [`opening`]: the share of tasks where the rule's first label is
/// the model's most likely label of the menu, and the mean log-probability of that label (a
/// uniform choice among ten gives ln 0.1 = -2.303).
fn choice_scores(model: &TinyAgent, bpe: &Bpe, tasks: &[Task], rule: &Lookup) -> (f64, f64) {
    let (mut hits, mut logp) = (0usize, 0.0);
    for task in tasks {
        let (ids, _) = bpe.encode_transcript(&opening(task, rule));
        let at = label_at(bpe, &ids);
        let prefix: Vec<i64> = ids[..at].iter().map(|&i| i64::from(i)).collect();
        let x = Tensor::from_slice(&prefix)
            .view([1, at as i64])
            .to_device(model.device());
        let valid = Tensor::ones([1, at as i64], (Kind::Bool, model.device()));
        let last: Vec<f64> = tch::no_grad(|| {
            let logits = model.logits(&x, &valid).get(0).get(at as i64 - 1); // [V]
            Vec::try_from(logits.log_softmax(-1, Kind::Double))
        })
        .expect("log-probs");
        let labels: Vec<u32> = task
            .menu
            .iter()
            .map(|e| bpe.id(&format!("Ġ{}", e.name)).expect("a label token"))
            .collect();
        let best = labels
            .iter()
            .copied()
            .max_by(|&a, &b| last[a as usize].total_cmp(&last[b as usize]))
            .expect("a menu");
        hits += usize::from(best == ids[at]);
        logp += last[ids[at] as usize];
    }
    (hits as f64 / tasks.len() as f64, logp / tasks.len() as f64)
}

fn report(name: &str, model: &TinyAgent, bpe: &Bpe, sets: &[(&str, Vec<Task>)], rule: &Lookup) {
    for (set_name, set) in sets {
        let mut rng = StdRng::seed_from_u64(5);
        let played = evaluation_until(model, bpe, set, 2, OPENING, None, &mut rng);
        let f = first_edits(set, &played, rule);
        let (accuracy, logp) = choice_scores(model, bpe, set, rule);
        println!(
            "{name:<28} {set_name:<20} episodes with an edit {}/{}: first edit the rule's pick {} ({:.0} by chance), the fix {}",
            f.episodes,
            played.len(),
            f.lookups_pick,
            f.lookups_pick_by_chance,
            f.fix
        );
        println!(
            "{:<28} {set_name:<20} teacher-forced: the rule's label most likely in {accuracy:.3} of tasks (0.1 by chance), mean log-prob {logp:.3} (uniform -2.303)",
            ""
        );
    }
}

/// What `train` is asked.
struct Training {
    examples: usize,
    steps: usize,
    lr: f64,
    seeds: Vec<u64>,
    number_only: bool,
    model: Option<(i64, i64)>,
    save: Option<PathBuf>,
}

/// The format flags and, for `train`, its settings, from `args` (after the command).
fn parse(args: &[String], train: bool) -> Result<(Format, Training, Vec<String>), String> {
    let mut format = Format::default();
    let mut training = Training {
        examples: 0,
        steps: 0,
        lr: 3e-3,
        seeds: vec![0, 1],
        number_only: false,
        model: None,
        save: None,
    };
    let mut positional = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--comma" => format.comma = true,
            "--label-last" => format.label_last = true,
            "--mark" => format.mark = true,
            "--number-only" => training.number_only = true,
            "--lr" => training.lr = value("--lr")?.parse().map_err(|e| format!("--lr: {e}"))?,
            "--seed" => {
                training.seeds = vec![value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?]
            }
            "--save" => training.save = Some(PathBuf::from(value("--save")?)),
            "--model" => {
                let shape = value("--model")?;
                let (d, l) = shape.split_once(',').ok_or("--model D,L")?;
                let number = |s: &str| s.parse::<i64>().map_err(|e| format!("--model: {e}"));
                training.model = Some((number(d)?, number(l)?));
            }
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            other => positional.push(other.to_string()),
        }
    }
    if train {
        let count = |k: usize, name: &str| -> Result<usize, String> {
            positional
                .get(k)
                .ok_or(format!("train needs {name}"))?
                .parse()
                .map_err(|e| format!("{name}: {e}"))
        };
        training.examples = count(0, "EXAMPLES")?;
        training.steps = count(1, "STEPS")?;
    }
    Ok((format, training, positional))
}

fn main() -> Result<(), String> {
    tch::set_num_threads(1);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = args.first().cloned().unwrap_or_default();
    let (format, training, positional) =
        parse(args.get(1..).unwrap_or_default(), command == "train")?;
    let programs = mutation::programs();
    let split = mutation::split(&programs, &FORMAT, 12);
    // A diff's shape does not depend on how the menu is written.
    let rule = Lookup::fit(&split.train);
    let mut order: Vec<usize> = (0..split.train.len()).collect();
    order.shuffle(&mut StdRng::seed_from_u64(3));
    let shown =
        |tasks: &[Task]| -> Vec<Task> { tasks.iter().map(|t| format.shown(t, &rule)).collect() };
    let training_sample: Vec<Task> = order[..150]
        .iter()
        .map(|&i| split.train[i].clone())
        .collect();
    let sets: Vec<(&str, Vec<Task>)> = vec![
        ("training (150)", shown(&training_sample)),
        ("held-out instances", shown(&split.held_out_instances)),
    ];
    let started = Instant::now();
    match command.as_str() {
        "diagnose" => {
            let root = positional
                .first()
                .map_or("target/learned-search".into(), PathBuf::from);
            let (bpe, base) = load_model(&base_dir())?;
            report("base model", &base, &bpe, &sets, &rule);
            for seed in [0u64, 1, 2] {
                for kind in ["warm-start", "warm-start-ordered"] {
                    let dir = root.join(format!("seed-{seed}")).join(kind);
                    if let Ok((bpe, model)) = saved_model(&dir) {
                        report(&format!("{kind} seed {seed}"), &model, &bpe, &sets, &rule);
                    }
                }
            }
        }
        "show" => {
            let task =
                format.renumbered(&split.train[order[0]], &rule, &mut StdRng::seed_from_u64(1));
            for (owner, text) in opening(&task, &rule) {
                println!("[{owner:?}] {text}");
            }
            let (bpe, _) = load_model(&base_dir())?;
            let (ids, owners) = bpe.encode_transcript(&opening(&task, &rule));
            let pieces: Vec<String> = ids
                .iter()
                .zip(&owners)
                .map(|(&i, o)| {
                    format!(
                        "{}{}",
                        if *o == Owner::Policy { "^" } else { "" },
                        bpe.token(i)
                    )
                })
                .collect();
            println!(
                "{} tokens (^ the policy's): {}",
                ids.len(),
                pieces.join("|")
            );
        }
        "train" => {
            let t = &training;
            side_by_side(t.seeds.clone(), 2, |seed| {
                let (bpe, mut model) = load_model(&base_dir()).expect("the base model");
                if let Some((d_model, n_layer)) = t.model {
                    tch::manual_seed(seed as i64);
                    let config = agentrl::tinyagent::Config {
                        d_model,
                        n_layer,
                        ..model.config
                    };
                    model = TinyAgent::new(config, model.device());
                }
                let mut rng = StdRng::seed_from_u64(100 + seed);
                let sequences: Vec<Sequence> = (0..t.examples)
                    .map(|m| {
                        let task = format.renumbered(
                            &split.train[order[m % order.len()]],
                            &rule,
                            &mut rng,
                        );
                        let mut sequence = Sequence::new(&bpe, &opening(&task, &rule), 0.0);
                        if t.number_only {
                            let at = label_at(&bpe, &sequence.ids);
                            for (i, w) in sequence.weights.iter_mut().enumerate() {
                                *w = if i == at { 1.0 } else { 0.0 };
                            }
                        }
                        sequence
                    })
                    .collect();
                let config = PretrainConfig {
                    model: model.config,
                    episodes: t.examples,
                    steps: t.steps,
                    batch: 8,
                    lr: t.lr,
                    context_weight: 0.0,
                    seed,
                    ..BASE
                };
                let clock = Instant::now();
                let losses = pretrain(&mut model, &sequences, &config);
                let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
                let tenths: Vec<String> = losses
                    .chunks(losses.len().div_ceil(10))
                    .map(|c| format!("{:.3}", mean(c)))
                    .collect();
                println!(
                    "seed {seed}: {} openings, {} steps, lr {}: {:.0} s; loss by tenths of the steps {}",
                    t.examples,
                    t.steps,
                    t.lr,
                    clock.elapsed().as_secs_f64(),
                    tenths.join(" ")
                );
                if let Some(dir) = &t.save {
                    save_model(&dir.join(format!("seed-{seed}")), &bpe, &model).expect("saved");
                }
                report(&format!("openings seed {seed}"), &model, &bpe, &sets, &rule);
            });
        }
        _ => {
            return Err(
                "choice_probe diagnose [folder] | show [flags] | train EXAMPLES STEPS [flags]"
                    .into(),
            )
        }
    }
    eprintln!("{:.0} s in all", started.elapsed().as_secs_f64());
    Ok(())
}
