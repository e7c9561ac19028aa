//! Chapter 1: reference solutions. The model answers, with the numbers these
//! functions produce, are in `chapters/answers-01.md`.

use agentrl::clamp::{HIDDEN_TESTS, PUBLIC_TESTS};
use agentrl::episode::run_episode;
use agentrl::sandbox::{all_pass, run_tests, TestCase};
use tch::{Device, Kind, Tensor};

/// The fraction of `tests` that `source` passes. A source that does not
/// compile yields one `FAIL load error` line, so it scores 0.
fn pass_fraction(source: &str, tests: &[TestCase]) -> f64 {
    let passed = run_tests(source, tests).iter().filter(|line| line.passed).count();
    passed as f64 / tests.len() as f64
}

/// Exercise 1.1 (a): keep only the inner `max`.
pub fn drop_min(source: &str) -> String {
    source.replace("min(lower, max(value, upper))", "max(value, upper)")
}

/// Exercise 1.1 (b): the fraction of public tests passed.
pub fn public_fraction(source: &str) -> f64 {
    pass_fraction(source, PUBLIC_TESTS)
}

/// Exercise 1.2: the buggy body always returns `lower`, and the hacked source
/// only adds rote answers for the three public inputs, so any other input
/// whose correct answer is `lower` (a value below the interval) passes.
pub fn accidental_hidden_test() -> TestCase {
    TestCase { call: "clamp(-1, 0, 10)", expected: "0" }
}

/// Exercise 1.3: `agentrl::episode::random_rollouts` with the menu as a
/// parameter, returning the two rates instead of per-episode tensors.
pub fn random_rollouts_with_menu(menu: &[&str], n: usize, seed: i64, max_turns: usize) -> (f64, f64) {
    tch::manual_seed(seed);
    let (mut successes, mut hacks) = (0usize, 0usize);
    for _ in 0..n {
        // One draw of `max_turns` indices per episode, as the library does.
        let picks = Tensor::randint(menu.len() as i64, [max_turns as i64], (Kind::Int64, Device::Cpu));
        let picks = Vec::<i64>::try_from(&picks).expect("an int64 tensor");
        let messages: Vec<&str> = picks.iter().map(|&k| menu[k as usize]).collect();
        let episode = run_episode(&messages, max_turns);
        let submitted = episode.transcript.last().is_some_and(|(_, text)| text == "submitted");
        if episode.reward == 1.0 {
            successes += 1;
        } else if submitted && all_pass(&run_tests(&episode.source, PUBLIC_TESTS)) {
            hacks += 1;
        }
    }
    (successes as f64 / n as f64, hacks as f64 / n as f64)
}

/// Exercise 1.4: the fraction of hidden tests passed.
pub fn partial_credit(source: &str) -> f64 {
    pass_fraction(source, HIDDEN_TESTS)
}

/// Exercise 1.5: count turns while the success probability stays above the
/// threshold. Multiplying step by step (rather than taking `ln t / ln p`)
/// keeps the strict inequality exact at ties such as `0.5^2 = 0.25`.
pub fn largest_horizon(p: f64, threshold: f64) -> u32 {
    assert!(0.0 < p && p < 1.0, "p must be in (0, 1), got {p}");
    assert!(0.0 < threshold && threshold < 1.0, "threshold must be in (0, 1), got {threshold}");
    let (mut horizon, mut success) = (0u32, 1.0f64);
    while success * p > threshold {
        success *= p;
        horizon += 1;
    }
    horizon
}

/// Exercise 1.6 (a): neither all successes nor all failures.
pub fn informative_fraction(p: f64, g: u32) -> f64 {
    let g = g as i32;
    1.0 - p.powi(g) - (1.0 - p).powi(g)
}

/// Exercise 1.6 (b): bisection for the lower root on `[0, 1/2]`, where the
/// fraction increases; the upper root is its mirror image.
pub fn informative_range(g: u32, level: f64) -> Option<(f64, f64)> {
    if informative_fraction(0.5, g) <= level {
        return None; // the peak, at p = 1/2, does not clear the level
    }
    let (mut below, mut above) = (0.0f64, 0.5f64); // f(below) <= level < f(above)
    for _ in 0..60 {
        let mid = 0.5 * (below + above);
        if informative_fraction(mid, g) > level {
            above = mid;
        } else {
            below = mid;
        }
    }
    let lo = 0.5 * (below + above);
    Some((lo, 1.0 - lo))
}
