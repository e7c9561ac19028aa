//! Chapter 9: where the time of one training step goes.
//!
//! `cargo bench -p agentrl --bench train_step` trains the base model with
//! GRPO++ (8 tasks × 8 episodes per step, 4 minibatches) for a warm-up step
//! and `STEPS` measured steps, and reports the median step split into
//! generation (the policy sampling actions), environment (the gym: tool calls,
//! test runs, encoding observations) and learning (advantages, forward and
//! backward passes, optimiser steps), with tokens per second. Evaluation is
//! not part of a step. The book runs with one libtorch thread and AVX2
//! kernels; set `ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 OMP_NUM_THREADS=1`
//! to measure the same.

use agentrl::grpo::{Grpo, Plain, TrainConfig};
use agentrl::gym::Gym;
use agentrl::pg::{train, StepTime, TrainRecord};
use agentrl::pretrain::base_model;

const STEPS: usize = 8;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (e.g. a filter) is ignored.
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let gym = Gym::standard();
    let (bpe, mut model) = base_model(&gym.train);
    let config = TrainConfig {
        name: "bench".into(),
        iterations: STEPS + 1,
        eval_every: usize::MAX,
        eval_episodes: 1,
        ..TrainConfig::grpo_plus_plus()
    };
    let dir = std::env::temp_dir().join(format!("agentrl-bench-{}", std::process::id()));
    let mut grpo = Grpo {
        config: config.clone(),
        regularizer: Box::new(Plain),
    };
    let records = train(
        &mut model,
        &bpe,
        (&gym.train, &gym.held_out[..1]),
        &config.schedule(),
        &mut grpo,
        &dir,
    )
    .unwrap_or_else(|err| panic!("{err}"));
    std::fs::remove_dir_all(&dir).ok();
    let steps: Vec<_> = records
        .iter()
        .skip(1)
        .filter(|r| r.time.is_some())
        .collect(); // the first step warms up
    let time =
        |f: fn(&StepTime) -> f64| median(steps.iter().map(|r| f(&r.time.unwrap())).collect());
    let (generation, environment, learning) = (
        time(|t| t.generation),
        time(|t| t.environment),
        time(|t| t.learning),
    );
    let total = generation + environment + learning;
    let per_second = |count: fn(&TrainRecord) -> usize, secs: fn(&StepTime) -> f64| {
        median(
            steps
                .iter()
                .map(|r| count(r) as f64 / secs(&r.time.unwrap()))
                .collect(),
        )
    };
    let generated = per_second(|r| r.generated_tokens.unwrap(), |t| t.generation);
    let trained = per_second(|r| r.trained_tokens.unwrap(), |t| t.learning);
    let processed = per_second(|r| r.sequence_tokens.unwrap(), |t| t.learning);
    println!("one GRPO++ step: {} tasks x {} episodes, {} minibatches; median of {STEPS} steps after one warm-up", config.tasks, config.group, config.minibatches);
    println!("{:<12} {:>8} {:>7}", "part", "seconds", "share");
    for (name, secs) in [
        ("generation", generation),
        ("environment", environment),
        ("learning", learning),
        ("step", total),
    ] {
        println!("{name:<12} {secs:>8.3} {:>6.1}%", 100.0 * secs / total);
    }
    println!("generated: {generated:.0} tokens/s (sampled by the policy, KV cache)");
    println!("trained:   {trained:.0} action tokens/s, {processed:.0} sequence tokens/s (forward + backward)");
    let sequence: usize = steps.iter().map(|r| r.sequence_tokens.unwrap()).sum();
    let actions: usize = steps.iter().map(|r| r.trained_tokens.unwrap()).sum();
    println!(
        "sequence tokens per trained action token: {:.2}",
        sequence as f64 / actions as f64
    );
}
