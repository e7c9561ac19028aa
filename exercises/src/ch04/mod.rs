//! Chapter 4, *Environments and tools: the BugFix gym*: exercises 4.1 to 4.3
//! (4.4 and 4.5 are prose, with model answers in `chapters/answers-04.md`).
//!
//! The functions below come from `stubs.rs`, or from `solutions.rs` when the
//! `solutions` feature is on; both files have the same public signatures.

exercise_files!();
