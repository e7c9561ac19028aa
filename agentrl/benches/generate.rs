//! Chapter 4: what the KV cache buys.
//!
//! `cargo bench -p agentrl --bench generate` generates 256 new tokens for a
//! batch of 8 prompts of 96 tokens with a TinyAgent of the base model's shape
//! (weights do not matter for speed, so they are fresh), once reusing cached
//! keys and values and once recomputing the whole sequence at every step, and
//! once with the cache and the weights in 32 bits instead of the book's 64.
//! The book runs with one libtorch thread and AVX2 kernels; set
//! `ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 OMP_NUM_THREADS=1` to measure the same.

use agentrl::pretrain::BASE;
use agentrl::tinyagent::{Sampling, TinyAgent};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::hint::black_box;
use std::time::Duration;

const BATCH: usize = 8;
const PROMPT: usize = 96;
const NEW: usize = 256;

fn generation(c: &mut Criterion) {
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let model = TinyAgent::new(BASE.model, tch::Device::Cpu);
    let prompts: Vec<Vec<u32>> = (0..BATCH)
        .map(|b| {
            (0..PROMPT)
                .map(|i| (7 + 13 * i + b) as u32 % 1000)
                .collect()
        })
        .collect();
    let mut group = c.benchmark_group("generate_256");
    group
        .throughput(Throughput::Elements((BATCH * NEW) as u64))
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    for (name, use_cache) in [("kv_cache", true), ("recompute", false)] {
        let model = &model;
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut rng = StdRng::seed_from_u64(0);
                let out = model.generate(&prompts, NEW, &[], Sampling::PURE, &mut rng, use_cache);
                assert_eq!(out[0].tokens.len(), NEW);
                black_box(out)
            })
        });
    }
    // The price of the book's 64-bit weights: the same generation in 32 bits.
    let mut model32 = TinyAgent::new(BASE.model, tch::Device::Cpu);
    model32.vs.set_kind(tch::Kind::Float);
    group.bench_function("kv_cache_32_bit", |b| {
        b.iter(|| {
            let mut rng = StdRng::seed_from_u64(0);
            black_box(model32.generate(&prompts, NEW, &[], Sampling::PURE, &mut rng, true))
        })
    });
    group.finish();
}

criterion_group!(benches, generation);
criterion_main!(benches);
