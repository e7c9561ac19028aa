//! Chapter 19: a grammar-aware fuzzer for everything a policy or a task can hand the gym.
//!
//! Four targets: the call parser ([`parse_call`]), the environment step
//! ([`BugFixEnv::step`]), the in-process runner ([`Guarded`]) and the
//! child-process runner ([`ProcessRunner`]). Inputs come from small grammars
//! (tool calls; Rhai functions built from statements, expressions and the
//! standard library's functions called with boundary values; test calls), from
//! the catalogues of hostile inputs, and from random mutations of all of these
//! and of the gym's own sources. Every input is checked against properties that
//! must hold whatever it is: the target returns, within its wall-clock bound,
//! with output of the promised shape, and no hidden test ever shows in an
//! observation. Counts by outcome, the slowest input and the process's resident
//! memory go into one [`TargetReport`] per target.
//!
//! Every input draws from its own stream, seeded by (seed, target, index)
//! ([`input_seed`]), and an episode of the environment from the stream of the
//! step that started it, so a finding names its seed and is made again alone
//! by [`replay`], whichever thread found it, and cut down by [`shrink`].

use crate::episode::parse_call;
use crate::gym::{BugFixEnv, Gym, Step, Task};
use crate::horizon::{family_split, multi_bug_tasks};
use crate::runner::{abandoned_suites, Guarded, ProcessRunner, Test, TestRunner, HOSTILE_SOURCES};
use crate::sandbox::{all_pass, unsafe_char, TestLine};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ANCHOR: targets
/// What the fuzzer drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Target {
    /// `parse_call` on one message.
    CallParser,
    /// One `BugFixEnv::step` (episodes on the gym's, Chapter 12's, multi-bug and QuixBugs tasks).
    EnvStep,
    /// One suite on the in-process runner.
    Guarded,
    /// One suite on the child-process runner.
    ProcessRunner,
}

impl Target {
    pub const ALL: [Target; 4] = [
        Target::CallParser,
        Target::EnvStep,
        Target::Guarded,
        Target::ProcessRunner,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Target::CallParser => "call parser",
            Target::EnvStep => "environment step",
            Target::Guarded => "in-process runner",
            Target::ProcessRunner => "child-process runner",
        }
    }
}
// ANCHOR_END: targets

// ---------------------------------------------------------------------------
// Grammars
// ---------------------------------------------------------------------------

/// Characters that parsers, terminals and tokenizers tend to treat specially.
const ODD_CHARS: &[char] = &[
    '<', '>', '/', '\\', '"', '\'', ' ', '\t', '\n', '\r', '\0', '\u{7f}', '\u{a0}', '\u{3000}',
    '\u{200b}', '\u{202e}', '\u{2066}', '\u{feff}', '\u{fffd}', 'é', 'ß', 'İ', '\u{301}', '🦀',
    '𝒳', '_', '0', '9', '{', '}', '(', ')', ';', '$', '*', '.',
];

const TOOLS: &[&str] = &["read", "test", "edit", "undo", "submit"];

fn odd_char(rng: &mut StdRng) -> char {
    *ODD_CHARS.choose(rng).expect("a character")
}

/// A word for a tool or argument: a real one, a near miss, or something no parser expects.
fn word(rng: &mut StdRng, real: &[&str]) -> String {
    match rng.random_range(0..10) {
        0..=5 if !real.is_empty() => real.choose(rng).expect("a word").to_string(),
        6 => (0..rng.random_range(1..12))
            .map(|_| rng.random_range(b'a'..=b'z') as char)
            .collect(),
        7 => "x".repeat(rng.random_range(60..5_000)),
        8 => (0..rng.random_range(1..6)).map(|_| odd_char(rng)).collect(),
        _ => {
            let mut w = real
                .choose(rng)
                .map_or("edit".to_string(), |w| w.to_string());
            w.insert(rng.random_range(0..=w.len()), 'é');
            w
        }
    }
}

fn space(rng: &mut StdRng) -> &'static str {
    [
        " ", " ", " ", "", "  ", "\t", "\n", "\u{a0}", "\u{3000}", " \r\n ",
    ]
    .choose(rng)
    .expect("a space")
}

/// One `<call> tool [arg] </call>`, well formed or nearly: mostly a real tool
/// with the argument it takes (an op of the task's menu for `edit`).
fn call(rng: &mut StdRng, ops: &[&str]) -> String {
    let tool = if rng.random_bool(0.85) {
        TOOLS.choose(rng).expect("a tool").to_string()
    } else {
        word(rng, TOOLS)
    };
    let takes_arg = tool == "edit";
    let arg = match (takes_arg, rng.random_range(0..10)) {
        (true, 0..=6) if !ops.is_empty() => {
            format!("{}{}", space(rng), ops.choose(rng).expect("an op"))
        }
        (true, _) | (false, 0 | 1) => format!("{}{}", space(rng), word(rng, ops)),
        (false, _) => String::new(),
    };
    format!(
        "{}<call>{}{tool}{arg}{}</call>{}",
        if rng.random_bool(0.9) { "" } else { space(rng) },
        space(rng),
        space(rng),
        if rng.random_bool(0.9) { "" } else { space(rng) }
    )
}

/// Insert, delete, duplicate, truncate or overwrite a few characters.
pub fn mutate(rng: &mut StdRng, text: &str, times: std::ops::Range<usize>) -> String {
    let times = rng.random_range(times);
    let mut chars: Vec<char> = text.chars().collect();
    for _ in 0..times {
        let at = rng.random_range(0..=chars.len());
        match rng.random_range(0..6) {
            0 => chars.insert(at, odd_char(rng)),
            1 if at < chars.len() => {
                let end = (at + rng.random_range(1..8)).min(chars.len());
                chars.drain(at..end);
            }
            2 if at < chars.len() => {
                let end = (at + rng.random_range(1..40)).min(chars.len());
                let copy: Vec<char> = chars[at..end].to_vec();
                let to = rng.random_range(0..=chars.len());
                chars.splice(to..to, copy);
            }
            3 => chars.truncate(at),
            4 if at < chars.len() => chars[at] = odd_char(rng),
            _ => {
                let token = *[
                    "<call>", "</call>", "fn ", "{", "}", "(", ")", ";", "loop", "\"", "let ",
                    "return ", "//", "/*", "0x", "-",
                ]
                .choose(rng)
                .expect("a token");
                chars.splice(at..at, token.chars());
            }
        }
    }
    chars.into_iter().collect()
}

// ANCHOR: action_grammar
/// A message for the environment: mostly calls (some of a task's real ops),
/// then several calls at once, noise, hostile messages and mutations.
pub fn action(rng: &mut StdRng, ops: &[&str]) -> String {
    match rng.random_range(0..20) {
        0..=10 => call(rng, ops),
        11 | 12 => {
            let text = call(rng, ops);
            mutate(rng, &text, 1..4)
        }
        13 => (0..rng.random_range(2..5))
            .map(|_| call(rng, ops))
            .collect::<Vec<_>>()
            .join(space(rng)),
        14 => (0..rng.random_range(0..64))
            .map(|_| odd_char(rng))
            .collect(),
        15 => {
            let hostile = hostile_actions();
            hostile.choose(rng).expect("a hostile action").1.clone()
        }
        16 => format!(
            "{}{}",
            "<call>".repeat(rng.random_range(1..2_000)),
            call(rng, ops)
        ),
        17 => format!("Let me look.\n{}\nThat should do it.", call(rng, ops)),
        _ => {
            let text = call(rng, ops);
            mutate(rng, &text, 4..16)
        }
    }
}
// ANCHOR_END: action_grammar

/// Messages that would crash, hang or confuse a careless environment, by name.
pub fn hostile_actions() -> Vec<(&'static str, String)> {
    vec![
        ("empty", String::new()),
        ("whitespace only", " \t\n\r ".into()),
        ("a megabyte of text", "a".repeat(1 << 20)),
        ("ten thousand open tags", "<call>".repeat(10_000)),
        (
            "a tool name of ten thousand letters",
            format!("<call> {} </call>", "r".repeat(10_000)),
        ),
        (
            "an op name of ten thousand letters",
            format!("<call> edit {} </call>", "o".repeat(10_000)),
        ),
        ("NUL bytes", "<call> read\0 </call>".into()),
        (
            "right-to-left override",
            "<call> edit \u{202e}pam_xof </call>".into(),
        ),
        (
            "two calls",
            "<call> edit a </call><call> submit </call>".into(),
        ),
        ("unclosed", "<call> submit".into()),
        ("closing tag only", "</call>".into()),
        ("regex metacharacters", "<call> .* </call>".into()),
        (
            "a path for an argument",
            "<call> read /etc/passwd </call>".into(),
        ),
        (
            "a parent directory",
            "<call> read ../hidden_tests </call>".into(),
        ),
        ("test with an argument", "<call> test hidden </call>".into()),
        (
            "submit with an argument",
            "<call> submit now </call>".into(),
        ),
        ("a tool in another script", "<call> éditer </call>".into()),
        ("an emoji tool", "<call> 🦀 </call>".into()),
        ("a combining mark", "<call> subm\u{301}it </call>".into()),
        ("a byte-order mark", "\u{feff}<call> submit </call>".into()),
        (
            "Rhai code for an argument",
            "<call> edit fn f(x){ loop {} } </call>".into(),
        ),
        ("JSON for a call", "{\"tool\": \"submit\"}".into()),
    ]
}

/// Sources the fuzzer found that broke a property, kept as tests; each says
/// what broke and what fixed it.
pub const FOUND_SOURCES: &[(&str, &str)] = &[
    (
        "a DEL character: the load error quoted it raw (load errors are now cut and escaped)",
        "fn f(x){\n    x\u{7f}\n}\n",
    ),
    (
        "a left-to-right isolate: the load error quoted it raw",
        "fn f(x){\n    \u{2066}x\n}\n",
    ),
    (
        "a right-to-left override: the load error quoted it raw",
        "fn f(x){\n\u{202e}    x\n}\n",
    ),
    (
        "a character literal of control characters, found by libFuzzer: the load error was cut \
         to 200 characters before its escapes, which made it 307 long (it is now cut as shown too)",
        "'30\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}\u{10}' ",
    ),
];

const INTS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "7",
    "63",
    "64",
    "-64",
    "255",
    "1000",
    "100000",
    "9223372036854775807",
    "(-9223372036854775807 - 1)",
    "4294967296",
];
const FLOATS: &[&str] = &[
    "0.0",
    "-0.0",
    "1.5",
    "1e308",
    "-1e308",
    "1e-308",
    "(0.0 / 0.0)",
];
const STRINGS: &[&str] = &[
    "\"\"",
    "\"abc\"",
    "\"\\u202E\"",
    "\"\\x00\"",
    "\"é🦀\"",
    "\"x\\ny\"",
    "\"<call> submit </call>\"",
];
const VARS: &[&str] = &["x", "a", "s", "v", "m"];

/// Methods of Rhai's standard library, with the number of arguments each takes.
const METHODS: &[(&str, usize)] = &[
    ("len", 0),
    ("sub_string", 2),
    ("sub_string", 1),
    ("pad", 2),
    ("truncate", 1),
    ("extract", 2),
    ("extract", 1),
    ("get_bits", 2),
    ("insert", 2),
    ("remove", 1),
    ("split", 1),
    ("split", 0),
    ("crop", 2),
    ("chop", 1),
    ("drain", 2),
    ("splice", 3),
    ("replace", 2),
    ("to_upper", 0),
    ("to_chars", 0),
    ("reverse", 0),
    ("sort", 0),
    ("contains", 1),
    ("index_of", 1),
    ("to_string", 0),
    ("abs", 0),
    ("get", 1),
    ("set", 2),
    ("push", 1),
    ("pop", 0),
    ("shift", 0),
    ("append", 1),
    ("dedup", 0),
    ("clear", 0),
    ("keys", 0),
    ("values", 0),
    ("is_empty", 0),
    ("trim", 0),
    ("bytes", 0),
    ("to_json", 0),
    ("floor", 0),
    ("sqrt", 0),
    ("to_int", 0),
    ("to_float", 0),
    ("min", 1),
    ("max", 1),
    ("sign", 0),
    ("fill_with", 1),
    ("mixin", 1),
    ("split_rev", 2),
    ("zip", 2),
];

/// Functions called with a list of arguments.
const FUNCTIONS: &[(&str, usize)] = &[
    ("f", 1),
    ("g", 2),
    ("range", 2),
    ("range", 3),
    ("parse_int", 1),
    ("parse_int", 2),
    ("parse_float", 1),
    ("to_string", 1),
    ("min", 2),
    ("max", 2),
    ("print", 1),
    ("debug", 1),
    ("eval", 1),
    ("type_of", 1),
    ("sleep", 1),
    ("timestamp", 0),
    ("is_def_var", 1),
    ("is_def_fn", 2),
];

const BINARY: &[&str] = &[
    "+", "-", "*", "/", "%", "**", "<<", ">>", "&", "|", "^", "==", "!=", "<", "<=", ">", ">=",
    "&&", "||", "??", "in",
];

/// A Rhai expression of at most `depth` levels.
fn expr(rng: &mut StdRng, depth: usize) -> String {
    if depth == 0 {
        return match rng.random_range(0..10) {
            0..=3 => INTS.choose(rng).expect("an int").to_string(),
            4 => FLOATS.choose(rng).expect("a float").to_string(),
            5 | 6 => STRINGS.choose(rng).expect("a string").to_string(),
            7 => ["true", "false", "()", "'c'", "[]", "#{}"]
                .choose(rng)
                .expect("a literal")
                .to_string(),
            _ => VARS.choose(rng).expect("a variable").to_string(),
        };
    }
    let d = depth - 1;
    match rng.random_range(0..16) {
        0..=2 => expr(rng, 0),
        3..=5 => match *BINARY.choose(rng).expect("an operator") {
            op @ ("&&" | "||") => format!("({} {op} {})", cond(rng, d), cond(rng, d)),
            op => format!("({} {op} {})", expr(rng, d), expr(rng, d)),
        },
        6 => format!("-{}", expr(rng, d)),
        7 | 8 => {
            let (name, args) = *METHODS.choose(rng).expect("a method");
            let args: Vec<String> = (0..args).map(|_| expr(rng, d)).collect();
            format!("{}.{name}({})", expr(rng, d), args.join(", "))
        }
        9 | 10 => {
            let (name, args) = *FUNCTIONS.choose(rng).expect("a function");
            let args: Vec<String> = (0..args)
                .map(|_| {
                    if name == "eval" {
                        format!("{:?}", source_body(rng, d))
                    } else {
                        expr(rng, d)
                    }
                })
                .collect();
            format!("{name}({})", args.join(", "))
        }
        11 => format!(
            "[{}]",
            (0..rng.random_range(0..4))
                .map(|_| expr(rng, d))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        12 => format!("#{{a: {}, b: {}}}", expr(rng, d), expr(rng, d)),
        13 => format!("{}[{}]", expr(rng, d), expr(rng, d)),
        14 => format!(
            "{}.{}(|p| {})",
            expr(rng, d),
            ["map", "filter", "reduce", "all", "some", "sort", "retain", "for_each"]
                .choose(rng)
                .expect("a method"),
            expr(rng, d)
        ),
        _ => format!(
            "if {} {{ {} }} else {{ {} }}",
            cond(rng, d),
            expr(rng, d),
            expr(rng, d)
        ),
    }
}

/// A condition: a comparison, a test of a value or a boolean literal.
fn cond(rng: &mut StdRng, depth: usize) -> String {
    match rng.random_range(0..6) {
        0..=2 => format!(
            "({} {} {})",
            expr(rng, depth),
            ["<", "<=", "==", "!=", ">", ">="]
                .choose(rng)
                .expect("a comparison"),
            expr(rng, depth)
        ),
        3 => format!(
            "{}.{}",
            VARS.choose(rng).expect("a variable"),
            ["is_empty()", "contains(0)", "len() > 3"]
                .choose(rng)
                .expect("a test")
        ),
        4 => ["true", "false", "x == x"]
            .choose(rng)
            .expect("a literal")
            .to_string(),
        _ => format!("!{}", cond(rng, depth.saturating_sub(1))),
    }
}

/// A Rhai statement of at most `depth` levels.
fn statement(rng: &mut StdRng, depth: usize) -> String {
    let d = depth.saturating_sub(1);
    let var = *VARS.choose(rng).expect("a variable");
    match rng.random_range(0..16) {
        0..=2 => format!("{var} = {};", expr(rng, depth)),
        3 => format!("{var} += {};", expr(rng, depth)),
        4 => format!("let {var} = {};", expr(rng, depth)),
        5 if depth > 0 => format!(
            "if {} {{ {} }} else {{ {} }}",
            cond(rng, d),
            statement(rng, d),
            statement(rng, d)
        ),
        6 if depth > 0 => format!("while {} {{ {} }}", cond(rng, d), statement(rng, d)),
        7 if depth > 0 => format!(
            "loop {{ {} if {} {{ break; }} }}",
            statement(rng, d),
            cond(rng, d)
        ),
        8 if depth > 0 => format!(
            "for i in {} {{ {} }}",
            [
                "range(0, x)".to_string(),
                format!("range({}, {})", expr(rng, 0), expr(rng, 0)),
                VARS.choose(rng).expect("a variable").to_string(),
                format!("[{}, {}]", expr(rng, d), expr(rng, d))
            ]
            .choose(rng)
            .expect("an iterable"),
            statement(rng, d)
        ),
        9 => format!("return {};", expr(rng, depth)),
        10 => format!("throw {};", expr(rng, depth)),
        11 if depth > 0 => format!(
            "try {{ {} }} catch (err) {{ {} }}",
            statement(rng, d),
            statement(rng, d)
        ),
        12 => format!(
            "switch {} {{ 1 => {}, \"a\" => {}, _ => {} }};",
            expr(rng, d),
            expr(rng, d),
            expr(rng, d),
            expr(rng, d)
        ),
        13 => format!(
            "{var}.{}({});",
            ["push", "append", "pad", "insert", "remove"]
                .choose(rng)
                .expect("a method"),
            expr(rng, depth)
        ),
        14 => format!("print({});", expr(rng, depth)),
        _ => format!("{};", expr(rng, depth)),
    }
}

fn source_body(rng: &mut StdRng, depth: usize) -> String {
    (0..rng.random_range(1..4))
        .map(|_| statement(rng, depth))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A function body: the variables every statement may use, some statements, a result.
fn function(rng: &mut StdRng, name: &str, params: &str) -> String {
    let depth = rng.random_range(0..4);
    let body: Vec<String> = (0..rng.random_range(1..6))
        .map(|_| statement(rng, depth))
        .collect();
    format!("fn {name}({params}) {{\n    let a = 0; let s = \"\"; let v = []; let m = #{{}};\n    {}\n    {}\n}}\n", body.join("\n    "), expr(rng, depth))
}

// ANCHOR: source_grammar
/// A program that runs into a limit: a loop, recursion, doubling a string,
/// growing an array, printing, nesting, with random sizes.
fn hungry(rng: &mut StdRng) -> String {
    let n = *[1u64, 10, 1_000, 100_000, 10_000_000]
        .choose(rng)
        .expect("a size");
    let body = match rng.random_range(0..8) {
        0 => format!("let i = 0; while i < {n} {{ i += 1; }} i"),
        1 => format!("if x > {n} {{ 0 }} else {{ f(x + 1) + 1 }}"),
        2 => format!("let s = \"ab\"; for i in 0..{n} {{ s += s; }} s.len()"),
        3 => format!("let a = []; for i in 0..{n} {{ a.push([i, [i]]); }} a.len()"),
        4 => format!("for i in 0..{n} {{ print(\"line \" + i); }} x"),
        5 => format!("let a = x; for i in 0..{n} {{ a = [a]; }} a"),
        6 => format!("let g = |k| k * 2; let t = 0; for i in 0..{n} {{ t = g.call(t) % 7; }} t"),
        _ => format!("let s = \"x\"; s.pad({n}, \"y\"); s.len()"),
    };
    format!("fn f(x) {{\n    {body}\n}}\n")
}

/// A source for a runner with its tests: a generated program (`f` of one
/// argument and `g` of two), a program that runs into a limit, one of the
/// gym's sources (with its own tests), a hostile one, or any of these mutated.
pub fn program(rng: &mut StdRng, pool: &[Task]) -> (String, Vec<Test>) {
    let task = pool.choose(rng).expect("a task");
    let own_tests = || {
        task.public_tests
            .iter()
            .chain(&task.hidden_tests)
            .take(4)
            .cloned()
            .collect::<Vec<_>>()
    };
    match rng.random_range(0..10) {
        0..=3 => (
            format!("{}{}", function(rng, "f", "x"), function(rng, "g", "x, y")),
            tests(rng, pool),
        ),
        4 => (
            if rng.random_bool(0.5) {
                task.source.clone()
            } else {
                task.fixed.clone()
            },
            own_tests(),
        ),
        5 => (mutate(rng, &task.source, 1..3), own_tests()),
        6 => (hungry(rng), tests(rng, pool)),
        7 => (
            HOSTILE_SOURCES
                .choose(rng)
                .expect("a hostile source")
                .1
                .to_string(),
            tests(rng, pool),
        ),
        8 => {
            let text = HOSTILE_SOURCES.choose(rng).expect("a hostile source").1;
            (mutate(rng, text, 1..6), tests(rng, pool))
        }
        _ => {
            let text = function(rng, "f", "x");
            (mutate(rng, &text, 1..10), tests(rng, pool))
        }
    }
}
// ANCHOR_END: source_grammar

/// One to four tests: calls of `f` (or of a task's own tests) and expected
/// values, with literals where the grammar put a variable (a test has none).
pub fn tests(rng: &mut StdRng, pool: &[Task]) -> Vec<Test> {
    static VARIABLE: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"\b[xasvm]\b").expect("a valid pattern"));
    let literal = |test: Test| {
        Test::new(
            VARIABLE.replace_all(&test.call, "3"),
            VARIABLE.replace_all(&test.expected, "3"),
        )
    };
    (0..rng.random_range(1..5))
        .map(|_| match rng.random_range(0..4) {
            0 => pool
                .choose(rng)
                .and_then(|t| t.hidden_tests.choose(rng))
                .cloned()
                .unwrap_or_else(|| Test::new("f(1)", "1")),
            1 => Test::new(format!("f({})", expr(rng, 1)), expr(rng, 0)),
            2 => Test::new(
                format!("g({}, {})", expr(rng, 1), expr(rng, 1)),
                expr(rng, 1),
            ),
            _ => {
                let (call, expected) = (format!("f({})", expr(rng, 0)), expr(rng, 0));
                Test::new(mutate(rng, &call, 1..2), mutate(rng, &expected, 1..2))
            }
        })
        .map(literal)
        .collect()
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

/// The longest load-error line a runner may print, in characters.
pub const MAX_ERROR_LINE_CHARS: usize = crate::runner::MAX_ERROR_CHARS + 40;

// ANCHOR: runner_properties
/// What a runner must return for any source and tests: one line per test (or
/// one line for a source that did not load or a runner that failed), each
/// `PASS `/`FAIL ` with its flag, results cut to the limit and free of raw
/// control characters. `None` when all hold, else what broke.
pub fn check_lines(lines: &[TestLine], tests: &[Test], max_result_chars: usize) -> Option<String> {
    let whole = lines.len() == 1
        && (lines[0].text.starts_with("FAIL load error: ")
            || lines[0].text.starts_with("FAIL runner error: "));
    if whole {
        let chars = lines[0].text.chars().count();
        if chars > MAX_ERROR_LINE_CHARS {
            return Some(format!("an error line of {chars} characters"));
        }
        if lines[0].text.chars().any(unsafe_char) || lines[0].passed {
            return Some(format!(
                "an error line with a raw control character or a pass flag: {:?}",
                lines[0].text
            ));
        }
        return None;
    }
    if lines.len() != tests.len() {
        return Some(format!("{} lines for {} tests", lines.len(), tests.len()));
    }
    for (line, test) in lines.iter().zip(tests) {
        let verdict = if line.passed { "PASS " } else { "FAIL " };
        let Some(rest) = line
            .text
            .strip_prefix(verdict)
            .and_then(|rest| rest.strip_prefix(test.call.as_str()))
            .and_then(|rest| rest.strip_prefix(" -> "))
        else {
            return Some(format!(
                "a line that is not `{verdict}{} -> ...`: {:?}",
                test.call, line.text
            ));
        };
        // A cut result keeps `max_result_chars` characters and adds `...`; an
        // escaped control character takes up to 10 (`\u{10ffff}`).
        if rest.chars().count() > 10 * max_result_chars + 3 {
            return Some(format!("a result of {} characters", rest.chars().count()));
        }
        if rest.chars().any(unsafe_char) {
            return Some(format!("a raw control character in a result: {rest:?}"));
        }
    }
    None
}
// ANCHOR_END: runner_properties

/// The test calls of a task that only its hidden tests make.
fn hidden_only(task: &Task) -> Vec<String> {
    let public: HashSet<&str> = task.public_tests.iter().map(|t| t.call.as_str()).collect();
    task.hidden_tests
        .iter()
        .filter(|t| !public.contains(t.call.as_str()))
        .map(|t| format!("{} -> ", t.call))
        .collect()
}

/// The longest observation a step may return, in bytes.
pub const MAX_OBSERVATION_BYTES: usize = 64 * 1024;

// ---------------------------------------------------------------------------
// The fuzzer
// ---------------------------------------------------------------------------

/// One property that did not hold (or, when recording, one input with the
/// recorded outcome), with what makes it again.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    pub target: Target,
    pub problem: String,
    /// The input whole: a message, a source and its tests, or an episode's
    /// steps up to the one that broke the property, one per line.
    pub input: String,
    /// The stream the input (or its episode) was drawn from: [`replay`].
    pub seed: u64,
    /// Steps of the episode up to and including the finding (1 for the
    /// other targets).
    pub steps: usize,
    /// The smallest input found that still shows the finding ([`shrink`]),
    /// when shrinking ran.
    pub shrunk: Option<String>,
}

/// What fuzzing one target found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetReport {
    pub target: Target,
    pub inputs: u64,
    /// Inputs by outcome (for example `call`, `unknown op`, `load error`, `operations limit`).
    pub outcomes: BTreeMap<String, u64>,
    /// Panics, caught where they escaped or contained by a runner.
    pub panics: u64,
    /// Inputs slower than the target's wall-clock bound.
    pub over_limit: u64,
    /// The target's wall-clock bound and the slowest input, in milliseconds.
    pub limit_ms: f64,
    pub slowest_ms: f64,
    /// Resident memory after the first tenth of the inputs and at the end, in MB.
    pub rss_warm_mb: f64,
    pub rss_end_mb: f64,
    /// Suites the in-process runner abandoned (each leaves a thread behind).
    pub abandoned: u64,
    pub findings: Vec<Finding>,
    pub seconds: f64,
}

impl TargetReport {
    /// No panic and no property broken: what holds on any machine, however
    /// loaded (the tests check this).
    pub fn properties_hold(&self) -> bool {
        self.panics == 0 && !self.outcomes.contains_key("property broken")
    }

    /// [`TargetReport::properties_hold`], and no input over its wall-clock
    /// bound, no suite abandoned, memory growth under `max_growth_mb` (the fuzz
    /// command checks these too; they depend on the machine's speed and load,
    /// so no test does).
    pub fn clean(&self, max_growth_mb: f64) -> bool {
        self.panics == 0
            && self.over_limit == 0
            && self
                .findings
                .iter()
                .all(|f| f.problem.starts_with("recorded outcome"))
            && self.abandoned == 0
            && self.rss_end_mb - self.rss_warm_mb <= max_growth_mb
    }
}

/// Resident memory of this process in MB (0 where `/proc` is missing).
pub fn resident_mb() -> f64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<f64>().ok())
        })
        .unwrap_or(0.0);
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
    pages * page / (1 << 20) as f64
}

/// The messages of panics on fuzzing threads, for the report.
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

thread_local! {
    /// Whether this thread is fuzzing, and the panics it has counted.
    static FUZZING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static THREAD_PANICS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Run `body` on this thread with its panics counted (and their messages kept)
/// instead of printed; returns what it returned and the count. Other threads'
/// panics go to the hook that was there before, untouched.
pub fn counting_panics<T>(body: impl FnOnce() -> T) -> (T, u64) {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if FUZZING.get() {
                THREAD_PANICS.set(THREAD_PANICS.get() + 1);
                if let Ok(mut panics) = PANICS.lock() {
                    panics.push(info.to_string());
                }
            } else {
                previous(info);
            }
        }));
    });
    let (was, before) = (FUZZING.replace(true), THREAD_PANICS.get());
    let out = body();
    FUZZING.set(was);
    (out, THREAD_PANICS.get() - before)
}

/// Where the tasks for the environment and the sources come from.
pub struct Pools {
    /// Task sets, each played by its own environment.
    pub task_sets: Vec<Arc<Vec<Task>>>,
    /// Tasks whose sources and tests feed the runners.
    pub sources: Vec<Task>,
}

impl Pools {
    /// The gym's tasks, Chapter 12's neutral tasks (with `undo`) and files with
    /// two bugs, and the QuixBugs programs.
    pub fn standard() -> Pools {
        let gym = Gym::standard();
        let split = family_split(&gym);
        let multi = multi_bug_tasks(&split.train, 2, 20, 19);
        let quix = crate::quixbugs::tasks(19);
        let all: Vec<Task> = gym
            .train
            .iter()
            .chain(&gym.held_out)
            .chain(&split.train)
            .chain(&multi)
            .chain(&quix)
            .cloned()
            .collect();
        let task_sets = vec![
            Arc::new(gym.train.iter().chain(&gym.held_out).cloned().collect()),
            Arc::new(split.train.clone()),
            Arc::new(multi),
            Arc::new(quix),
        ];
        Pools {
            task_sets,
            sources: all,
        }
    }
}

/// The child-process runner's executable: `sandbox-child` beside the running program.
pub fn child_exe() -> PathBuf {
    std::env::current_exe()
        .map(|exe| exe.with_file_name("sandbox-child"))
        .unwrap_or_else(|_| PathBuf::from("sandbox-child"))
}

/// Settings of one fuzzing session.
#[derive(Clone, Debug)]
pub struct FuzzConfig {
    pub seed: u64,
    pub threads: usize,
    /// The child-process runner's executable.
    pub child: PathBuf,
    /// Also keep (as findings) the inputs with this outcome, for example
    /// `"unknown op"`: to see what reaches an outcome, and to test replay.
    pub record: Option<String>,
}

/// What one input of a target did: its outcome, or the property it broke.
pub type Outcome = Result<String, String>;

/// Classify a runner's lines (for the outcome counts).
fn runner_outcome(lines: &[TestLine]) -> String {
    let text = lines
        .iter()
        .map(|l| l.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let kind = if text.contains("FAIL load error") {
        "load error"
    } else if text.contains("FAIL runner error") {
        "runner error"
    } else if text.contains("operations") {
        "operations limit"
    } else if text.contains("time limit") {
        "time limit"
    } else if text.contains("output limit") {
        "output limit"
    } else if lines.iter().all(|l| l.passed) {
        "all pass"
    } else if text.contains("-> error:") {
        "runtime error"
    } else {
        "wrong value"
    };
    kind.to_string()
}

/// What the call parser must do with `message`: parse it into words that
/// parse back, or find no call.
pub fn check_message(message: &str) -> Outcome {
    match parse_call(message) {
        None => Ok("no call".to_string()),
        Some(call) => {
            let word = |w: &str| {
                !w.is_empty()
                    && !w
                        .chars()
                        .any(|c| c.is_whitespace() || c.is_control() || "<>/".contains(c))
            };
            if !word(&call.tool) || call.arg.as_deref().is_some_and(|a| !word(a)) {
                Err(format!(
                    "parsed into a tool or argument that is not a word: {call:?}"
                ))
            } else if parse_call(&format!(
                "<call> {} {} </call>",
                call.tool,
                call.arg.clone().unwrap_or_default()
            )) != Some(call.clone())
            {
                Err(format!("a call that does not parse back: {call:?}"))
            } else {
                Ok(if call.arg.is_some() {
                    "call with argument"
                } else {
                    "call"
                }
                .to_string())
            }
        }
    }
}

/// A runner's input as the findings show it: the source, then its tests.
fn program_text(source: &str, tests: &[Test]) -> String {
    format!(
        "{source}\n// tests: {:?}",
        tests
            .iter()
            .map(|t| (&t.call, &t.expected))
            .collect::<Vec<_>>()
    )
}

/// What a runner must do with `source` and `tests`: lines of the promised
/// shape, no panic inside, and, for the child-process runner, the same
/// verdicts as the in-process runner (the two are built to agree; a line that
/// hit the processor-time limit in either is not compared, since that limit
/// depends on the machine's load).
pub fn check_runner(
    target: Target,
    source: &str,
    tests: &[Test],
    child: &ProcessRunner,
) -> Outcome {
    let (lines, max_result) = if target == Target::Guarded {
        (
            Guarded::shared().run(source, tests),
            Guarded::shared().limits().max_result_chars,
        )
    } else {
        (child.run(source, tests), child.limits.max_result_chars)
    };
    if let Some(problem) = check_lines(&lines, tests, max_result) {
        return Err(problem);
    }
    if lines
        .iter()
        .any(|l| l.text.contains("the sandbox panicked"))
    {
        return Err("the runner's sandbox panicked".to_string());
    }
    if target == Target::ProcessRunner && !lines[0].text.starts_with("FAIL runner error") {
        let inside = Guarded::shared().run(source, tests);
        let timed = |l: &TestLine| l.text.contains("time limit");
        if inside.len() != lines.len() {
            return Err(format!(
                "the runners disagree: {} lines in the child, {} in process",
                lines.len(),
                inside.len()
            ));
        }
        if let Some((a, b)) = lines
            .iter()
            .zip(&inside)
            .find(|(a, b)| a.passed != b.passed && !timed(a) && !timed(b))
        {
            return Err(format!(
                "the runners disagree: child `{}`, in process `{}`",
                a.text, b.text
            ));
        }
    }
    Ok(runner_outcome(&lines))
}

/// One input of `target` from `rng`, run and checked: (the input, its outcome).
fn one_input(
    target: Target,
    rng: &mut StdRng,
    pools: &Pools,
    child: &ProcessRunner,
) -> (String, Outcome) {
    match target {
        Target::CallParser => {
            let message = action(rng, &["swap_minmax", "op_1", "x"]);
            let outcome = check_message(&message);
            (message, outcome)
        }
        Target::EnvStep => unreachable!("episodes are fuzzed by `env_input`"),
        Target::Guarded | Target::ProcessRunner => {
            let (source, tests) = program(rng, &pools.sources);
            let outcome = check_runner(target, &source, &tests, child);
            (program_text(&source, &tests), outcome)
        }
    }
}

/// Classify an environment observation (for the outcome counts).
fn step_outcome(observation: &str, done: bool) -> String {
    let kind = if observation.starts_with("ERROR: expected") {
        "parse error"
    } else if observation.starts_with("ERROR: unknown op") {
        "unknown op"
    } else if observation.starts_with("ERROR: unknown tool") {
        "unknown tool"
    } else if observation.starts_with("ERROR: the episode is over") {
        "after the end"
    } else if observation.starts_with("ERROR: no edit to undo") {
        "nothing to undo"
    } else if observation.starts_with("edited with") {
        "edited"
    } else if observation.contains(": nothing to change") {
        "nothing to change"
    } else if observation == "undid the last edit" {
        "undone"
    } else if observation == "submitted" {
        "submitted"
    } else if observation.starts_with("PASS") || observation.starts_with("FAIL") {
        "test output"
    } else {
        "source"
    };
    if done && kind != "submitted" && kind != "after the end" {
        format!("{kind}, truncated")
    } else {
        kind.to_string()
    }
}

// ANCHOR: step_properties
/// What a step must keep for any message: a bounded observation that never
/// shows a hidden test, a reward of 0 or 1 that only a passing submission
/// earns, an episode that ends exactly at `submit` or at the turn budget.
/// `None` when all hold, else what broke.
pub fn check_step(step: &Step, task: &Task, turn: usize, max_turns: usize) -> Option<String> {
    if step.observation.len() > MAX_OBSERVATION_BYTES {
        Some(format!(
            "an observation of {} bytes",
            step.observation.len()
        ))
    } else if let Some(call) = hidden_only(task)
        .iter()
        .find(|call| step.observation.contains(call.as_str()))
    {
        Some(format!("the hidden test `{call}` shows in an observation"))
    } else if step.reward != 0.0 && step.reward != 1.0 {
        Some(format!("a reward of {}", step.reward))
    } else if step.reward == 1.0
        && !(step.info.submitted && step.info.public_pass && step.info.hidden_pass)
    {
        Some("a reward without a passing submission".to_string())
    } else if step.done != (step.info.submitted || step.info.truncated)
        || (step.info.truncated != (!step.info.submitted && turn >= max_turns))
    {
        Some("an episode that ended other than at submit or at the turn budget".to_string())
    } else if turn > max_turns {
        Some("more turns than the budget".to_string())
    } else {
        None
    }
}
// ANCHOR_END: step_properties

/// An episode in progress on one of a thread's environments.
pub struct Episode {
    set: usize,
    task: usize,
    /// The stream it was drawn from.
    seed: u64,
    rng: StdRng,
    /// Its steps so far, one line each.
    steps: Vec<String>,
}

/// One environment per task set, each with a budget of 8 turns until an
/// episode draws its own.
fn fresh_envs(pools: &Pools) -> Vec<BugFixEnv> {
    pools
        .task_sets
        .iter()
        .map(|set| BugFixEnv::new(set.clone(), 8))
        .collect()
}

/// Start an episode drawn from `seed`: a task set, a task and a turn budget.
fn start_episode(seed: u64, pools: &Pools, envs: &mut [BugFixEnv]) -> Episode {
    let mut rng = StdRng::seed_from_u64(seed);
    let set = rng.random_range(0..envs.len());
    let task = rng.random_range(0..pools.task_sets[set].len());
    envs[set].max_turns = rng.random_range(1..13);
    envs[set].reset(task);
    Episode {
        set,
        task,
        seed,
        rng,
        steps: Vec::new(),
    }
}

/// Episodes whose hidden-test verdict at the end is checked against a run of
/// the hidden tests without the environment's caches: one in this many.
pub const UNCACHED_CHECK_EVERY: u64 = 8;

/// Play `message` in `episode` and check the step: its outcome, and whether
/// the episode ended.
fn play_step(
    message: &str,
    pools: &Pools,
    envs: &mut [BugFixEnv],
    episode: &mut Episode,
) -> (Outcome, bool) {
    let spec = &pools.task_sets[episode.set][episode.task];
    let env = &mut envs[episode.set];
    let turn = env.turn();
    let step = env.step(message);
    episode
        .steps
        .push(format!("task {} turn {turn}: {message}", spec.id));
    if let Some(problem) = check_step(&step, spec, env.turn(), env.max_turns) {
        return (Err(problem), step.done);
    }
    if step.done {
        // The cached verdict against the hidden tests run again, uncached.
        if episode.seed.is_multiple_of(UNCACHED_CHECK_EVERY) {
            let lines = Guarded::shared().run(env.source(), &spec.hidden_tests);
            let timed = lines.iter().any(|l| l.text.contains("time limit"));
            if !timed && all_pass(&lines) != step.info.hidden_pass {
                return (
                    Err(format!(
                        "the cached hidden verdict ({}) differs from an uncached run ({})",
                        step.info.hidden_pass,
                        all_pass(&lines)
                    )),
                    true,
                );
            }
        }
        // A step after the end must say so and change nothing.
        let after = env.step("<call> submit </call>");
        if !after.done
            || after.reward != 0.0
            || !after.observation.starts_with("ERROR: the episode is over")
        {
            return (
                Err("a step after the end of an episode was not refused".to_string()),
                true,
            );
        }
    }
    (Ok(step_outcome(&step.observation, step.done)), step.done)
}

/// One step of the episode in progress, or of a new one drawn from `seed`,
/// checked: (the episode's steps so far, one per line; the step's outcome;
/// the episode's seed; its steps so far).
fn env_input(
    seed: u64,
    pools: &Pools,
    envs: &mut [BugFixEnv],
    state: &mut Option<Episode>,
) -> (String, Outcome, u64, usize) {
    let episode = state.get_or_insert_with(|| start_episode(seed, pools, envs));
    let spec = &pools.task_sets[episode.set][episode.task];
    let ops: Vec<&str> = spec.menu.iter().map(|e| e.name.as_str()).collect();
    let message = action(&mut episode.rng, &ops);
    let (outcome, done) = play_step(&message, pools, envs, episode);
    let found = (
        episode.steps.join("\n"),
        outcome,
        episode.seed,
        episode.steps.len(),
    );
    if done {
        *state = None;
    }
    found
}

/// The first property that an episode drawn from `seed` (its task set, task
/// and turn budget) breaks when the policy sends `messages`, if any: what the
/// coverage-guided fuzz target checks (`cargo xtask fuzz-coverage`).
pub fn check_episode(pools: &Pools, seed: u64, messages: &[String]) -> Option<String> {
    let mut envs = fresh_envs(pools);
    let mut episode = start_episode(seed, pools, &mut envs);
    for message in messages {
        let (outcome, done) = play_step(message, pools, &mut envs, &mut episode);
        if let Err(problem) = outcome {
            return Some(problem);
        }
        if done {
            break;
        }
    }
    None
}

/// The stream of input `index` of `target` in a session seeded `seed`
/// (SplitMix64's finaliser over the three).
pub fn input_seed(seed: u64, target: Target, index: u64) -> u64 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    mix(seed ^ mix(((target as u64) << 56) ^ index.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// A finding's input made again from its seed alone: the input and its
/// outcome, as the fuzzer saw them (for the environment, the episode from its
/// reset to the finding's step).
pub fn replay(
    target: Target,
    seed: u64,
    steps: usize,
    pools: &Pools,
    child: &ProcessRunner,
) -> (String, Outcome) {
    match target {
        Target::EnvStep => {
            let mut envs = fresh_envs(pools);
            let mut state = None;
            let mut last = (String::new(), Ok(String::new()));
            for _ in 0..steps.max(1) {
                let (input, outcome, ..) = env_input(seed, pools, &mut envs, &mut state);
                last = (input, outcome);
            }
            last
        }
        _ => one_input(target, &mut StdRng::seed_from_u64(seed), pools, child),
    }
}

/// Findings per target that [`fuzz`] shrinks.
pub const SHRUNK_FINDINGS: usize = 5;

/// Most candidate inputs one shrink tries.
pub const SHRINK_TRIES: usize = 2_000;

/// `items` with as many removed as possible, chunk by chunk from halves down
/// to single items, while `keeps` holds (delta debugging, greedy); at most
/// `*budget` tries.
fn shrink_list<T: Clone>(
    items: Vec<T>,
    budget: &mut usize,
    keeps: &mut dyn FnMut(&[T]) -> bool,
) -> Vec<T> {
    let mut items = items;
    let mut chunk = items.len().div_ceil(2).max(1);
    loop {
        let mut start = 0;
        while start < items.len() && *budget > 0 {
            let end = (start + chunk).min(items.len());
            let candidate: Vec<T> = items[..start]
                .iter()
                .chain(&items[end..])
                .cloned()
                .collect();
            *budget -= 1;
            if keeps(&candidate) {
                items = candidate;
            } else {
                start = end;
            }
        }
        if chunk == 1 || *budget == 0 {
            return items;
        }
        chunk = chunk.div_ceil(2);
    }
}

/// A string cut down character by character (as [`shrink_list`]).
fn shrink_text(text: &str, budget: &mut usize, keeps: &mut dyn FnMut(&str) -> bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    shrink_list(chars, budget, &mut |c: &[char]| {
        keeps(&c.iter().collect::<String>())
    })
    .into_iter()
    .collect()
}

/// The smallest input found that still shows what `finding` shows (a broken
/// property, or the recorded outcome `recorded`): for the call parser, the
/// message; for the runners, the tests and then the source's lines and
/// characters; for the environment, the episode's earlier messages and then
/// the characters of each. `None` for a finding about time, which a replay on
/// another machine need not show.
pub fn shrink(
    finding: &Finding,
    recorded: Option<&str>,
    pools: &Pools,
    child: &ProcessRunner,
) -> Option<String> {
    if finding.problem.starts_with("took ") {
        return None;
    }
    let shows = |outcome: &Outcome| match (outcome, recorded) {
        (Err(_), None) => true,
        (Ok(kind), Some(want)) => kind == want,
        _ => false,
    };
    let mut budget = SHRINK_TRIES;
    match finding.target {
        Target::CallParser => {
            let (message, _) = replay(Target::CallParser, finding.seed, 1, pools, child);
            Some(shrink_text(&message, &mut budget, &mut |m| {
                shows(&check_message(m))
            }))
        }
        Target::Guarded | Target::ProcessRunner => {
            let target = finding.target;
            let (source, tests) = program(&mut StdRng::seed_from_u64(finding.seed), &pools.sources);
            let tests = shrink_list(tests, &mut budget, &mut |t| {
                !t.is_empty() && shows(&check_runner(target, &source, t, child))
            });
            let lines: Vec<&str> = source.lines().collect();
            let lines = shrink_list(lines, &mut budget, &mut |l| {
                shows(&check_runner(target, &l.join("\n"), &tests, child))
            });
            let source = shrink_text(&lines.join("\n"), &mut budget, &mut |s| {
                shows(&check_runner(target, s, &tests, child))
            });
            Some(program_text(&source, &tests))
        }
        Target::EnvStep => {
            // The episode's messages, made again from its seed.
            let mut envs = fresh_envs(pools);
            let mut episode = start_episode(finding.seed, pools, &mut envs);
            let spec = &pools.task_sets[episode.set][episode.task];
            let ops: Vec<&str> = spec.menu.iter().map(|e| e.name.as_str()).collect();
            let messages: Vec<String> = (0..finding.steps)
                .map(|_| action(&mut episode.rng, &ops))
                .collect();
            // Play `messages` from a fresh reset; what the last step shows.
            let mut play = |messages: &[String]| -> Option<(String, Outcome)> {
                let mut envs = fresh_envs(pools);
                let mut episode = start_episode(finding.seed, pools, &mut envs);
                let mut last = None;
                for (i, message) in messages.iter().enumerate() {
                    let (outcome, done) = play_step(message, pools, &mut envs, &mut episode);
                    if done && i + 1 < messages.len() {
                        return None;
                    }
                    last = Some((episode.steps.join("\n"), outcome));
                }
                last
            };
            let keeps =
                |m: &[String], play: &mut dyn FnMut(&[String]) -> Option<(String, Outcome)>| {
                    !m.is_empty() && play(m).is_some_and(|(_, outcome)| shows(&outcome))
                };
            let mut messages = shrink_list(messages, &mut budget, &mut |m| keeps(m, &mut play));
            for i in 0..messages.len() {
                let mut others = messages.clone();
                messages[i] = shrink_text(&messages[i].clone(), &mut budget, &mut |text| {
                    others[i] = text.to_string();
                    keeps(&others, &mut play)
                });
            }
            play(&messages).map(|(steps, _)| steps)
        }
    }
}

/// The wall-clock bound of one input of `target`: the runner's own hard limit, plus a second.
pub fn wall_limit(target: Target, child: &ProcessRunner, pools: &Pools) -> Duration {
    let slack = Duration::from_secs(1);
    let most = |tests: fn(&Task) -> usize| {
        pools
            .task_sets
            .iter()
            .flat_map(|set| set.iter())
            .map(tests)
            .max()
            .unwrap_or(0)
    };
    match target {
        Target::CallParser => slack,
        // A step runs at most the task's public suite and its hidden suite.
        Target::EnvStep => {
            Guarded::shared().hard_deadline(most(|t| t.public_tests.len()))
                + Guarded::shared().hard_deadline(most(|t| t.hidden_tests.len()))
                + slack
        }
        Target::Guarded => Guarded::shared().hard_deadline(4) + slack,
        Target::ProcessRunner => child.wall_clock + slack,
    }
}

// ANCHOR: fuzz
/// Fuzz `target` with `inputs` inputs on `config.threads` threads, counting
/// every input on `progress`.
pub fn fuzz(
    target: Target,
    inputs: u64,
    config: &FuzzConfig,
    pools: &Pools,
    progress: &(dyn Fn(u64) + Sync),
) -> TargetReport {
    let child = ProcessRunner::new(&config.child);
    let limit = wall_limit(target, &child, pools);
    let start = Instant::now();
    let abandoned_before = abandoned_suites();
    let done = AtomicU64::new(0);
    let warm = Mutex::new(None::<f64>);
    let (mut outcomes, mut findings, mut over_limit, mut slowest_ms, mut panics) = (
        BTreeMap::<String, u64>::new(),
        Vec::<Finding>::new(),
        0u64,
        0.0f64,
        0u64,
    );
    std::thread::scope(|scope| {
        let threads = config.threads as u64;
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                // Thread t plays the inputs offset..offset + share, each from its own stream.
                let share = inputs / threads + u64::from(thread < inputs % threads);
                let offset = thread * (inputs / threads) + thread.min(inputs % threads);
                let (done, warm, child) = (&done, &warm, &child);
                scope.spawn(move || {
                    counting_panics(|| {
                        let mut envs = fresh_envs(pools);
                        let mut episode: Option<Episode> = None;
                        let (mut outcomes, mut findings, mut over, mut slowest) =
                            (BTreeMap::new(), Vec::new(), 0u64, 0.0f64);
                        for i in 0..share {
                            let seed = input_seed(config.seed, target, offset + i);
                            let began = Instant::now();
                            let result = catch_unwind(AssertUnwindSafe(|| match target {
                                Target::EnvStep => env_input(seed, pools, &mut envs, &mut episode),
                                _ => {
                                    let mut rng = StdRng::seed_from_u64(seed);
                                    let (input, outcome) =
                                        one_input(target, &mut rng, pools, child);
                                    (input, outcome, seed, 1)
                                }
                            }));
                            let took = began.elapsed();
                            slowest = slowest.max(took.as_secs_f64() * 1e3);
                            let (input, outcome, seed, steps) = match result {
                                Ok(found) => found,
                                Err(_) => {
                                    // The environment may be mid-episode in an unknown state: start
                                    // afresh. The input is made again by `replay` from its seed.
                                    let (seed, steps) = match episode.take() {
                                        Some(e) => (e.seed, e.steps.len() + 1),
                                        None => (seed, 1),
                                    };
                                    envs = fresh_envs(pools);
                                    (
                                        String::from("(lost in a panic: replay its seed)"),
                                        Err("a panic escaped".to_string()),
                                        seed,
                                        steps,
                                    )
                                }
                            };
                            let finding = |problem: String| Finding {
                                target,
                                problem,
                                input: input.clone(),
                                seed,
                                steps,
                                shrunk: None,
                            };
                            if took > limit {
                                over += 1;
                                findings.push(finding(format!(
                                    "took {:.0} ms, over the bound of {} ms",
                                    took.as_secs_f64() * 1e3,
                                    limit.as_millis()
                                )));
                            }
                            match &outcome {
                                Ok(kind) => {
                                    if config.record.as_ref() == Some(kind) && findings.len() < 50 {
                                        findings.push(finding(format!("recorded outcome: {kind}")));
                                    }
                                    *outcomes.entry(kind.clone()).or_insert(0) += 1
                                }
                                Err(problem) => {
                                    *outcomes.entry("property broken".to_string()).or_insert(0) +=
                                        1;
                                    if findings.len() < 50 {
                                        findings.push(finding(problem.clone()));
                                    }
                                }
                            }
                            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                            if n == inputs / 10 + 1 {
                                *warm.lock().expect("warm-up memory") = Some(resident_mb());
                            }
                            if i % 256 == 255 {
                                progress(256);
                            }
                        }
                        progress(share % 256);
                        (outcomes, findings, over, slowest)
                    })
                })
            })
            .collect();
        // Each thread's counts, and the panics its hook counted.
        for worker in workers {
            let ((kinds, found, over, slowest), panicked) =
                worker.join().expect("a fuzzing thread finished");
            for (kind, n) in kinds {
                *outcomes.entry(kind).or_insert(0) += n;
            }
            findings.extend(found);
            (over_limit, slowest_ms, panics) = (
                over_limit + over,
                slowest_ms.max(slowest),
                panics + panicked,
            );
        }
    });
    // The first findings cut down to what still shows them.
    for finding in findings.iter_mut().take(SHRUNK_FINDINGS) {
        finding.shrunk = shrink(finding, config.record.as_deref(), pools, &child);
    }
    let rss_end_mb = resident_mb();
    TargetReport {
        target,
        inputs,
        outcomes,
        panics,
        over_limit,
        limit_ms: limit.as_secs_f64() * 1e3,
        slowest_ms,
        rss_warm_mb: warm
            .into_inner()
            .expect("warm-up memory")
            .unwrap_or(rss_end_mb),
        rss_end_mb,
        abandoned: (abandoned_suites() - abandoned_before) as u64,
        findings,
        seconds: start.elapsed().as_secs_f64(),
    }
}
// ANCHOR_END: fuzz

/// The first `n` inputs of `target` as a fuzzing session seeded `seed` draws
/// them on one thread, each with its outcome.
pub fn examples(
    target: Target,
    n: usize,
    seed: u64,
    pools: &Pools,
    child: &ProcessRunner,
) -> Vec<(String, Outcome)> {
    let mut envs = fresh_envs(pools);
    let mut episode = None;
    (0..n as u64)
        .map(|i| {
            let seed = input_seed(seed, target, i);
            match target {
                Target::EnvStep => {
                    let (input, outcome, ..) = env_input(seed, pools, &mut envs, &mut episode);
                    let last = input.lines().last().unwrap_or("").to_string();
                    (last, outcome)
                }
                _ => one_input(target, &mut StdRng::seed_from_u64(seed), pools, child),
            }
        })
        .collect()
}

/// The panic messages seen while fuzzing so far (at most `n`).
pub fn panic_messages(n: usize) -> Vec<String> {
    PANICS
        .lock()
        .map(|p| p.iter().take(n).cloned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gym::{Info, MAX_TURNS};

    fn config() -> FuzzConfig {
        FuzzConfig {
            seed: 7,
            threads: 2,
            child: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/none"),
            record: None,
        }
    }

    #[test]
    fn every_hostile_action_gets_an_error_observation_and_the_episode_goes_on() {
        let gym = Gym::standard();
        let mut env = BugFixEnv::new(gym.train.clone(), MAX_TURNS);
        let hidden = hidden_only(&gym.train[0]);
        for (name, message) in hostile_actions() {
            env.reset(0);
            let step = env.step(&message);
            assert!(
                step.observation.starts_with("ERROR: "),
                "{name}: {}",
                step.observation
            );
            assert!(
                step.observation.len() <= 200,
                "{name}: an observation of {} bytes",
                step.observation.len()
            );
            assert!(
                !step.observation.chars().any(unsafe_char),
                "{name}: {:?}",
                step.observation
            );
            assert!(
                hidden
                    .iter()
                    .all(|call| !step.observation.contains(call.as_str())),
                "{name}"
            );
            assert!(!step.done && step.reward == 0.0, "{name}");
            // The episode is still usable: a real call works afterwards.
            assert!(
                env.step("<call> read </call>").observation.contains("fn "),
                "{name}"
            );
        }
    }

    #[test]
    fn every_found_and_hungry_source_keeps_the_runner_properties() {
        let mut rng = StdRng::seed_from_u64(3);
        let hungry: Vec<String> = (0..40).map(|_| hungry(&mut rng)).collect();
        let tests = vec![Test::new("f(1)", "1"), Test::new("f(\"a\")", "1")];
        for source in FOUND_SOURCES
            .iter()
            .map(|(_, s)| s.to_string())
            .chain(hungry)
        {
            let lines = Guarded::shared().run(&source, &tests);
            assert_eq!(
                check_lines(&lines, &tests, Guarded::shared().limits().max_result_chars),
                None,
                "{source}"
            );
        }
    }

    #[test]
    fn a_step_that_shows_a_hidden_test_or_pays_without_a_pass_is_reported() {
        let gym = Gym::standard();
        let task = gym
            .train
            .iter()
            .find(|t| !hidden_only(t).is_empty())
            .expect("a task with a hidden-only test");
        let hidden = &task
            .hidden_tests
            .iter()
            .find(|t| !task.public_tests.iter().any(|p| p.call == t.call))
            .expect("a hidden-only test")
            .call;
        let step = |observation: String, reward: f64, info: Info| Step {
            observation: observation.into(),
            reward,
            done: info.submitted || info.truncated,
            info,
        };
        assert_eq!(
            check_step(
                &step("PASS f(1) -> 1".into(), 0.0, Info::default()),
                task,
                1,
                8
            ),
            None
        );
        assert!(
            check_step(
                &step(format!("FAIL {hidden} -> 0"), 0.0, Info::default()),
                task,
                1,
                8
            )
            .is_some(),
            "a hidden test shown"
        );
        assert!(
            check_step(
                &step(
                    "submitted".into(),
                    1.0,
                    Info {
                        submitted: true,
                        public_pass: true,
                        ..Info::default()
                    }
                ),
                task,
                2,
                8
            )
            .is_some(),
            "paid for a hack"
        );
        assert!(
            check_step(&step("x".into(), 0.0, Info::default()), task, 8, 8).is_some(),
            "not truncated at the budget"
        );
        assert!(
            check_step(
                &step("x".repeat(MAX_OBSERVATION_BYTES + 1), 0.0, Info::default()),
                task,
                1,
                8
            )
            .is_some(),
            "too long"
        );
    }

    #[test]
    fn a_broken_runner_line_is_reported() {
        let tests = vec![Test::new("f(1)", "1")];
        let line = |text: &str, passed: bool| {
            vec![TestLine {
                passed,
                text: text.to_string(),
            }]
        };
        assert_eq!(check_lines(&line("PASS f(1) -> 1", true), &tests, 80), None);
        assert_eq!(
            check_lines(&line("FAIL load error: Syntax error", false), &tests, 80),
            None
        );
        assert!(
            check_lines(&line("PASS f(1) -> 1", false), &tests, 80).is_some(),
            "a flag that disagrees with the verdict"
        );
        assert!(
            check_lines(
                &line(&format!("FAIL f(1) -> {}", "9".repeat(1_000)), false),
                &tests,
                80
            )
            .is_some(),
            "an uncut result"
        );
        assert!(
            check_lines(&line("FAIL f(1) -> \u{202e}1", false), &tests, 80).is_some(),
            "a raw override"
        );
        assert!(check_lines(&[], &tests, 80).is_some(), "no line at all");
    }

    #[test]
    fn the_grammars_reach_every_kind_of_outcome() {
        let pools = Pools::standard();
        let quiet = |_: u64| {};
        let parser = fuzz(Target::CallParser, 4_000, &config(), &pools, &quiet);
        for kind in ["no call", "call", "call with argument"] {
            assert!(
                parser.outcomes.get(kind).copied().unwrap_or(0) > 100,
                "{kind}: {:?}",
                parser.outcomes
            );
        }
        let env = fuzz(Target::EnvStep, 6_000, &config(), &pools, &quiet);
        for kind in [
            "parse error",
            "unknown op",
            "unknown tool",
            "edited",
            "nothing to change",
            "undone",
            "submitted",
            "test output",
            "source",
        ] {
            assert!(
                env.outcomes.get(kind).copied().unwrap_or(0) > 10,
                "{kind}: {:?}",
                env.outcomes
            );
        }
        let runner = fuzz(Target::Guarded, 3_000, &config(), &pools, &quiet);
        for kind in [
            "load error",
            "operations limit",
            "all pass",
            "runtime error",
            "wrong value",
        ] {
            assert!(
                runner.outcomes.get(kind).copied().unwrap_or(0) > 10,
                "{kind}: {:?}",
                runner.outcomes
            );
        }
        for report in [&parser, &env, &runner] {
            assert!(
                report.properties_hold(),
                "{:?}: {:#?}",
                report.target,
                report.findings.iter().take(3).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn every_finding_replays_from_its_seed_alone_and_shrinks() {
        let pools = Pools::standard();
        let child = ProcessRunner::new(&config().child);
        let quiet = |_: u64| {};
        for (target, inputs, kind) in [
            (Target::EnvStep, 3_000, "unknown op"),
            (Target::CallParser, 2_000, "call with argument"),
            (Target::Guarded, 400, "load error"),
        ] {
            let recording = FuzzConfig {
                record: Some(kind.to_string()),
                ..config()
            };
            let report = fuzz(target, inputs, &recording, &pools, &quiet);
            // Both threads record: the second thread's findings replay as well as
            // the first's.
            let first: HashSet<u64> = (0..inputs / 2)
                .map(|i| input_seed(recording.seed, target, i))
                .collect();
            assert!(
                report.findings.iter().any(|f| !first.contains(&f.seed)),
                "{target:?}: no finding from the second thread"
            );
            for f in &report.findings {
                let (input, outcome) = replay(target, f.seed, f.steps, &pools, &child);
                assert_eq!(input, f.input, "{target:?}");
                assert_eq!(outcome, Ok(kind.to_string()), "{target:?}: {input}");
            }
            // The shrunk inputs still show the outcome and are no longer.
            for f in report.findings.iter().take(SHRUNK_FINDINGS) {
                let small = f.shrunk.as_ref().expect("shrunk");
                assert!(small.len() <= f.input.len(), "{target:?}: {small}");
                match target {
                    // An unknown op needs one step, whatever came before it.
                    Target::EnvStep => assert_eq!(
                        small.lines().filter(|l| l.starts_with("task ")).count(),
                        1,
                        "{small}"
                    ),
                    Target::CallParser => {
                        assert_eq!(check_message(small), Ok(kind.to_string()), "{small}")
                    }
                    _ => assert!(small.len() < f.input.len(), "{small}"),
                }
            }
        }
    }

    #[test]
    fn a_panic_on_a_fuzzing_thread_is_counted_not_raised() {
        let (caught, panics) = counting_panics(|| catch_unwind(|| panic!("boom")).is_err());
        assert!(caught);
        assert_eq!(panics, 1);
        assert!(panic_messages(usize::MAX)
            .iter()
            .any(|m| m.contains("boom")));
        // Outside, panics are not counted.
        assert_eq!(counting_panics(|| 1 + 1), (2, 0));
    }
}
