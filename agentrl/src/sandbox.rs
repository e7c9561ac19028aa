//! Chapter 1: running code we did not write.
//!
//! The code under repair in this book is [Rhai](https://rhai.rs), a small
//! scripting language embedded in Rust. A [`Sandbox`] is a Rhai engine with
//! hard limits: it has no file system, network or console, and every script
//! is cut off after a fixed number of operations, call depth and string/array
//! size. [`run_tests`] turns a source file and a list of test cases into one
//! `PASS`/`FAIL` line per case; nothing a source does can crash or hang it.
//! Chapter 3 extends this runner with a time limit, output limits and process
//! isolation.

use rhai::{
    Array, Dynamic, Engine, EvalAltResult, ImmutableString, NativeCallContext, Scope, AST, INT,
};
use std::fmt;
use std::sync::LazyLock;

/// One test: a call expression in Rhai and the value it must return.
///
/// Both are Rhai text, so a test case is plain data (`"clamp(3, 0, 5)"`, `"3"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestCase {
    pub call: &'static str,
    pub expected: &'static str,
}

/// The outcome of one test case, printed as `PASS clamp(3, 0, 5) -> 3`.
#[derive(Clone, Debug, PartialEq)]
pub struct TestLine {
    pub passed: bool,
    pub text: String,
}

impl fmt::Display for TestLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// True when every line passed (and there is at least one).
pub fn all_pass(lines: &[TestLine]) -> bool {
    !lines.is_empty() && lines.iter().all(|line| line.passed)
}

// ANCHOR: limits
/// The limits every script runs under.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Rhai operations per call (a loop iteration, a function call, ...).
    pub max_operations: u64,
    /// Nested function calls (stops runaway recursion).
    pub max_call_depth: usize,
    /// Characters in any one string, elements in any one array or map.
    pub max_string_len: usize,
    pub max_collection_len: usize,
    /// Bytes held by all the variables of a call together (strings, and
    /// 16 bytes per element or entry), checked every
    /// [`LIVE_DATA_CHECK_EVERY`] variable reads: many values, each within the
    /// limits above, cannot add up to more.
    pub max_live_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_operations: 100_000,
            max_call_depth: 32,
            max_string_len: 10_000,
            max_collection_len: 1_000,
            max_live_bytes: 1_000_000,
        }
    }
}
// ANCHOR_END: limits

/// A Rhai engine that can run untrusted sources.
pub struct Sandbox {
    engine: Engine,
}

// ANCHOR: sandbox
/// A Rhai engine under `limits`: no modules, no console, Python-like `min`/`max`.
pub fn limited_engine(limits: Limits) -> Engine {
    let mut engine = Engine::new();
    engine
        .set_max_operations(limits.max_operations)
        .set_max_call_levels(limits.max_call_depth)
        .set_max_expr_depths(64, 32)
        .set_max_string_size(limits.max_string_len)
        .set_max_array_size(limits.max_collection_len)
        .set_max_map_size(limits.max_collection_len)
        .set_max_modules(0) // no `import`: a script sees nothing outside itself
        .set_strict_variables(true);
    engine.on_print(|_| {}).on_debug(|_, _, _| {}); // a script cannot write to our console
    register_python_min_max(&mut engine);
    register_bounded_pad(&mut engine);
    forbid_sleep(&mut engine);
    bound_live_data(&mut engine, limits.max_live_bytes);
    engine
}

/// How many variable reads pass between two checks of the live data.
pub const LIVE_DATA_CHECK_EVERY: u32 = 32;

thread_local! {
    /// Variable reads since the last check of the live data, per thread, so
    /// that one engine can serve several threads.
    static READS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Bytes a value holds: its characters, 16 bytes per element or entry (the
/// size of a `Dynamic`), and what the elements hold.
pub fn live_bytes(value: &Dynamic) -> usize {
    if let Some(s) = value.read_lock::<ImmutableString>() {
        return s.len();
    }
    if let Some(array) = value.read_lock::<Array>() {
        return array.iter().map(|v| 16 + live_bytes(v)).sum();
    }
    if let Some(map) = value.read_lock::<rhai::Map>() {
        return map.iter().map(|(k, v)| 16 + k.len() + live_bytes(v)).sum();
    }
    if let Some(blob) = value.read_lock::<rhai::Blob>() {
        return blob.len();
    }
    0
}

/// Rhai checks the size of a value when it is made or assigned, but not the
/// container it is stored into by `m[key] = value`: a map can gain entry after
/// entry, each within the limits, until the process holds hundreds of
/// megabytes. Every call's variables live in one scope (a called function's
/// arguments and locals are pushed on top of its caller's), so the sandbox
/// sums the scope on every [`LIVE_DATA_CHECK_EVERY`]-th variable read and
/// stops the script when it holds more than `max` bytes.
#[allow(deprecated)] // `on_var` is marked volatile, not withdrawn
fn bound_live_data(engine: &mut Engine, max: usize) {
    engine.on_var(move |_name, _index, context| {
        let reads = READS.get() + 1;
        READS.set(reads % LIVE_DATA_CHECK_EVERY);
        if reads < LIVE_DATA_CHECK_EVERY {
            return Ok(None);
        }
        let held: usize = context
            .scope()
            .iter_raw()
            .map(|(_, _, value)| live_bytes(value))
            .sum();
        if held > max {
            return Err(EvalAltResult::ErrorDataTooLarge(
                "Data held by the script's variables".into(),
                rhai::Position::NONE,
            )
            .into());
        }
        Ok(None)
    });
}

/// Rhai's standard library has `sleep(seconds)`, which blocks the calling
/// thread inside one native call, beyond the reach of every limit. A script
/// under test has no reason to wait, so the sandbox refuses it.
fn forbid_sleep(engine: &mut Engine) {
    engine.register_fn("sleep", |_seconds: INT| -> Result<(), Box<EvalAltResult>> {
        Err("sleep is not available in the sandbox".into())
    });
    engine.register_fn(
        "sleep",
        |_seconds: rhai::FLOAT| -> Result<(), Box<EvalAltResult>> {
            Err("sleep is not available in the sandbox".into())
        },
    );
}

impl Sandbox {
    pub fn new(limits: Limits) -> Self {
        Sandbox {
            engine: limited_engine(limits),
        }
    }

    /// The sandbox shared by everything in Chapter 1 (default limits).
    pub fn shared() -> &'static Sandbox {
        static SHARED: LazyLock<Sandbox> = LazyLock::new(|| Sandbox::new(Limits::default()));
        &SHARED
    }

    /// Compile a source file; a syntax error comes back as its message.
    pub fn compile(&self, source: &str) -> Result<AST, String> {
        self.engine.compile(source).map_err(|err| err.to_string())
    }

    /// Evaluate one call expression against a compiled source.
    pub fn call(&self, program: &AST, call: &str) -> Result<Dynamic, String> {
        let expr = self
            .engine
            .compile_expression(call)
            .map_err(|err| err.to_string())?;
        let merged = program.merge(&expr); // the source's functions + the call
        self.engine
            .eval_ast_with_scope::<Dynamic>(&mut Scope::new(), &merged)
            .map_err(|err| err.to_string())
    }
}
// ANCHOR_END: sandbox

/// Rhai's `pad` has two holes, found by calling every native function with
/// awkward arguments (`runner::tests`). `string.pad(len, padding)` never
/// returns when `padding` is empty: its loop adds nothing and runs inside one
/// native call, where neither the operation limit nor a clock checked between
/// operations can stop it. `array.pad(len, item)` with a length near `i64::MAX`
/// overflows the arithmetic of its size check (a panic, or a wrapped check and a
/// huge allocation). Ours, registered in the engine's own namespace (searched
/// before the standard library), refuse both and otherwise pad the same way.
fn register_bounded_pad(engine: &mut Engine) {
    engine.register_fn(
        "pad",
        |context: NativeCallContext,
         array: &mut Array,
         len: INT,
         item: Dynamic|
         -> Result<(), Box<EvalAltResult>> {
            let max = context.engine().max_array_size();
            let Ok(len) = usize::try_from(len) else {
                return Ok(());
            }; // a negative length pads nothing
            if max > 0 && len > max {
                return Err(EvalAltResult::ErrorDataTooLarge(
                    "Size of array/BLOB".into(),
                    context.call_position(),
                )
                .into());
            }
            if len > array.len() {
                array.resize(len, item);
            }
            Ok(())
        },
    );
    engine.register_fn(
        "pad",
        |context: NativeCallContext,
         string: &mut ImmutableString,
         len: INT,
         padding: &str|
         -> Result<(), Box<EvalAltResult>> {
            if padding.is_empty() {
                return Err("pad: the padding string is empty".into());
            }
            let max = context.engine().max_string_size();
            let Ok(len) = usize::try_from(len) else {
                return Ok(());
            }; // a negative length pads nothing
            if max > 0 && len > max {
                return Err(EvalAltResult::ErrorDataTooLarge(
                    "Length of string".into(),
                    context.call_position(),
                )
                .into());
            }
            let have = string.chars().count();
            if have < len {
                let mut padded = string.to_string();
                padded.extend(padding.chars().cycle().take(len - have));
                *string = padded.into();
            }
            Ok(())
        },
    );
}

/// Rhai's own `min`/`max` turn `min(0, 1.0)` into the float `0.0`. Ours return
/// the chosen argument unchanged, as Python's do, so `min(0, 1.0)` is the int `0`.
fn register_python_min_max(engine: &mut Engine) {
    fn pick(a: Dynamic, b: Dynamic, want_smaller: bool) -> Dynamic {
        let (x, y) = (
            as_f64(&a).unwrap_or(f64::NAN),
            as_f64(&b).unwrap_or(f64::NAN),
        );
        // Python keeps the first argument on ties.
        let take_b = if want_smaller { y < x } else { y > x };
        if take_b {
            b
        } else {
            a
        }
    }
    macro_rules! both {
        ($a:ty, $b:ty) => {
            engine.register_fn("min", |a: $a, b: $b| {
                pick(Dynamic::from(a), Dynamic::from(b), true)
            });
            engine.register_fn("max", |a: $a, b: $b| {
                pick(Dynamic::from(a), Dynamic::from(b), false)
            });
        };
    }
    both!(i64, i64);
    both!(i64, f64);
    both!(f64, i64);
    both!(f64, f64);
}

/// A number as f64, for comparing ints with floats (`0 == 0.0`, as in Python).
pub fn as_f64(value: &Dynamic) -> Option<f64> {
    if let Ok(i) = value.as_int() {
        Some(i as f64)
    } else {
        value.as_float().ok()
    }
}

/// Equality of two results: numbers by value, anything else by type and text.
pub fn same_value(a: &Dynamic, b: &Dynamic) -> bool {
    match (as_f64(a), as_f64(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a.type_name() == b.type_name() && a.to_string() == b.to_string(),
    }
}

/// Control and bidirectional-formatting characters: what [`shorten`] escapes.
pub fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Text safe to show an agent: at most `max` characters, `...` marking a cut,
/// and control and bidirectional-formatting characters (NUL, escape, newline,
/// right-to-left override, ...) written as escapes such as `\u{202e}`, so that
/// what a script returns cannot forge lines or reorder what is displayed.
pub fn shorten(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == max {
            out.push_str("...");
            break;
        }
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

// ANCHOR: run_tests
/// Run each test case against `source` in the shared sandbox.
///
/// A source that does not compile gives the single line `FAIL load error: ...`;
/// a case that errors at run time (a type error, too many operations) fails
/// with the error as its result.
pub fn run_tests(source: &str, tests: &[TestCase]) -> Vec<TestLine> {
    let sandbox = Sandbox::shared();
    let program = match sandbox.compile(source) {
        Ok(program) => program,
        Err(err) => {
            return vec![TestLine {
                passed: false,
                text: format!("FAIL load error: {err}"),
            }]
        }
    };
    tests
        .iter()
        .map(|test| {
            let expected = sandbox
                .call(&AST::empty(), test.expected)
                .expect("test expectations are valid Rhai");
            let (passed, got) = match sandbox.call(&program, test.call) {
                Ok(value) => (same_value(&value, &expected), value.to_string()),
                Err(err) => (false, format!("error: {err}")),
            };
            let verdict = if passed { "PASS" } else { "FAIL" };
            TestLine {
                passed,
                text: format!("{verdict} {} -> {got}", test.call),
            }
        })
        .collect()
}
// ANCHOR_END: run_tests

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &[TestCase] = &[TestCase {
        call: "f(1)",
        expected: "1",
    }];

    #[test]
    fn passing_and_failing_cases_are_reported() {
        let lines = run_tests(
            "fn f(x) { x }",
            &[
                TestCase {
                    call: "f(2)",
                    expected: "2",
                },
                TestCase {
                    call: "f(2)",
                    expected: "3",
                },
            ],
        );
        assert_eq!(lines[0].text, "PASS f(2) -> 2");
        assert_eq!(lines[1].text, "FAIL f(2) -> 2");
        assert!(!all_pass(&lines));
    }

    #[test]
    fn an_infinite_loop_is_stopped() {
        let lines = run_tests("fn f(x) { loop { x += 1; } }", ONE);
        assert!(!lines[0].passed);
        assert!(
            lines[0].text.contains("Too many operations"),
            "{}",
            lines[0].text
        );
    }

    #[test]
    fn deep_recursion_is_stopped() {
        let lines = run_tests("fn f(x) { f(x + 1) }", ONE);
        assert!(!lines[0].passed);
        assert!(lines[0].text.contains("error"), "{}", lines[0].text);
    }

    #[test]
    fn a_huge_string_is_stopped() {
        let lines = run_tests("fn f(x) { let s = \"ab\"; loop { s += s; } }", ONE);
        assert!(!lines[0].passed);
        assert!(lines[0].text.contains("error"), "{}", lines[0].text);
    }

    #[test]
    fn syntax_errors_and_type_errors_are_observations() {
        let lines = run_tests("fn f(x) { x + }", ONE);
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].text.starts_with("FAIL load error:"),
            "{}",
            lines[0].text
        );
        let lines = run_tests("fn f(x) { x + \"a\" - 1 }", ONE);
        assert!(
            lines[0].text.starts_with("FAIL f(1) -> error:"),
            "{}",
            lines[0].text
        );
    }

    #[test]
    fn scripts_cannot_print_or_import() {
        let lines = run_tests("fn f(x) { print(\"hello\"); x }", ONE);
        assert!(lines[0].passed);
        let lines = run_tests("import \"std\" as s; fn f(x) { x }", ONE);
        assert!(!lines[0].passed, "{}", lines[0].text);
    }

    #[test]
    fn shown_text_is_cut_by_characters_and_escaped() {
        assert_eq!(shorten("abcdef", 3), "abc...");
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("ééé", 2), "éé...");
        assert_eq!(
            shorten("a\u{0}b\u{202e}c\nd", 80),
            "a\\u{0}b\\u{202e}c\\u{a}d"
        );
    }

    #[test]
    fn padding_with_an_empty_string_is_an_error_not_a_hang() {
        let sandbox = Sandbox::shared();
        let program = sandbox
            .compile("fn pad_to(n, fill) { let s = \"a\"; s.pad(n, fill); s }")
            .unwrap();
        let err = sandbox.call(&program, "pad_to(3, \"\")").unwrap_err();
        assert!(err.contains("the padding string is empty"), "{err}");
        assert_eq!(
            sandbox
                .call(&program, "pad_to(6, \"xy\")")
                .unwrap()
                .to_string(),
            "axyxyx"
        );
        assert_eq!(
            sandbox
                .call(&program, "pad_to(-5, \"x\")")
                .unwrap()
                .to_string(),
            "a"
        );
        let err = sandbox
            .call(&program, "pad_to(1000000, \"x\")")
            .unwrap_err();
        assert!(err.contains("Length of string"), "{err}");
    }

    #[test]
    fn scripts_cannot_sleep() {
        let sandbox = Sandbox::shared();
        for call in ["sleep(1000000)", "sleep(0.5)"] {
            let err = sandbox.call(&AST::empty(), call).unwrap_err();
            assert!(err.contains("sleep is not available"), "{call}: {err}");
        }
    }

    #[test]
    fn padding_an_array_to_a_huge_length_is_an_error_not_an_overflow() {
        let sandbox = Sandbox::shared();
        let program = sandbox
            .compile("fn pad_to(n) { let a = [1, 2]; a.pad(n, [1, 2]); a.len() }")
            .unwrap();
        let err = sandbox
            .call(&program, "pad_to(9223372036854775807)")
            .unwrap_err();
        assert!(err.contains("Size of array"), "{err}");
        assert_eq!(
            sandbox.call(&program, "pad_to(5)").unwrap().to_string(),
            "5"
        );
    }

    #[test]
    fn min_and_max_keep_the_type_of_the_chosen_argument() {
        let sandbox = Sandbox::shared();
        let value = sandbox.call(&AST::empty(), "min(0, max(0.5, 1))").unwrap();
        assert_eq!(value.to_string(), "0");
        let value = sandbox.call(&AST::empty(), "max(0, min(0.5, 1))").unwrap();
        assert_eq!(value.to_string(), "0.5");
    }
}
