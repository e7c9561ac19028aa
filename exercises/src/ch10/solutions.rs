//! Chapter 10: reference solutions. The model answers, with the reasoning
//! behind them, are in `chapters/answers-10.md`.

/// The pairs $(q(x), \log r(x))$ over the categories, $\log r = \log p - \log q$.
fn log_ratios(q: &[f64], p: &[f64]) -> Vec<(f64, f64)> {
    assert_eq!(q.len(), p.len(), "two distributions over the same categories");
    q.iter().zip(p).map(|(&qx, &px)| (qx, px.ln() - qx.ln())).collect()
}

/// Exercise 10.1: categories with $q(x) = 0$ are skipped, so $0 \log 0$ counts as 0,
/// and $\log 0 = -\infty$ makes the sum infinite where $p$ misses mass that $q$ has.
pub fn kl_categorical(q: &[f64], p: &[f64]) -> f64 {
    assert_eq!(q.len(), p.len(), "two distributions over the same categories");
    let mut kl = 0.0;
    for (&qx, &px) in q.iter().zip(p) {
        if qx > 0.0 {
            kl += qx * (qx.ln() - px.ln());
        }
    }
    kl
}

/// Exercise 10.2: since $\mathrm{KL} = \mathbb{E}_q[-\log r]$, the bias is the single
/// expectation $\mathbb{E}_q[\tfrac12 (\log r)^2 + \log r]$, which avoids subtracting two
/// nearly equal numbers when $p \approx q$.
pub fn k2_bias(q: &[f64], p: &[f64]) -> f64 {
    log_ratios(q, p).iter().map(|(w, l)| w * (0.5 * l * l + l)).sum()
}

/// Exercise 10.3: $-\log r + (e^{\log r} - 1)$, with `exp_m1` for accuracy near $r = 1$.
pub fn k3_from_k1(log_r: f64) -> f64 {
    -log_r + log_r.exp_m1()
}

/// Exercise 10.3: the regression coefficient of $-k_1$ on $r - 1$, from exact moments.
pub fn optimal_control_coefficient(q: &[f64], p: &[f64]) -> f64 {
    let points: Vec<(f64, f64, f64)> = log_ratios(q, p).iter().map(|&(w, l)| (w, -l, l.exp_m1())).collect();
    let mean = |f: &dyn Fn(&(f64, f64, f64)) -> f64| points.iter().map(|pt| pt.0 * f(pt)).sum::<f64>();
    let (k1_mean, c_mean) = (mean(&|pt| pt.1), mean(&|pt| pt.2));
    let covariance = mean(&|pt| (pt.1 - k1_mean) * (pt.2 - c_mean));
    let variance = mean(&|pt| (pt.2 - c_mean).powi(2));
    -covariance / variance
}

/// Exercise 10.4: the log ratio $\log \pi - \log \pi_{\text{ref}}$ summed where the mask is on.
pub fn sequence_kl_k1(policy_logprobs: &[f64], reference_logprobs: &[f64], mask: &[bool]) -> f64 {
    assert!(policy_logprobs.len() == reference_logprobs.len() && mask.len() == policy_logprobs.len(), "one log-prob of each policy and one mask bit per position");
    policy_logprobs.iter().zip(reference_logprobs).zip(mask).filter(|(_, &on)| on).map(|((pi, reference), _)| pi - reference).sum()
}

/// Exercise 10.5: $\partial H / \partial z_i = -p_i (\log p_i + H)$, with $\log p$ from the
/// log-sum-exp of the logits shifted by their maximum.
pub fn entropy_gradient(logits: &[f64]) -> Vec<f64> {
    assert!(!logits.is_empty(), "at least one logit");
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let log_normaliser = max + logits.iter().map(|z| (z - max).exp()).sum::<f64>().ln();
    let logp: Vec<f64> = logits.iter().map(|z| z - log_normaliser).collect();
    let entropy: f64 = -logp.iter().map(|l| l.exp() * l).sum::<f64>();
    logp.iter().map(|l| -l.exp() * (l + entropy)).collect()
}
