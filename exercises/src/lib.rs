//! Exercises for *Agentic RL in Rust*, graded by tests.
//!
//! Every chapter with code exercises has a module here (`ch01`, `ch02`, ...)
//! made of four files:
//!
//! | file | what it is |
//! | --- | --- |
//! | `chNN/stubs.rs` | the file you edit: one function per exercise, its doc comment states the task, its body is `todo!()` |
//! | `chNN/tests.rs` | the grading tests, named `ex1_...`, `ex2_...`; read them, but do not edit them |
//! | `chNN/solutions.rs` | reference solutions; try the exercise before you open it |
//! | `chNN/mod.rs` | picks the stubs or the solutions and re-exports them |
//!
//! # How to work an exercise
//!
//! 1. Read the exercise at the end of the chapter and the doc comment of its
//!    function in `src/chNN/stubs.rs`.
//! 2. Replace the `todo!()` with your code. You may add private helper
//!    functions, but keep every public signature as it is: the tests call them.
//! 3. From the workspace root, run the chapter's tests:
//!
//!    ```text
//!    cargo test -p exercises ch01            # every exercise of Chapter 1
//!    cargo test -p exercises ch01::tests::ex3 # only Exercise 1.3
//!    ```
//!
//!    A test that still reaches a `todo!()` fails with the exercise's number in
//!    its message; a test that reaches a wrong answer fails with an assertion
//!    that says what was expected.
//!
//! The reference solutions are compiled instead of the stubs when the
//! `solutions` feature is on, which is how the book checks that every test can
//! be passed (and, without the feature, that every test fails on the stubs):
//!
//! ```text
//! cargo test -p exercises --features solutions
//! ```
//!
//! Prose exercises (design reviews, "what does this imply" questions) have no
//! tests; their model answers are in `chapters/answers-NN.md`.

/// A chapter module's files: `stubs.rs`, or `solutions.rs` when the
/// `solutions` feature is on (both with the same public signatures), and the
/// grading tests in `tests.rs`. Each `chNN/mod.rs` calls this once.
macro_rules! exercise_files {
    () => {
        #[cfg(not(feature = "solutions"))]
        #[path = "stubs.rs"]
        mod answers;

        #[cfg(feature = "solutions")]
        #[path = "solutions.rs"]
        mod answers;

        pub use answers::*;

        #[cfg(test)]
        mod tests;
    };
}

pub mod ch00;
pub mod ch01;
pub mod ch02;
pub mod ch03;
pub mod ch04;
pub mod ch05;
pub mod ch06;
pub mod ch07;
pub mod ch08;
pub mod ch09;
pub mod ch10;
pub mod ch11;
pub mod ch12;
pub mod ch13;
pub mod ch14;
pub mod ch15;
pub mod ch16;
pub mod ch17;
pub mod ch18;
pub mod ch19;
#[cfg(test)]
mod testkit;
