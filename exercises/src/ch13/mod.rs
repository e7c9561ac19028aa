//! Chapter 13, *Rollout systems*: exercises 13.1 to
//! 13.3 (13.4 and 13.5 are an analysis question and a design question with
//! model answers in `chapters/answers-13.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
