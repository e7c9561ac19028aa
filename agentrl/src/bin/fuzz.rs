//! Chapter 19: `cargo xtask fuzz`, the fuzzer of `agentrl::fuzzing` over all four targets.
//!
//! Usage: `fuzz [--inputs N] [--seed S] [--threads T] [--target NAME]... [--examples K]
//! [--record OUTCOME] [--replay INPUT_SEED [--steps N]] [--report PATH]`.
//! `--inputs` is the total over the targets, shared out in fixed proportions;
//! `--examples K` prints K inputs of each target with their outcomes instead of fuzzing;
//! `--record OUTCOME` also keeps the inputs with that outcome as findings (shown, shrunk);
//! `--replay` makes one finding's input again from the seed and steps it printed, and shrinks it.

use agentrl::fuzzing::{
    child_exe, examples, fuzz, panic_messages, replay, shrink, Finding, FuzzConfig, Pools, Target,
    TargetReport,
};
use agentrl::rollout::progress;
use agentrl::runner::ProcessRunner;

/// Shares of the inputs per target: the child-process runner starts a process per input.
fn share(target: Target) -> f64 {
    match target {
        Target::CallParser => 0.50,
        Target::EnvStep => 0.35,
        Target::Guarded => 0.148,
        Target::ProcessRunner => 0.002,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let number = |name: &str, default: u64| {
        value(name).map_or(default, |v| {
            v.replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, not {v}"))
        })
    };
    let inputs = number("--inputs", 10_000_000);
    let config = FuzzConfig {
        seed: number("--seed", 19),
        threads: number("--threads", 2) as usize,
        child: child_exe(),
        record: value("--record"),
    };
    let chosen: Vec<Target> = args
        .iter()
        .enumerate()
        .filter(|(_, a)| *a == "--target")
        .filter_map(|(i, _)| args.get(i + 1))
        .map(|name| {
            *Target::ALL
                .iter()
                .find(|t| t.name() == name.as_str() || format!("{t:?}").eq_ignore_ascii_case(name))
                .unwrap_or_else(|| {
                    panic!(
                        "unknown target {name}; one of {:?}",
                        Target::ALL.map(|t| t.name())
                    )
                })
        })
        .collect();
    let targets = if chosen.is_empty() {
        Target::ALL.to_vec()
    } else {
        chosen
    };
    if !config.child.exists() {
        eprintln!(
            "error: {} is missing; build it with `cargo build --release -p agentrl --bins`",
            config.child.display()
        );
        std::process::exit(2);
    }
    let pools = Pools::standard();
    if let Some(seed) = value("--replay") {
        let seed: u64 = seed.parse().expect("--replay takes an input's seed");
        let steps = number("--steps", 1) as usize;
        let child = ProcessRunner::new(&config.child);
        for &target in &targets {
            let (input, outcome) = replay(target, seed, steps, &pools, &child);
            println!(
                "== {}: seed {seed}, {steps} step(s)\n{input}\n-> {outcome:?}",
                target.name()
            );
            let finding = Finding {
                target,
                problem: format!("{outcome:?}"),
                input,
                seed,
                steps,
                shrunk: None,
            };
            let recorded = outcome.as_ref().ok().map(String::as_str);
            if let Some(small) = shrink(&finding, recorded, &pools, &child) {
                println!("shrunk:\n{small}");
            }
        }
        return;
    }
    if let Some(k) = value("--examples") {
        let k: usize = k.parse().expect("--examples takes a number");
        for &target in &targets {
            println!("== {}", target.name());
            for (input, outcome) in examples(
                target,
                k,
                config.seed,
                &pools,
                &ProcessRunner::new(&config.child),
            ) {
                println!("{outcome:?}\n{input}\n--");
            }
        }
        return;
    }
    let total: f64 = targets.iter().map(|&t| share(t)).sum();
    let counts: Vec<u64> = targets
        .iter()
        .map(|&t| ((inputs as f64 * share(t) / total).round() as u64).max(1))
        .collect();
    let bar = progress(counts.iter().sum(), "fuzzing");
    let mut reports: Vec<TargetReport> = Vec::new();
    for (&target, &n) in targets.iter().zip(&counts) {
        bar.set_message(format!("fuzzing the {}", target.name()));
        reports.push(fuzz(target, n, &config, &pools, &|k| bar.inc(k)));
    }
    bar.finish_and_clear();
    println!(
        "{:<22} {:>10} {:>7} {:>10} {:>12} {:>12} {:>14} {:>9}",
        "target",
        "inputs",
        "panics",
        "over limit",
        "slowest ms",
        "limit ms",
        "memory MB",
        "seconds"
    );
    for r in &reports {
        println!(
            "{:<22} {:>10} {:>7} {:>10} {:>12.1} {:>12.0} {:>6.0} -> {:<5.0} {:>9.1}",
            r.target.name(),
            r.inputs,
            r.panics,
            r.over_limit,
            r.slowest_ms,
            r.limit_ms,
            r.rss_warm_mb,
            r.rss_end_mb,
            r.seconds
        );
    }
    for r in &reports {
        let outcomes: Vec<String> = r.outcomes.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!("{}: {}", r.target.name(), outcomes.join(", "));
        for f in r.findings.iter().take(5) {
            let shown: String = f.input.chars().take(300).collect();
            let more = f.input.chars().count().saturating_sub(300);
            let more = if more > 0 {
                format!(" ... ({more} more characters in the report)")
            } else {
                String::new()
            };
            println!(
                "  FINDING: {}\n    input: {shown:?}{more}\n    replay: cargo xtask fuzz --target \"{}\" --replay {} --steps {}",
                f.problem,
                r.target.name(),
                f.seed,
                f.steps
            );
            if let Some(small) = &f.shrunk {
                println!("    shrunk: {small:?}");
            }
        }
    }
    for message in panic_messages(5) {
        println!("  PANIC: {message}");
    }
    let growth_limit = 64.0;
    let clean = reports.iter().all(|r| r.clean(growth_limit));
    let total_inputs: u64 = reports.iter().map(|r| r.inputs).sum();
    if let Some(path) = value("--report") {
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&reports).expect("a report serialises"),
        )
        .unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
    }
    if clean {
        println!("{total_inputs} inputs: no panic, no input over its wall-clock bound, no property broken, memory growth under {growth_limit} MB per target");
    } else {
        println!("{total_inputs} inputs: FINDINGS above");
        std::process::exit(1);
    }
}
