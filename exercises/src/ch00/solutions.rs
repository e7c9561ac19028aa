//! Chapter 0: reference solutions. The model answers, with the numbers these
//! functions produce, are in `chapters/answers-00.md`.

use tch::{Device, IndexOp, Kind, Tensor};

/// Exercise 0.1 (a): one division, by the number of tokens with mask 1.
pub fn token_mean(logp: &Tensor, mask: &Tensor) -> f64 {
    let mean = (logp * mask).sum(Kind::Float) / mask.sum(Kind::Float); // []
    mean.double_value(&[])
}

/// Exercise 0.1 (b): one division per row, then a plain mean over the rows.
pub fn mean_of_sequence_means(logp: &Tensor, mask: &Tensor) -> f64 {
    let row_sums = (logp * mask).sum_dim_intlist(1, false, Kind::Float); // [G]
    let row_counts = mask.sum_dim_intlist(1, false, Kind::Float); // [G]
    (row_sums / row_counts).mean(Kind::Float).double_value(&[])
}

/// Exercise 0.2 (a): `-(p * log p)` summed over the vocabulary. The log comes
/// from `log_softmax`, which stays finite where `p` underflows to 0, so such a
/// term is `0 * (finite) = 0` rather than `0 * (-inf) = NaN`.
pub fn entropies(logits: &Tensor) -> Tensor {
    let p = logits.softmax(-1, Kind::Float); // [G, T, V]
    let logp = logits.log_softmax(-1, Kind::Float); // [G, T, V]
    (p * logp).sum_dim_intlist(-1, false, Kind::Float).neg() // [G, T]
}

/// Exercise 0.2 (b): the same masked mean as Exercise 0.1 (a).
pub fn masked_mean(values: &Tensor, mask: &Tensor) -> f64 {
    token_mean(values, mask)
}

/// Exercise 0.3: `i((.., -1, ..))` is `[:, -1, :]`; `argmax(-1, false)` is
/// `argmax(-1)`, which returns the first of several equal maxima.
pub fn greedy_last(logits: &Tensor) -> Vec<i64> {
    let last = logits.i((.., -1, ..)); // [G, V]
    Vec::<i64>::try_from(&last.argmax(-1, false)).expect("an int64 tensor")
}

/// Exercise 0.4: threads first, then the seed, then the one draw.
pub fn seeded_normal_sum(seed: i64, n: i64, threads: i32) -> f64 {
    tch::set_num_threads(threads);
    tch::manual_seed(seed);
    let draw = Tensor::randn([n], (Kind::Float, Device::Cpu)); // [n]
    draw.sum(Kind::Float).double_value(&[])
}
