//! Chapter 15, *SFT, rejection sampling and preferences*: exercises 15.1
//! and 15.2 (15.3 and 15.4 are an analysis question and a design question
//! with model answers in `chapters/answers-15.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
