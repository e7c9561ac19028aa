//! Reference solutions for the Chapter 14 exercises (the `solutions` feature).

// ANCHOR: ex1
pub fn first_fit_decreasing(lengths: &[usize], capacity: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
    let mut rows: Vec<(usize, Vec<usize>)> = Vec::new(); // (tokens used, sequences)
    for i in order {
        assert!(lengths[i] <= capacity, "sequence {i} ({} tokens) does not fit a row of {capacity}", lengths[i]);
        match rows.iter_mut().find(|(used, _)| used + lengths[i] <= capacity) {
            Some((used, row)) => {
                *used += lengths[i];
                row.push(i);
            }
            None => rows.push((lengths[i], vec![i])),
        }
    }
    rows.into_iter().map(|(_, row)| row).collect()
}
// ANCHOR_END: ex1

// ANCHOR: ex2
pub fn microbatch_weights(norm: &str, rows: &[usize], tokens: &[f64]) -> Vec<f64> {
    assert_eq!(rows.len(), tokens.len(), "one token count per micro-batch");
    let share = |parts: Vec<f64>| {
        let total: f64 = parts.iter().sum();
        parts.iter().map(|p| if total > 0.0 { p / total } else { 0.0 }).collect()
    };
    match norm {
        "sequence_mean" | "constant" => share(rows.iter().map(|&r| r as f64).collect()),
        "token_mean" => share(tokens.to_vec()),
        other => panic!("unknown normalisation {other:?}"),
    }
}
// ANCHOR_END: ex2

// ANCHOR: ex3
pub fn group_signal_probability(successes: f64, trials: f64, g: usize) -> f64 {
    let (a, b) = (successes + 1.0, trials - successes + 1.0);
    let moment = |x: f64| (0..g).map(|i| (x + i as f64) / (a + b + i as f64)).product::<f64>();
    1.0 - moment(a) - moment(b)
}
// ANCHOR_END: ex3
