//! Chapter 13's recorded latencies: the public tests of many different
//! files, each run once through the in-process runner (a cold compile, as an
//! environment sees a file it has not met) and once through the process
//! runner. Writes `data/latency.json` (milliseconds), which the chapter reads.
//!
//! `cargo run --release -p agentrl --example record_latency`

use agentrl::gym::Gym;
use agentrl::pipeline::Recorded;
use agentrl::runner::{Guarded, ProcessRunner, RunLimits, Test, TestRunner};
use std::time::Instant;

fn main() {
    let gym = Gym::standard();
    let exe = std::env::current_exe().expect("this program's path");
    let child = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("sandbox-child"))
        .expect("the target folder");
    assert!(
        child.exists(),
        "build the child first: cargo build --release -p agentrl --bin sandbox-child ({})",
        child.display()
    );
    let process = ProcessRunner::new(child);
    let (mut in_process, mut processes) = (Vec::new(), Vec::new());
    let time = |f: &dyn Fn()| {
        let start = Instant::now();
        f();
        start.elapsed().as_secs_f64() * 1000.0
    };
    // Every training task's buggy source and each file one edit makes of it.
    let mut n = 0;
    for task in &gym.train {
        let tests: &[Test] = &task.public_tests;
        let files = std::iter::once(task.source.clone())
            .chain(task.menu.iter().filter_map(|edit| edit.apply(&task.source)));
        for source in files {
            n += 1;
            let cold = Guarded::new(RunLimits::default()); // an empty compile cache
            in_process.push(time(&|| drop(cold.run(&source, tests))));
            if n % 2 == 0 {
                processes.push(time(&|| drop(process.run(&source, tests))));
            }
        }
    }
    let machine = agentrl::book::machine();
    let recorded = Recorded { machine, what: "one suite of public tests per call, every training task's buggy file and each one-edit file".into(), in_process, process: processes };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .join("data");
    std::fs::create_dir_all(&root).expect("data folder");
    let path = root.join("latency.json");
    let round = |v: &[f64]| {
        v.iter()
            .map(|x| (x * 1e4).round() / 1e4)
            .collect::<Vec<_>>()
    };
    let stored = Recorded {
        in_process: round(&recorded.in_process),
        process: round(&recorded.process),
        ..recorded
    };
    std::fs::write(&path, serde_json::to_string(&stored).expect("json")).expect("write");
    eprintln!(
        "wrote {} ({} in-process and {} process samples)",
        path.display(),
        stored.in_process.len(),
        stored.process.len()
    );
}
