//! Chapter 2: the error of an estimate from a few independent runs.
//!
//! A learning experiment run with several seeds gives one number per seed;
//! the mean is the estimate and the spread between seeds its error. With few
//! seeds the interval uses Student's t distribution, not the normal one. A
//! success rate over n episodes gets the Wilson interval; a comparison of two
//! variants on the same tasks gets a paired bootstrap over the tasks; a
//! learning curve over seeds gets a band, point by point.
//!
//! Two variants compared on the same seed should meet the same luck: the
//! same tasks in the same order, the same evaluation episodes. So an
//! experiment's randomness comes from named streams, each seeded from the
//! experiment's seed, its name and the iteration ([`Streams`]): changing how
//! one stream is used (a variant that shuffles more, or samples longer
//! actions) leaves every other stream as it was.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use statrs::distribution::{Beta, ContinuousCDF, Normal, StudentsT};

/// The `q`-quantile of `samples` (0 ≤ q ≤ 1) by the nearest rank: the
/// sorted value at index round((n − 1) q); 0 for no samples.
pub fn percentile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
        .get(((sorted.len().max(1) - 1) as f64 * q).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

/// The sample mean and the standard error of the mean, `s / √n` with `s` the
/// sample standard deviation (n − 1 in its denominator). Needs two values.
pub fn standard_error(values: &[f64]) -> (f64, f64) {
    let n = values.len();
    assert!(
        n >= 2,
        "a standard error needs at least two values, got {n}"
    );
    let mean = values.iter().sum::<f64>() / n as f64;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, (variance / n as f64).sqrt())
}

// ANCHOR: interval
/// The mean of `values` and the half-width of its two-sided 95 % confidence
/// interval, `t(0.975, n − 1) · s / √n` with `s` the sample standard
/// deviation. Needs at least two values.
pub fn mean_interval(values: &[f64]) -> (f64, f64) {
    mean_interval_at(values, 0.975)
}

/// [`mean_interval`] with the quantile `q` of Student's t in place of
/// 0.975: the interval covers the true mean with probability 2q − 1 (for
/// m comparisons read at once, q = 1 − 0.025/m keeps the chance of any false
/// detection below 5 %).
pub fn mean_interval_at(values: &[f64], q: f64) -> (f64, f64) {
    let n = values.len();
    assert!(n >= 2, "an interval needs at least two values, got {n}");
    let (mean, se) = standard_error(values);
    (mean, students_t(n - 1, q) * se)
}

/// The `q`-quantile of Student's t distribution with `df` degrees of freedom.
pub fn students_t(df: usize, q: f64) -> f64 {
    StudentsT::new(0.0, 1.0, df as f64)
        .expect("df > 0 degrees of freedom")
        .inverse_cdf(q)
}

/// [`mean_interval`] as text for a table: "mean ± half-width", 3 decimals.
/// When every seed gave the same value the spread is zero and so is the
/// t-interval: that says the seeds agreed, not that the next seed would, so
/// no interval is printed, only the count of seeds that agreed ("0.000 (all
/// 3)"). A half-width too small for three decimals prints as "± <0.001".
pub fn plus_minus(values: &[f64]) -> String {
    let (mean, half) = mean_interval(values);
    if values.iter().all(|v| *v == values[0]) {
        format!("{mean:.3} (all {})", values.len())
    } else if half < 0.0005 {
        format!("{mean:.3} ± <0.001")
    } else {
        format!("{mean:.3} ± {half:.3}")
    }
}

/// `b − a` seed by seed (runs that share their seeds), with [`mean_interval`]
/// of the differences.
pub fn paired_difference(a: &[f64], b: &[f64]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "paired runs come in pairs");
    let differences: Vec<f64> = a.iter().zip(b).map(|(x, y)| y - x).collect();
    mean_interval(&differences)
}

/// [`paired_difference`] in words: the mean difference, its interval, and
/// what the interval allows one to say. A null result comes with the
/// smallest difference the design would detect in 80 % of experiments
/// ([`minimum_detectable_effect`], with the spread the seeds showed), so that
/// "no detectable difference" never stands without its size. When every pair
/// differs by the same amount there is no spread to build an interval from,
/// and the summary says so instead of printing a zero-width interval.
pub fn paired_summary(a: &[f64], b: &[f64]) -> String {
    let (mean, half) = paired_difference(a, b);
    let first = b[0] - a[0];
    if a.iter().zip(b).all(|(x, y)| y - x == first) {
        return format!(
            "{mean:+.3} in each of {} paired seeds: no spread, so no interval",
            a.len()
        );
    }
    let n = a.len();
    let verdict = if mean - half > 0.0 {
        "higher".to_string()
    } else if mean + half < 0.0 {
        "lower".to_string()
    } else {
        // The seeds' spread: half = t(0.975, n − 1) · sd / √n.
        let sd = half * (n as f64).sqrt() / students_t(n - 1, 0.975);
        let size = minimum_detectable_effect(sd, n, 0.8);
        if half < 5e-4 {
            format!("no detectable difference (this design detects about {size:.1e})")
        } else {
            format!("no detectable difference (this design detects about {size:.3})")
        }
    };
    // Three decimals, unless the interval is too narrow to show in them.
    let show = |x: f64| {
        if half < 5e-4 {
            format!("{x:+.1e}")
        } else {
            format!("{x:+.3}")
        }
    };
    format!(
        "{} (95% interval {} to {}, {} paired seeds): {verdict}",
        show(mean),
        show(mean - half),
        show(mean + half),
        a.len()
    )
}

/// `mean(b) − mean(a)` for runs that share nothing (independent seeds), with
/// the half-width of Welch's 95 % interval: Student's t with the
/// Welch–Satterthwaite degrees of freedom times √(s_a²/n_a + s_b²/n_b).
pub fn welch_difference(a: &[f64], b: &[f64]) -> (f64, f64) {
    let ((mean_a, se_a), (mean_b, se_b)) = (standard_error(a), standard_error(b));
    let (va, vb) = (se_a * se_a, se_b * se_b); // squared standard errors
    let df = (va + vb).powi(2) / (va * va / (a.len() - 1) as f64 + vb * vb / (b.len() - 1) as f64);
    let t = StudentsT::new(0.0, 1.0, df)
        .expect("positive degrees of freedom")
        .inverse_cdf(0.975);
    (mean_b - mean_a, t * (va + vb).sqrt())
}

/// The smallest true mean difference that a paired design of `n` seeds
/// detects (its 95 % interval excludes 0) in a share `power` of experiments,
/// when the paired differences spread with standard deviation `sd`:
/// (t(0.975, n − 1) + t(power, n − 1)) · sd / √n.
pub fn minimum_detectable_effect(sd: f64, n: usize, power: f64) -> f64 {
    assert!(
        n >= 2 && (0.5..1.0).contains(&power),
        "need n >= 2 seeds and a power in [0.5, 1) (got n = {n}, power = {power})"
    );
    (students_t(n - 1, 0.975) + students_t(n - 1, power)) * sd / (n as f64).sqrt()
}
// ANCHOR_END: interval

// ANCHOR: wilson
/// The Wilson score interval (95 %) for a rate of `successes` in `n` trials:
/// the set of true rates p for which the observed rate lies within z = 1.96
/// standard errors √(p(1 − p)/n). Unlike `rate ± 1.96·√(rate(1 − rate)/n)`,
/// it stays inside [0, 1] and is not empty at 0 or n successes.
pub fn wilson_interval(successes: usize, n: usize) -> (f64, f64) {
    assert!(
        n > 0 && successes <= n,
        "a rate needs 0 <= successes <= n and n > 0 (got {successes} of {n})"
    );
    wilson_interval_of_mean(successes as f64 / n as f64, n)
}

/// [`wilson_interval`] for the mean `rate` of `n` values in [0, 1] that need
/// not be 0 or 1 (per-task success rates, per-task pass@k). A value in
/// [0, 1] with mean p varies at most as much as a success/failure with rate
/// p, so the interval errs on the wide side.
pub fn wilson_interval_of_mean(rate: f64, n: usize) -> (f64, f64) {
    assert!(
        n > 0 && (0.0..=1.0).contains(&rate),
        "a rate needs n > 0 and 0 <= rate <= 1 (got {rate} over {n})"
    );
    let z = Normal::new(0.0, 1.0)
        .expect("the standard normal")
        .inverse_cdf(0.975);
    let n = n as f64;
    let denominator = 1.0 + z * z / n;
    let centre = (rate + z * z / (2.0 * n)) / denominator;
    let half = z / denominator * (rate * (1.0 - rate) / n + z * z / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The Clopper–Pearson ("exact") 95 % interval for `successes` in `n`
/// trials: the rates p under which a count at least as extreme as the one
/// seen has probability at least 2.5 % on its side. Its ends are quantiles of
/// Beta distributions; at 0 successes the upper end is 1 − 0.025^(1/n).
/// It covers the true rate at least 95 % of the time for every p, at the
/// price of being wider than Wilson's.
pub fn clopper_pearson_interval(successes: usize, n: usize) -> (f64, f64) {
    assert!(
        n > 0 && successes <= n,
        "a rate needs 0 <= successes <= n and n > 0 (got {successes} of {n})"
    );
    let (k, n_f) = (successes as f64, n as f64);
    let low = if successes == 0 {
        0.0
    } else {
        Beta::new(k, n_f - k + 1.0)
            .expect("positive shapes")
            .inverse_cdf(0.025)
    };
    let high = if successes == n {
        1.0
    } else {
        Beta::new(k + 1.0, n_f - k)
            .expect("positive shapes")
            .inverse_cdf(0.975)
    };
    (low, high)
}
// ANCHOR_END: wilson

// ANCHOR: bootstrap
/// A paired comparison over units (tasks) that both variants were scored on:
/// the mean of `b[i] − a[i]` and its 95 % percentile-bootstrap interval from
/// `resamples` draws of the units with replacement, drawn from `seed`, its
/// ends read by [`percentile`] (the one percentile rule of the book).
pub fn paired_bootstrap(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> (f64, f64, f64) {
    assert_eq!(a.len(), b.len(), "paired scores come in pairs");
    assert!(
        !a.is_empty() && resamples >= 100,
        "need some units and at least 100 resamples"
    );
    let differences: Vec<f64> = a.iter().zip(b).map(|(x, y)| y - x).collect();
    let n = differences.len();
    let mean = differences.iter().sum::<f64>() / n as f64;
    let mut rng = StdRng::seed_from_u64(seed);
    let means: Vec<f64> = (0..resamples)
        .map(|_| {
            (0..n)
                .map(|_| differences[rng.random_range(0..n)])
                .sum::<f64>()
                / n as f64
        })
        .collect();
    (mean, percentile(&means, 0.025), percentile(&means, 0.975))
}
// ANCHOR_END: bootstrap

// ANCHOR: streams
/// The random streams of one experiment. Each is a fresh generator for one
/// (purpose, iteration), seeded from the experiment's seed and the purpose's
/// name, so two runs with the same seed share every stream whose use does not
/// depend on what they learned (common random numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streams {
    pub seed: u64,
}

impl Streams {
    pub fn new(seed: u64) -> Streams {
        Streams { seed }
    }

    /// The stream `name` at `iteration`.
    pub fn stream(&self, name: &str, iteration: usize) -> StdRng {
        // FNV-1a of the name, then SplitMix64 to spread (seed, name, iteration) over 64 bits.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in name.bytes() {
            h = (h ^ byte as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mix = |mut z: u64| {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        StdRng::seed_from_u64(mix(mix(mix(self.seed) ^ h) ^ iteration as u64))
    }

    /// Which training tasks an iteration draws.
    pub fn tasks(&self, iteration: usize) -> StdRng {
        self.stream("tasks", iteration)
    }

    /// The policy's token sampling during an iteration's rollout.
    pub fn sampling(&self, iteration: usize) -> StdRng {
        self.stream("sampling", iteration)
    }

    /// The order of episodes in an iteration's minibatches.
    pub fn shuffle(&self, iteration: usize) -> StdRng {
        self.stream("shuffle", iteration)
    }

    /// The sampling of the evaluation episodes after `iteration` updates.
    pub fn evaluation(&self, iteration: usize) -> StdRng {
        self.stream("evaluation", iteration)
    }
}
// ANCHOR_END: streams

// ANCHOR: band
/// A band for curves over seeds: `runs[seed][point]` becomes, point by point,
/// (mean, mean − half, mean + half) with the Student-t half-width of
/// [`mean_interval`]. All runs must have the same length.
pub fn band(runs: &[Vec<f64>]) -> Vec<(f64, f64, f64)> {
    assert!(runs.len() >= 2, "a band needs at least two runs");
    let points = runs[0].len();
    assert!(
        runs.iter().all(|run| run.len() == points),
        "every run needs the same number of points"
    );
    (0..points)
        .map(|i| {
            let (mean, half) = mean_interval(&runs.iter().map(|run| run[i]).collect::<Vec<_>>());
            (mean, mean - half, mean + half)
        })
        .collect()
}
// ANCHOR_END: band

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_that_agree_print_no_interval() {
        assert_eq!(plus_minus(&[0.0, 0.0, 0.0]), "0.000 (all 3)");
        assert_eq!(plus_minus(&[0.5, 0.5001, 0.5]), "0.500 ± <0.001");
        assert_eq!(plus_minus(&[0.1, 0.2, 0.3]), "0.200 ± 0.248");
        // An interval too narrow for three decimals is shown in powers of ten.
        assert_eq!(
            paired_summary(&[1.0, 1.0, 1.0], &[1.0 + 1e-6, 1.0 + 2e-6, 1.0 + 3e-6]),
            "+2.0e-6 (95% interval -4.8e-7 to +4.5e-6, 3 paired seeds): no detectable difference (this design detects about 3.1e-6)"
        );
        assert_eq!(
            paired_summary(&[0.5, 0.25, 0.0], &[0.25, 0.0, -0.25]),
            "-0.250 in each of 3 paired seeds: no spread, so no interval"
        );
    }

    #[test]
    fn a_paired_summary_says_only_what_its_interval_allows() {
        // Differences 0.1, 0.2, 0.3: mean 0.2, s = 0.1, t(0.975, 2) = 4.303, half-width 0.248;
        // detectable in 80 % of runs: (4.303 + t(0.8, 2) = 1.061) · 0.1 / √3 = 0.310.
        assert_eq!(
            paired_summary(&[0.0, 0.0, 0.0], &[0.1, 0.2, 0.3]),
            "+0.200 (95% interval -0.048 to +0.448, 3 paired seeds): no detectable difference (this design detects about 0.310)"
        );
        assert!(paired_summary(&[0.0, 0.0, 0.0], &[0.19, 0.2, 0.21]).ends_with(": higher"));
        assert!(paired_summary(&[0.5, 0.5, 0.5], &[0.29, 0.3, 0.31]).ends_with(": lower"));
    }

    #[test]
    fn streams_depend_on_seed_name_and_iteration_only() {
        let draw = |mut rng: StdRng| (0..4).map(|_| rng.random::<u64>()).collect::<Vec<_>>();
        let (a, b) = (Streams::new(7), Streams::new(7));
        assert_eq!(draw(a.tasks(3)), draw(b.tasks(3)));
        let all = [
            draw(a.tasks(3)),
            draw(a.tasks(4)),
            draw(a.sampling(3)),
            draw(a.shuffle(3)),
            draw(a.evaluation(3)),
            draw(Streams::new(8).tasks(3)),
        ];
        for i in 0..all.len() {
            for j in 0..i {
                assert_ne!(all[i], all[j], "streams {i} and {j} coincide");
            }
        }
    }

    #[test]
    fn the_interval_uses_students_t() {
        // 1, 2, 3: mean 2, s = 1, t(0.975, 2) = 4.302653.
        let (mean, half) = mean_interval(&[1.0, 2.0, 3.0]);
        assert!((mean - 2.0).abs() < 1e-12);
        assert!(
            (half - 4.302_652_729_911_275 / 3f64.sqrt()).abs() < 1e-9,
            "{half}"
        );
        // Five values, t(0.975, 4) = 2.776445.
        let (_, half) = mean_interval(&[0.0, 1.0, 0.0, 1.0, 0.5]);
        // Their sample standard deviation is 0.5.
        assert!(
            (half - 2.776_445_105_197_8 * 0.5 / 5f64.sqrt()).abs() < 1e-9,
            "{half}"
        );
    }

    #[test]
    fn pairing_removes_what_the_runs_share() {
        // A seed effect shared by both variants cancels in the differences.
        let a = [0.2, 0.5, 0.8];
        let b = [0.3, 0.6, 0.9];
        let (mean, half) = paired_difference(&a, &b);
        assert!((mean - 0.1).abs() < 1e-12 && half < 1e-9);
    }

    #[test]
    fn the_standard_error_divides_the_sample_deviation_by_root_n() {
        let (mean, se) = standard_error(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        // Sample variance 32 / 7.
        assert!(
            (mean - 5.0).abs() < 1e-12 && (se - (32.0 / 7.0 / 8.0f64).sqrt()).abs() < 1e-12,
            "{se}"
        );
    }

    #[test]
    fn wilson_intervals_match_published_values() {
        // 8 of 10: (0.4902, 0.9433), from the closed form by hand.
        let (low, high) = wilson_interval(8, 10);
        assert!(
            (low - 0.490_16).abs() < 1e-4 && (high - 0.943_32).abs() < 1e-4,
            "{low} {high}"
        );
        // 0 of 10: the lower end is 0 and the upper end z²/(n + z²) = 0.2775.
        let (low, high) = wilson_interval(0, 10);
        assert!(
            low.abs() < 1e-12 && (high - 0.277_53).abs() < 1e-4,
            "{low} {high}"
        );
        // Symmetry: k of n mirrors n − k of n.
        let (a, b) = wilson_interval(3, 17);
        let (c, d) = wilson_interval(14, 17);
        assert!((a - (1.0 - d)).abs() < 1e-12 && (b - (1.0 - c)).abs() < 1e-12);
    }

    #[test]
    fn the_paired_bootstrap_agrees_with_the_normal_interval_on_many_units() {
        // Constant differences: no spread at all.
        let (mean, low, high) = paired_bootstrap(&[0.0, 1.0, 0.0], &[0.5, 1.5, 0.5], 1000, 1);
        assert!(
            (mean - 0.5).abs() < 1e-12 && (low - 0.5).abs() < 1e-12 && (high - 0.5).abs() < 1e-12
        );
        // 400 units of ±1 around 0.1: the interval is close to mean ± 1.96 SE.
        let a = vec![0.0; 400];
        let b: Vec<f64> = (0..400)
            .map(|i| if i % 2 == 0 { 1.1 } else { -0.9 })
            .collect();
        let (mean, low, high) = paired_bootstrap(&a, &b, 4000, 7);
        let (_, se) = standard_error(&b);
        assert!((mean - 0.1).abs() < 1e-12);
        assert!(
            ((high - low) / (2.0 * 1.96 * se) - 1.0).abs() < 0.1,
            "{low} {high} {se}"
        );
        assert_eq!(
            paired_bootstrap(&a, &b, 4000, 7),
            (mean, low, high),
            "the same seed gives the same interval"
        );
    }

    #[test]
    fn a_band_is_the_interval_point_by_point() {
        let runs = vec![vec![0.0, 1.0], vec![1.0, 2.0], vec![2.0, 3.0]];
        let band = band(&runs);
        let (mean, half) = mean_interval(&[1.0, 2.0, 3.0]);
        assert_eq!(band.len(), 2);
        assert!((band[1].0 - mean).abs() < 1e-12 && (band[1].2 - band[1].0 - half).abs() < 1e-12);
    }

    #[test]
    fn clopper_pearson_matches_its_closed_forms_and_published_values() {
        let (low, high) = clopper_pearson_interval(0, 39);
        assert_eq!(low, 0.0);
        assert!(
            (high - (1.0 - 0.025f64.powf(1.0 / 39.0))).abs() < 1e-9,
            "{high}"
        );
        let (low, high) = clopper_pearson_interval(39, 39);
        assert!(
            (low - 0.025f64.powf(1.0 / 39.0)).abs() < 1e-9 && high == 1.0,
            "{low}"
        );
        // 5 of 20: R's binom.test gives 0.08657 to 0.49105.
        let (low, high) = clopper_pearson_interval(5, 20);
        assert!(
            (low - 0.08657).abs() < 5e-5 && (high - 0.49105).abs() < 5e-5,
            "{low} {high}"
        );
        // Symmetric in successes and failures, and never narrower than Wilson at the ends.
        for (k, n) in [(0, 10), (3, 10), (1, 160), (80, 160)] {
            let (l, h) = clopper_pearson_interval(k, n);
            let (l2, h2) = clopper_pearson_interval(n - k, n);
            assert!((l - (1.0 - h2)).abs() < 1e-9 && (h - (1.0 - l2)).abs() < 1e-9);
        }
        assert!(clopper_pearson_interval(0, 39).1 > wilson_interval(0, 39).1);
    }

    #[test]
    fn welch_and_the_detectable_effect_follow_their_formulas() {
        // Equal sizes and spreads: Welch's degrees of freedom are 2(n − 1).
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [3.0, 4.0, 5.0, 6.0];
        let (d, half) = welch_difference(&a, &b);
        let se = (2.0 * (5.0 / 3.0) / 4.0f64).sqrt();
        assert!(
            (d - 2.0).abs() < 1e-12 && (half - students_t(6, 0.975) * se).abs() < 1e-9,
            "{d} {half}"
        );
        // With many seeds the detectable effect tends to (1.96 + 0.84) sd / √n.
        let mde = minimum_detectable_effect(1.0, 10_000, 0.8);
        assert!((mde - (1.959964 + 0.841621) / 100.0).abs() < 1e-4, "{mde}");
        // Three seeds pay for their few degrees of freedom: t(0.975, 2) = 4.30, t(0.8, 2) = 1.06.
        assert!(
            (minimum_detectable_effect(1.0, 3, 0.8) - (4.3027 + 1.0607) / 3f64.sqrt()).abs() < 1e-3
        );
        // The interval at q = 0.975 is mean_interval's.
        assert_eq!(mean_interval_at(&a, 0.975), mean_interval(&a));
    }

    #[test]
    #[should_panic(expected = "at least two values")]
    fn one_value_has_no_interval() {
        mean_interval(&[0.5]);
    }
}
