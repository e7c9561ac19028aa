//! Reference solutions for the Chapter 16 exercises (the `solutions` feature).

// ANCHOR: ex1
/// log softmax(z): z − max − ln Σ e^(z − max), so no exponent is positive.
fn log_softmax(z: &[f64]) -> Vec<f64> {
    let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let log_sum = z.iter().map(|v| (v - top).exp()).sum::<f64>().ln();
    z.iter().map(|v| v - top - log_sum).collect()
}

pub fn kl_from_logits(logits_p: &[f64], logits_q: &[f64]) -> f64 {
    let (log_p, log_q) = (log_softmax(logits_p), log_softmax(logits_q));
    log_p.iter().zip(&log_q).map(|(a, b)| a.exp() * (a - b)).sum()
}
// ANCHOR_END: ex1

// ANCHOR: ex2
pub fn layer_norm(x: &[f64], eps: f64) -> Vec<f64> {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    x.iter().map(|v| (v - mean) / (var + eps).sqrt()).collect()
}
// ANCHOR_END: ex2
