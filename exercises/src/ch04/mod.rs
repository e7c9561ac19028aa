//! Chapter 4, *Language models as policies; TinyAgent*: exercises 4.1 to 4.6
//! (4.7 is a design question with a model answer in `chapters/answers-04.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
