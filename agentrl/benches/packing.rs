//! Chapter 14: what packing buys in the update.
//!
//! `cargo bench -p agentrl --bench packing` plays the 64 episodes of Chapter
//! 14's Section 14.1 with the base model (8 training tasks × 8) and times one
//! forward and backward pass of the clipped loss over all of them: padded to
//! the longest (64 rows), padded in 8 minibatches of 8 episodes of similar
//! length (sorted by length), and packed by first-fit decreasing into rows of
//! 384 and of 768 tokens (a block-diagonal mask, positions restarting). The
//! book runs with one libtorch thread and AVX2 kernels; set
//! `ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 OMP_NUM_THREADS=1` to measure the same.

use agentrl::agent::LmPolicy;
use agentrl::grpo::{grpo_loss, LossNorm};
use agentrl::gym::{Gym, MAX_TURNS};
use agentrl::packing::{collate_packed, forward_packed, pack, unpack};
use agentrl::pg::{draw_tasks, forward};
use agentrl::pretrain::base_model;
use agentrl::rollout::play;
use agentrl::stats::Streams;
use agentrl::tinyagent::Sampling;
use agentrl::trajectory::{collate, Trajectory};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;
use tch::Tensor;

fn update(c: &mut Criterion) {
    tch::set_num_threads(1);
    tch::manual_seed(0);
    let gym = Gym::standard();
    let (bpe, model) = base_model(&gym.train);
    let policy = LmPolicy {
        model: &model,
        bpe: &bpe,
        sampling: Sampling::PURE,
        max_action_tokens: 16,
    };
    let picks = draw_tasks(gym.train.len(), 8, 8, &mut Streams::new(14).tasks(0));
    let played = play(
        &policy,
        &gym.train,
        &picks,
        MAX_TURNS,
        &mut Streams::new(14).sampling(0),
    );
    let trajectories: Vec<Trajectory> = played.iter().map(Trajectory::from_played).collect();
    let lengths: Vec<usize> = trajectories.iter().map(|t| t.ids.len()).collect();
    let norm = (LossNorm::TokenMean, (0.2, 0.28));
    let params = model.vs.trainable_variables();
    let padded = collate(&trajectories, model.device());
    let advantages = |mask: &Tensor| {
        Tensor::from_slice(&(0..64).map(|i| (i % 3) as f64 - 1.0).collect::<Vec<_>>()).unsqueeze(1)
            * mask
    };
    let mut group = c.benchmark_group("update_64");
    group
        .throughput(Throughput::Elements(lengths.iter().sum::<usize>() as u64))
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.bench_function("padded", |b| {
        b.iter(|| {
            let (loss, _) = grpo_loss(
                &forward(&model, &padded).logp,
                &padded.logprobs,
                &advantages(&padded.mask),
                &padded.mask,
                norm.1,
                norm.0,
            );
            Tensor::run_backward(&[loss], &params, false, false)
        })
    });
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let sorted: Vec<(agentrl::trajectory::Batch, Vec<f64>)> = order
        .chunks(8)
        .map(|rows| {
            (
                collate(
                    &rows
                        .iter()
                        .map(|&i| trajectories[i].clone())
                        .collect::<Vec<_>>(),
                    model.device(),
                ),
                rows.iter().map(|&i| (i % 3) as f64 - 1.0).collect(),
            )
        })
        .collect();
    group.bench_function("sorted", |b| {
        b.iter(|| {
            for (batch, adv) in &sorted {
                let adv = Tensor::from_slice(adv).unsqueeze(1) * &batch.mask;
                let (loss, _) = grpo_loss(
                    &forward(&model, batch).logp,
                    &batch.logprobs,
                    &adv,
                    &batch.mask,
                    norm.1,
                    norm.0,
                );
                Tensor::run_backward(&[loss], &params, false, false);
            }
        })
    });
    for (name, capacity) in [("packed_384", 384), ("packed_768", 768)] {
        let packed = collate_packed(
            &trajectories,
            &pack(&lengths, capacity).expect("fits"),
            model.device(),
        );
        group.bench_function(name, |b| {
            b.iter(|| {
                let mask = unpack(&packed.mask, &packed.places);
                let logp = unpack(&forward_packed(&model, &packed).logp, &packed.places);
                let (loss, _) = grpo_loss(
                    &logp,
                    &unpack(&packed.logprobs, &packed.places),
                    &advantages(&mask),
                    &mask,
                    norm.1,
                    norm.0,
                );
                Tensor::run_backward(&[loss], &params, false, false)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, update);
criterion_main!(benches);
