//! Chapter 18, *Debugging RL Runs*: exercises 18.1 and 18.2 (18.3 and 18.4 are
//! an analysis question and a design question with model answers in
//! `chapters/answers-18.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
