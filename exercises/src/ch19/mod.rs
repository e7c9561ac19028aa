//! Chapter 19, *Capstone: A Coding Agent End to End*: exercises 19.1 and 19.2
//! (19.3 and 19.4 are an analysis question and a design question with model
//! answers in `chapters/answers-19.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
