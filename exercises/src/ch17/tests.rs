//! Grading tests for the Chapter 17 exercises: `cargo test -p exercises ch17`.
//!
//! Each test is named after its exercise (`ex2_...` grades Exercise 17.2)
//! and checks hand-checked values, extreme inputs, exact expectations, and
//! agreement with the library (`agentrl::evaluation`).

use super::*;
use agentrl::evaluation;

use crate::testkit::assert_close;

/// C(n, k) as an f64, for the small n of the hand checks.
fn choose(n: usize, k: usize) -> f64 {
    if k > n {
        return 0.0;
    }
    (0..k).map(|i| (n - i) as f64 / (k - i) as f64).product()
}

/// P(c successes among n) for a task with success rate p.
fn binomial(n: usize, c: usize, p: f64) -> f64 {
    choose(n, c) * p.powi(c as i32) * (1.0 - p).powi((n - c) as i32)
}

// ---------------------------------------------------------------------------
// Exercise 17.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_hand_values() {
    // 4 samples, 1 success, k = 2: the pair misses the success in C(3,2) = 3 of C(4,2) = 6 draws.
    assert_close("pass@2, n = 4, c = 1", pass_at_k(4, 1, 2), 0.5, 1e-12);
    assert_close("pass@1 is the success rate", pass_at_k(10, 3, 1), 0.3, 1e-12);
    assert_close("no success", pass_at_k(10, 0, 5), 0.0, 1e-12);
    // Fewer than k failures: every draw of k holds a success.
    assert_close("n − c < k", pass_at_k(10, 8, 3), 1.0, 1e-12);
    assert_close("k = n with one success", pass_at_k(7, 1, 7), 1.0, 1e-12);
}

#[test]
fn ex1_is_unbiased() {
    // Averaged over the binomial distribution of c, the estimate is exactly 1 − (1 − p)^k.
    for &(n, k, p) in &[(8usize, 3usize, 0.2f64), (12, 5, 0.05), (6, 6, 0.5)] {
        let expected: f64 = (0..=n).map(|c| binomial(n, c, p) * pass_at_k(n, c, k)).sum();
        assert_close(&format!("E[estimate], n = {n}, k = {k}, p = {p}"), expected, 1.0 - (1.0 - p).powi(k as i32), 1e-12);
    }
}

#[test]
fn ex1_large_n_and_the_library() {
    // C(2000, 1000) is about 1e600 and overflows an f64; the estimate does not.
    let got = pass_at_k(2000, 10, 1000);
    assert!(got.is_finite() && (0.0..=1.0).contains(&got), "pass@1000 of 2000 samples with 10 successes: {got}");
    for &(n, c, k) in &[(2000usize, 10usize, 1000usize), (2000, 10, 100), (200, 3, 50), (64, 0, 64), (64, 64, 1), (33, 17, 16)] {
        assert_close(&format!("n = {n}, c = {c}, k = {k}"), pass_at_k(n, c, k), evaluation::pass_at_k(n, c, k), 1e-12);
    }
}

// ---------------------------------------------------------------------------
// Exercise 17.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_hand_values() {
    // 4 samples, 2 successes, k = 2: both drawn are successes in 1 of C(4,2) = 6 draws.
    assert_close("pass^2, n = 4, c = 2", pass_hat_k(4, 2, 2), 1.0 / 6.0, 1e-12);
    assert_close("pass^1 is the success rate", pass_hat_k(10, 3, 1), 0.3, 1e-12);
    assert_close("c < k", pass_hat_k(10, 2, 3), 0.0, 1e-12);
    assert_close("all succeed", pass_hat_k(9, 9, 9), 1.0, 1e-12);
}

#[test]
fn ex2_is_unbiased_where_the_plug_in_is_not() {
    for &(n, k, p) in &[(8usize, 3usize, 0.6f64), (10, 4, 0.9), (5, 2, 0.3)] {
        let expected: f64 = (0..=n).map(|c| binomial(n, c, p) * pass_hat_k(n, c, k)).sum();
        assert_close(&format!("E[estimate], n = {n}, k = {k}, p = {p}"), expected, p.powi(k as i32), 1e-12);
        // (c/n)^k is convex in c, so the plug-in is too high on average.
        let plug_in: f64 = (0..=n).map(|c| binomial(n, c, p) * (c as f64 / n as f64).powi(k as i32)).sum();
        assert!(plug_in > p.powi(k as i32) + 1e-6, "the plug-in should be biased upwards");
    }
}

#[test]
fn ex2_matches_the_library() {
    for &(n, c, k) in &[(2000usize, 1990usize, 100usize), (64, 40, 8), (64, 3, 4), (16, 16, 16)] {
        assert_close(&format!("n = {n}, c = {c}, k = {k}"), pass_hat_k(n, c, k), evaluation::pass_hat_k(n, c, k), 1e-12);
    }
}

// ---------------------------------------------------------------------------
// Exercise 17.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_hand_values() {
    // Six words give two 5-grams; changing the last word keeps one of them: 1 / 3.
    assert_close("one gram shared of three", five_gram_jaccard("a b c d e f", "a b c d e g"), 1.0 / 3.0, 1e-12);
    assert_close("same text", five_gram_jaccard("fn f(x) { x + 1 }", "fn f(x) { x + 1 }"), 1.0, 1e-12);
    // White space only separates: re-spacing changes nothing.
    assert_close("re-spaced", five_gram_jaccard("let  x = a+b;", "let x=a + b ;"), 1.0, 1e-12);
    // Punctuation is a word: `a+b` is three words, so this text has five words and one gram.
    assert_close("short texts are one gram", five_gram_jaccard("x = a+b", "x = a-b"), 0.0, 1e-12);
    assert_close("no words", five_gram_jaccard("", "   "), 1.0, 1e-12);
}

#[test]
fn ex3_a_renamed_copy_is_near_and_an_unrelated_program_is_not() {
    let original = "fn total(xs) {\n    let s = 0;\n    for x in xs { s += x; }\n    s\n}";
    let renamed = "fn total(ys) {\n    let s = 0;\n    for y in ys { s += y; }\n    s\n}";
    let other = "fn max_of(a, b) { if a > b { a } else { b } }";
    let near = five_gram_jaccard(original, renamed);
    assert!(near > 0.1 && near < 1.0, "a renamed copy shares some grams: {near}");
    assert!(five_gram_jaccard(original, other) < 0.05, "unrelated programs share (almost) none");
    assert_eq!(five_gram_jaccard(original, renamed), five_gram_jaccard(renamed, original), "symmetric");
}

#[test]
fn ex3_matches_the_library() {
    // `leaks` with threshold 0 reports the most similar training text and its similarity.
    let train = vec!["fn f(a, b) { if a < b { a } else { b } }".to_string(), "let x = 1; let y = 2; x + y".to_string()];
    for held in ["fn f(a, b) { if a > b { a } else { b } }", "let x = 1; let y = 3; x * y", "fn g(n) { n * 2 }"] {
        let found = evaluation::leaks(&train, &[held.to_string()], 0.0);
        let best = train.iter().map(|t| five_gram_jaccard(t, held)).fold(0.0, f64::max);
        assert_eq!(found.len(), 1);
        assert_close(held, best, found[0].similarity, 1e-12);
    }
}
