//! Chapter 3: the child process of `agentrl::runner::ProcessRunner`.
//!
//! It reads one JSON request (a source, its tests, the in-process limits) from
//! stdin, runs it in a `Guarded` sandbox and writes one JSON reply to stdout.
//! The parent sets its CPU-time and address-space limits before it starts.
//!
//! The binary compiles the two modules it needs from their source files
//! instead of linking the `agentrl` library, so that it does not load
//! libtorch: a child that starts in a millisecond instead of a few hundred.
#![allow(dead_code)]

#[path = "../sandbox.rs"]
mod sandbox;

#[path = "../runner.rs"]
mod runner;

fn main() {
    runner::child_main();
}
