//! Chapter 16, *Distillation for agents*: exercises 16.1 and 16.2 (16.3 and
//! 16.4 are an analysis question and a design question with model answers
//! in `chapters/answers-16.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
