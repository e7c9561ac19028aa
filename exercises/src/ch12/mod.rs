//! Chapter 12, *Multi-turn behaviour and long horizons*: exercises 12.1 to
//! 12.3 (12.4 and 12.5 are an analysis question and a design question with
//! model answers in `chapters/answers-12.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
