//! Reference solutions for the Chapter 12 exercises (the `solutions` feature).

pub fn overlong_penalty(turns: usize, truncated: bool, budget: usize, cache: usize) -> f64 {
    // Turns past the free part of the budget, as a fraction of the ramp; truncation is the floor.
    let over = turns.saturating_sub(budget - cache) as f64 / cache as f64;
    if truncated { -1.0 } else { -over.min(1.0) }
}

pub fn shaped_return(rewards: &[f64], potentials: &[f64], gamma: f64) -> f64 {
    assert_eq!(potentials.len(), rewards.len() + 1, "one potential per state, the terminal one included");
    let last = rewards.len();
    let phi = |t: usize| if t == last { 0.0 } else { potentials[t] };
    let mut discount = 1.0;
    let mut total = 0.0;
    for (t, r) in rewards.iter().enumerate() {
        total += discount * (r + gamma * phi(t + 1) - phi(t));
        discount *= gamma;
    }
    total
}

/// (tool, argument) of a well-formed call.
fn call(action: &str) -> Option<(&str, Option<&str>)> {
    let inner = action.trim().strip_prefix("<call>")?.strip_suffix("</call>")?;
    let words: Vec<&str> = inner.split_whitespace().collect();
    let word = |w: &str| w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    match words.as_slice() {
        [tool] if word(tool) => Some((tool, None)),
        [tool, arg] if word(tool) && word(arg) => Some((tool, Some(arg))),
        _ => None,
    }
}

pub fn repeated_call(actions: &[&str]) -> bool {
    actions.windows(2).any(|pair| match (call(pair[0]), call(pair[1])) {
        (Some(a), Some(b)) => a == b && matches!(a.0, "read" | "test" | "edit"),
        _ => false,
    })
}
