//! Chapter 18 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch18`.
//!
//! Exercise 18.1 is graded on the metrics files of the chapter's runs
//! (`figures/ch18-mystery-K-seed-S.jsonl`, seven runs with a bug each, and
//! `figures/ch18-healthy-seed-S.jsonl`): tune on seeds S = 0, 1, 2; the tests
//! grade seeds 3, 4 and 5. Exercise 18.2 on the loss of
//! `agentrl::debugging::Injected` with and without a bug.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

use agentrl::debugging::Bug;
use agentrl::pg::{Algorithm, TrainRecord};

// ---------------------------------------------------------------------------
// Exercise 18.1: diagnose a run from its metrics
// ---------------------------------------------------------------------------

/// Exercise 18.1: the bug in `run`, or `None` if it looks healthy. `healthy`
/// is the healthy recipe's run with the same seed (same tasks, same sampling
/// stream at iteration 0). Both are the lines of a metrics file, read with
/// `agentrl::pg::read_records`. Use only what the dashboard shows (the
/// `debugging::Panel` values), not the run's name.
pub fn diagnose(run: &[TrainRecord], healthy: &[TrainRecord]) -> Option<Bug> {
    todo!("Exercise 18.1: one test per signature, the most specific first")
}

// ---------------------------------------------------------------------------
// Exercise 18.2: a unit check for the loss normalisation
// ---------------------------------------------------------------------------

/// Exercise 18.2: check that `algorithm`'s loss weighs every action token
/// alike, as GRPO++'s constant normalisation does: for a minibatch of
/// sequences of different lengths (in all tokens and in action tokens; make
/// one much shorter than the others, so that the forward pass would run them
/// as micro-batches of different sizes, see `agentrl::pg::length_buckets`),
/// all with advantage 1 and log-probs equal to
/// their sampling log-probs (ratio 1), the gradient of the loss with respect
/// to each action token's log-prob must be −1 / (B · C), with B the number of
/// sequences and C = `agentrl::grpo::MAX_ACTION_TOKENS`, and 0 on every other
/// token. Return `Err` with what differed otherwise.
pub fn check_normalisation(algorithm: &mut dyn Algorithm) -> Result<(), String> {
    todo!("Exercise 18.2: a two-sequence batch, the algorithm's loss, and the gradient it sends to logp")
}
