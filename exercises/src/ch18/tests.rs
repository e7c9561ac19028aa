//! Grading tests for the Chapter 18 exercises: `cargo test -p exercises ch18`.
//!
//! Exercise 18.1 is graded on the metrics files the chapter's runs wrote;
//! Exercise 18.2 on the loss of `agentrl::debugging::Injected`.

use super::*;
use agentrl::debugging::{Bug, Injected};
use agentrl::grpo::{Grpo, Plain, TrainConfig};
use agentrl::pg::{read_records, TrainRecord};

fn records(name: &str) -> Vec<TrainRecord> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../figures").join(name);
    read_records(&path).unwrap_or_else(|err| panic!("{err} (run `cargo xtask refresh 18` to write it)"))
}

/// What each mystery run holds: the grader's answers.
const ANSWERS: [(usize, Bug); 7] = [
    (1, Bug::ReferenceAliased),
    (2, Bug::Retokenized),
    (3, Bug::MisalignedLogprobs),
    (4, Bug::AdvantageSignFlipped),
    (5, Bug::GroupShift),
    (6, Bug::StaleWeights),
    (7, Bug::MaskOff),
];

// ---------------------------------------------------------------------------
// Exercise 18.1
// ---------------------------------------------------------------------------

/// The seeds the diagnosis is graded on: the chapter wrote them beside seeds
/// 0-2, which are for reading and tuning, and no threshold of the reference
/// solution was chosen on them.
const GRADED: [u64; 3] = [3, 4, 5];

#[test]
fn ex1_names_the_bug_of_every_mystery_run_of_the_unseen_seeds() {
    for seed in GRADED {
        let healthy = records(&format!("ch18-healthy-seed-{seed}.jsonl"));
        for (k, bug) in ANSWERS {
            let run = records(&format!("ch18-mystery-{k}-seed-{seed}.jsonl"));
            assert_eq!(diagnose(&run, &healthy), Some(bug), "mystery run {k}, seed {seed}");
        }
    }
}

#[test]
fn ex1_finds_nothing_wrong_with_the_healthy_runs_of_the_unseen_seeds() {
    for seed in GRADED {
        let healthy = records(&format!("ch18-healthy-seed-{seed}.jsonl"));
        assert_eq!(diagnose(&healthy, &healthy), None, "healthy run, seed {seed}");
        for other_seed in GRADED.into_iter().filter(|&o| o != seed) {
            let other = records(&format!("ch18-healthy-seed-{other_seed}.jsonl"));
            assert_eq!(diagnose(&healthy, &other), None, "healthy run {seed} against the healthy run of seed {other_seed}");
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 18.2
// ---------------------------------------------------------------------------

fn injected(bug: Option<Bug>, config: TrainConfig) -> Injected {
    Injected::new(bug, Grpo { config, regularizer: Box::new(Plain) }, None)
}

#[test]
fn ex2_passes_the_healthy_loss_and_bugs_that_leave_the_loss_alone() {
    assert_eq!(check_normalisation(&mut injected(None, TrainConfig::grpo_plus_plus())), Ok(()));
    // The sign bug lives in the advantages, which the check supplies itself.
    assert_eq!(check_normalisation(&mut injected(Some(Bug::AdvantageSignFlipped), TrainConfig::grpo_plus_plus())), Ok(()));
}

#[test]
fn ex2_catches_the_wrong_denominator() {
    let err = check_normalisation(&mut injected(Some(Bug::LossDenominator), TrainConfig::grpo_plus_plus()));
    assert!(err.is_err(), "the loss-denominator bug must fail the check");
}

#[test]
fn ex2_catches_the_averaged_micro_batch_means() {
    // Right on a batch whose micro-batches have equal sizes, wrong on any other.
    let err = check_normalisation(&mut injected(Some(Bug::AccumulationDenominator), TrainConfig::grpo_plus_plus()));
    assert!(err.is_err(), "averaging micro-batch means must fail the check");
}

#[test]
fn ex2_catches_other_normalisations_too() {
    // GRPO's per-sequence mean weighs a token of the short sequence more than one of the long one.
    assert!(check_normalisation(&mut injected(None, TrainConfig::grpo())).is_err());
    // DAPO's per-token mean is constant within a batch, but not 1 / (B · C).
    assert!(check_normalisation(&mut injected(None, TrainConfig::dapo())).is_err());
}
