//! Chapter 0 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch00`.
//!
//! The example of Section 0.6 is `super::example()` (its `logits`, `tokens`
//! and `mask`), and `super::chosen_log_probs(&logits, &tokens)` turns it into
//! the `[G, T]` log-probabilities of the chosen tokens. Section 0.6's table
//! translates the PyTorch operations you may know into tch.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

use tch::Tensor;

// ---------------------------------------------------------------------------
// Exercise 0.1: two ways to average over a mask
// ---------------------------------------------------------------------------

/// Exercise 0.1 (a): the masked token mean.
///
/// `logp` (`[G, T]`, `Kind::Float`) holds the log-probabilities of the chosen
/// tokens and `mask` (`[G, T]`, `Kind::Float`, entries 0 or 1) the loss mask.
/// Return `sum_i m_i logp_i / sum_i m_i`, the sums running over every token of
/// every sequence: each token the policy wrote weighs the same. On the
/// chapter's example this is -0.4652.
pub fn token_mean(logp: &Tensor, mask: &Tensor) -> f64 {
    todo!("Exercise 0.1: the masked mean over all tokens of all sequences")
}

/// Exercise 0.1 (b): the mean of sequence means.
///
/// Same inputs as [`token_mean`]. First average each row over its own masked
/// tokens, then average those `G` row means: each sequence weighs the same,
/// however many tokens it has. Every row has at least one token with mask 1.
/// On the chapter's example this is -0.4538.
///
/// Then mask the last token of sequence 1 too and compare the two averages.
/// When are they equal in general?
pub fn mean_of_sequence_means(logp: &Tensor, mask: &Tensor) -> f64 {
    todo!("Exercise 0.1: the mean over sequences of each sequence's masked mean")
}

// ---------------------------------------------------------------------------
// Exercise 0.2: entropy of the next-token distribution
// ---------------------------------------------------------------------------

/// Exercise 0.2 (a): the entropy at every position.
///
/// `logits` is `[G, T, V]`; return the `[G, T]` tensor (`Kind::Float`) of
/// `H = -sum_v p(v) log p(v)` with `p = softmax(logits)` over the last
/// dimension, in natural logarithms. Use tch operations: `softmax`,
/// `log_softmax`, a product and a sum over the last dimension.
///
/// The result must stay finite at very confident positions, such as logits
/// `[1000, 0, 0]`, where some probabilities are exactly 0 in `f32` (their
/// entropy contribution is 0, not NaN).
pub fn entropies(logits: &Tensor) -> Tensor {
    todo!("Exercise 0.2: the [G, T] entropies of softmax(logits)")
}

/// Exercise 0.2 (b): the masked token mean of any `[G, T]` values.
///
/// `sum_i m_i values_i / sum_i m_i` over all positions, as in Exercise 0.1 (a).
/// Apply it to the example's entropies and mask. Which positions have the
/// highest entropy, and why could you tell before computing anything?
pub fn masked_mean(values: &Tensor, mask: &Tensor) -> f64 {
    todo!("Exercise 0.2: the masked mean of a [G, T] tensor")
}

// ---------------------------------------------------------------------------
// Exercise 0.3: the greedy next token
// ---------------------------------------------------------------------------

/// Exercise 0.3: PyTorch's `logits[:, -1, :].argmax(-1)` in tch.
///
/// `logits` is `[G, T, V]`. Return, for each of the `G` sequences, the
/// vocabulary index with the highest logit at the last position, as a
/// `Vec<i64>` of length `G`. Use libtorch's `argmax`; evaluate it on the
/// example's logits and look at how it breaks ties.
pub fn greedy_last(logits: &Tensor) -> Vec<i64> {
    todo!("Exercise 0.3: the argmax over the vocabulary at the last position")
}

// ---------------------------------------------------------------------------
// Exercise 0.4: seeds, threads and kernels
// ---------------------------------------------------------------------------

/// Exercise 0.4: the experiment's measurement as a function.
///
/// Call `tch::set_num_threads(threads)`, seed the generator with
/// `tch::manual_seed(seed)`, draw `Tensor::randn([n], (Kind::Float, Device::Cpu))`
/// and return its sum (libtorch's `sum(Kind::Float)`, read with
/// `double_value(&[])`). Leave the thread count at `threads` when you return.
///
/// The experiment itself is a scratch program that prints
/// `seeded_normal_sum(0, 10_000_000, 1)` and `(0, 10_000_000, 2)` with `{:.4}`,
/// run under `ATEN_CPU_CAPABILITY=default` and `ATEN_CPU_CAPABILITY=avx2`.
/// The tests only check what holds on every machine; the numbers are yours.
pub fn seeded_normal_sum(seed: i64, n: i64, threads: i32) -> f64 {
    todo!("Exercise 0.4: set the threads, seed, draw n normals and sum them")
}
