//! Small helpers: the repository root, running commands with clear errors, timing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

pub type Result<T> = std::result::Result<T, String>;

/// The workspace root (the folder holding `book.toml`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Print a step header; every long step says what it is doing first.
pub fn step(what: &str) {
    eprintln!("\x1b[1m==> {what}\x1b[0m");
}

/// Run a command with inherited output; fail with the command line on error.
pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .map_err(|err| format!("could not start {shown}: {err}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("command failed ({status}): {shown}"))
    }
}

/// Run a command and capture its output (status is not checked).
pub fn capture(cmd: &mut Command) -> Result<Output> {
    let shown = format!("{cmd:?}");
    cmd.output()
        .map_err(|err| format!("could not start {shown}: {err}"))
}

/// Seconds since `start`, for the step summaries.
pub fn secs(start: Instant) -> String {
    format!("{:.1} s", start.elapsed().as_secs_f64())
}

/// Is `program` on the PATH (or at this path)?
pub fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).exists().then(|| PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// `~/.cargo/bin`, where `cargo install` puts the book tools.
pub fn cargo_bin() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo")
        });
    home.join("bin")
}

/// Text of a file, with the path in the error.
pub fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))
}

/// Write a file (creating its folder), with the path in the error.
pub fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|err| format!("cannot write {}: {err}", path.display()))
}

/// A unified-style line diff of expected vs actual, for failure messages.
pub fn diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut out = String::new();
    let n = e.len().max(a.len());
    for i in 0..n {
        match (e.get(i), a.get(i)) {
            (Some(x), Some(y)) if x == y => out.push_str(&format!("   {x}\n")),
            (x, y) => {
                if let Some(x) = x {
                    out.push_str(&format!(" - {x}\n"));
                }
                if let Some(y) = y {
                    out.push_str(&format!(" + {y}\n"));
                }
            }
        }
    }
    out
}

/// Apply `f` to every item on `workers` threads (items are taken in order);
/// `f` also gets the number of the worker that runs it. Results come back in
/// the items' order.
pub fn parallel<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for worker in 0..workers.clamp(1, items.len().max(1)) {
            let (next, results, f) = (&next, &results, &f);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= items.len() {
                    break;
                }
                let result = f(worker, &items[i]);
                *results[i].lock().unwrap() = Some(result);
            });
        }
    });
    results
        .into_iter()
        .map(|slot| slot.into_inner().unwrap().expect("every item ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn parallel_keeps_the_order_and_runs_everything() {
        let items: Vec<u64> = (0..25).collect();
        let out = super::parallel(&items, 2, |_, &x| x * x);
        assert_eq!(out, items.iter().map(|x| x * x).collect::<Vec<_>>());
        assert!(super::parallel(&Vec::<u8>::new(), 2, |_, &x| x).is_empty());
    }
}
