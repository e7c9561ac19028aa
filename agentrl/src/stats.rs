//! Chapter 2: the error of an estimate from a few independent runs.
//!
//! A learning experiment run with several seeds gives one number per seed;
//! the mean is the estimate and the spread between seeds its error. With few
//! seeds the interval uses Student's t distribution, not the normal one.

use statrs::distribution::{ContinuousCDF, StudentsT};

// ANCHOR: interval
/// The mean of `values` and the half-width of its two-sided 95 % confidence
/// interval, `t(0.975, n − 1) · s / √n` with `s` the sample standard
/// deviation. Needs at least two values.
pub fn mean_interval(values: &[f64]) -> (f64, f64) {
    let n = values.len();
    assert!(n >= 2, "an interval needs at least two values, got {n}");
    let mean = values.iter().sum::<f64>() / n as f64;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64).expect("n - 1 > 0 degrees of freedom").inverse_cdf(0.975);
    (mean, t * (variance / n as f64).sqrt())
}

/// `b − a` seed by seed (runs that share their seeds), with [`mean_interval`]
/// of the differences.
pub fn paired_difference(a: &[f64], b: &[f64]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "paired runs come in pairs");
    let differences: Vec<f64> = a.iter().zip(b).map(|(x, y)| y - x).collect();
    mean_interval(&differences)
}
// ANCHOR_END: interval

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_uses_students_t() {
        // 1, 2, 3: mean 2, s = 1, t(0.975, 2) = 4.302653.
        let (mean, half) = mean_interval(&[1.0, 2.0, 3.0]);
        assert!((mean - 2.0).abs() < 1e-12);
        assert!((half - 4.302_652_729_911_275 / 3f64.sqrt()).abs() < 1e-9, "{half}");
        // Five values, t(0.975, 4) = 2.776445.
        let (_, half) = mean_interval(&[0.0, 1.0, 0.0, 1.0, 0.5]);
        // Their sample standard deviation is 0.5.
        assert!((half - 2.776_445_105_197_8 * 0.5 / 5f64.sqrt()).abs() < 1e-9, "{half}");
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
    #[should_panic(expected = "at least two values")]
    fn one_value_has_no_interval() {
        mean_interval(&[0.5]);
    }
}
