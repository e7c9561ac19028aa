//! Chapter 5 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch05`.
//!
//! Everything you need is in `agentrl::trajectory` (`Trajectory`, `Batch`,
//! `collate`, `policy_logprobs`, `retokenized_action`), `agentrl::tokenizer`
//! (`Bpe`) and `agentrl::episode::Owner`. The tests build a small tokenizer
//! and tiny untrained models on the CPU; none of them trains.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

use agentrl::episode::Owner;
use agentrl::tokenizer::Bpe;
use agentrl::trajectory::Trajectory;
use tch::Tensor;

// ---------------------------------------------------------------------------
// Exercise 5.1: where the actions are
// ---------------------------------------------------------------------------

/// Exercise 5.1: the positions of the policy's actions in a token stream.
///
/// `owners` says who wrote each token of a trajectory. An action is a maximal
/// run of consecutive `Owner::Policy` tokens. Return one half-open range
/// `(start, end)` per action, in order: `owners[start..end]` are all
/// `Policy`, and the tokens just before `start` and at `end` (when they
/// exist) are not. A stream without policy tokens has no actions.
pub fn action_spans(owners: &[Owner]) -> Vec<(usize, usize)> {
    todo!("Exercise 5.1: one (start, end) per run of Policy tokens")
}

// ---------------------------------------------------------------------------
// Exercise 5.2: padding on the left
// ---------------------------------------------------------------------------

/// Exercise 5.2: sequences of different lengths padded on the left.
///
/// Every output row has the length of the longest input row (0 when there
/// are no rows, or only empty ones): first `pad` as many times as needed,
/// then the row's own ids, in order. The second result has the same shape and
/// is `true` exactly on the row's own ids. With `rows` empty, both results
/// are empty.
///
/// This is the layout generation uses: every row's last token sits in the
/// last column, so one batched forward pass gives every row its next-token
/// logits in the same place.
pub fn left_pad(rows: &[Vec<u32>], pad: u32) -> (Vec<Vec<u32>>, Vec<Vec<bool>>) {
    todo!("Exercise 5.2: the pads first, then the row; valid on the row's own ids")
}

// ---------------------------------------------------------------------------
// Exercise 5.3: the log-probability of each trajectory
// ---------------------------------------------------------------------------

/// Exercise 5.3: $\sum_t m_{b,t} \, \ell_{b,t}$ for every row $b$.
///
/// `logprobs` is a `[B, T]` float tensor of per-token log-probabilities
/// aligned with a batch's ids (as `policy_logprobs` or `Batch::logprobs`
/// give them), and `mask` is a `[B, T]` float tensor that is 1 on the tokens
/// the policy sampled and 0 elsewhere (as `Batch::mask`). Return the `B`
/// masked row sums as `f64`, summed in double precision: the log-probability
/// of all of a trajectory's actions together. Whatever `logprobs` holds where
/// the mask is 0 (padding, the environment's tokens) must not matter. The
/// tensors may require gradients; the result is plain numbers.
pub fn sequence_logprobs(logprobs: &Tensor, mask: &Tensor) -> Vec<f64> {
    todo!("Exercise 5.3: the masked sum of each row, as f64")
}

// ---------------------------------------------------------------------------
// Exercise 5.4: finding the retokenization mismatches
// ---------------------------------------------------------------------------

/// Exercise 5.4: which actions of `trajectory` a text pipeline would change.
///
/// The actions are the runs of policy tokens of Exercise 5.1, numbered from 0
/// in order. Return, in increasing order, the numbers of the actions whose
/// ids differ from `retokenized_action(bpe, ids)`: the actions whose ids are
/// not the tokenizer's canonical encoding of their own text.
pub fn retokenization_mismatches(bpe: &Bpe, trajectory: &Trajectory) -> Vec<usize> {
    todo!("Exercise 5.4: the actions whose ids change when decoded and encoded again")
}

// ---------------------------------------------------------------------------
// Exercise 5.5: the cost of padding
// ---------------------------------------------------------------------------

/// Exercise 5.5: the share of a batched pass's positions that are padding.
///
/// `lengths` are the lengths of the sequences. If `sort_by_length`, first
/// order them from shortest to longest (a stable sort); otherwise keep the
/// given order. Then cut the list into consecutive batches of `batch`
/// sequences (the last one may be smaller; `batch >= 1`), pad every batch to
/// its longest member, and return
///
/// $$ \frac{\text{padding positions}}{\text{all positions}}, \qquad
/// \text{all positions} = \sum_{\text{batches}} (\text{size}) \times (\text{longest}). $$
///
/// When there are no positions at all (no sequences, or only empty ones),
/// return 0.
pub fn padding_fraction(lengths: &[usize], batch: usize, sort_by_length: bool) -> f64 {
    todo!("Exercise 5.5: 1 - real positions / (sum over batches of size * longest)")
}
