//! Chapter 9, *GRPO and the critic-free family; the main training loop*:
//! exercises 9.1 to 9.5 (9.6 is a design question with a model answer in
//! `chapters/answers-09.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
