//! Chapter 10, *KL and entropy regularization*: exercises 10.1 to 10.5
//! (10.6 is a design question with a model answer in
//! `chapters/answers-10.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
