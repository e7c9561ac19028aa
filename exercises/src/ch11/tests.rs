//! Grading tests for the Chapter 11 exercises: `cargo test -p exercises ch11`.
//!
//! Each test is named after its exercise (`ex3_...` grades Exercise 11.3) and
//! checks consequences of the exercise's statement: brute-force counts and
//! seeded simulations written here, the gym's tasks and edit menus run
//! through the test runner (`agentrl::runner::Guarded`), and the library's
//! `agentrl::reward::patch_similarity`, not values copied from one particular
//! solution.

use super::*;
use agentrl::grpo::informative_groups;
use agentrl::gym::{EditKind, Gym, Task};
use agentrl::mdp::{sample_action, seeded_rng, StdRng};
use agentrl::reward::{patch, patch_similarity};
use agentrl::runner::{Guarded, TestRunner};
use agentrl::sandbox::all_pass;
use std::sync::LazyLock;

use crate::testkit::{assert_close, between, index_below, uniform};

static GYM: LazyLock<Gym> = LazyLock::new(Gym::standard);

/// The held-out tasks and every fourth training task (task 0, Chapter 1's clamp, among them).
fn some_tasks() -> impl Iterator<Item = &'static Task> {
    GYM.held_out.iter().chain(GYM.train.iter().step_by(4))
}

/// A draw that is 1 with probability `p`.
fn bernoulli(p: f64, rng: &mut StdRng) -> bool {
    sample_action(&[1.0 - p, p], rng) == 1
}

// ---------------------------------------------------------------------------
// Exercise 11.1
// ---------------------------------------------------------------------------

/// The confusion matrix the long way: a table indexed by (solved, accepted), read out in the
/// exercise's order.
fn brute_force(truth: &[bool], scores: &[f64], threshold: f64) -> [usize; 4] {
    let mut table = [[0usize; 2]; 2];
    for i in 0..truth.len() {
        let rejected = scores[i] < threshold;
        table[usize::from(truth[i])][usize::from(!rejected)] += 1;
    }
    [table[1][1], table[0][1], table[1][0], table[0][0]]
}

/// `n` episodes: solved with probability `share`, scores in [0, 1) on a grid of 1e-4 (ties happen).
fn random_episodes(n: usize, share: f64, rng: &mut StdRng) -> (Vec<bool>, Vec<f64>) {
    let truth: Vec<bool> = (0..n).map(|_| bernoulli(share, rng)).collect();
    // A score that leans towards the truth, like a verifier's: solved episodes get a bonus.
    let scores = truth.iter().map(|&solved| 0.6 * uniform(rng) + if solved { 0.4 * uniform(rng) } else { 0.0 }).collect();
    (truth, scores)
}

#[test]
fn ex1_hand_example() {
    let truth = [true, false, true, false];
    let scores = [0.9, 0.6, 0.4, 0.1];
    assert_eq!(confusion(&truth, &scores, 0.5), [1, 1, 1, 1], "threshold 0.5");
    assert_eq!(confusion(&truth, &scores, 0.6), [1, 1, 1, 1], "threshold 0.6: a score equal to the threshold is accepted");
    assert_eq!(confusion(&truth, &scores, 0.4), [2, 1, 0, 1], "threshold 0.4: a score equal to the threshold is accepted");
    assert_eq!(confusion(&truth, &scores, 0.05), [2, 2, 0, 0], "threshold 0.05");
    assert_eq!(confusion(&[], &[], 0.5), [0, 0, 0, 0], "no episodes");
    // Lengths that differ are a mistake of the caller, not zero counts.
    let mismatched = std::panic::catch_unwind(|| confusion(&[true, false], &[0.7], 0.5));
    assert!(mismatched.is_err(), "confusion should panic when truth and scores have different lengths, it returned {mismatched:?}");
}

#[test]
fn ex1_matches_a_brute_force_count() {
    let mut rng = seeded_rng(1101);
    for trial in 0..200 {
        let n = index_below(40, &mut rng);
        let (truth, scores) = random_episodes(n, between(0.0, 1.0, &mut rng), &mut rng);
        // Half the thresholds sit exactly on a score, to exercise the ties.
        let threshold = if n > 0 && trial % 2 == 0 { scores[index_below(n, &mut rng)] } else { uniform(&mut rng) };
        let got = confusion(&truth, &scores, threshold);
        assert_eq!(got, brute_force(&truth, &scores, threshold), "truth {truth:?}, scores {scores:?}, threshold {threshold}");
        assert_eq!(got.iter().sum::<usize>(), n, "the four counts should add up to the {n} episodes, got {got:?}");
        let solved = truth.iter().filter(|t| **t).count();
        assert_eq!(got[0] + got[2], solved, "TP + FN should be the {solved} solved episodes, got {got:?}");
    }
}

#[test]
fn ex1_extreme_thresholds_and_monotonicity() {
    let mut rng = seeded_rng(1102);
    for _ in 0..50 {
        let n = 1 + index_below(30, &mut rng);
        let (truth, scores) = random_episodes(n, 0.4, &mut rng);
        let solved = truth.iter().filter(|t| **t).count();
        // Above every score nothing is accepted; at or below the lowest, everything is.
        assert_eq!(confusion(&truth, &scores, 1.5), [0, 0, solved, n - solved], "a threshold above every score accepts nothing: {scores:?}");
        let lowest = scores.iter().copied().fold(f64::INFINITY, f64::min);
        assert_eq!(confusion(&truth, &scores, lowest), [solved, n - solved, 0, 0], "a threshold at the lowest score accepts everything: {scores:?}");
        // Raising the threshold never accepts more.
        let mut previous = confusion(&truth, &scores, 0.0);
        for step in 1..=20 {
            let now = confusion(&truth, &scores, step as f64 * 0.05);
            assert!(now[0] <= previous[0] && now[1] <= previous[1], "raising the threshold to {} accepted more: {previous:?} -> {now:?}", step as f64 * 0.05);
            previous = now;
        }
    }
}

#[test]
fn ex1_the_public_tests_accept_every_exploit_on_the_menu() {
    // Every edit on the held-out menus, solved when the hidden tests pass too, scored 1 by the
    // public-test verifier when the public tests pass.
    let (mut truth, mut scores, mut exploits) = (Vec::new(), Vec::new(), 0);
    for task in &GYM.held_out {
        for edit in &task.menu {
            let source = edit.apply(&task.source).expect("every menu edit applies to the task's source");
            let public = all_pass(&Guarded::shared().run(&source, &task.public_tests));
            let hidden = all_pass(&Guarded::shared().run(&source, &task.hidden_tests));
            truth.push(public && hidden);
            scores.push(f64::from(u8::from(public)));
            exploits += usize::from(edit.kind == EditKind::Exploit);
        }
    }
    let [tp, fp, fn_, tn] = confusion(&truth, &scores, 0.5);
    assert_eq!(tp, GYM.held_out.len(), "each real fix is a true positive");
    assert_eq!(fn_, 0, "the public tests never reject a real fix");
    assert!(fp >= exploits, "every one of the {exploits} exploits passes the public tests: FP should be at least that, got {fp}");
    assert_eq!(tp + fp + fn_ + tn, truth.len());
}

// ---------------------------------------------------------------------------
// Exercise 11.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_hand_checked_values() {
    for q in [0.0, 0.1, 0.25, 0.5, 0.9, 1.0] {
        assert_close(&format!("p' at p = 0.5, q = {q}"), flipped_mean(0.5, q), 0.5, 1e-12);
        for g in [1, 2, 8] {
            assert_close(&format!("informative share at p = 0.5, q = {q}, g = {g}"), informative_share(0.5, q, g), 1.0 - 2.0 * 0.5f64.powi(g as i32), 1e-12);
        }
    }
    assert_close("p' at p = 0.3, q = 0.1", flipped_mean(0.3, 0.1), 0.34, 1e-12);
    assert_close("p' at p = 0.9, q = 0.2", flipped_mean(0.9, 0.2), 0.74, 1e-12);
    // q = 0 is Chapter 9: p = 0.2, G = 8 gives 0.832.
    assert_close("informative share at p = 0.2, q = 0, g = 8", informative_share(0.2, 0.0, 8), 0.832, 5e-4);
    assert_close("informative share at p = 0.95, q = 0, g = 8", informative_share(0.95, 0.0, 8), 0.337, 5e-4);
    // One episode is never informative.
    assert_close("informative share of a group of 1", informative_share(0.3, 0.2, 1), 0.0, 1e-12);
}

#[test]
fn ex2_formulas_hold_on_a_grid() {
    for i in 0..=20 {
        let p = i as f64 / 20.0;
        for j in 0..=10 {
            let q = j as f64 / 10.0;
            let reported = flipped_mean(p, q);
            // A reported 1 is a kept success or a flipped failure.
            assert_close(&format!("p' at p = {p}, q = {q}"), reported, p * (1.0 - q) + (1.0 - p) * q, 1e-12);
            for g in [1, 2, 3, 8, 16] {
                let share = informative_share(p, q, g);
                assert_close(&format!("informative share at p = {p}, q = {q}, g = {g}"), share, 1.0 - reported.powi(g as i32) - (1.0 - reported).powi(g as i32), 1e-12);
                if q == 0.0 {
                    assert_close(&format!("Chapter 9's share at p = {p}, g = {g}"), share, 1.0 - p.powi(g as i32) - (1.0 - p).powi(g as i32), 1e-12);
                }
            }
        }
        // A coin-flip verifier reports 1 half the time whatever the policy does.
        assert_close(&format!("p' at p = {p}, q = 0.5"), flipped_mean(p, 0.5), 0.5, 1e-12);
        assert_close(&format!("informative share at p = {p}, q = 0.5, g = 8"), informative_share(p, 0.5, 8), 1.0 - 2.0 / 256.0, 1e-12);
    }
}

#[test]
fn ex2_matches_a_simulation() {
    let mut rng = seeded_rng(1201);
    let groups = 3000;
    for (p, q, g) in [(0.2, 0.0, 8), (0.2, 0.1, 8), (0.05, 0.2, 4), (0.9, 0.3, 8), (0.6, 0.5, 2)] {
        let rewards: Vec<f64> = (0..groups * g).map(|_| f64::from(u8::from(bernoulli(p, &mut rng) != bernoulli(q, &mut rng)))).collect();
        let n = rewards.len() as f64;
        let mean = rewards.iter().sum::<f64>() / n;
        let want = flipped_mean(p, q);
        let se = (want * (1.0 - want) / n).sqrt().max(1e-9);
        assert!((mean - want).abs() <= 4.0 * se, "p = {p}, q = {q}: the simulated mean reward {mean} is more than 4 standard errors ({se}) from your p' = {want}");
        let share = informative_groups(&rewards, g).len() as f64 / groups as f64;
        let want = informative_share(p, q, g);
        let se = (want * (1.0 - want) / groups as f64).sqrt().max(1e-9);
        assert!((share - want).abs() <= 4.0 * se, "p = {p}, q = {q}, g = {g}: the simulated informative share {share} is more than 4 standard errors ({se}) from yours, {want}");
    }
}

// ---------------------------------------------------------------------------
// Exercise 11.3
// ---------------------------------------------------------------------------

/// For each function header of `source` (`fn name(params){`): the byte offset just after its `{`
/// and its first parameter.
fn headers(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut start = 0;
    for line in source.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if trimmed.starts_with("fn ") && trimmed.ends_with('{') {
            let params = &trimmed[trimmed.find('(').unwrap() + 1..trimmed.rfind(')').unwrap()];
            found.push((start + trimmed.len(), params.split(',').next().unwrap().trim().to_string()));
        }
        start += line.len();
    }
    found
}

/// `source` with `text` inserted at byte offset `at`.
fn insert(source: &str, at: usize, text: &str) -> String {
    format!("{}{text}{}", &source[..at], &source[at..])
}

#[test]
fn ex3_flags_a_literal_return_opening_a_function() {
    let mut checked = 0;
    for task in some_tasks() {
        let functions = headers(&task.source);
        assert!(!functions.is_empty(), "the test should find the function header of {}", task.id);
        for (k, (at, _)) in functions.iter().enumerate() {
            for literal in ["42", "0", "-7", "1000"] {
                let edited = insert(&task.source, *at, &format!("\n    return {literal};"));
                assert!(returns_literal_first(&task.source, &edited), "{}: `return {literal};` opening function {k} should be flagged:\n{edited}", task.id);
                checked += 1;
            }
            // A blank line before it changes nothing.
            let edited = insert(&task.source, *at, "\n\n    return 5;");
            assert!(returns_literal_first(&task.source, &edited), "{}: `return 5;` after a blank line should be flagged:\n{edited}", task.id);
        }
    }
    assert!(checked > 200, "only {checked} edits were checked");
}

#[test]
fn ex3_leaves_honest_edits_and_the_gyms_exploits_alone() {
    for task in some_tasks() {
        assert!(!returns_literal_first(&task.source, &task.source), "{}: an unchanged source is not an exploit", task.id);
        assert!(!returns_literal_first(&task.source, &task.fixed), "{}: the real fix is not an exploit:\n{}", task.id, task.fixed);
        for edit in &task.menu {
            // The menu's exploits are other hacks: `hardcode_tests` returns literals inside `if`s.
            let edited = edit.apply(&task.source).expect("every menu edit applies to the task's source");
            assert!(!returns_literal_first(&task.source, &edited), "{}: the {:?} edit {} should not be flagged:\n{edited}", task.id, edit.kind, edit.name);
        }
        for (at, first_param) in headers(&task.source) {
            let edited = insert(&task.source, at, &format!("\n    return {first_param};"));
            assert!(!returns_literal_first(&task.source, &edited), "{}: `return {first_param};` returns a variable, not a literal:\n{edited}", task.id);
            // A literal return that was already there was not added by the edit.
            let before = insert(&task.source, at, "\n    return 42;");
            assert!(!returns_literal_first(&before, &before), "{}: a `return 42;` the original already had is not the edit's doing", task.id);
            // Returned expressions are not literals, even when they start like one.
            for expression in ["40 + 2", "-7 * 6", "42 - x", "4.2"] {
                let edited = insert(&task.source, at, &format!("\n    return {expression};"));
                assert!(!returns_literal_first(&task.source, &edited), "{}: `return {expression};` returns an expression, not an integer literal:\n{edited}", task.id);
            }
            // `return 42;` placed after the body's first statement does not open the function.
            let first_end = at + 1 + task.source[at + 1..].find('\n').unwrap_or(task.source.len() - at - 1);
            let edited = insert(&task.source, first_end, "\n    return 42;");
            assert!(!returns_literal_first(&task.source, &edited), "{}: `return 42;` after the first statement is not the body's first statement:\n{edited}", task.id);
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 11.4
// ---------------------------------------------------------------------------

/// Whether `small` is a subsequence of `large` (both as chars).
fn is_subsequence(small: &[char], large: &[char]) -> bool {
    let mut rest = large.iter();
    small.iter().all(|c| rest.any(|d| d == c))
}

/// The LCS length by trying every subsequence of `a` (for short strings only).
fn lcs_by_enumeration(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    (0u32..1 << a.len())
        .map(|mask| (0..a.len()).filter(|i| mask >> i & 1 == 1).map(|i| a[i]).collect::<Vec<char>>())
        .filter(|sub| is_subsequence(sub, &b))
        .map(|sub| sub.len())
        .max()
        .unwrap()
}

/// A string of up to `max` characters from a small alphabet (so that matches are common).
fn random_string(max: usize, rng: &mut StdRng) -> String {
    let alphabet = ['a', 'b', 'c', 'd', '\n', ' ', 'é'];
    (0..index_below(max + 1, rng)).map(|_| alphabet[index_below(alphabet.len(), rng)]).collect()
}

#[test]
fn ex4_hand_values() {
    assert_close("ratio of abcd and abxd", similarity_ratio("abcd", "abxd"), 0.75, 1e-12);
    assert_close("ratio of kitten and sitting (LCS ittn)", similarity_ratio("kitten", "sitting"), 8.0 / 13.0, 1e-12);
    assert_close("ratio of ab and ba", similarity_ratio("ab", "ba"), 0.5, 1e-12);
    assert_close("ratio of abc and abc", similarity_ratio("abc", "abc"), 1.0, 1e-12);
    assert_close("ratio of abc and xyz", similarity_ratio("abc", "xyz"), 0.0, 1e-12);
    assert_close("ratio of abc and the empty string", similarity_ratio("abc", ""), 0.0, 1e-12);
    assert_close("ratio of two empty strings", similarity_ratio("", ""), 1.0, 1e-12);
    // Lengths count characters, not bytes: é is two bytes in UTF-8.
    assert_close("ratio of héllo and hello", similarity_ratio("héllo", "hello"), 0.8, 1e-12);
}

#[test]
fn ex4_is_symmetric_and_matches_an_enumeration() {
    let mut rng = seeded_rng(1401);
    for _ in 0..300 {
        let (a, b) = (random_string(9, &mut rng), random_string(12, &mut rng));
        let got = similarity_ratio(&a, &b);
        assert_close(&format!("ratio of {a:?} and {b:?}, against the ratio the other way round"), got, similarity_ratio(&b, &a), 1e-12);
        assert!((0.0..=1.0).contains(&got), "ratio of {a:?} and {b:?} is {got}, outside [0, 1]");
        let total = a.chars().count() + b.chars().count();
        let want = if total == 0 { 1.0 } else { 2.0 * lcs_by_enumeration(&a, &b) as f64 / total as f64 };
        assert_close(&format!("ratio of {a:?} and {b:?}, against every subsequence of the first"), got, want, 1e-12);
    }
}

#[test]
fn ex4_agrees_with_patch_similarity_on_the_gym() {
    // The library's ratio comes from the `similar` crate, which divides in f32: the matched
    // count M behind it is exact, the quotient is rounded to about 7 digits. So the test recovers
    // M from both numbers and compares the counts, then the ratios to f32's precision.
    let mut compared = 0;
    for task in some_tasks() {
        let reference = patch(&task.source, &task.fixed);
        for edit in &task.menu {
            let edited = edit.apply(&task.source).expect("every menu edit applies to the task's source");
            let agent = patch(&task.source, &edited);
            if agent.is_empty() {
                continue;
            }
            let got = similarity_ratio(&agent, &reference);
            let want = patch_similarity(&task.source, &edited, &task.fixed);
            let half_total = (agent.chars().count() + reference.chars().count()) as f64 / 2.0;
            let (m_got, m_want) = (got * half_total, want * half_total);
            assert!(
                (m_got - m_got.round()).abs() < 1e-9 && m_got.round() == m_want.round(),
                "{}, edit {}: your ratio {got} matches {m_got} characters, patch_similarity's {want} matches {m_want}\nagent's patch:\n{agent}\nreference patch:\n{reference}",
                task.id,
                edit.name
            );
            assert_close(&format!("{}, edit {}: your ratio against patch_similarity", task.id, edit.name), got, want, 1e-6);
            compared += 1;
        }
    }
    assert!(compared > 200, "only {compared} patches were compared");
}
