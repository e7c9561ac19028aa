//! Chapter 2, *RL fundamentals*: exercises 2.1 to 2.5 (2.6 is a design
//! review with a model answer in `chapters/answers-02.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
