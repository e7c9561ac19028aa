//! Chapter 0, *Notation and how to use this book*: exercises 0.1 to 0.4.
//! Exercise 0.4 is an experiment; only its machine-independent part (the same
//! seed gives the same draw, the thread count only changes the rounding) is
//! graded here, and its measured numbers are in `chapters/answers-00.md`.
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.
//! [`example`] and [`chosen_log_probs`] rebuild the small example of Section
//! 0.6 and are shared by both; they are given, not part of any exercise.

use tch::{Kind, Tensor};

exercise_files!();

/// The example of Section 0.6: two sequences of three tokens over a
/// vocabulary of three.
pub struct Example {
    /// The model's scores, `[G, T, V] = [2, 3, 3]`, `Kind::Float`.
    pub logits: Tensor,
    /// The tokens that were actually there, `[G, T]`, `Kind::Int64`.
    pub tokens: Tensor,
    /// The loss mask, `[G, T]`, `Kind::Float`: the last token of sequence 0 is padding.
    pub mask: Tensor,
}

/// The logits, tokens and mask of Section 0.6, exactly as the chapter builds
/// them (without `requires_grad`, which no exercise needs).
pub fn example() -> Example {
    let logits = Tensor::from_slice(&[
        2.0f32, 0.5, -1.0, // sequence 0, token 0
        0.0, 1.0, 0.0, //     sequence 0, token 1
        1.0, 1.0, 1.0, //     sequence 0, token 2 (padding)
        0.5, 0.5, 2.0, //     sequence 1, token 0
        -1.0, 0.0, 3.0, //    sequence 1, token 1
        0.0, 0.0, 0.0, //     sequence 1, token 2
    ])
    .reshape([2, 3, 3]); // [G, T, V]
    let tokens = Tensor::from_slice2(&[[0i64, 1, 2], [2, 2, 0]]); // [G, T]
    let mask = Tensor::from_slice2(&[[1.0f32, 1.0, 0.0], [1.0, 1.0, 1.0]]); // [G, T]
    Example {
        logits,
        tokens,
        mask,
    }
}

/// `log pi(y_i | c_i)` of the chosen tokens, `[G, T]`: `log_softmax` over the
/// vocabulary, then `gather` at `tokens`, as in Section 0.6.
pub fn chosen_log_probs(logits: &Tensor, tokens: &Tensor) -> Tensor {
    logits
        .log_softmax(-1, Kind::Float)
        .gather(2, &tokens.unsqueeze(-1), false)
        .squeeze_dim(-1) // [G, T]
}
