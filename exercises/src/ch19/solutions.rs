//! Reference solutions for the Chapter 19 exercises (the `solutions` feature).

use agentrl::capstone::CapstoneReport;
use agentrl::evaluation::{pass_at_k, RESAMPLES};
use agentrl::gym::{Family, Task};
use agentrl::stats::paired_bootstrap;

// ANCHOR: ex1
/// Exercise 19.1: delete chunks of halving size, from the largest, while the
/// input still fails; a pass with chunks of one character that deletes
/// nothing leaves a 1-minimal input.
pub fn shrink(input: &str, fails: &dyn Fn(&str) -> bool) -> String {
    let mut chars: Vec<char> = input.chars().collect();
    let mut chunk = chars.len().div_ceil(2).max(1);
    loop {
        let mut deleted = false;
        let mut start = 0;
        while start < chars.len() {
            let end = (start + chunk).min(chars.len());
            let candidate: String = chars[..start].iter().chain(&chars[end..]).collect();
            if fails(&candidate) {
                chars.drain(start..end);
                deleted = true;
            } else {
                start += chunk;
            }
        }
        if chunk == 1 && !deleted {
            return chars.into_iter().collect();
        }
        if !deleted {
            chunk = chunk.div_ceil(2);
        }
    }
}

// ANCHOR_END: ex1

// ANCHOR: ex2
/// Exercise 19.2: per-task pass@1 of the warm start and the trained agent,
/// grouped by family, and a paired bootstrap for each group.
pub fn family_gains(report: &CapstoneReport, families: &[Task], seed: usize) -> Vec<(Family, f64, f64, f64)> {
    let run = &report.seeds[seed];
    let (warm, trained) = (&run.warm[1].report.scores, &run.trained[1].report.scores);
    let family = |id: &str| families.iter().find(|t| t.id == id).map(|t| t.family).unwrap_or_else(|| panic!("{id} is not a held-out family task"));
    let mut order: Vec<Family> = Vec::new();
    for score in warm {
        let f = family(&score.task);
        if !order.contains(&f) {
            order.push(f);
        }
    }
    order
        .into_iter()
        .map(|f| {
            let pick = |scores: &[agentrl::evaluation::TaskScore]| scores.iter().filter(|s| family(&s.task) == f).map(|s| pass_at_k(s.samples, s.successes, 1)).collect::<Vec<f64>>();
            let (mean, low, high) = paired_bootstrap(&pick(warm), &pick(trained), RESAMPLES, 19);
            (f, mean, low, high)
        })
        .collect()
}
// ANCHOR_END: ex2
