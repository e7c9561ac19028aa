//! Chapter 6, *Policy gradients*: exercises 6.1 to 6.5 (6.6 is a diagnosis
//! question with a model answer in `chapters/answers-06.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
