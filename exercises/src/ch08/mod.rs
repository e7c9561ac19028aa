//! Chapter 8, *PPO and safe sample reuse*: exercises 8.1 to 8.5 (8.6 is a
//! design question with a model answer in `chapters/answers-08.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
