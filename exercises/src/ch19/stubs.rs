//! Chapter 19 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch19`.
//!
//! Exercise 19.1 is graded on properties of strings and of the call parser;
//! Exercise 19.2 on the full capstone run stored in `data/capstone-report.json`.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

use agentrl::capstone::CapstoneReport;
use agentrl::gym::{Family, Task};

// ---------------------------------------------------------------------------
// Exercise 19.1: shrink a failing input
// ---------------------------------------------------------------------------

/// Exercise 19.1: a fuzzer's failing input made as small as it will go.
/// `fails(input)` is true on entry. Return a string, made by deleting
/// characters (not bytes) of `input`, on which `fails` is still true and from
/// which deleting any one more character makes it false ("1-minimal"). Try
/// deleting large chunks before single characters, so that long inputs
/// shrink in few calls of `fails`.
pub fn shrink(input: &str, fails: &dyn Fn(&str) -> bool) -> String {
    todo!("Exercise 19.1: delete chunks of halving size while the input still fails, then single characters")
}

// ---------------------------------------------------------------------------
// Exercise 19.2: where the held-out families stand
// ---------------------------------------------------------------------------

/// Exercise 19.2: for seed number `seed` of `report` (an index into
/// `report.seeds`), the paired pass@1 gain of the trained agent over its own
/// warm start on each held-out family separately (set 1 of
/// `agentrl::capstone::SETS`), as (family, mean gain, low, high) with a 95 %
/// paired bootstrap interval over that family's tasks (use
/// `agentrl::stats::paired_bootstrap` with `agentrl::evaluation::RESAMPLES`
/// and seed 19). `families` are the held-out family tasks (the split's
/// `families`), which give each task id its family. Families in the order
/// they first appear in the report's scores.
pub fn family_gains(report: &CapstoneReport, families: &[Task], seed: usize) -> Vec<(Family, f64, f64, f64)> {
    todo!("Exercise 19.2: group the per-task pass@1 of warm start and trained agent by family, then a paired bootstrap per family")
}
