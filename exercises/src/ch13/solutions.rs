//! Reference solutions for the Chapter 13 exercises (the `solutions` feature).

pub fn truncated_weights(old: &[f64], behaviour: &[f64], cap: f64, sequence: bool) -> Vec<f64> {
    assert_eq!(old.len(), behaviour.len(), "one behaviour log-prob per token");
    let log_w: Vec<f64> = old.iter().zip(behaviour).map(|(o, b)| o - b).collect();
    if sequence {
        let total: f64 = log_w.iter().sum();
        vec![total.exp().min(cap); log_w.len()]
    } else {
        log_w.iter().map(|l| l.exp().min(cap)).collect()
    }
}

pub fn lockstep_time(episodes: &[Vec<(f64, f64)>]) -> f64 {
    let turns = episodes.iter().map(Vec::len).max().unwrap_or(0);
    (0..turns)
        .map(|t| {
            let open = episodes.iter().filter(|e| t < e.len()).map(|e| e[t]);
            let (generate, call) = open.fold((0.0f64, 0.0f64), |(g, c), (eg, ec)| (g.max(eg), c.max(ec)));
            generate + call
        })
        .sum()
}

pub fn effective_sample_size(weights: &[f64]) -> f64 {
    let sum: f64 = weights.iter().sum();
    let squares: f64 = weights.iter().map(|w| w * w).sum();
    if squares == 0.0 { 0.0 } else { sum * sum / squares }
}
