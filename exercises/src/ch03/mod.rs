//! Chapter 3, *Environments and tools: the BugFix gym*: exercises 3.1 to 3.3
//! (3.4 and 3.5 are prose, with model answers in `chapters/answers-03.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
