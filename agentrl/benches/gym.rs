//! Chapter 3: how fast the BugFix gym runs.
//!
//! `cargo bench -p agentrl --bench gym` measures
//! - `gym/random_episode`: one episode of the random policy on the train split,
//!   with warm caches (criterion's throughput line is episodes per second);
//! - `runner/*`: the public tests of task 0 through the in-process runner with
//!   a cold compile, with a cached compile, and through the process runner.

use agentrl::gym::{task_zero, BugFixEnv, Gym, MAX_TURNS};
use agentrl::policies::{run_episode, RandomPolicy};
use agentrl::runner::{Guarded, ProcessRunner, RunLimits, TestRunner};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;

fn gym(c: &mut Criterion) {
    let gym = Gym::standard();
    let tasks = gym.train.len();
    let mut env = BugFixEnv::new(gym.train, MAX_TURNS);
    let mut policy = RandomPolicy::new(0);
    for i in 0..50_000 {
        run_episode(&mut env, i % tasks, &mut policy, None);
    }
    let mut group = c.benchmark_group("gym");
    group
        .throughput(Throughput::Elements(1))
        .measurement_time(Duration::from_secs(5));
    let mut i = 0;
    group.bench_function("random_episode", |b| {
        b.iter(|| {
            i += 1;
            black_box(run_episode(&mut env, i % tasks, &mut policy, None))
        })
    });
    group.finish();
}

fn runners(c: &mut Criterion) {
    let task = task_zero();
    let mut group = c.benchmark_group("runner");
    group.measurement_time(Duration::from_secs(4));
    let cold = Guarded::new(RunLimits::default());
    let mut n = 0u64;
    group.bench_function("in_process_cold_compile", |b| {
        b.iter(|| {
            n += 1; // a new comment makes a new source text, so the cache misses
            black_box(cold.run(&format!("{}// {n}\n", task.source), &task.public_tests))
        })
    });
    group.bench_function("in_process_cached_compile", |b| {
        b.iter(|| black_box(Guarded::shared().run(&task.source, &task.public_tests)))
    });
    let process = ProcessRunner::new(env!("CARGO_BIN_EXE_sandbox-child"));
    group.sample_size(30);
    group.bench_function("process", |b| {
        b.iter(|| black_box(process.run(&task.source, &task.public_tests)))
    });
    group.finish();
}

// The runners first, while the process is small: a process runner forks the
// bench process, and forking a large heap costs time of its own.
criterion_group!(benches, runners, gym);
criterion_main!(benches);
