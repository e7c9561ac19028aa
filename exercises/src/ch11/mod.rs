//! Chapter 11, *Rewards, verifiers and reward hacking*: exercises 11.1 to
//! 11.4 (11.5 and 11.6 are a design question and an analysis question with
//! model answers in `chapters/answers-11.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
