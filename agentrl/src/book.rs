//! Chapter 0: how the book keeps its printed numbers the same on every run.
//!
//! [`setup`] pins libtorch to one thread (so reductions add in one order) and
//! seeds its generator; the chapter runner also sets `ATEN_CPU_CAPABILITY` so
//! that every x86-64 machine runs the same CPU kernels where it can. [`REAL`]
//! makes the networks compute in 64 bits, so that the orders of summation that
//! still differ between processors stay far below the printed digits. [`seeded`] and
//! [`generator_turn`] keep threads that share libtorch's one generator (tests
//! run in parallel) from interleaving their draws. [`figure_path`] says where a
//! chapter writes its figures. [`reuse`] lets the test command's notebook stage
//! read back the training runs that the chapter stage finished.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tch::Kind;

// ANCHOR: real
/// The floating-point kind of every network in the book: 64-bit. Different
/// processors add the terms of a matrix product in different orders; in 64 bits
/// the results differ by about 1e-16 of their size, and training amplifies that
/// far less than to a printed digit or to a different sampled token (Section 0.7).
pub const REAL: Kind = Kind::Double;
// ANCHOR_END: real

// ANCHOR: setup
/// Call once at the top of a chapter: one libtorch thread, seed 0.
/// (`AGENTRL_THREADS=2` gives libtorch two threads: the test command runs every
/// chapter that way too, to show that the printed outputs do not depend on it.)
pub fn setup() {
    let threads = std::env::var("AGENTRL_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    tch::set_num_threads(threads);
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
    GENERATOR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Take a turn at the generator and seed it; the stream is ours until the guard drops.
pub fn seeded(seed: i64) -> MutexGuard<'static, ()> {
    let turn = generator_turn();
    tch::manual_seed(seed);
    turn
}
// ANCHOR_END: generator

/// The repository's data file `name` (`data/name`): measurements recorded
/// once on a named machine and read by the chapters, such as Chapter 13's latencies.
pub fn data_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data")
        .join(name)
}

/// The processor's name as Linux reports it (`model name` in /proc/cpuinfo),
/// or "unknown": the machine that a data file was recorded on.
pub fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Where figure `name` is written: `$AGENTRL_FIGURES/name` when that variable
/// is set (the runner points it at a scratch folder to check figures), else
/// the repository's `figures/` folder.
pub fn figure_path(name: &str) -> PathBuf {
    let dir = match std::env::var_os("AGENTRL_FIGURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../figures"),
    };
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|err| panic!("cannot create {}: {err}", dir.display()));
    dir.join(name)
}

/// FNV-1a, 64 bits: a hash that is the same in every build (std's is not),
/// for naming stored runs. Continue a hash by passing the last one as `hash`.
pub fn fnv1a(bytes: &[u8], hash: u64) -> u64 {
    bytes
        .iter()
        .fold(hash, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// A place where a test may kill the process: when `AGENTRL_KILL_AT` names
/// `point`, the process sends itself SIGKILL, which it can neither catch nor
/// clean up after, as a lost machine would stop it. The tests of resuming
/// (Chapter 19) kill runs this way in the middle of a save.
pub fn kill_point(point: &str) {
    if std::env::var("AGENTRL_KILL_AT").is_ok_and(|at| at == point) {
        // SAFETY: getpid and kill have no preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

/// The hash [`fnv1a`] starts from.
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// The folder that `AGENTRL_RUN_CACHE` names, if it is set: see [`reuse`].
pub fn run_cache() -> Option<PathBuf> {
    std::env::var_os("AGENTRL_RUN_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The test command runs every chapter and then, under another setting, its
/// notebook, which would repeat the chapter's training. It sets
/// `AGENTRL_RUN_CACHE` to a folder that it empties first; a training function
/// that finds a finished run of the same `key` there (the same code within one
/// test command, and a key that names everything the run starts from) reads it
/// back instead of training again. Without the variable, as for a reader,
/// every run trains.
///
/// With a `cache` folder (see [`run_cache`]): if a complete entry for `key` is
/// stored there, `read` gets its folder and its answer is returned; otherwise
/// `train` runs, `write` stores what it made into a fresh folder, and the entry
/// is marked complete. An entry that cannot be read back counts as absent.
pub fn reuse<T>(
    cache: Option<&Path>,
    key: &str,
    train: impl FnOnce() -> T,
    write: impl FnOnce(&T, &Path) -> Result<(), String>,
    read: impl FnOnce(&Path) -> Result<T, String>,
) -> Result<T, String> {
    let Some(cache) = cache else {
        return Ok(train());
    };
    let stored = cache.join(format!("{:016x}", fnv1a(key.as_bytes(), FNV_START)));
    if stored.join("complete").exists()
        && std::fs::read_to_string(stored.join("key")).ok().as_deref() == Some(key)
    {
        if let Ok(found) = read(&stored) {
            return Ok(found);
        }
    }
    let made = train();
    let _ = std::fs::remove_dir_all(&stored);
    std::fs::create_dir_all(&stored)
        .map_err(|err| format!("cannot create {}: {err}", stored.display()))?;
    write(&made, &stored)?;
    std::fs::write(stored.join("key"), key).map_err(|err| err.to_string())?;
    std::fs::write(stored.join("complete"), "").map_err(|err| err.to_string())?;
    Ok(made)
}
