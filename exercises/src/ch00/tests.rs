//! Grading tests for the Chapter 0 exercises: `cargo test -p exercises ch00`.
//!
//! Each test is named after its exercise (`ex2_...` grades Exercise 0.2). The
//! expected values are the chapter's printed numbers, hand-made cases whose
//! answer is known exactly, or the same quantity computed here in plain Rust
//! `f64` arithmetic, independently of tch.

use super::*;
use agentrl::book::generator_turn;
use tch::{Device, Kind, Tensor};

use crate::testkit::assert_close;

/// A `[G, T]` tensor of any float kind as rows of `f64`.
fn rows(t: &Tensor) -> Vec<Vec<f64>> {
    Vec::<Vec<f64>>::try_from(&t.to_kind(Kind::Double)).expect("a two-dimensional float tensor")
}

/// A `[G, T]` `Kind::Float` tensor from rows of `f64`.
fn tensor2(values: &[Vec<f64>]) -> Tensor {
    let g = values.len() as i64;
    let flat: Vec<f32> = values.iter().flatten().map(|&v| v as f32).collect();
    Tensor::from_slice(&flat).reshape([g, -1])
}

/// The two averages of Exercise 0.1, in plain `f64`: (token mean, mean of sequence means).
fn plain_averages(logp: &[Vec<f64>], mask: &[Vec<f64>]) -> (f64, f64) {
    let (mut total, mut count, mut row_means) = (0.0, 0.0, 0.0);
    for (lp, m) in logp.iter().zip(mask) {
        let row: f64 = lp.iter().zip(m).map(|(a, b)| a * b).sum();
        let row_count: f64 = m.iter().sum();
        total += row;
        count += row_count;
        row_means += row / row_count;
    }
    (total / count, row_means / logp.len() as f64)
}

/// `H = -sum p log p` of one row of logits, in plain `f64`.
fn plain_entropy(logits: &[f64]) -> f64 {
    let top = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let log_z = top + logits.iter().map(|z| (z - top).exp()).sum::<f64>().ln();
    -logits.iter().map(|z| (z - log_z).exp() * (z - log_z)).sum::<f64>()
}

/// The entropies of a `[G, T, V]` logits tensor, `[G][T]`, in plain `f64`.
fn plain_entropies(logits: &Tensor) -> Vec<Vec<f64>> {
    let size = logits.size();
    let flat = Vec::<f64>::try_from(&logits.to_kind(Kind::Double).reshape([-1])).expect("float logits");
    let v = size[2] as usize;
    flat.chunks(v).map(plain_entropy).collect::<Vec<f64>>().chunks(size[1] as usize).map(|row| row.to_vec()).collect()
}

// ---------------------------------------------------------------------------
// Exercise 0.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_the_chapters_two_averages() {
    let ex = example();
    let logp = chosen_log_probs(&ex.logits, &ex.tokens); // [G, T]
    let token = token_mean(&logp, &ex.mask);
    let sequences = mean_of_sequence_means(&logp, &ex.mask);
    assert_eq!(format!("{token:.4}"), "-0.4652", "token mean of the chapter's example");
    assert_eq!(format!("{sequences:.4}"), "-0.4538", "mean of sequence means of the chapter's example");
    // The given helper reproduces the chapter's chosen log-probabilities.
    let printed = [[-0.2413, -0.5514, -1.0986], [-0.3690, -0.0659, -1.0986]];
    for (got, want) in rows(&logp).iter().zip(printed) {
        for (g, w) in got.iter().zip(want) {
            assert_close("chosen log-prob", *g, w, 5e-5);
        }
    }
}

#[test]
fn ex1_masking_the_last_token_of_sequence_1_makes_them_equal() {
    let ex = example();
    let logp = chosen_log_probs(&ex.logits, &ex.tokens); // [G, T]
    let mask = Tensor::from_slice2(&[[1.0f32, 1.0, 0.0], [1.0, 1.0, 0.0]]); // [G, T]
    let token = token_mean(&logp, &mask);
    let sequences = mean_of_sequence_means(&logp, &mask);
    assert_eq!(format!("{token:.4}"), "-0.3069", "token mean with two tokens per sequence");
    assert_eq!(format!("{sequences:.4}"), "-0.3069", "mean of sequence means with two tokens per sequence");
    assert_close("token mean vs mean of sequence means", token, sequences, 1e-6);
}

#[test]
fn ex1_equal_token_counts_give_equal_averages() {
    let _turn = generator_turn();
    tch::manual_seed(0);
    let (g, t) = (4usize, 7i64);
    for kept in 1..=t {
        let logp = Tensor::rand([g as i64, t], (Kind::Float, Device::Cpu)) * -3.0; // [G, T]
        // Every row keeps `kept` tokens, at positions that differ from row to row.
        let mask: Vec<Vec<f64>> = (0..g)
            .map(|_| {
                let order = Vec::<i64>::try_from(&Tensor::randperm(t, (Kind::Int64, Device::Cpu))).unwrap();
                (0..t).map(|i| if order[i as usize] < kept { 1.0 } else { 0.0 }).collect()
            })
            .collect();
        let (want_token, want_sequences) = plain_averages(&rows(&logp), &mask);
        let mask = tensor2(&mask);
        let token = token_mean(&logp, &mask);
        let sequences = mean_of_sequence_means(&logp, &mask);
        assert_close(&format!("token mean, {kept} tokens per row"), token, want_token, 1e-5);
        assert_close(&format!("mean of sequence means, {kept} tokens per row"), sequences, want_sequences, 1e-5);
        assert_close(&format!("the two averages, {kept} tokens per row"), token, sequences, 1e-5);
    }
}

#[test]
fn ex1_unequal_counts_weigh_tokens_and_sequences_differently() {
    // Row 0 keeps one token at -1, row 1 keeps three at -2: the token mean is
    // (-1 - 6) / 4, the mean of sequence means (-1 - 2) / 2.
    let logp = tensor2(&[vec![-1.0, -1.0, -1.0], vec![-2.0, -2.0, -2.0]]);
    let mask = tensor2(&[vec![0.0, 1.0, 0.0], vec![1.0, 1.0, 1.0]]);
    assert_close("token mean", token_mean(&logp, &mask), -1.75, 1e-6);
    assert_close("mean of sequence means", mean_of_sequence_means(&logp, &mask), -1.5, 1e-6);
    // Unequal counts but equal row means: the weights no longer matter.
    let flat = tensor2(&[vec![9.0, -0.5, 9.0], vec![-0.5, -0.5, -0.5]]);
    assert_close("token mean, equal row means", token_mean(&flat, &mask), -0.5, 1e-6);
    assert_close("mean of sequence means, equal row means", mean_of_sequence_means(&flat, &mask), -0.5, 1e-6);
    // Three rows of different lengths against the plain-Rust averages.
    let logp = vec![vec![-0.3, -1.2, -0.7, -2.0], vec![-0.1, -0.4, -3.0, -0.9], vec![-1.5, -0.2, -0.6, -0.8]];
    let mask = vec![vec![1.0, 0.0, 0.0, 0.0], vec![1.0, 1.0, 1.0, 0.0], vec![1.0, 1.0, 1.0, 1.0]];
    let (want_token, want_sequences) = plain_averages(&logp, &mask);
    assert_close("token mean, three rows", token_mean(&tensor2(&logp), &tensor2(&mask)), want_token, 1e-6);
    assert_close("mean of sequence means, three rows", mean_of_sequence_means(&tensor2(&logp), &tensor2(&mask)), want_sequences, 1e-6);
}

// ---------------------------------------------------------------------------
// Exercise 0.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_entropies_of_the_example() {
    let ex = example();
    let h = entropies(&ex.logits);
    assert_eq!(h.size(), [2, 3], "entropies of [G, T, V] logits are [G, T]");
    let printed: Vec<Vec<String>> = rows(&h).iter().map(|row| row.iter().map(|v| format!("{v:.4}")).collect()).collect();
    assert_eq!(printed, [["0.6216", "0.9753", "1.0986"], ["0.8318", "0.2743", "1.0986"]], "entropies of the example");
}

#[test]
fn ex2_uniform_positions_have_the_highest_entropy() {
    let ex = example();
    let h = rows(&entropies(&ex.logits));
    let ln3 = 3.0f64.ln();
    assert_close("entropy at sequence 0, token 2 (logits 1, 1, 1)", h[0][2], ln3, 1e-6);
    assert_close("entropy at sequence 1, token 2 (logits 0, 0, 0)", h[1][2], ln3, 1e-6);
    for (g, t) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        assert!(h[g][t] < ln3 - 0.1, "position ({g}, {t}) is not uniform, yet its entropy {} is near ln 3", h[g][t]);
    }
    // Equal logits over five entries, whatever their value: ln 5.
    let five = Tensor::full([1, 2, 5], 7.5, (Kind::Float, Device::Cpu)); // [1, 2, 5]
    for v in rows(&entropies(&five).reshape([1, -1]))[0].iter() {
        assert_close("entropy of five equal logits", *v, 5.0f64.ln(), 1e-6);
    }
}

#[test]
fn ex2_entropies_agree_with_a_plain_computation() {
    let _turn = generator_turn();
    tch::manual_seed(1);
    let logits = Tensor::randn([3, 4, 6], (Kind::Float, Device::Cpu)) * 2.5; // [G, T, V]
    let got = rows(&entropies(&logits));
    let want = plain_entropies(&logits);
    assert_eq!(got.len(), 3, "one row per sequence");
    for (g, (got_row, want_row)) in got.iter().zip(&want).enumerate() {
        assert_eq!(got_row.len(), 4, "one entropy per position");
        for (t, (a, b)) in got_row.iter().zip(want_row).enumerate() {
            assert_close(&format!("entropy at ({g}, {t})"), *a, *b, 1e-5);
        }
    }
}

#[test]
fn ex2_confident_positions_are_finite() {
    // In f32, exp(-1000) is exactly 0: log_softmax keeps the log finite, log(softmax) does not.
    let logits = Tensor::from_slice(&[1000.0f32, 0.0, 0.0, 0.0, -1000.0, -1000.0, -1000.0, 0.0, 0.0]).reshape([1, 3, 3]);
    let h = rows(&entropies(&logits));
    for (t, want) in [(0, 0.0), (1, 0.0), (2, 2.0f64.ln())] {
        assert!(h[0][t].is_finite(), "entropy at position {t} is {}, not a number", h[0][t]);
        assert_close(&format!("entropy at position {t}"), h[0][t], want, 1e-6);
    }
}

#[test]
fn ex2_masked_mean_of_the_entropies() {
    let ex = example();
    // The example's entropies, computed here without tch.
    let h = tensor2(&plain_entropies(&ex.logits));
    let mean = masked_mean(&h, &ex.mask);
    assert_eq!(format!("{mean:.4}"), "0.7603", "masked mean entropy of the example (the plain mean would be 0.8167)");
    let values = tensor2(&[vec![1.0, 2.0, 100.0], vec![3.0, 4.0, 5.0]]);
    assert_close("masked mean skips the padded 100", masked_mean(&values, &ex.mask), 3.0, 1e-6);
    let mask = tensor2(&[vec![0.0, 0.0, 1.0], vec![0.0, 0.0, 0.0]]);
    assert_close("a single kept value", masked_mean(&values, &mask), 100.0, 1e-4);
}

// ---------------------------------------------------------------------------
// Exercise 0.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_ties_go_to_the_first_index() {
    // Both last positions of the example are uniform (1, 1, 1 and 0, 0, 0).
    assert_eq!(greedy_last(&example().logits), [0, 0], "greedy tokens of the example");
    // A tie between indices 1 and 2 goes to 1, and one between 2 and 3 to 2.
    let logits = Tensor::from_slice(&[0.0f32, 3.0, 3.0, 1.0, 1.0, -1.0, 4.0, 4.0]).reshape([2, 1, 4]);
    assert_eq!(greedy_last(&logits), [1, 2], "greedy tokens with tied maxima");
}

#[test]
fn ex3_greedy_reads_the_last_position_of_every_sequence() {
    // G = 3, T = 4, V = 5; at (g, t) the largest logit sits at (g + 2t) mod 5,
    // so every position points somewhere else and the last one at (g + 1) mod 5.
    let (g, t, v) = (3usize, 4usize, 5usize);
    let mut flat = Vec::with_capacity(g * t * v);
    for gi in 0..g {
        for ti in 0..t {
            for vi in 0..v {
                flat.push(if vi == (gi + 2 * ti) % v { 5.0f32 } else { 0.1 * vi as f32 });
            }
        }
    }
    let logits = Tensor::from_slice(&flat).reshape([g as i64, t as i64, v as i64]); // [G, T, V]
    assert_eq!(greedy_last(&logits), [1, 2, 3], "the argmax at the last position of each sequence");
    // Dropping the last position moves the answer to the new last one, (g + 4) mod 5.
    assert_eq!(greedy_last(&logits.narrow(1, 0, 3)), [4, 0, 1], "the last of three positions");
}

// ---------------------------------------------------------------------------
// Exercise 0.4 (only what holds on every machine)
// ---------------------------------------------------------------------------

/// Puts libtorch's thread count back when a test ends, even if it fails.
struct RestoreThreads(i32);

impl Drop for RestoreThreads {
    fn drop(&mut self) {
        tch::set_num_threads(self.0);
    }
}

#[test]
fn ex4_the_same_seed_gives_the_same_draw() {
    let _turn = generator_turn();
    let _restore = RestoreThreads(tch::get_num_threads());
    let n = 100_000;
    let first = seeded_normal_sum(3, n, 1);
    let _unrelated = Tensor::randn([1000], (Kind::Float, Device::Cpu)); // moves the generator on
    let again = seeded_normal_sum(3, n, 1);
    assert_eq!(first.to_bits(), again.to_bits(), "seed 3 gave {first}, then {again}: the function must reseed");
    let other = seeded_normal_sum(4, n, 1);
    assert!((first - other).abs() > 1.0, "seeds 3 and 4 gave {first} and {other}: the seed is not used");
    // The same stream as seeding and drawing by hand (Kind::Float draws, not Double).
    tch::manual_seed(3);
    let by_hand = Tensor::randn([n], (Kind::Float, Device::Cpu)).sum(Kind::Double).double_value(&[]);
    assert_close("sum after seed 3", first, by_hand, 1e-3 * (n as f64).sqrt());
    // A sum of n standard normals has standard deviation sqrt(n).
    assert!(first.abs() < 6.0 * (n as f64).sqrt(), "sum {first} of {n} standard normals");
}

#[test]
fn ex4_the_thread_count_changes_only_the_rounding() {
    let _turn = generator_turn();
    let _restore = RestoreThreads(tch::get_num_threads());
    let n = 1_000_000;
    let one = seeded_normal_sum(0, n, 1);
    assert_eq!(tch::get_num_threads(), 1, "the thread count after seeded_normal_sum(.., 1)");
    let two = seeded_normal_sum(0, n, 2);
    assert_eq!(tch::get_num_threads(), 2, "the thread count after seeded_normal_sum(.., 2)");
    // Same draw, other order of additions: the sums agree up to f32 rounding.
    assert_close("sum on two threads vs one", two, one, 0.05);
    tch::manual_seed(0);
    let by_hand = Tensor::randn([n], (Kind::Float, Device::Cpu)).sum(Kind::Double).double_value(&[]);
    assert_close("sum after seed 0", one, by_hand, 0.05);
}
