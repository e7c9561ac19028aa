//! Reference solutions for the Chapter 15 exercises (the `solutions` feature).

// ANCHOR: ex1
/// −ln σ(x) = ln(1 + e^(−x)) = max(−x, 0) + ln(1 + e^(−|x|)): the exponent is never positive.
fn minus_log_sigmoid(x: f64) -> f64 {
    (-x).max(0.0) + (-x.abs()).exp().ln_1p()
}

/// σ(x) without overflow on either side.
fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

pub fn dpo_pair(beta: f64, label_smoothing: f64, chosen: f64, rejected: f64, ref_chosen: f64, ref_rejected: f64) -> (f64, f64) {
    let eps = label_smoothing;
    let h = beta * ((chosen - ref_chosen) - (rejected - ref_rejected));
    let loss = (1.0 - eps) * minus_log_sigmoid(h) + eps * minus_log_sigmoid(-h);
    // d(−ln σ(h))/dh = −σ(−h), d(−ln σ(−h))/dh = σ(h), and dh/dchosen = β.
    let d_h = -(1.0 - eps) * sigmoid(-h) + eps * sigmoid(h);
    (loss, beta * d_h)
}
// ANCHOR_END: ex1

// ANCHOR: ex2
pub fn pair_count(rewards: &[f64], group: usize, threshold: f64) -> usize {
    rewards
        .chunks(group.max(1))
        .map(|g| {
            let won = g.iter().filter(|&&r| r > threshold).count();
            won.min(g.len() - won)
        })
        .sum()
}
// ANCHOR_END: ex2
