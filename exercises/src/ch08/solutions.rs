//! Chapter 8: reference solutions. The model answers, with the reasoning
//! behind them, are in `chapters/answers-08.md`.

/// Exercise 8.1: the smaller of the unclipped and the clipped term.
pub fn clipped_objective(ratio: f64, advantage: f64, eps: f64) -> f64 {
    let clipped = ratio.clamp(1.0 - eps, 1.0 + eps);
    (ratio * advantage).min(clipped * advantage)
}

/// Exercise 8.1: $\rho A$ unless the ratio has passed the clip in the direction the
/// advantage favours ($A > 0$ above $1 + \epsilon$, $A < 0$ below $1 - \epsilon$), then 0.
pub fn clipped_slope(ratio: f64, advantage: f64, eps: f64) -> f64 {
    let clipped = (advantage > 0.0 && ratio > 1.0 + eps) || (advantage < 0.0 && ratio < 1.0 - eps);
    if clipped {
        0.0
    } else {
        ratio * advantage
    }
}

/// Exercise 8.2: $\frac1n \sum_i e^{\log \pi_{\text{new}} - \log \pi_{\text{old}}} f(a_i)$.
pub fn importance_weighted_mean(values: &[f64], logp_new: &[f64], logp_old: &[f64]) -> f64 {
    assert!(values.len() == logp_new.len() && values.len() == logp_old.len(), "one value and two log-probs per sample");
    if values.is_empty() {
        return 0.0;
    }
    let total: f64 = values.iter().zip(logp_new.iter().zip(logp_old)).map(|(f, (new, old))| (new - old).exp() * f).sum();
    total / values.len() as f64
}

/// Exercise 8.3: the mean of $(\rho - 1) - \log \rho$, computed from the log ratio.
pub fn k3_kl(logp_new: &[f64], logp_old: &[f64]) -> f64 {
    assert_eq!(logp_new.len(), logp_old.len(), "two log-probs per sample");
    if logp_new.is_empty() {
        return 0.0;
    }
    let total: f64 = logp_new
        .iter()
        .zip(logp_old)
        .map(|(new, old)| {
            let log_ratio = new - old;
            log_ratio.exp_m1() - log_ratio
        })
        .sum();
    total / logp_new.len() as f64
}

/// Exercise 8.4: count the ratios with $|\rho - 1| > \epsilon$.
pub fn clip_fraction(ratios: &[f64], eps: f64) -> f64 {
    if ratios.is_empty() {
        return 0.0;
    }
    ratios.iter().filter(|&&r| (r - 1.0).abs() > eps).count() as f64 / ratios.len() as f64
}

/// Exercise 8.5: pushed unless the advantage is zero or the ratio has passed the clip
/// in the advantage's direction.
pub fn tokens_still_pushed(ratios: &[f64], advantages: &[f64], eps: f64) -> Vec<bool> {
    assert_eq!(ratios.len(), advantages.len(), "one advantage per ratio");
    ratios
        .iter()
        .zip(advantages)
        .map(|(&r, &a)| {
            let past_clip = (a > 0.0 && r > 1.0 + eps) || (a < 0.0 && r < 1.0 - eps);
            a != 0.0 && !past_clip
        })
        .collect()
}
