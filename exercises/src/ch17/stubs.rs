//! Chapter 17 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch17`.
//!
//! The tests compare your answers with hand-checked values, with extreme
//! inputs, with exact expectations, and with the library
//! (`agentrl::evaluation`). Do not call the function an exercise is checked against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

// ---------------------------------------------------------------------------
// Exercise 17.1: the unbiased pass@k, computed stably
// ---------------------------------------------------------------------------

/// Exercise 17.1: the unbiased estimate of pass@k from `n` samples of which
/// `c` succeeded, 1 − C(n−c, k) / C(n, k), for 0 ≤ c ≤ n and 1 ≤ k ≤ n. It must
/// stay accurate for n in the thousands, where the binomials overflow an f64.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    todo!("Exercise 17.1: the ratio of binomials as a product of factors between 0 and 1")
}

// ---------------------------------------------------------------------------
// Exercise 17.2: the unbiased pass^k
// ---------------------------------------------------------------------------

/// Exercise 17.2: the unbiased estimate of pass^k, the chance that `k`
/// samples drawn without replacement from the `n` are all successes, when
/// `c` of the `n` succeeded (0 ≤ c ≤ n, 1 ≤ k ≤ n).
pub fn pass_hat_k(n: usize, c: usize, k: usize) -> f64 {
    todo!("Exercise 17.2: C(c, k) / C(n, k) as a product of k factors")
}

// ---------------------------------------------------------------------------
// Exercise 17.3: near-duplicate detection
// ---------------------------------------------------------------------------

/// Exercise 17.3: the Jaccard similarity |A ∩ B| / |A ∪ B| of the sets of
/// word 5-grams of two texts. Words are maximal runs of letters, digits and
/// `_`; every other character that is not white space is a word of its own
/// (so `a+b` is three words); white space only separates. A 5-gram is five
/// consecutive words; a text of fewer than five words has one gram, all its
/// words. Two texts with no words at all have similarity 1.
pub fn five_gram_jaccard(a: &str, b: &str) -> f64 {
    todo!("Exercise 17.3: split into words, collect the 5-grams of each text in a set, then |A ∩ B| / |A ∪ B|")
}
