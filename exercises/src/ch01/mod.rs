//! Chapter 1, *What is agentic RL?*: exercises 1.1 to 1.6 (1.7 is a design
//! review with a model answer in `chapters/answers-01.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
