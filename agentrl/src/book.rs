//! Chapter 0: how the book keeps its printed numbers the same on every run.
//!
//! [`setup`] pins libtorch to one thread (so reductions add in one order) and
//! seeds its generator; the chapter runner also sets `ATEN_CPU_CAPABILITY` so
//! that every x86-64 machine runs the same CPU kernels. [`seeded`] and
//! [`generator_turn`] keep threads that share libtorch's one generator (tests
//! run in parallel) from interleaving their draws. [`figure_path`] says where a
//! chapter writes its figures.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

// ANCHOR: setup
/// Call once at the top of a chapter: one libtorch thread, seed 0.
pub fn setup() {
    tch::set_num_threads(1);
    tch::manual_seed(0);
}
// ANCHOR_END: setup

// ANCHOR: generator
/// A turn at libtorch's random generator. There is one generator per process, so a
/// seeded stream (model initialisation, `randn`, `randint`) comes out the same only
/// if no other thread draws between the seed and the last draw. Code that seeds on
/// several threads at once (the test harness runs tests in parallel) holds this
/// guard for that whole stretch.
pub fn generator_turn() -> MutexGuard<'static, ()> {
    static GENERATOR: Mutex<()> = Mutex::new(());
    GENERATOR.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Take a turn at the generator and seed it; the stream is ours until the guard drops.
pub fn seeded(seed: i64) -> MutexGuard<'static, ()> {
    let turn = generator_turn();
    tch::manual_seed(seed);
    turn
}
// ANCHOR_END: generator

/// Where figure `name` is written: `$AGENTRL_FIGURES/name` when that variable
/// is set (the runner points it at a scratch folder to check figures), else
/// the repository's `figures/` folder.
pub fn figure_path(name: &str) -> PathBuf {
    let dir = match std::env::var_os("AGENTRL_FIGURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../figures"),
    };
    std::fs::create_dir_all(&dir).unwrap_or_else(|err| panic!("cannot create {}: {err}", dir.display()));
    dir.join(name)
}
