//! A pilot experiment that no chapter runs yet: the base model trained further on transcripts of
//! the scripted test-driven search on compact mutation tasks (three seeds), evaluated on the
//! held-out splits beside chance, the random-order search, the lookup by shape and the oracle, and
//! again with the test's answers frozen, which shows whether it acts on them. About 18 minutes on
//! two cores.
//!
//! cargo run --example learned_search
use agentrl::agent::LmPolicy;
use agentrl::gym::{Gym, Task};
use agentrl::mutation::{
    self, baselines, behaviour, compact, frozen_tests, warm_start_search, Behaviour, Lookup,
    FORMAT, SEARCH_WARM_START,
};
use agentrl::pretrain::{base_dir, base_model, load_model, PretrainConfig};
use agentrl::rollout::{play_viewed, Played, View};
use agentrl::stats::{paired_summary, plus_minus, wilson_interval_of_mean};
use agentrl::tinyagent::Sampling;
use rand::rngs::StdRng;
use rand::SeedableRng;

const SEEDS: [u64; 3] = [0, 1, 2];

fn main() {
    tch::set_num_threads(1);
    let programs = mutation::programs();
    let split = mutation::split(&programs, &FORMAT, 12);
    let short = |set: &[Task]| -> Vec<Task> { set.iter().map(compact).collect() };
    let train = short(&split.train);
    let sets: Vec<(&str, Vec<Task>, usize)> = vec![
        ("held-out instances", short(&split.held_out_instances), 2),
        ("held-out programs", short(&split.held_out_programs), 2),
        ("held-out operators", short(&split.held_out_operators), 1),
    ];
    let lookup = Lookup::fit(&train);
    println!(
        "{:<20} {:>5}  {:>6}  {:>21}  {:>21}  {:>6}",
        "split", "tasks", "chance", "random-order search", "lookup by shape", "oracle"
    );
    for (name, set, _) in &sets {
        let b = baselines(set, &lookup, &FORMAT, 8, 12);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let cell = |v: &[f64]| {
            let (low, high) = wilson_interval_of_mean(mean(v), v.len());
            format!("{:.3} [{low:.3}, {high:.3}]", mean(v))
        };
        println!(
            "{name:<20} {:>5}  {:>6.3}  {:>21}  {:>21}  {:>6.3}",
            set.len(),
            mean(&b.chance),
            cell(&b.search),
            cell(&b.lookup),
            mean(&b.oracle)
        );
    }
    // The base model on disk before the two threads load it.
    base_model(&Gym::standard().train);
    // Per seed: [set] -> (solved, behaviour), and the frozen control on the held-out operators.
    let results = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(&seed) = SEEDS.get(i) else { break };
                let started = std::time::Instant::now();
                let (bpe, mut model) = load_model(&base_dir()).expect("the base model");
                let losses = warm_start_search(
                    &mut model,
                    &bpe,
                    &train,
                    &PretrainConfig {
                        seed,
                        ..SEARCH_WARM_START
                    },
                    16,
                );
                eprintln!(
                    "seed {seed}: warm start {:.0} s, loss {:.3} -> {:.3}",
                    started.elapsed().as_secs_f64(),
                    losses[..10].iter().sum::<f64>() / 10.0,
                    losses[losses.len() - 10..].iter().sum::<f64>() / 10.0
                );
                let policy = LmPolicy {
                    model: &model,
                    bpe: &bpe,
                    sampling: Sampling::PURE,
                    max_action_tokens: 16,
                };
                let frozen = frozen_tests(&bpe);
                let run =
                    |set: &[Task], per: usize, view: Option<View>, stream: u64| -> Behaviour {
                        let which: Vec<usize> = (0..set.len())
                            .flat_map(|t| std::iter::repeat_n(t, per))
                            .collect();
                        let mut rng = StdRng::seed_from_u64(1000 * seed + stream);
                        let played: Vec<Played> =
                            play_viewed(&policy, set, &which, FORMAT.max_turns, view, &mut rng).0;
                        behaviour(set, &played, FORMAT.max_turns)
                    };
                let mut row: Vec<Behaviour> = sets
                    .iter()
                    .enumerate()
                    .map(|(k, (_, set, per))| run(set, *per, None, k as u64))
                    .collect();
                row.push(run(&sets[2].1, sets[2].2, Some(&frozen), 2));
                eprintln!(
                    "seed {seed}: done in {:.0} s",
                    started.elapsed().as_secs_f64()
                );
                results.lock().unwrap().push((seed, row));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(seed, _)| *seed);
    let rate = |b: &Behaviour| b.solved as f64 / b.episodes as f64;
    let names = [
        "held-out instances",
        "held-out programs",
        "held-out operators",
        "operators, test answers frozen",
    ];
    for (k, name) in names.iter().enumerate() {
        let solved: Vec<f64> = results.iter().map(|(_, row)| rate(&row[k])).collect();
        println!(
            "{name:<32} solved {} (seeds {})",
            plus_minus(&solved),
            solved
                .iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for (seed, row) in &results {
            let b = &row[k];
            println!(
                "   seed {seed}: undo after a failing test {}/{}, after a passing one {}/{}; submit after passing {}/{}, after failing {}/{}; repeated edits {}/{}",
                b.undo_after_failing, b.failing, b.undo_after_passing, b.passing, b.submit_after_passing, b.passing, b.submit_after_failing, b.failing, b.repeated_edits, b.edits
            );
        }
    }
    let column = |k: usize| -> Vec<f64> { results.iter().map(|(_, row)| rate(&row[k])).collect() };
    println!(
        "frozen - real answers, held-out operators: {}",
        paired_summary(&column(2), &column(3))
    );
}
