//! Chapter 14, *Packing, batching and data filtering*: exercises 14.1 to
//! 14.3 (14.4 and 14.5 are an analysis question and a design question with
//! model answers in `chapters/answers-14.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
