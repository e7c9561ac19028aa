//! Chapter 17, *Evaluation*: exercises 17.1 to 17.3 (17.4 and 17.5 are an
//! analysis question and a design question with model answers in
//! `chapters/answers-17.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
