//! Chapter 3: the sandboxed test runners of the BugFix gym.
//!
//! Chapter 1's [`Sandbox`](crate::sandbox::Sandbox) bounds what a script may
//! do (operations, call depth, string and array sizes). [`Guarded`] adds what
//! a gym needs on top: a time limit checked from Rhai's progress callback, a
//! limit on printed output and on the length of a reported result, and a cache
//! of compiled sources keyed by their text. [`ProcessRunner`] runs the same
//! code in a child process under operating-system limits (CPU time, address
//! space, wall clock), for when a bug in the interpreter itself must not take
//! the trainer down. Both implement [`TestRunner`] and report every outcome,
//! however hostile the source, as `PASS`/`FAIL` lines.

use crate::sandbox::{limited_engine, same_value, shorten, Limits, TestLine};
use rhai::{Dynamic, Engine, EvalAltResult, Scope, AST};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

/// One test as data: a call expression and the value it must return, both Rhai text.
///
/// Chapter 1's [`TestCase`](crate::sandbox::TestCase) holds `&'static str`
/// constants; generated tasks need owned strings that can be serialised.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Test {
    pub call: String,
    pub expected: String,
}

impl Test {
    pub fn new(call: impl Into<String>, expected: impl Into<String>) -> Self {
        Test {
            call: call.into(),
            expected: expected.into(),
        }
    }
}

impl From<&crate::sandbox::TestCase> for Test {
    fn from(case: &crate::sandbox::TestCase) -> Self {
        Test::new(case.call, case.expected)
    }
}

/// Anything that turns a source and its tests into one line per test.
pub trait TestRunner: Send + Sync {
    fn run(&self, source: &str, tests: &[Test]) -> Vec<TestLine>;
}

// ANCHOR: run_limits
/// Limits of one test run: Chapter 1's script limits plus a clock and output caps.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunLimits {
    /// Operations per call; 0 means no limit (the time limit still applies).
    pub max_operations: u64,
    pub max_call_depth: usize,
    pub max_string_len: usize,
    pub max_collection_len: usize,
    /// Bytes all of a call's variables may hold together.
    #[serde(default = "default_live_bytes")]
    pub max_live_bytes: usize,
    /// Processor time per call (the calling thread's own, so a busy machine
    /// that pauses the thread does not use it up), checked every 64 operations.
    pub cpu_time_ms: u64,
    /// Bytes a script may `print` per call before it is stopped.
    pub max_output_bytes: usize,
    /// Characters of a result shown in a test line; longer results are cut.
    pub max_result_chars: usize,
    /// Bytes of source text; a longer source is not compiled.
    pub max_source_bytes: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        let script = Limits::default();
        RunLimits {
            max_operations: script.max_operations,
            max_call_depth: script.max_call_depth,
            max_string_len: script.max_string_len,
            max_collection_len: script.max_collection_len,
            max_live_bytes: script.max_live_bytes,
            cpu_time_ms: 100,
            max_output_bytes: 4_096,
            max_result_chars: 80,
            max_source_bytes: 16_384,
        }
    }
}
// ANCHOR_END: run_limits

fn default_live_bytes() -> usize {
    Limits::default().max_live_bytes
}

/// Distinct sources whose compiled form is kept; the least recently used goes first.
pub const PROGRAM_CACHE_CAPACITY: usize = 1_024;

/// Characters of a load error shown in its line; the rest is cut.
pub const MAX_ERROR_CHARS: usize = 200;

/// `text` made safe by [`shorten`] and then at most `max` characters as
/// shown, `...` marking a cut. `shorten` counts the characters of `text`, and
/// each control character it escapes grows to as many as ten, so a load error
/// of 200 characters made of them would fill a screen; libFuzzer found one of
/// 307 (Chapter 19). A cut inside an escape leaves only harmless text.
fn cut_shown(text: &str, max: usize) -> String {
    let safe = shorten(text, max);
    if safe.chars().count() <= max + 3 {
        return safe;
    }
    let mut out: String = safe.chars().take(max).collect();
    out.push_str("...");
    out
}

/// Functions a script may define in one source.
pub const MAX_FUNCTIONS: usize = 64;

thread_local! {
    /// When the current call must stop (in this thread's processor time), and
    /// how much it has printed so far.
    /// Thread-local, so one engine can serve several threads at once.
    static DEADLINE: Cell<Option<Duration>> = const { Cell::new(None) };
    static PRINTED: Cell<usize> = const { Cell::new(0) };
}

/// The processor time the calling thread has used so far. A clock of this
/// kind, unlike the wall clock, stands still while the thread waits for a
/// processor, so whether a script runs out of time depends on the script and
/// the processor's speed, not on what else the machine is doing.
#[cfg(unix)]
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the pointer it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Duration::MAX; // no clock: stop at the first check rather than run unbounded
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Elsewhere, the time since the first call (a wall clock).
#[cfg(not(unix))]
fn thread_cpu_time() -> Duration {
    static START: LazyLock<Instant> = LazyLock::new(Instant::now);
    START.elapsed()
}

/// Suites abandoned because a call did not return by the hard deadline.
static ABANDONED: AtomicUsize = AtomicUsize::new(0);

/// Compiled programs by source text, at most [`PROGRAM_CACHE_CAPACITY`] of them.
#[derive(Default)]
struct ProgramCache {
    clock: u64,
    entries: HashMap<String, (u64, Result<Arc<AST>, String>)>,
}

impl ProgramCache {
    fn get(&mut self, source: &str) -> Option<Result<Arc<AST>, String>> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(source).map(|(used, program)| {
            *used = clock;
            program.clone()
        })
    }

    fn insert(&mut self, source: &str, program: Result<Arc<AST>, String>) {
        if self.entries.len() >= PROGRAM_CACHE_CAPACITY {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(text, _)| text.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.entries
            .insert(source.to_string(), (self.clock, program));
    }
}

/// The engine, its limits and the compile cache, shared with worker threads.
struct Core {
    engine: Engine,
    limits: RunLimits,
    programs: Mutex<ProgramCache>,
}

/// A Rhai engine with Chapter 1's limits, a time limit, output limits and a compile cache.
#[derive(Clone)]
pub struct Guarded {
    core: Arc<Core>,
}

// ANCHOR: guarded
impl Guarded {
    pub fn new(limits: RunLimits) -> Self {
        Guarded::with_natives(limits, |_| {})
    }

    /// A runner whose engine also has the native functions that `register` adds.
    pub fn with_natives(limits: RunLimits, register: impl FnOnce(&mut Engine)) -> Self {
        let script_limits = Limits {
            max_operations: limits.max_operations,
            max_call_depth: limits.max_call_depth,
            max_string_len: limits.max_string_len,
            max_collection_len: limits.max_collection_len,
            max_live_bytes: limits.max_live_bytes,
        };
        // Chapter 1's engine; the callbacks below replace its silent print/debug.
        let mut engine = limited_engine(script_limits);
        engine.set_max_functions(MAX_FUNCTIONS);
        let max_output = limits.max_output_bytes;
        // `print` and `debug` only count bytes; nothing reaches our console.
        engine.on_print(move |text| PRINTED.set(PRINTED.get().saturating_add(text.len() + 1)));
        engine
            .on_debug(move |text, _, _| PRINTED.set(PRINTED.get().saturating_add(text.len() + 1)));
        // Called before every operation: stop on too much output or on the clock.
        engine.on_progress(move |ops| {
            if PRINTED.get() > max_output {
                return Some(Dynamic::from(format!(
                    "output limit of {max_output} bytes exceeded"
                )));
            }
            if ops % 64 == 0
                && DEADLINE
                    .get()
                    .is_some_and(|deadline| thread_cpu_time() >= deadline)
            {
                return Some(Dynamic::from(format!(
                    "time limit of {} ms of processor time exceeded",
                    limits.cpu_time_ms
                )));
            }
            None
        });
        register(&mut engine);
        let programs = Mutex::new(ProgramCache::default());
        Guarded {
            core: Arc::new(Core {
                engine,
                limits,
                programs,
            }),
        }
    }

    /// The runner the gym uses by default (default limits), shared by all threads.
    pub fn shared() -> &'static Guarded {
        static SHARED: LazyLock<Guarded> = LazyLock::new(|| Guarded::new(RunLimits::default()));
        &SHARED
    }

    pub fn limits(&self) -> RunLimits {
        self.core.limits
    }

    /// Compile once per distinct source text; later calls get the cached tree.
    pub fn compile(&self, source: &str) -> Result<Arc<AST>, String> {
        let max = self.core.limits.max_source_bytes;
        if source.len() > max {
            return Err(format!(
                "source of {} bytes is over the limit of {max} bytes",
                source.len()
            ));
        }
        let mut programs = self
            .core
            .programs
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(found) = programs.get(source) {
            return found;
        }
        let compiled = self
            .core
            .engine
            .compile(source)
            .map(Arc::new)
            .map_err(|err| err.to_string());
        programs.insert(source, compiled.clone());
        compiled
    }

    /// How many distinct sources are in the compile cache.
    pub fn cached_programs(&self) -> usize {
        self.core
            .programs
            .lock()
            .map(|programs| programs.entries.len())
            .unwrap_or(0)
    }

    /// Evaluate one expression against a program under the clock and output limits.
    pub fn call(&self, program: &AST, call: &str) -> Result<Dynamic, String> {
        let engine = &self.core.engine;
        let expr = engine
            .compile_expression(call)
            .map_err(|err| err.to_string())?;
        let merged = program.merge(&expr);
        DEADLINE.set(Some(
            thread_cpu_time() + Duration::from_millis(self.core.limits.cpu_time_ms),
        ));
        PRINTED.set(0);
        let result = engine.eval_ast_with_scope::<Dynamic>(&mut Scope::new(), &merged);
        DEADLINE.set(None);
        result.map_err(|err| match *err {
            EvalAltResult::ErrorTerminated(reason, _) => reason.to_string(),
            other => other.to_string(),
        })
    }
}
// ANCHOR_END: guarded

// ANCHOR: guarded_run
impl Guarded {
    /// Run a suite on the calling thread.
    fn run_here(&self, source: &str, tests: &[Test]) -> Vec<TestLine> {
        let program = match self.compile(source) {
            Ok(program) => program,
            // The interpreter's message can quote the source, control characters included.
            Err(err) => {
                return vec![TestLine {
                    passed: false,
                    text: format!("FAIL load error: {}", cut_shown(&err, MAX_ERROR_CHARS)),
                }]
            }
        };
        tests
            .iter()
            .map(|test| {
                let (passed, got) = match (
                    self.call(&program, &test.call),
                    self.call(&AST::empty(), &test.expected),
                ) {
                    (Ok(value), Ok(expected)) => (same_value(&value, &expected), value.to_string()),
                    (Err(err), _) => (false, format!("error: {err}")),
                    (_, Err(err)) => (false, format!("bad expectation: {err}")),
                };
                let got = shorten(&got, self.core.limits.max_result_chars);
                let verdict = if passed { "PASS" } else { "FAIL" };
                TestLine {
                    passed,
                    text: format!("{verdict} {} -> {got}", test.call),
                }
            })
            .collect()
    }

    /// How long a suite of `tests` may take before it is abandoned: the
    /// cooperative clock of every call (each test and its expectation), plus
    /// one second for compiling and for the thread itself.
    pub fn hard_deadline(&self, tests: usize) -> Duration {
        Duration::from_millis(self.core.limits.cpu_time_ms * (2 * tests as u64 + 1) + 1_000)
    }
}

/// Suites abandoned so far in this process because a call never returned
/// (each one left a worker thread running).
pub fn abandoned_suites() -> usize {
    ABANDONED.load(Ordering::Relaxed)
}

/// A suite for a worker: the runner, the source and its tests.
type Job = (Guarded, String, Vec<Test>);

/// A thread that runs suites for one calling thread, and the two ends of its channels.
struct Worker {
    jobs: mpsc::Sender<Job>,
    lines: mpsc::Receiver<Vec<TestLine>>,
}

impl Worker {
    fn start() -> std::io::Result<Worker> {
        let (jobs, job_queue) = mpsc::channel::<Job>();
        let (reply, lines) = mpsc::channel();
        std::thread::Builder::new()
            .name("sandbox".into())
            .spawn(move || {
                for (runner, source, tests) in job_queue {
                    if reply.send(runner.run_here(&source, &tests)).is_err() {
                        break; // the caller gave up on this worker
                    }
                }
            })?;
        Ok(Worker { jobs, lines })
    }
}

thread_local! {
    /// Each calling thread's worker, started on first use and replaced if abandoned.
    static WORKER: std::cell::RefCell<Option<Worker>> = const { std::cell::RefCell::new(None) };
}

impl TestRunner for Guarded {
    /// The suite runs on a worker thread that the caller waits for at most
    /// [`Guarded::hard_deadline`]: a native function that never returns
    /// cannot hang the caller, whatever the progress callback sees. A worker
    /// that overstays is abandoned and the next suite gets a new one.
    fn run(&self, source: &str, tests: &[Test]) -> Vec<TestLine> {
        let fail = |text: String| {
            vec![TestLine {
                passed: false,
                text,
            }]
        };
        let limit = self.hard_deadline(tests.len());
        WORKER.with(|slot| {
            let mut slot = slot.borrow_mut();
            if slot.is_none() {
                match Worker::start() {
                    Ok(worker) => *slot = Some(worker),
                    Err(err) => return fail(format!("FAIL runner error: cannot start a worker thread: {err}")),
                }
            }
            let worker = slot.as_ref().expect("a worker");
            if worker.jobs.send((self.clone(), source.to_string(), tests.to_vec())).is_err() {
                *slot = None;
                return fail("FAIL runner error: the sandbox panicked".into());
            }
            match worker.lines.recv_timeout(limit) {
                Ok(lines) => lines,
                Err(RecvTimeoutError::Timeout) => {
                    *slot = None;
                    ABANDONED.fetch_add(1, Ordering::Relaxed);
                    fail(format!("FAIL runner error: no result after the hard limit of {} ms; the suite was abandoned", limit.as_millis()))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    *slot = None;
                    fail("FAIL runner error: the sandbox panicked".into())
                }
            }
        })
    }
}
// ANCHOR_END: guarded_run

/// What the parent sends the child: a source, its tests and the in-process limits.
#[derive(Serialize, Deserialize)]
struct Request {
    source: String,
    tests: Vec<Test>,
    limits: RunLimits,
}

/// What the child sends back: one `(passed, text)` per line.
#[derive(Serialize, Deserialize)]
struct Reply {
    lines: Vec<(bool, String)>,
}

// ANCHOR: process_runner
/// Runs each request in a fresh child process under OS limits.
///
/// The child is the `sandbox-child` binary of this crate, which calls
/// [`child_main`]: it reads one JSON request from stdin, runs it with
/// [`Guarded`] and writes one JSON reply to stdout.
#[derive(Clone, Debug)]
pub struct ProcessRunner {
    pub exe: PathBuf,
    /// Limits applied inside the child (the same as in process).
    pub limits: RunLimits,
    /// RLIMIT_CPU: seconds of CPU time before the kernel kills the child.
    pub cpu_seconds: u64,
    /// RLIMIT_AS: bytes of address space the child may map.
    pub memory_bytes: u64,
    /// Wall clock enforced by the parent, which kills a child that overstays.
    pub wall_clock: Duration,
    /// Bytes of the child's stdout the parent reads at most.
    pub max_reply_bytes: u64,
}

impl ProcessRunner {
    pub fn new(exe: impl Into<PathBuf>) -> Self {
        ProcessRunner {
            exe: exe.into(),
            limits: RunLimits::default(),
            cpu_seconds: 2,
            memory_bytes: 1 << 30,
            wall_clock: Duration::from_secs(2),
            max_reply_bytes: 1 << 20,
        }
    }

    fn fail(&self, why: String) -> Vec<TestLine> {
        vec![TestLine {
            passed: false,
            text: format!("FAIL runner error: {why}"),
        }]
    }
}

impl TestRunner for ProcessRunner {
    fn run(&self, source: &str, tests: &[Test]) -> Vec<TestLine> {
        let request = Request {
            source: source.to_string(),
            tests: tests.to_vec(),
            limits: self.limits,
        };
        let request = serde_json::to_vec(&request).expect("a request serialises");
        let (cpu, memory) = (self.cpu_seconds, self.memory_bytes);
        let mut command = Command::new(&self.exe);
        command
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        set_os_limits(&mut command, cpu, memory);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => return self.fail(format!("cannot start {}: {err}", self.exe.display())),
        };
        let mut stdin = child.stdin.take().expect("piped stdin");
        let writer = std::thread::spawn(move || stdin.write_all(&request));
        let stdout = child.stdout.take().expect("piped stdout");
        let limit = self.max_reply_bytes;
        let reader = std::thread::spawn(move || {
            let mut reply = Vec::new();
            stdout.take(limit).read_to_end(&mut reply).map(|_| reply)
        });
        let deadline = Instant::now() + self.wall_clock;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err(format!(
                        "killed after the wall-clock limit of {} ms",
                        self.wall_clock.as_millis()
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_micros(100)),
                Err(err) => break Err(err.to_string()),
            }
        };
        let _ = writer.join();
        let reply = reader
            .join()
            .map_err(|_| "reader panicked".to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        let status = match status {
            Ok(status) => status,
            Err(why) => return self.fail(why),
        };
        if !status.success() {
            return self.fail(describe_exit(status));
        }
        match reply.and_then(|bytes| {
            serde_json::from_slice::<Reply>(&bytes).map_err(|err| err.to_string())
        }) {
            Ok(reply) => reply
                .lines
                .into_iter()
                .map(|(passed, text)| TestLine { passed, text })
                .collect(),
            Err(err) => self.fail(format!("unreadable reply: {err}")),
        }
    }
}
// ANCHOR_END: process_runner

// ANCHOR: os_limits
/// CPU seconds and address space for the child, set between fork and exec.
#[cfg(unix)]
fn set_os_limits(command: &mut Command, cpu_seconds: u64, memory_bytes: u64) {
    use std::os::unix::process::CommandExt;
    let limit = |resource, value: u64| {
        // The hard limit one above the soft one: at the soft limit the kernel
        // sends SIGXCPU (a named cause), at the hard one SIGKILL.
        let bound = libc::rlimit {
            rlim_cur: value as libc::rlim_t,
            rlim_max: value.saturating_add(1) as libc::rlim_t,
        };
        // SAFETY: setrlimit is async-signal-safe and only touches the child.
        if unsafe { libc::setrlimit(resource, &bound) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: the closure runs in the forked child and calls only setrlimit.
    unsafe {
        command.pre_exec(move || {
            limit(libc::RLIMIT_CPU, cpu_seconds)?;
            limit(libc::RLIMIT_AS, memory_bytes)?;
            limit(libc::RLIMIT_CORE, 0)
        });
    }
}
// ANCHOR_END: os_limits

#[cfg(not(unix))]
fn set_os_limits(_command: &mut Command, _cpu_seconds: u64, _memory_bytes: u64) {}

fn describe_exit(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            let name = match signal {
                libc::SIGXCPU => "SIGXCPU, the CPU-time limit",
                libc::SIGKILL => "SIGKILL",
                libc::SIGSEGV => "SIGSEGV",
                libc::SIGABRT => "SIGABRT",
                _ => "a signal",
            };
            return format!("child killed by {name} ({signal})");
        }
    }
    format!("child exited with {status}")
}

/// The child side of [`ProcessRunner`]: one request on stdin, one reply on stdout.
pub fn child_main() {
    let mut input = String::new();
    if std::io::stdin()
        .take(16 << 20)
        .read_to_string(&mut input)
        .is_err()
    {
        std::process::exit(2);
    }
    let request: Request = match serde_json::from_str(&input) {
        Ok(request) => request,
        Err(_) => std::process::exit(3),
    };
    let lines = Guarded::new(request.limits).run(&request.source, &request.tests);
    let reply = Reply {
        lines: lines
            .into_iter()
            .map(|line| (line.passed, line.text))
            .collect(),
    };
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, &reply);
    let _ = out.flush();
}

/// Sources that would hang, crash or flood an unprotected runner, by name.
pub const HOSTILE_SOURCES: &[(&str, &str)] = &[
    ("infinite loop", "fn f(x){\n    loop { x += 1; }\n}\n"),
    ("deep recursion", "fn f(x){\n    f(x + 1)\n}\n"),
    ("huge string", "fn f(x){\n    let s = \"ab\";\n    loop { s += s; }\n}\n"),
    ("huge array", "fn f(x){\n    let a = [];\n    loop { a.push(x); }\n}\n"),
    ("growing map", "fn f(x){\n    let m = #{};\n    for i in 0..20000 {\n        let s = \"x\";\n        s.pad(9000, \"y\");\n        m[`${i}`] = s + i;\n    }\n}\n"),
    ("type error", "fn f(x){\n    x + \"one\" - 1\n}\n"),
    ("syntax error", "fn f(x){\n    x +\n}\n"),
    ("huge output", "fn f(x){\n    let s = \"spam \";\n    for i in 0..8 { s += s; }\n    loop { print(s); }\n}\n"),
    ("long result", "fn f(x){\n    let a = [];\n    a.pad(500, x);\n    a\n}\n"),
    ("empty padding", "fn f(x){\n    let s = \"a\";\n    s.pad(10, \"\");\n    s\n}\n"),
    ("control chars", "fn f(x){\n    \"\\x00\\u202E\" + x\n}\n"),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn one() -> Vec<Test> {
        vec![Test::new("f(1)", "1")]
    }

    fn hostile(name: &str) -> &'static str {
        HOSTILE_SOURCES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
            .unwrap()
    }

    #[test]
    fn a_correct_source_passes() {
        let lines = Guarded::shared().run(
            "fn f(x){ x }",
            &[Test::new("f(1)", "1"), Test::new("f(2)", "3")],
        );
        assert_eq!(lines[0].text, "PASS f(1) -> 1");
        assert_eq!(lines[1].text, "FAIL f(2) -> 2");
    }

    #[test]
    fn every_hostile_source_is_a_fail_line() {
        for (name, source) in HOSTILE_SOURCES {
            let lines = Guarded::shared().run(source, &one());
            assert_eq!(lines.len(), 1, "{name}");
            assert!(
                lines[0].text.starts_with("FAIL "),
                "{name}: {}",
                lines[0].text
            );
            assert!(!lines[0].passed, "{name}");
        }
    }

    #[test]
    fn each_hostile_source_fails_for_its_own_reason() {
        let text = |name| Guarded::shared().run(hostile(name), &one())[0].text.clone();
        assert!(
            text("infinite loop").contains("error: Too many operations"),
            "{}",
            text("infinite loop")
        );
        assert!(
            text("deep recursion").contains("Stack overflow"),
            "{}",
            text("deep recursion")
        );
        assert!(
            text("huge string").contains("Length of string too large"),
            "{}",
            text("huge string")
        );
        assert!(
            text("huge array").contains("Size of array/BLOB too large"),
            "{}",
            text("huge array")
        );
        assert!(
            text("growing map").contains("Data held by the script's variables too large"),
            "{}",
            text("growing map")
        );
        assert!(
            text("type error").contains("error: Function not found"),
            "{}",
            text("type error")
        );
        assert!(
            text("syntax error").starts_with("FAIL load error:"),
            "{}",
            text("syntax error")
        );
        assert_eq!(
            text("huge output"),
            "FAIL f(1) -> error: output limit of 4096 bytes exceeded"
        );
        let long = text("long result");
        assert!(
            long.starts_with("FAIL f(1) -> [1, 1, 1") && long.ends_with("..."),
            "{long}"
        );
        assert_eq!(long.chars().count(), "FAIL f(1) -> ".len() + 80 + 3);
        assert!(
            text("empty padding").contains("the padding string is empty"),
            "{}",
            text("empty padding")
        );
        assert_eq!(text("control chars"), "FAIL f(1) -> \\u{0}\\u{202e}1");
    }

    #[test]
    fn sources_are_bounded_in_size_and_in_functions() {
        let huge = "fn f(x){ x }\n".repeat(80_000); // about 1 MB
        let lines = Guarded::shared().run(&huge, &one());
        assert_eq!(
            lines[0].text,
            format!(
                "FAIL load error: source of {} bytes is over the limit of 16384 bytes",
                huge.len()
            )
        );
        let many: String = (0..=MAX_FUNCTIONS)
            .map(|i| format!("fn g{i}(x){{ x }}\n"))
            .collect::<String>()
            + "fn f(x){ x }";
        let lines = Guarded::shared().run(&many, &one());
        assert!(
            lines[0]
                .text
                .starts_with("FAIL load error: Number of functions defined exceeds maximum limit"),
            "{}",
            lines[0].text
        );
    }

    #[test]
    fn the_compile_cache_keeps_the_most_recently_used_sources() {
        let runner = Guarded::new(RunLimits::default());
        let source = |i: usize| format!("fn f(x){{ x + {i} }}");
        for i in 0..PROGRAM_CACHE_CAPACITY + 10 {
            runner.compile(&source(i)).unwrap();
            runner.compile(&source(0)).unwrap(); // kept in use
        }
        assert_eq!(runner.cached_programs(), PROGRAM_CACHE_CAPACITY);
        let cache = runner.core.programs.lock().unwrap();
        assert!(cache.entries.contains_key(&source(0)));
        assert!(
            !cache.entries.contains_key(&source(1)),
            "the least recently used source is evicted first"
        );
    }

    /// Call every native function the engine has (every name, every number of
    /// parameters) with every combination of awkward arguments: empty and
    /// huge strings, the extreme integers, empty and nested collections, unit,
    /// a function pointer. Each call must come back (with a value or an error)
    /// within seconds; a watchdog names the call that does not.
    #[test]
    fn no_native_function_runs_unbounded_on_awkward_arguments() {
        use std::collections::BTreeSet;
        use std::sync::atomic::AtomicBool;
        const WIDE: &[&str] = &[
            "\"\"",
            "\"ab\"",
            "'x'",
            "0",
            "-1",
            "2",
            "1000000",
            "9223372036854775807",
            "-9223372036854775808",
            "0.5",
            "-0.0",
            "[]",
            "[1, \"a\", [2]]",
            "#{a: 1}",
            "()",
            "true",
            "(1..3)",
            "blob(2)",
            "Fn(\"g\")",
        ];
        const NARROW: &[&str] = &[
            "\"\"",
            "\"ab\"",
            "0",
            "-1",
            "9223372036854775807",
            "-9223372036854775808",
            "[1, 2]",
            "'x'",
        ];
        let runner = Guarded::shared();
        let mut functions = BTreeSet::new();
        for signature in runner.core.engine.gen_fn_signatures(true) {
            let (name, rest) = signature.split_once('(').unwrap();
            let params = rest.split(')').next().unwrap();
            let arity = if params.trim().is_empty() {
                0
            } else {
                params.split(',').count()
            };
            let plain = name.chars().all(|c| c.is_alphanumeric() || c == '_');
            if plain && !name.is_empty() {
                functions.insert((name.to_string(), arity));
            }
        }
        assert!(
            functions.len() > 100,
            "only {} functions found",
            functions.len()
        );
        let calls: Vec<String> = functions
            .iter()
            .flat_map(|(name, arity)| {
                let pool = if *arity >= 4 { NARROW } else { WIDE };
                let mut argument_lists = vec![Vec::<&str>::new()];
                for _ in 0..*arity {
                    argument_lists = argument_lists
                        .iter()
                        .flat_map(|args| {
                            pool.iter().map(move |a| [args.clone(), vec![*a]].concat())
                        })
                        .collect();
                }
                argument_lists
                    .into_iter()
                    .map(move |args| format!("{name}({})", args.join(", ")))
            })
            .collect();
        assert!(calls.len() > 100_000, "only {} calls", calls.len());
        let program = runner.compile("fn g(a, b) { a }").unwrap();
        let current = Arc::new(Mutex::new(String::new()));
        let (done, finished) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let panicked = Arc::new(Mutex::new(Vec::<String>::new()));
        let total = calls.len();
        {
            let (current, done, finished, panicked) = (
                current.clone(),
                done.clone(),
                finished.clone(),
                panicked.clone(),
            );
            std::thread::spawn(move || {
                for call in calls {
                    *current.lock().unwrap() = call.clone();
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        runner.call(&program, &call)
                    }))
                    .is_err()
                    {
                        panicked.lock().unwrap().push(call);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
                finished.store(true, Ordering::SeqCst);
            });
        }
        let (mut last, mut since) = (0, Instant::now());
        while !finished.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
            let now = done.load(Ordering::SeqCst);
            if now != last {
                (last, since) = (now, Instant::now());
            }
            assert!(
                since.elapsed() < Duration::from_secs(10),
                "no return after 10 s from `{}`",
                current.lock().unwrap()
            );
        }
        assert_eq!(done.load(Ordering::SeqCst), total);
        assert_eq!(
            *panicked.lock().unwrap(),
            Vec::<String>::new(),
            "native functions that panicked"
        );
    }

    #[test]
    fn a_native_call_that_never_returns_is_abandoned_at_the_hard_limit() {
        let limits = RunLimits {
            cpu_time_ms: 10,
            ..RunLimits::default()
        };
        let runner = Guarded::with_natives(limits, |engine| {
            engine.register_fn("stall", || std::thread::sleep(Duration::from_secs(3)));
        });
        let before = abandoned_suites();
        let lines = runner.run("fn f(x){ stall(); x }", &one());
        assert_eq!(
            lines[0].text,
            "FAIL runner error: no result after the hard limit of 1030 ms; the suite was abandoned"
        );
        assert!(abandoned_suites() > before);
        // The next suite on this thread gets a fresh worker.
        assert_eq!(runner.run("fn f(x){ x }", &one())[0].text, "PASS f(1) -> 1");
    }

    #[test]
    fn the_time_limit_stops_a_loop_that_the_operation_limit_would_not() {
        let limits = RunLimits {
            max_operations: 0,
            cpu_time_ms: 20,
            ..RunLimits::default()
        };
        let lines = Guarded::new(limits).run(hostile("infinite loop"), &one());
        assert_eq!(
            lines[0].text,
            "FAIL f(1) -> error: time limit of 20 ms of processor time exceeded"
        );
    }

    #[test]
    fn compiled_sources_are_cached_by_text() {
        let runner = Guarded::new(RunLimits::default());
        for _ in 0..3 {
            runner.run("fn f(x){ x }", &one());
            runner.run("fn f(x){ x + 0 }", &one());
            runner.run("fn f(x){ x +", &one());
        }
        assert_eq!(runner.cached_programs(), 3);
    }

    #[test]
    fn scripts_see_no_files_and_no_modules() {
        let lines = Guarded::shared().run("import \"std\" as s;\nfn f(x){ x }", &one());
        assert!(!lines[0].passed, "{}", lines[0].text);
        let lines = Guarded::shared().run("fn f(x){ open_file(\"/etc/passwd\") }", &one());
        assert!(
            lines[0]
                .text
                .starts_with("FAIL f(1) -> error: Function not found"),
            "{}",
            lines[0].text
        );
    }

    #[test]
    fn a_missing_child_binary_is_a_fail_line() {
        let runner = ProcessRunner::new("/nonexistent/sandbox-child");
        let lines = runner.run("fn f(x){ x }", &one());
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].text.starts_with("FAIL runner error: cannot start"),
            "{}",
            lines[0].text
        );
    }
}
