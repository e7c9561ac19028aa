//! Grading tests for the Chapter 13 exercises: `cargo test -p exercises ch13`.
//!
//! Each test is named after its exercise (`ex2_...` grades Exercise 13.2)
//! and checks hand-checked values, consequences of the statement on random
//! inputs, and agreement with the library (`agentrl::offpolicy`,
//! `agentrl::pipeline`).

use super::*;
use agentrl::offpolicy::{importance_weights, Correction};
use agentrl::pipeline::{lockstep, makespan, Costs, Latency, Turn};
use agentrl::mdp::seeded_rng;

use crate::testkit::{assert_close, between, index_below, tensor, to_vec, uniform};

// ---------------------------------------------------------------------------
// Exercise 13.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_hand_values() {
    let (half, two) = (0.5f64.ln(), 2.0f64.ln());
    let token = truncated_weights(&[0.0, two, two + two], &[0.0, 0.0, 0.0], 3.0, false);
    for (got, want) in token.iter().zip([1.0, 2.0, 3.0]) {
        assert_close("token weights 1, 2, 4 capped at 3", *got, want, 1e-12);
    }
    let sequence = truncated_weights(&[half, two, two], &[0.0, 0.0, 0.0], 3.0, true);
    assert_eq!(sequence.len(), 3, "one weight per token, the same for all");
    for got in sequence {
        assert_close("0.5 · 2 · 2 = 2, under the cap", got, 2.0, 1e-12);
    }
    let capped = truncated_weights(&[two, two], &[0.0, 0.0], 3.0, true);
    assert_close("2 · 2 = 4 capped at 3", capped[0], 3.0, 1e-12);
    assert!(truncated_weights(&[], &[], 2.0, true).is_empty(), "no action tokens, no weights");
}

#[test]
fn ex1_matches_the_library() {
    let mut rng = seeded_rng(13);
    for _ in 0..200 {
        let n = 1 + index_below(6, &mut rng);
        let old: Vec<f64> = (0..n).map(|_| between(-3.0, 0.0, &mut rng)).collect();
        let behaviour: Vec<f64> = (0..n).map(|_| between(-3.0, 0.0, &mut rng)).collect();
        let cap = between(1.0, 4.0, &mut rng);
        for (sequence, correction) in [(false, Correction::TokenTis(cap)), (true, Correction::SequenceTis(cap))] {
            let mask = tensor(&vec![1.0; n]).view([1, n as i64]);
            let library = to_vec(&importance_weights(&tensor(&old).view([1, n as i64]), &tensor(&behaviour).view([1, n as i64]), &mask, correction).view([-1]));
            let yours = truncated_weights(&old, &behaviour, cap, sequence);
            assert_eq!(yours.len(), n);
            for (y, l) in yours.iter().zip(&library) {
                assert_close(if sequence { "a sequence weight" } else { "a token weight" }, *y, *l, 1e-9);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 13.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_hand_values() {
    assert_close("no episodes", lockstep_time(&[]), 0.0, 0.0);
    assert_close("one episode alone", lockstep_time(&[vec![(2.0, 1.0), (3.0, 4.0)]]), 10.0, 1e-12);
    // Turn 1: max(4, 2) + max(10, 0.5); turn 2: only the first episode, 2 + 10.
    let two = [vec![(4.0, 10.0), (2.0, 10.0)], vec![(2.0, 0.5)]];
    assert_close("two episodes", lockstep_time(&two), 26.0, 1e-12);
}

#[test]
fn ex2_is_at_least_the_slowest_episode_and_at_most_all_of_them_in_turn() {
    let mut rng = seeded_rng(2);
    for _ in 0..200 {
        let episodes: Vec<Vec<(f64, f64)>> = (0..1 + index_below(6, &mut rng))
            .map(|_| (0..index_below(5, &mut rng)).map(|_| (uniform(&mut rng), 5.0 * uniform(&mut rng))).collect())
            .collect();
        let own = |e: &Vec<(f64, f64)>| e.iter().map(|(g, c)| g + c).sum::<f64>();
        let time = lockstep_time(&episodes);
        let slowest = episodes.iter().map(own).fold(0.0, f64::max);
        let all: f64 = episodes.iter().map(own).sum();
        assert!(time >= slowest - 1e-9 && time <= all + 1e-9, "{time} not in [{slowest}, {all}] for {episodes:?}");
    }
}

#[test]
fn ex2_matches_the_library() {
    let mut rng = seeded_rng(3);
    let costs = Costs { per_token: 1.0, light_call: 0.25, update: 0.0 };
    for _ in 0..100 {
        let latency = between(0.5, 20.0, &mut rng);
        let shapes: Vec<Vec<Turn>> = (0..1 + index_below(8, &mut rng))
            .map(|_| (0..1 + index_below(6, &mut rng)).map(|_| Turn { tokens: 1 + index_below(16, &mut rng), runs_tests: uniform(&mut rng) < 0.5 }).collect())
            .collect();
        let episodes: Vec<Vec<(f64, f64)>> = shapes.iter().map(|s| s.iter().map(|t| (t.tokens as f64, if t.runs_tests { latency } else { 0.25 })).collect()).collect();
        let library = makespan(&lockstep(&shapes, costs, &Latency::Recorded(vec![latency]), &mut seeded_rng(0)));
        assert_close("the library's lockstep makespan", lockstep_time(&episodes), library, 1e-9);
    }
}

// ---------------------------------------------------------------------------
// Exercise 13.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_hand_values() {
    assert_close("four equal weights", effective_sample_size(&[0.7, 0.7, 0.7, 0.7]), 4.0, 1e-12);
    assert_close("one weight carries everything", effective_sample_size(&[0.0, 3.0, 0.0]), 1.0, 1e-12);
    assert_close("weights 1 and 3: 16 / 10", effective_sample_size(&[1.0, 3.0]), 1.6, 1e-12);
    assert_close("all zero", effective_sample_size(&[0.0, 0.0]), 0.0, 0.0);
    assert_close("none", effective_sample_size(&[]), 0.0, 0.0);
}

#[test]
fn ex3_lies_between_one_and_n_and_ignores_scale() {
    let mut rng = seeded_rng(4);
    for _ in 0..200 {
        let n = 1 + index_below(20, &mut rng);
        let weights: Vec<f64> = (0..n).map(|_| between(0.01, 5.0, &mut rng)).collect();
        let ess = effective_sample_size(&weights);
        assert!((1.0 - 1e-9..=n as f64 + 1e-9).contains(&ess), "{ess} for {n} weights");
        let scaled: Vec<f64> = weights.iter().map(|w| w * 7.5).collect();
        assert_close("the same weights times 7.5", effective_sample_size(&scaled), ess, 1e-9);
    }
}
