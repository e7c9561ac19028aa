//! Chapter 19: `cargo xtask capstone`, the capstone run from the command line.
//!
//! Usage: `capstone [--short] [--root DIR] [--record PATH]`, or `capstone --report PATH` to print
//! a stored report again. Runs the full configuration (three seeds) unless `--short`; a finished run
//! in the folder is read back, and a stopped run
//! started again with the same folder resumes. Prints the summary and the goals, and exits with 1
//! if a goal is not met. `--record PATH` also copies the report there (the chapter reads
//! `data/capstone-report.json`).

use agentrl::capstone::{default_root, goals, run, summary, CapstoneConfig, CapstoneReport};
use agentrl::rollout::progress;

fn main() {
    agentrl::book::setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let (report, timed) = match value("--report") {
        Some(path) => {
            let report =
                CapstoneReport::read(std::path::Path::new(&path)).unwrap_or_else(|e| fail(&e));
            let timed = report.config == CapstoneConfig::full();
            (report, timed)
        }
        None => {
            let config = if args.iter().any(|a| a == "--short") {
                CapstoneConfig::short()
            } else {
                CapstoneConfig::full()
            };
            let root = value("--root")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| default_root(&config));
            eprintln!(
                "capstone: {} seeds, {} RL iterations each, in {}",
                config.seeds.len(),
                config.rl.iterations,
                root.display()
            );
            if root.join("report.json").exists() {
                eprintln!("capstone: a finished run is read back from {} (delete the folder to run again)", root.display());
            }
            let bar = progress(8 * config.seeds.len() as u64, "capstone"); // warm start, RL, six evaluations per seed
            let report = run(&config, &root, &|stage: &str| {
                bar.set_message(format!("capstone: {stage} done"));
                bar.inc(1);
            })
            .unwrap_or_else(|e| fail(&e));
            bar.finish_and_clear();
            if let Some(path) = value("--record") {
                std::fs::write(
                    &path,
                    serde_json::to_string_pretty(&report).expect("a report serialises"),
                )
                .unwrap_or_else(|e| fail(&format!("cannot write {path}: {e}")));
            }
            let timed = config == CapstoneConfig::full();
            (report, timed)
        }
    };
    println!("{}", summary(&report));
    if !timed {
        println!("(a configuration other than the full run: its numbers are shown, the goals are the full run's)");
        return;
    }
    let goals = goals(&report, timed);
    for (goal, met) in &goals {
        println!("{} {goal}", if *met { "met:    " } else { "NOT MET:" });
    }
    if goals.iter().any(|(_, met)| !met) {
        std::process::exit(1);
    }
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(2);
}
