//! Chapter 7, *Advantages and credit assignment*: exercises 7.1 to 7.5 (7.6 is
//! a design question with a model answer in `chapters/answers-07.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
