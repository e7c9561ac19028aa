//! Chapter 5, *Trajectories and templates*: exercises 5.1 to 5.5 (5.6 is a
//! design question with a model answer in `chapters/answers-05.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
