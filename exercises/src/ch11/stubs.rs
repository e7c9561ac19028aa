//! Chapter 11 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch11`.
//!
//! The tests compare your answers with brute-force counts and simulations
//! written in the tests, with the gym's tasks and edit menus
//! (`agentrl::gym::Gym::standard`) run through the test runner, and with
//! `agentrl::reward::patch_similarity`. The answers themselves are plain
//! Rust on slices and strings; do not call the function an exercise is
//! checked against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

// ---------------------------------------------------------------------------
// Exercise 11.1: a verifier's confusion matrix
// ---------------------------------------------------------------------------

/// Exercise 11.1: the confusion matrix of a verifier against the ground
/// truth. Episode $i$ is truly solved when `truth[i]` is true, and the
/// verifier gives it the score `scores[i]`; the verifier *accepts* the
/// episode when `scores[i] >= threshold`. Return the four counts
///
/// `[true positives, false positives, false negatives, true negatives]`:
/// accepted and solved, accepted but not solved, rejected but solved, and
/// rejected and not solved. They add up to the number of episodes. Panic if
/// `truth` and `scores` have different lengths.
pub fn confusion(truth: &[bool], scores: &[f64], threshold: f64) -> [usize; 4] {
    todo!("Exercise 11.1: count the four outcomes of score >= threshold against the truth")
}

// ---------------------------------------------------------------------------
// Exercise 11.2: a flaky verifier
// ---------------------------------------------------------------------------

/// Exercise 11.2 (first half): the expected reward of an episode under a
/// flaky verifier. The episode succeeds with probability `p` (true reward 1,
/// otherwise 0); the verifier reports the true reward, but flips it
/// ($1 \leftrightarrow 0$) with probability `flip`, independently of the
/// outcome. Return the probability $p'$ that the reported reward is 1.
pub fn flipped_mean(p: f64, flip: f64) -> f64 {
    todo!("Exercise 11.2: the probability that the flaky verifier reports 1")
}

/// Exercise 11.2 (second half): the probability that a group of `g`
/// episodes ($g \ge 1$, independent, each with success probability `p`) is
/// *informative* when every reward passes through the flaky verifier of
/// [`flipped_mean`] (flip probability `flip`, independently per episode): that
/// its reported rewards are not all equal. With `flip = 0` this is Chapter 9's
/// $1 - p^G - (1 - p)^G$.
pub fn informative_share(p: f64, flip: f64, g: usize) -> f64 {
    todo!("Exercise 11.2: one minus the probability that all g reported rewards agree")
}

// ---------------------------------------------------------------------------
// Exercise 11.3: a monitor for an exploit the gym does not have
// ---------------------------------------------------------------------------

/// Exercise 11.3: an exploit monitor for early literal returns. Return true
/// when the edit from `original` to `edited` made the first statement of a
/// function body a line `return <integer literal>;`, for instance
/// `    return 42;` or `    return -7;` (a decimal integer, optionally
/// negative; spaces around it do not matter), and false otherwise.
///
/// A function header is a line that starts with `fn ` and ends with `{`
/// (leading and trailing spaces aside), as the gym writes them; the first
/// statement of its body is the next line that is not blank. Only what the
/// edit added counts: a function whose first statement was already that
/// same line in `original` is not flagged. A `return` of anything other
/// than an integer literal (a variable, an expression) is not flagged.
pub fn returns_literal_first(original: &str, edited: &str) -> bool {
    todo!("Exercise 11.3: find function bodies of `edited` that now open with `return <integer>;`")
}

// ---------------------------------------------------------------------------
// Exercise 11.4: the similarity ratio
// ---------------------------------------------------------------------------

/// Exercise 11.4: the similarity ratio of two strings,
/// $$\frac{2M}{|x| + |y|},$$
/// where $|x|$ and $|y|$ are their lengths in characters (`char`s, not
/// bytes) and $M$ is the length of a longest common subsequence of their
/// characters (characters of both, in the same order, not necessarily
/// adjacent). Two empty strings have ratio 1. This is the ratio with which
/// `agentrl::reward::patch_similarity` compares the agent's patch with the
/// reference patch.
pub fn similarity_ratio(a: &str, b: &str) -> f64 {
    todo!("Exercise 11.4: 2 * LCS length / total length, by dynamic programming")
}
