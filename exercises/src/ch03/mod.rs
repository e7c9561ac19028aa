//! Chapter 3, *Language models as policies; TinyAgent*: exercises 3.1 to 3.6
//! (3.7 is a design question with a model answer in `chapters/answers-03.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
