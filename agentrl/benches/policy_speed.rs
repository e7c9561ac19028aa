//! The policy's own speed, beside the same model in PyTorch eager.
//!
//! `cargo bench -p agentrl --bench policy_speed` times what
//! `benches/policy_speed.py` times for the PyTorch model, with the same
//! shapes, inputs and repetitions: decoding NEW tokens after B prompts of
//! PROMPT tokens with the KV cache (pure sampling, each token's log-probability
//! kept), for B = 1, 8, 32; and one training step (the forward pass of the
//! policy loop, `pg::forward`, a policy-gradient loss with an entropy bonus,
//! backward and an AdamW step) on B_TRAIN rows of T_TRAIN tokens. It prints
//! `parameters n`, `decode B tokens_per_second` and `train_step seconds` lines, which `cargo
//! xtask perf` divides by the PyTorch script's. The book runs with one
//! libtorch thread and AVX2 kernels; set `ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2
//! OMP_NUM_THREADS=1` to measure the same.

use agentrl::book::REAL;
use agentrl::pg::forward;
use agentrl::pretrain::BASE;
use agentrl::tinyagent::{Sampling, TinyAgent};
use agentrl::trajectory::Batch;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::time::Instant;
use tch::nn::{self, OptimizerConfig};
use tch::{Kind, Tensor};

const PROMPT: i64 = 96;
const NEW: usize = 256;
const B_TRAIN: i64 = 16;
const T_TRAIN: i64 = 256;
const REPEATS: usize = 7;

/// The median time of `REPEATS` runs of `run` after one warm-up run.
fn median_time(mut run: impl FnMut()) -> f64 {
    run();
    let mut times: Vec<f64> = (0..REPEATS)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[REPEATS / 2]
}

fn main() {
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let model = TinyAgent::new(BASE.model, tch::Device::Cpu);
    let vocab = BASE.model.vocab;
    println!("parameters {}", model.parameter_count());
    for b in [1i64, 8, 32] {
        // The same prompts as the PyTorch script: (13 i + 7 + row) mod V.
        let prompts: Vec<Vec<u32>> = (0..b)
            .map(|row| {
                (0..PROMPT)
                    .map(|i| ((13 * i + 7 + row) % vocab) as u32)
                    .collect()
            })
            .collect();
        let mut rng = StdRng::seed_from_u64(0);
        let seconds = median_time(|| {
            let out = model.generate(&prompts, NEW, &[], Sampling::PURE, &mut rng, true);
            assert_eq!(out[0].tokens.len(), NEW);
        });
        println!("decode {b} {:.1}", (b as usize * NEW) as f64 / seconds);
    }
    // One training step on the PyTorch script's batch.
    let mut opt = nn::AdamW::default()
        .build(&model.vs, 1e-3)
        .expect("an optimiser");
    let position = Tensor::arange(T_TRAIN, (Kind::Int64, tch::Device::Cpu)).unsqueeze(0); // [1, T]
    let row = Tensor::arange(B_TRAIN, (Kind::Int64, tch::Device::Cpu)).unsqueeze(1); // [B, 1]
    let ids = (&position * 31 + &row * 5).remainder(vocab); // [B, T]
    let mask = (&position + &row)
        .remainder(7)
        .eq(3)
        .logical_and(&position.gt(0))
        .to_kind(REAL); // [B, T]
    let sign = row.remainder(2).eq(0).to_kind(REAL) * 2.0 - 1.0; // [B, 1]: +1 on even rows, -1 on odd
    let batch = Batch {
        valid: ids.ones_like().to_kind(Kind::Bool),
        logprobs: mask.zeros_like(),
        rewards: Tensor::zeros([B_TRAIN], (REAL, tch::Device::Cpu)),
        ids,
        mask,
    };
    let advantages = &sign * &batch.mask; // [B, T]
    let seconds = median_time(|| {
        let f = forward(&model, &batch);
        let tokens = batch.mask.sum(REAL);
        let loss = -(&advantages * &f.logp).sum(REAL) / &tokens
            - 0.001 * (&f.entropy * &batch.mask).sum(REAL) / &tokens;
        opt.backward_step(&loss);
    });
    println!("train_step {seconds:.6}");
}
