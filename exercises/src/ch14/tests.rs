//! Grading tests for the Chapter 14 exercises: `cargo test -p exercises ch14`.
//!
//! Each test is named after its exercise (`ex2_...` grades Exercise 14.2)
//! and checks hand-checked values, consequences of the statement on random
//! inputs, and agreement with the library (`agentrl::packing`,
//! `agentrl::curriculum`).

use super::*;
use agentrl::curriculum::{signal_probability, PassRates};
use agentrl::grpo::{aggregate, LossNorm};
use agentrl::mdp::seeded_rng;
use agentrl::packing::{microbatch_weight, pack, Accumulate};

use crate::testkit::{assert_close, between, index_below, tensor, to_vec, uniform};

// ---------------------------------------------------------------------------
// Exercise 14.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_hand_values() {
    // Longest first: 9 opens a row, 8 another, 7 a third, 5 a fourth, 5 joins it, 3 joins 7, 2 joins 8, 1 joins 9.
    let rows = first_fit_decreasing(&[7, 3, 9, 2, 5, 5, 1, 8], 10);
    assert_eq!(rows, vec![vec![2, 6], vec![7, 3], vec![0, 1], vec![4, 5]]);
    assert!(first_fit_decreasing(&[], 10).is_empty(), "nothing to pack, no rows");
    assert_eq!(first_fit_decreasing(&[4, 4, 4], 4), vec![vec![0], vec![1], vec![2]], "equal lengths keep their order");
    assert!(std::panic::catch_unwind(|| first_fit_decreasing(&[3, 11, 2], 10)).is_err(), "a sequence longer than a row must panic");
}

#[test]
fn ex1_keeps_every_sequence_once_and_matches_the_library() {
    let mut rng = seeded_rng(14);
    for _ in 0..300 {
        let capacity = 5 + index_below(60, &mut rng);
        let lengths: Vec<usize> = (0..index_below(30, &mut rng)).map(|_| 1 + index_below(capacity, &mut rng)).collect();
        let rows = first_fit_decreasing(&lengths, capacity);
        let mut seen: Vec<usize> = rows.concat();
        seen.sort();
        assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>(), "every sequence in exactly one row");
        for row in &rows {
            assert!(row.iter().map(|&i| lengths[i]).sum::<usize>() <= capacity, "row {row:?} overflows {capacity}");
        }
        let total: usize = lengths.iter().sum();
        assert!(rows.len() >= total.div_ceil(capacity), "fewer rows than the tokens need");
        assert_eq!(rows, pack(&lengths, capacity).expect("fits"), "lengths {lengths:?}, capacity {capacity}");
    }
}

// ---------------------------------------------------------------------------
// Exercise 14.2
// ---------------------------------------------------------------------------

const NORMS: [(&str, LossNorm); 3] = [("sequence_mean", LossNorm::SequenceMean), ("token_mean", LossNorm::TokenMean), ("constant", LossNorm::Constant(16.0))];

#[test]
fn ex2_hand_values() {
    let rows = [1, 3];
    let tokens = [30.0, 10.0];
    for (name, want) in [("sequence_mean", [0.25, 0.75]), ("constant", [0.25, 0.75]), ("token_mean", [0.75, 0.25])] {
        let got = microbatch_weights(name, &rows, &tokens);
        assert_eq!(got.len(), 2);
        for (g, w) in got.iter().zip(want) {
            assert_close(name, *g, w, 1e-12);
        }
    }
    assert!(std::panic::catch_unwind(|| microbatch_weights("median", &[1], &[1.0])).is_err(), "an unknown normalisation must panic");
}

#[test]
fn ex2_sums_to_one_and_matches_the_library() {
    let mut rng = seeded_rng(15);
    for _ in 0..200 {
        let k = 1 + index_below(6, &mut rng);
        let rows: Vec<usize> = (0..k).map(|_| 1 + index_below(9, &mut rng)).collect();
        let tokens: Vec<f64> = rows.iter().map(|&r| (r * (1 + index_below(20, &mut rng))) as f64).collect();
        let batch = (rows.iter().sum::<usize>(), tokens.iter().sum::<f64>());
        for (name, norm) in NORMS {
            let weights = microbatch_weights(name, &rows, &tokens);
            assert_close("the weights' sum", weights.iter().sum(), 1.0, 1e-12);
            for (j, w) in weights.iter().enumerate() {
                assert_close(name, *w, microbatch_weight(Accumulate::Share, norm, (rows[j], tokens[j]), batch, k), 1e-12);
            }
        }
    }
}

#[test]
fn ex2_weighted_micro_batch_losses_add_up_to_the_whole_batch_loss() {
    let mut rng = seeded_rng(16);
    for _ in 0..50 {
        // Sequences of per-token losses with random masks, padded to T.
        let (b, t) = (2 + index_below(10, &mut rng), 12);
        let losses: Vec<f64> = (0..b * t).map(|_| between(-2.0, 2.0, &mut rng)).collect();
        let mask: Vec<f64> = (0..b * t).map(|i| if i % t == 0 || uniform(&mut rng) < 0.5 { 1.0 } else { 0.0 }).collect();
        // Cut the sequences, in order, into micro-batches.
        let mut cuts = vec![0];
        while *cuts.last().unwrap() < b {
            let next = (cuts.last().unwrap() + 1 + index_below(4, &mut rng)).min(b);
            cuts.push(next);
        }
        let part = |values: &[f64], from: usize, to: usize| tensor(&values[from * t..to * t]).view([(to - from) as i64, t as i64]);
        let rows: Vec<usize> = cuts.windows(2).map(|w| w[1] - w[0]).collect();
        let tokens: Vec<f64> = cuts.windows(2).map(|w| mask[w[0] * t..w[1] * t].iter().sum()).collect();
        for (name, norm) in NORMS {
            let whole = aggregate(&part(&losses, 0, b), &part(&mask, 0, b), norm).double_value(&[]);
            let weights = microbatch_weights(name, &rows, &tokens);
            let summed: f64 = cuts
                .windows(2)
                .zip(&weights)
                .map(|(w, weight)| weight * aggregate(&part(&losses, w[0], w[1]), &part(&mask, w[0], w[1]), norm).double_value(&[]))
                .sum();
            assert_close(name, summed, whole, 1e-9);
        }
        assert!(to_vec(&part(&mask, 0, b)).len() == b * t);
    }
}

// ---------------------------------------------------------------------------
// Exercise 14.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_hand_values() {
    for g in [2, 4, 8] {
        assert_close("no episodes: p uniform, E[p^g] = 1 / (g + 1)", group_signal_probability(0.0, 0.0, g), 1.0 - 2.0 / (g as f64 + 1.0), 1e-12);
    }
    assert_close("a group of one never has two rewards", group_signal_probability(3.0, 7.0, 1), 0.0, 1e-12);
    // One success in one episode: Beta(2, 1); E[p²] = 2·3/(3·4) = 1/2, E[(1 − p)²] = 1·2/(3·4) = 1/6.
    assert_close("Beta(2, 1), pairs", group_signal_probability(1.0, 1.0, 2), 1.0 - 0.5 - 1.0 / 6.0, 1e-12);
}

#[test]
fn ex3_tends_to_the_plug_in_value_and_matches_the_library() {
    assert_close("many episodes at p = 0.3", group_signal_probability(30_000.0, 100_000.0, 8), signal_probability(0.3, 8), 1e-4);
    let mut rng = seeded_rng(17);
    for _ in 0..200 {
        let trials = between(0.0, 40.0, &mut rng);
        let successes = between(0.0, trials, &mut rng);
        let g = 1 + index_below(12, &mut rng);
        let mut rates = PassRates::new(1, 1.0);
        (rates.successes, rates.trials) = (vec![successes], vec![trials]);
        let yours = group_signal_probability(successes, trials, g);
        assert_close("PassRates::signal", yours, rates.signal(0, g), 1e-12);
        assert!((-1e-12..=1.0).contains(&yours), "a probability: {yours}");
        // Jensen: the posterior's chance of signal is at most the plug-in one at the posterior mean.
        let mean = (successes + 1.0) / (trials + 2.0);
        assert!(yours <= signal_probability(mean, g) + 1e-12, "{yours} above the plug-in {}", signal_probability(mean, g));
    }
}
