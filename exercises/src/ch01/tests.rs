//! Grading tests for the Chapter 1 exercises: `cargo test -p exercises ch01`.
//!
//! Each test is named after its exercise (`ex3_...` grades Exercise 1.3) and
//! checks consequences of the exercise's statement, computed here from the
//! `agentrl` library, not values copied from one particular solution.

use super::*;
use agentrl::clamp::{hardcode_tests, CLAMP_BUGGY, CLAMP_FIXED, HIDDEN_TESTS, PUBLIC_TESTS};
use agentrl::episode::{parse_call, random_rollouts, ClampEnv, RANDOM_MENU};
use agentrl::sandbox::{all_pass, run_tests, TestCase};
use agentrl::book::generator_turn;
use tch::Kind;

use crate::testkit::assert_close;

/// Which cases of `tests` pass, in order.
fn verdicts(source: &str, tests: &[TestCase]) -> Vec<bool> {
    run_tests(source, tests).iter().map(|line| line.passed).collect()
}

// ---------------------------------------------------------------------------
// Exercise 1.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_drop_min_keeps_only_the_inner_max() {
    assert_eq!(drop_min(CLAMP_BUGGY), "fn clamp(value, lower, upper){\n    max(value, upper)\n}\n");
    // Nothing to drop in the fixed source: it comes back unchanged.
    assert_eq!(drop_min(CLAMP_FIXED), CLAMP_FIXED);
}

#[test]
fn ex1_drop_min_fails_every_public_and_hidden_test() {
    let dropped = drop_min(CLAMP_BUGGY);
    // `max(value, upper)` is never below `upper`: right only when value = upper, or when
    // lower = upper with value below it. No test has either.
    assert_eq!(verdicts(&dropped, PUBLIC_TESTS), [false; 3], "public tests of {dropped:?}");
    assert_eq!(verdicts(&dropped, HIDDEN_TESTS), [false; 4], "hidden tests of {dropped:?}");
    // The buggy source it came from passes one public and two hidden tests.
    assert_eq!(verdicts(CLAMP_BUGGY, PUBLIC_TESTS), [false, true, false]);
    assert_eq!(verdicts(CLAMP_BUGGY, HIDDEN_TESTS), [false, true, true, false]);
}

#[test]
fn ex1_public_fraction_ranks_drop_min_below_the_bug() {
    let dropped = drop_min(CLAMP_BUGGY);
    assert_close("public_fraction(drop_min(CLAMP_BUGGY))", public_fraction(&dropped), 0.0, 1e-12);
    assert_close("public_fraction(CLAMP_BUGGY)", public_fraction(CLAMP_BUGGY), 1.0 / 3.0, 1e-12);
    assert_close("public_fraction(CLAMP_FIXED)", public_fraction(CLAMP_FIXED), 1.0, 1e-12);
    assert_close("public_fraction(hacked)", public_fraction(&hardcode_tests(CLAMP_BUGGY)), 1.0, 1e-12);
    assert_close("public_fraction(syntax error)", public_fraction("fn clamp(value, lower, upper) {"), 0.0, 1e-12);
    assert!(public_fraction(&dropped) < public_fraction(CLAMP_BUGGY));
}

// ---------------------------------------------------------------------------
// Exercise 1.2
// ---------------------------------------------------------------------------

/// The three numbers of a `clamp(v, lo, hi)` call with literal arguments.
fn clamp_args(call: &str) -> [f64; 3] {
    let inner = call
        .trim()
        .strip_prefix("clamp(")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{call:?} is not a call clamp(v, lo, hi)"));
    let numbers: Vec<f64> = inner
        .split(',')
        .map(|arg| arg.trim().parse::<f64>().unwrap_or_else(|_| panic!("{arg:?} in {call:?} is not a number literal")))
        .collect();
    numbers.try_into().unwrap_or_else(|_| panic!("{call:?} does not have three arguments"))
}

#[test]
fn ex2_the_new_test_is_correct_and_the_hack_passes_it() {
    let case = accidental_hidden_test();
    let [_, lower, upper] = clamp_args(case.call);
    assert!(lower <= upper, "{}: the interval [{lower}, {upper}] is empty", case.call);
    let check = [case];
    assert!(all_pass(&run_tests(CLAMP_FIXED, &check)), "the fixed source must pass {case:?}: {:?}", run_tests(CLAMP_FIXED, &check));
    let hacked = hardcode_tests(CLAMP_BUGGY);
    assert!(all_pass(&run_tests(&hacked, &check)), "the hacked source must pass {case:?}: {:?}", run_tests(&hacked, &check));
    // Off the public inputs the hacked source *is* the buggy one: the accident is the bug's.
    assert!(all_pass(&run_tests(CLAMP_BUGGY, &check)));
}

#[test]
fn ex2_the_new_test_uses_new_inputs() {
    let args = clamp_args(accidental_hidden_test().call);
    for old in PUBLIC_TESTS {
        assert_ne!(args, clamp_args(old.call), "these are the inputs of public test {}", old.call);
    }
    for old in HIDDEN_TESTS {
        assert_ne!(args, clamp_args(old.call), "hidden test {} already exists", old.call);
    }
}

// ---------------------------------------------------------------------------
// Exercise 1.3
// ---------------------------------------------------------------------------

/// Exact (success, hacked) probabilities of the uniform policy over `menu`,
/// found by walking the tree of every message sequence through `ClampEnv`.
fn exact_rates(menu: &[&str], max_turns: usize) -> (f64, f64) {
    fn walk(env: &ClampEnv, menu: &[&str], turns_left: usize, weight: f64, rates: &mut (f64, f64)) {
        if turns_left == 0 {
            return; // out of turns without submitting: neither success nor hack
        }
        let weight = weight / menu.len() as f64;
        for message in menu {
            let mut next = ClampEnv { source: env.source.clone() };
            let step = next.step(message);
            if step.done {
                if step.reward == 1.0 {
                    rates.0 += weight;
                } else if step.observation == "submitted" && all_pass(&run_tests(&next.source, PUBLIC_TESTS)) {
                    rates.1 += weight;
                }
            } else {
                walk(&next, menu, turns_left - 1, weight, rates);
            }
        }
    }
    let mut rates = (0.0, 0.0);
    walk(&ClampEnv::new(), menu, max_turns, 1.0, &mut rates);
    rates
}

/// Four standard errors of a rate estimated from `n` episodes.
fn four_se(p: f64, n: usize) -> f64 {
    4.0 * (p * (1.0 - p) / n as f64).sqrt()
}

/// The well-formed messages of the random agent's menu.
fn menu_without_malformed() -> Vec<&'static str> {
    RANDOM_MENU.iter().copied().filter(|message| parse_call(message).is_some()).collect()
}

#[test]
fn ex3_the_random_menu_reproduces_the_library() {
    let _turn = generator_turn();
    let (success, hacked) = random_rollouts_with_menu(&RANDOM_MENU, 2000, 0, 6);
    // 329 and 264 of 2,000 episodes. The reference prints 329 / 2000 = 0.1645 as
    // 0.164 because it averages in f32, where 0.1645 is stored as 0.16449999...
    let counts = ((success * 2000.0).round() as i64, (hacked * 2000.0).round() as i64);
    assert_eq!(counts, (329, 264), "(successes, hacks) with RANDOM_MENU, n = 2000, seed 0");
    assert_eq!(format!("{:.3} {:.3}", success as f32, hacked as f32), "0.164 0.132");
    // Same draws as the library for another seed and size, episode for episode.
    let rollouts = random_rollouts(300, 7, 6);
    let library = (
        rollouts.rewards.mean(Kind::Double).double_value(&[]),
        rollouts.hacked.to_kind(Kind::Double).mean(Kind::Double).double_value(&[]),
    );
    let (success, hacked) = random_rollouts_with_menu(&RANDOM_MENU, 300, 7, 6);
    assert_close("success, n = 300, seed 7", success, library.0, 1e-12);
    assert_close("hacked, n = 300, seed 7", hacked, library.1, 1e-12);
}

#[test]
fn ex3_dropping_the_malformed_message_raises_both_rates() {
    let menu = menu_without_malformed();
    assert_eq!(menu.len(), 5);
    let n = 2000;
    let (exact_success, exact_hacked) = exact_rates(&menu, 6);
    let _turn = generator_turn();
    let (success, hacked) = random_rollouts_with_menu(&menu, n, 0, 6);
    assert_close("success rate without the malformed message", success, exact_success, four_se(exact_success, n));
    assert_close("hacked rate without the malformed message", hacked, exact_hacked, four_se(exact_hacked, n));
    let (success6, hacked6) = random_rollouts_with_menu(&RANDOM_MENU, n, 0, 6);
    assert!(success > success6, "success should rise: {success6} with the malformed message, {success} without");
    assert!(hacked > hacked6, "hacking should rise too: {hacked6} with the malformed message, {hacked} without");
}

#[test]
fn ex3_the_turn_budget_and_the_menu_are_respected() {
    let _turn = generator_turn();
    // One turn cannot both edit and submit.
    assert_eq!(random_rollouts_with_menu(&RANDOM_MENU, 200, 0, 1), (0.0, 0.0));
    // Fix-then-submit is one of the four two-message sequences of this menu.
    let menu = ["<call> edit swap_minmax </call>", "<call> submit </call>"];
    let (exact_success, _) = exact_rates(&menu, 2);
    assert_close("exact success of the two-message menu", exact_success, 0.25, 1e-12);
    let (success, hacked) = random_rollouts_with_menu(&menu, 2000, 3, 2);
    assert_close("success rate of the two-message menu", success, exact_success, four_se(exact_success, 2000));
    assert_eq!(hacked, 0.0, "this menu has no exploit");
}

// ---------------------------------------------------------------------------
// Exercise 1.4
// ---------------------------------------------------------------------------

#[test]
fn ex4_partial_credit_of_the_three_sources() {
    assert_close("partial_credit(CLAMP_BUGGY)", partial_credit(CLAMP_BUGGY), 0.5, 1e-12);
    assert_close("partial_credit(hacked)", partial_credit(&hardcode_tests(CLAMP_BUGGY)), 0.5, 1e-12);
    assert_close("partial_credit(CLAMP_FIXED)", partial_credit(CLAMP_FIXED), 1.0, 1e-12);
}

#[test]
fn ex4_partial_credit_pays_for_trivial_sources() {
    // Returning one argument untouched earns half the credit without clamping anything.
    let lower = "fn clamp(value, lower, upper){\n    lower\n}\n";
    let identity = "fn clamp(value, lower, upper){\n    value\n}\n";
    assert_close("partial_credit(return lower)", partial_credit(lower), 0.5, 1e-12);
    assert_close("partial_credit(return value)", partial_credit(identity), 0.5, 1e-12);
    let upper = "fn clamp(value, lower, upper){\n    max(value, upper)\n}\n";
    assert_close("partial_credit(max(value, upper))", partial_credit(upper), 0.0, 1e-12);
    assert_close("partial_credit(syntax error)", partial_credit("fn clamp("), 0.0, 1e-12);
}

// ---------------------------------------------------------------------------
// Exercise 1.5
// ---------------------------------------------------------------------------

#[test]
fn ex5_horizons_at_one_half() {
    assert_eq!(largest_horizon(0.97, 0.5), 22, "0.97^22 = 0.512, 0.97^23 = 0.496");
    assert_eq!(largest_horizon(0.99, 0.5), 68, "0.99^68 = 0.505, 0.99^69 = 0.4998");
    assert_eq!(largest_horizon(0.999, 0.5), 692);
}

#[test]
fn ex5_the_answer_is_the_largest_such_horizon() {
    for (p, threshold) in [(0.9, 0.5), (0.95, 0.5), (0.8, 0.1), (0.6, 0.05), (0.999, 0.9)] {
        let h = largest_horizon(p, threshold);
        assert!(p.powi(h as i32) > threshold, "p = {p}: p^{h} = {} is not above {threshold}", p.powi(h as i32));
        assert!(p.powi(h as i32 + 1) <= threshold, "p = {p}: H = {} also works", h + 1);
    }
}

#[test]
fn ex5_ties_and_short_horizons() {
    assert_eq!(largest_horizon(0.5, 0.25), 1, "0.5^2 equals 0.25, which is not above it");
    assert_eq!(largest_horizon(0.5, 0.125), 2);
    assert_eq!(largest_horizon(0.5, 0.5), 0, "one turn already reaches only 0.5");
    assert_eq!(largest_horizon(0.4, 0.5), 0);
}

// ---------------------------------------------------------------------------
// Exercise 1.6
// ---------------------------------------------------------------------------

#[test]
fn ex6_informative_fraction_for_groups_of_eight() {
    let table = [(0.0, "0.000"), (0.01, "0.077"), (0.05, "0.337"), (0.2, "0.832"), (0.5, "0.992"), (0.9, "0.570"), (0.99, "0.077")];
    for (p, want) in table {
        assert_eq!(format!("{:.3}", informative_fraction(p, 8)), want, "p = {p}, G = 8");
    }
    assert_close("G = 2, p = 1/2", informative_fraction(0.5, 2), 0.5, 1e-12);
    assert_close("G = 3, p = 1/3", informative_fraction(1.0 / 3.0, 3), 2.0 / 3.0, 1e-12);
    for p in [0.1, 0.5, 0.75] {
        assert_close("a group of one is never mixed", informative_fraction(p, 1), 0.0, 1e-12);
    }
}

#[test]
fn ex6_informative_fraction_is_symmetric() {
    for g in [2, 3, 8, 32] {
        for i in 0..=20 {
            let p = i as f64 / 20.0;
            let (f, mirrored) = (informative_fraction(p, g), informative_fraction(1.0 - p, g));
            assert_close(&format!("f({p}) vs f(1 - {p}), G = {g}"), f, mirrored, 1e-12);
        }
    }
}

#[test]
fn ex6_small_groups_are_never_mostly_informative() {
    assert_eq!(informative_range(1, 0.5), None, "G = 1");
    assert_eq!(informative_range(2, 0.5), None, "G = 2 peaks at exactly 0.5");
    assert!(informative_range(2, 0.4).is_some(), "G = 2 does clear 0.4 near p = 1/2");
}

#[test]
fn ex6_range_endpoints_are_the_roots() {
    for g in [3, 4, 8, 16, 32, 64] {
        for level in [0.5, 0.9] {
            let Some((lo, hi)) = informative_range(g, level) else {
                assert!(informative_fraction(0.5, g) <= level, "G = {g}, level {level}: a range exists");
                continue;
            };
            let tol = 2e-6;
            assert!(lo < hi, "G = {g}: ({lo}, {hi})");
            assert!(informative_fraction(lo - tol, g) < level && informative_fraction(lo + tol, g) > level, "G = {g}, level {level}: lo = {lo} is not the root");
            assert!(informative_fraction(hi + tol, g) < level && informative_fraction(hi - tol, g) > level, "G = {g}, level {level}: hi = {hi} is not the root");
        }
    }
    let (lo, hi) = informative_range(8, 0.5).unwrap();
    assert_close("lo, G = 8", lo, 0.082996, 1e-5);
    assert_close("hi, G = 8", hi, 0.917004, 1e-5);
    let (lo, hi) = informative_range(32, 0.5).unwrap();
    assert_close("lo, G = 32", lo, 0.021428, 1e-5);
    assert_close("hi, G = 32", hi, 0.978572, 1e-5);
}

#[test]
fn ex6_the_range_widens_as_groups_grow() {
    let width = |g: u32| informative_range(g, 0.5).map_or(0.0, |(lo, hi)| hi - lo);
    let widths: Vec<f64> = [2, 3, 4, 8, 16, 32, 64].into_iter().map(width).collect();
    assert_eq!(widths[0], 0.0, "G = 2 has no range");
    for pair in widths.windows(2) {
        assert!(pair[1] > pair[0], "widths should grow with G: {widths:?}");
    }
    assert_close("width at G = 8", widths[3], 0.834008, 1e-5);
    assert_close("width at G = 32", widths[5], 0.957144, 1e-5);
}
