//! Chapter 17: evaluation on an external benchmark. QuixBugs (40 small
//! programs from the Quixey Challenge, each with one documented one-line
//! defect) ported to Rhai and presented as gym tasks.
//!
//! Each ported program is a data file, `data/quixbugs/<program>.json`, read
//! into a [`Program`]: the buggy and the fixed Rhai source (which differ only
//! in the defect's lines), the fix as a find-and-replace edit, the defect in
//! one line with its class in QuixBugs' taxonomy, the gym [`Family`] nearest
//! to it, and the benchmark's test cases as Rhai calls. Cases that the fixed
//! program cannot pass within the sandbox's limits are kept apart with the
//! reason, and `not-ported.json` names each program left out and why.
//! [`task`] turns a program into a [`Task`] the agents of the earlier
//! chapters can play: the benchmark's cases split into public and hidden
//! tests, an issue in the gym's words, and a menu of the documented fix and
//! distractors made of the gym's own line edits ([`GENERIC_OPS`]).

use crate::book::{data_path, fnv1a, FNV_START};
use crate::gym::{fails_some, Edit, EditKind, Family, Task, GENERIC_OPS};
use crate::mutation;
use crate::runner::{Guarded, Test, TestRunner};
use crate::sandbox::shorten;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rhai::{Dynamic, AST};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;

/// The 40 programs of QuixBugs, by the names of its Python files.
pub const BENCHMARK_PROGRAMS: [&str; 40] = [
    "bitcount",
    "breadth_first_search",
    "bucketsort",
    "depth_first_search",
    "detect_cycle",
    "find_first_in_sorted",
    "find_in_sorted",
    "flatten",
    "gcd",
    "get_factors",
    "hanoi",
    "is_valid_parenthesization",
    "kheapsort",
    "knapsack",
    "kth",
    "lcs_length",
    "levenshtein",
    "lis",
    "longest_common_subsequence",
    "max_sublist_sum",
    "mergesort",
    "minimum_spanning_tree",
    "next_palindrome",
    "next_permutation",
    "pascal",
    "possible_change",
    "powerset",
    "quicksort",
    "reverse_linked_list",
    "rpn_eval",
    "shortest_path_length",
    "shortest_path_lengths",
    "shortest_paths",
    "shunting_yard",
    "sieve",
    "sqrt",
    "subsequences",
    "to_base",
    "topological_ordering",
    "wrap",
];

/// The folder under `data/` that holds the port.
pub const DATA_DIR: &str = "quixbugs";

/// The file that lists the programs left out.
pub const NOT_PORTED_FILE: &str = "not-ported.json";

/// Distractors on a task's menu, at most.
pub const MAX_DISTRACTORS: usize = 4;

/// Characters of a value quoted in an issue.
pub const MAX_ISSUE_VALUE_CHARS: usize = 80;

/// Programs whose buggy source fails only one of the benchmark's cases (that
/// the sandbox can run): that case must be public, so the hidden tests of
/// their tasks cannot catch the bug on their own.
pub const ONE_FAILING_CASE: &[&str] = &[
    "breadth_first_search",
    "depth_first_search",
    "detect_cycle",
    "is_valid_parenthesization",
    "next_palindrome",
    "possible_change",
    "quicksort",
];

// ANCHOR: program
/// One ported QuixBugs program, as stored in `data/quixbugs/<program>.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    /// The QuixBugs name (its Python file's stem, and this file's).
    pub program: String,
    /// The Rhai function under repair, the one the tests call.
    pub function: String,
    /// What the function should do: the first half of the task's issue.
    pub what: String,
    /// The documented defect, in one line.
    pub defect: String,
    /// Its class in QuixBugs' defect taxonomy (one of the paper's 14 classes).
    pub defect_kind: String,
    /// The gym family whose fix the documented fix is, or the nearest one.
    pub family: Family,
    /// Why that family.
    pub family_note: String,
    /// The fix's name on the task's menu.
    pub fix_name: String,
    /// How graphs, lists and other objects are written as Rhai values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// Where the port departs from the Python text, and why that keeps its meaning.
    #[serde(default)]
    pub port_notes: Vec<String>,
    pub buggy: String,
    pub fixed: String,
    /// The documented fix: replace `find` (which occurs once in `buggy`) by `replace`.
    pub fix: Fix,
    /// The benchmark file the test cases come from.
    pub tests_from: String,
    /// The benchmark's cases that the fixed source passes in the sandbox.
    pub tests: Vec<Test>,
    /// The benchmark's cases left out, each with the reason.
    #[serde(default)]
    pub excluded: Vec<Excluded>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fix {
    pub find: String,
    pub replace: String,
}

/// A benchmark case that the port does not run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Excluded {
    pub call: String,
    pub expected: String,
    pub reason: String,
}

/// A QuixBugs program that is not ported, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotPorted {
    pub program: String,
    pub defect_kind: String,
    pub reason: String,
}
// ANCHOR_END: program

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NotPortedFile {
    #[allow(dead_code)]
    benchmark: String,
    benchmark_programs: usize,
    not_ported: Vec<NotPorted>,
}

impl Program {
    /// The documented fix as a menu entry.
    pub fn fix_edit(&self) -> Edit {
        Edit {
            name: self.fix_name.clone(),
            kind: EditKind::Fix,
            find: self.fix.find.clone(),
            replace: self.fix.replace.clone(),
        }
    }

    /// Indices of the tests that the buggy source fails.
    pub fn buggy_failures(&self) -> Vec<usize> {
        failures(&self.buggy, &self.tests)
    }
}

fn failures(source: &str, tests: &[Test]) -> Vec<usize> {
    let lines = Guarded::shared().run(source, tests);
    if lines.len() != tests.len() {
        // A source that does not load fails every test (one line says why).
        return (0..tests.len()).collect();
    }
    lines
        .iter()
        .enumerate()
        .filter(|(_, line)| !line.passed)
        .map(|(i, _)| i)
        .collect()
}

// ---------------------------------------------------------------------------
// Loading, with errors that name the file and the field
// ---------------------------------------------------------------------------

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|err| format!("{}: cannot read: {err}", path.display()))
}

/// Read and check one program file.
pub fn load(path: &Path) -> Result<Program, String> {
    let file = path.display();
    let program: Program =
        serde_json::from_str(&read(path)?).map_err(|err| format!("{file}: {err}"))?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let fail = |field: &str, why: String| Err(format!("{file}: field `{field}`: {why}"));
    if program.program != stem {
        return fail(
            "program",
            format!("is {:?} but the file is named {stem}.json", program.program),
        );
    }
    if !BENCHMARK_PROGRAMS.contains(&program.program.as_str()) {
        return fail(
            "program",
            format!("{:?} is not a QuixBugs program", program.program),
        );
    }
    let header = format!("fn {}(", program.function);
    if !program.buggy.lines().any(|line| line.starts_with(&header)) {
        return fail("function", format!("`buggy` defines no `{header}...)`"));
    }
    if program.fix.find.is_empty() {
        return fail("fix.find", "is empty".into());
    }
    let count = program.buggy.matches(program.fix.find.as_str()).count();
    if count != 1 {
        return fail(
            "fix.find",
            format!("occurs {count} times in `buggy` (it must occur once)"),
        );
    }
    if program
        .buggy
        .replacen(program.fix.find.as_str(), &program.fix.replace, 1)
        != program.fixed
    {
        return fail("fixed", "is not `buggy` with the edit `fix` applied".into());
    }
    if program.tests.len() < 2 {
        return fail(
            "tests",
            format!(
                "has {} cases; a task needs at least two (one public, one hidden)",
                program.tests.len()
            ),
        );
    }
    for (field, text) in [
        ("what", &program.what),
        ("defect", &program.defect),
        ("defect_kind", &program.defect_kind),
        ("fix_name", &program.fix_name),
    ] {
        if text.trim().is_empty() {
            return fail(field, "is empty".into());
        }
    }
    if !program
        .fix_name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return fail(
            "fix_name",
            format!(
                "{:?} is not a plain op name (letters, digits, _)",
                program.fix_name
            ),
        );
    }
    if let Some(i) = program
        .excluded
        .iter()
        .position(|case| case.reason.trim().is_empty())
    {
        return fail(&format!("excluded[{i}].reason"), "is empty".into());
    }
    Ok(program)
}

fn program_files() -> Result<Vec<std::path::PathBuf>, String> {
    let dir = data_path(DATA_DIR);
    let entries =
        std::fs::read_dir(&dir).map_err(|err| format!("{}: cannot list: {err}", dir.display()))?;
    let mut files: Vec<_> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.extension().is_some_and(|ext| ext == "json")
                && path.file_name().is_some_and(|name| name != NOT_PORTED_FILE)
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Every ported program, in the order of their names, or the first error.
pub fn try_programs() -> Result<Vec<Program>, String> {
    program_files()?.iter().map(|path| load(path)).collect()
}

// ANCHOR: programs
/// Every ported program, in the order of their names (the data files are the truth).
pub fn programs() -> Vec<Program> {
    try_programs().unwrap_or_else(|err| panic!("{err}"))
}
// ANCHOR_END: programs

/// The programs left out, from `not-ported.json`, or the first error.
pub fn try_not_ported() -> Result<Vec<NotPorted>, String> {
    let path = data_path(DATA_DIR).join(NOT_PORTED_FILE);
    let file = path.display();
    let list: NotPortedFile =
        serde_json::from_str(&read(&path)?).map_err(|err| format!("{file}: {err}"))?;
    if list.benchmark_programs != BENCHMARK_PROGRAMS.len() {
        return Err(format!(
            "{file}: field `benchmark_programs`: is {}, QuixBugs has {}",
            list.benchmark_programs,
            BENCHMARK_PROGRAMS.len()
        ));
    }
    for (i, entry) in list.not_ported.iter().enumerate() {
        if !BENCHMARK_PROGRAMS.contains(&entry.program.as_str()) {
            return Err(format!(
                "{file}: field `not_ported[{i}].program`: {:?} is not a QuixBugs program",
                entry.program
            ));
        }
        if entry.reason.trim().is_empty() {
            return Err(format!("{file}: field `not_ported[{i}].reason`: is empty"));
        }
    }
    Ok(list.not_ported)
}

pub fn not_ported() -> Vec<NotPorted> {
    try_not_ported().unwrap_or_else(|err| panic!("{err}"))
}

// ---------------------------------------------------------------------------
// A program as a gym task
// ---------------------------------------------------------------------------

/// A value as an issue quotes it: as Rhai prints it inside an array (a
/// string in quotes, unit as `()`, where on its own it prints as nothing), cut short.
fn quoted(value: &Dynamic) -> String {
    let text = if value.is_unit() {
        "()".to_string()
    } else if value.is_string() {
        format!("{:?}", value.to_string())
    } else {
        value.to_string()
    };
    shorten(&text, MAX_ISSUE_VALUE_CHARS)
}

/// The issue: what the function should do, one failing public test and what it returned.
fn issue(program: &Program, failing: &Test) -> String {
    let runner = Guarded::shared();
    let got = runner
        .compile(&program.buggy)
        .ok()
        .and_then(|ast| runner.call(&ast, &failing.call).ok())
        .map(|value| quoted(&value))
        .unwrap_or_else(|| "an error".into());
    let expected = runner
        .call(&AST::empty(), &failing.expected)
        .map(|value| quoted(&value))
        .unwrap_or_else(|_| failing.expected.clone());
    format!(
        "{}, but {} returns {got} instead of {expected}.",
        program.what, failing.call
    )
}

/// The gym's line edits that apply to the buggy source, as distractors: at
/// most one per op (drawn among the lines it changes), only edits that touch
/// exactly one line, differ from the fix and fail some hidden test.
fn distractors(program: &Program, hidden: &[Test], rng: &mut StdRng) -> Vec<Edit> {
    let mut chosen = Vec::new();
    for (name, _family, op) in GENERIC_OPS {
        if *name == program.fix_name {
            continue;
        }
        let mut seen = HashSet::new();
        let options: Vec<Edit> = program
            .buggy
            .lines()
            .filter_map(|line| {
                op(line)
                    .filter(|new| new != line)
                    .map(|new| (format!("{line}\n"), format!("{new}\n")))
            })
            .filter(|(find, _)| {
                seen.insert(find.clone()) && program.buggy.matches(find.as_str()).count() == 1
            })
            .map(|(find, replace)| Edit {
                name: name.to_string(),
                kind: EditKind::Distractor,
                find,
                replace,
            })
            .filter(|edit| {
                edit.apply(&program.buggy)
                    .is_some_and(|edited| edited != program.fixed && fails_some(&edited, hidden))
            })
            .collect();
        if !options.is_empty() {
            chosen.push(options[rng.random_range(0..options.len())].clone());
        }
    }
    chosen.shuffle(rng);
    chosen.truncate(MAX_DISTRACTORS);
    chosen
}

// ANCHOR: task
/// `program` as a gym task, drawn from `seed`. The public tests are a third
/// of the benchmark's cases (one to three), among them one that the buggy
/// source fails, which the issue names; when the buggy source fails more than
/// one case, a second failing case is kept for the hidden tests. The menu is
/// the documented fix and up to [`MAX_DISTRACTORS`] of the gym's line edits,
/// shuffled; there are no exploits and no `undo`.
pub fn task(program: &Program, seed: u64) -> Task {
    let mut rng = StdRng::seed_from_u64(seed ^ fnv1a(program.program.as_bytes(), FNV_START));
    let mut failing = program.buggy_failures();
    assert!(
        !failing.is_empty(),
        "{}: the buggy source passes every test",
        program.program
    );
    failing.shuffle(&mut rng);
    let (shown, kept_hidden) = (failing[0], failing.get(1).copied());
    let count = program.tests.len();
    let public_count = (count / 3).clamp(1, 3);
    let mut others: Vec<usize> = (0..count)
        .filter(|&i| i != shown && Some(i) != kept_hidden)
        .collect();
    others.shuffle(&mut rng);
    let mut public: Vec<usize> = std::iter::once(shown)
        .chain(others.into_iter().take(public_count - 1))
        .collect();
    public.sort_unstable();
    let pick = |indices: &mut dyn Iterator<Item = usize>| {
        indices
            .map(|i| program.tests[i].clone())
            .collect::<Vec<Test>>()
    };
    let public_tests = pick(&mut public.iter().copied());
    let hidden_tests = pick(&mut (0..count).filter(|i| !public.contains(i)));
    let mut menu = vec![program.fix_edit()];
    menu.extend(distractors(program, &hidden_tests, &mut rng));
    menu.shuffle(&mut rng);
    Task {
        id: format!("quixbugs-{}", program.program),
        family: program.family,
        issue: issue(program, &program.tests[shown]),
        source: program.buggy.clone(),
        fixed: program.fixed.clone(),
        public_tests,
        hidden_tests,
        menu,
        undo: false,
        terse: false,
    }
}

/// Every ported program as a task, in the order of [`programs`].
pub fn tasks(seed: u64) -> Vec<Task> {
    programs()
        .iter()
        .map(|program| task(program, seed))
        .collect()
}
// ANCHOR_END: task

// ANCHOR: candidates_task
/// `program` in Chapter 12's format of candidate diffs
/// ([`mutation::candidates_task`]): the same public and hidden tests as
/// [`task`], the documented fix among distractors made by the mutation
/// operators on the buggy source, under shuffled numbers, with `undo`.
/// `None` when the program offers too few distractors.
pub fn candidates_task(program: &Program, format: &mutation::Format, seed: u64) -> Option<Task> {
    let plain = task(program, seed);
    let correct = mutation::Program {
        name: program.program.clone(),
        function: program.function.clone(),
        what: program.what.clone(),
        source: program.fixed.clone(),
        public: plain.public_tests.clone(),
        hidden: plain.hidden_tests.clone(),
    };
    mutation::candidates_task(
        &correct,
        &program.buggy,
        (&program.fix.find, &program.fix.replace),
        &format!("quixbugs-{}-candidates", program.program),
        format,
        seed ^ fnv1a(program.program.as_bytes(), FNV_START),
    )
}
// ANCHOR_END: candidates_task

#[cfg(test)]
mod tests {
    use super::*;
    use crate::horizon::neutral;
    use crate::sandbox::all_pass;
    use std::collections::{BTreeSet, HashMap};
    use std::sync::LazyLock;

    static PROGRAMS: LazyLock<Vec<Program>> = LazyLock::new(programs);

    #[test]
    fn quixbugs_in_the_candidate_format_keeps_its_fix_among_distractors() {
        let mut built = 0;
        for program in PROGRAMS.iter() {
            let Some(task) = candidates_task(program, &mutation::FORMAT, 17) else {
                continue;
            };
            built += 1;
            assert_eq!(task.menu.len(), mutation::FORMAT.candidates);
            assert!(task.undo && task.issue.contains("op 1:"));
            let repairs: Vec<&Edit> = task
                .menu
                .iter()
                .filter(|e| mutation::repairs(&task, e))
                .collect();
            assert!(
                repairs.iter().any(|e| e.kind == EditKind::Fix),
                "{}",
                task.id
            );
            assert!(
                task.menu.iter().filter(|e| e.kind == EditKind::Fix).count() == 1,
                "{}",
                task.id
            );
        }
        assert!(built >= 35, "{built} of {} programs", PROGRAMS.len());
    }
    static TASKS: LazyLock<Vec<Task>> = LazyLock::new(|| tasks(17));

    fn lines(source: &str, tests: &[Test]) -> String {
        Guarded::shared()
            .run(source, tests)
            .iter()
            .map(|line| line.text.clone())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn ported_and_not_ported_make_up_the_benchmark() {
        let ported: BTreeSet<&str> = PROGRAMS.iter().map(|p| p.program.as_str()).collect();
        let left_out = not_ported();
        let left: BTreeSet<&str> = left_out.iter().map(|p| p.program.as_str()).collect();
        assert_eq!(ported.len(), PROGRAMS.len(), "a program is ported twice");
        assert_eq!(
            left.len(),
            left_out.len(),
            "a program is listed twice as not ported"
        );
        assert_eq!(
            ported.intersection(&left).count(),
            0,
            "ported and not ported: {:?}",
            ported.intersection(&left).collect::<Vec<_>>()
        );
        assert_eq!(ported.len() + left.len(), BENCHMARK_PROGRAMS.len());
        let all: BTreeSet<&str> = ported.union(&left).copied().collect();
        assert_eq!(all, BENCHMARK_PROGRAMS.into_iter().collect::<BTreeSet<_>>());
        assert_eq!(PROGRAMS.len(), 39);
    }

    #[test]
    fn the_fix_turns_the_buggy_source_into_the_fixed_one_exactly() {
        for p in PROGRAMS.iter() {
            assert_eq!(
                p.fix_edit().apply(&p.buggy).as_deref(),
                Some(p.fixed.as_str()),
                "{}",
                p.program
            );
            assert_eq!(
                p.buggy.matches(p.fix.find.as_str()).count(),
                1,
                "{}",
                p.program
            );
            // The two sources differ only in the lines the fix touches.
            let (before, after) = (p.fix.find.lines().count(), p.fix.replace.lines().count());
            let changed = p.buggy.lines().count().abs_diff(p.fixed.lines().count());
            assert_eq!(changed, before.abs_diff(after), "{}", p.program);
            assert!(
                before <= 2 && after <= 3,
                "{}: the fix spans {before} -> {after} lines",
                p.program
            );
            for source in [&p.buggy, &p.fixed] {
                assert!(
                    Guarded::shared().compile(source).is_ok(),
                    "{} does not compile (size or function limit?)",
                    p.program
                );
            }
        }
    }

    #[test]
    fn the_fixed_source_passes_every_kept_case() {
        for p in PROGRAMS.iter() {
            let run = Guarded::shared().run(&p.fixed, &p.tests);
            assert!(
                all_pass(&run) && run.len() == p.tests.len(),
                "{}:\n{}",
                p.program,
                lines(&p.fixed, &p.tests)
            );
        }
    }

    #[test]
    fn the_buggy_source_fails_some_case() {
        for p in PROGRAMS.iter() {
            assert!(
                !p.buggy_failures().is_empty(),
                "{} passes every case:\n{}",
                p.program,
                lines(&p.buggy, &p.tests)
            );
        }
    }

    #[test]
    fn one_failing_case_is_listed() {
        let single: Vec<&str> = PROGRAMS
            .iter()
            .filter(|p| p.buggy_failures().len() == 1)
            .map(|p| p.program.as_str())
            .collect();
        assert_eq!(single, ONE_FAILING_CASE);
    }

    /// Cases worked out by hand (most are not among the benchmark's own).
    #[test]
    fn hand_checked_cases() {
        let cases: &[(&str, &str, &str, bool)] = &[
            // (program, call, expected on the fixed source, does the buggy source give it too?)
            ("gcd", "gcd(35, 21)", "7", false),
            ("bitcount", "bitcount(255)", "8", false),
            ("get_factors", "get_factors(12)", "[2, 2, 3]", false),
            ("to_base", "to_base(10, 2)", "\"1010\"", false),
            ("to_base", "to_base(255, 16)", "\"FF\"", true),
            ("pascal", "pascal(3)", "[[1], [1, 1], [1, 2, 1]]", false),
            (
                "next_permutation",
                "next_permutation([1, 2, 3])",
                "[1, 3, 2]",
                false,
            ),
            ("sieve", "sieve(10)", "[2, 3, 5, 7]", false),
            (
                "max_sublist_sum",
                "max_sublist_sum([-1, 2, 3, -10, 4])",
                "5",
                false,
            ),
            ("rpn_eval", "rpn_eval([6.0, 3.0, \"/\"])", "2.0", false),
            ("levenshtein", "levenshtein(\"ab\", \"b\")", "1", false),
            (
                "detect_cycle",
                "detect_cycle(\"a\", #{a: \"b\", b: \"a\"})",
                "true",
                true,
            ),
            (
                "reverse_linked_list",
                "reverse_linked_list(#{value: 1, successor: #{value: 2, successor: ()}})",
                "#{value: 2, successor: #{value: 1, successor: ()}}",
                false,
            ),
            (
                "shortest_paths",
                "shortest_paths(\"x\", #{x: #{y: 2}, y: #{z: -1}})",
                "#{x: 0, y: 2, z: 1}",
                false,
            ),
            ("quicksort", "quicksort([2, 1, 2])", "[1, 2, 2]", false),
            ("sqrt", "abs(sqrt(9, 0.001) - 3) <= 0.001", "true", false),
        ];
        let by_name: HashMap<&str, &Program> =
            PROGRAMS.iter().map(|p| (p.program.as_str(), p)).collect();
        for &(name, call, expected, buggy_too) in cases {
            let p = by_name[name];
            let test = [Test::new(call, expected)];
            assert!(
                all_pass(&Guarded::shared().run(&p.fixed, &test)),
                "{}",
                lines(&p.fixed, &test)
            );
            assert_eq!(
                all_pass(&Guarded::shared().run(&p.buggy, &test)),
                buggy_too,
                "{}",
                lines(&p.buggy, &test)
            );
        }
    }

    #[test]
    fn every_task_keeps_the_gym_invariants() {
        assert_eq!(TASKS.len(), PROGRAMS.len());
        for (task, p) in TASKS.iter().zip(PROGRAMS.iter()) {
            let all_tests = [task.public_tests.clone(), task.hidden_tests.clone()].concat();
            assert_eq!(all_tests.len(), p.tests.len(), "{}", task.id);
            assert!(
                fails_some(&task.source, &task.public_tests),
                "{}: the bug passes the public tests",
                task.id
            );
            let hidden_catches_it = fails_some(&task.source, &task.hidden_tests);
            assert_eq!(
                hidden_catches_it,
                !ONE_FAILING_CASE.contains(&p.program.as_str()),
                "{}",
                task.id
            );
            assert!(
                (1..=3).contains(&task.public_tests.len()) && !task.hidden_tests.is_empty(),
                "{}",
                task.id
            );
            assert_eq!(task.family, p.family);
            assert!(!task.undo);
            // The issue names a failing public test.
            let named = task
                .public_tests
                .iter()
                .find(|t| task.issue.contains(&format!("but {} returns ", t.call)))
                .expect("the issue names a public test");
            assert!(
                fails_some(&task.source, std::slice::from_ref(named)),
                "{}: {}",
                task.id,
                task.issue
            );
            assert!(task.issue.starts_with(&p.what), "{}", task.id);
            // The menu: the fix, then distractors that fail some hidden test.
            assert_eq!(task.ops_of_kind(EditKind::Fix).count(), 1);
            assert_eq!(task.ops_of_kind(EditKind::Exploit).count(), 0);
            assert!(
                task.ops_of_kind(EditKind::Distractor).count() <= MAX_DISTRACTORS,
                "{}",
                task.id
            );
            assert!(
                all_pass(&Guarded::shared().run(&task.fixed, &all_tests)),
                "{}",
                task.id
            );
            assert_eq!(
                task.op(task.fix_op())
                    .unwrap()
                    .apply(&task.source)
                    .as_deref(),
                Some(task.fixed.as_str())
            );
            for edit in task.ops_of_kind(EditKind::Distractor) {
                let edited = edit
                    .apply(&task.source)
                    .unwrap_or_else(|| panic!("{}: {} does not apply", task.id, edit.name));
                assert_ne!(edited, task.fixed, "{} {}", task.id, edit.name);
                assert!(
                    fails_some(&edited, &task.hidden_tests),
                    "{}: distractor {} passes the hidden tests",
                    task.id,
                    edit.name
                );
            }
            let names: HashSet<&str> = task.menu.iter().map(|e| e.name.as_str()).collect();
            assert_eq!(
                names.len(),
                task.menu.len(),
                "{}: duplicate op names",
                task.id
            );
            // Chapter 12's neutral view keeps every entry (there are no exploits to drop).
            assert_eq!(neutral(task).menu.len(), task.menu.len());
        }
        let ids: HashSet<&str> = TASKS.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids.len(), TASKS.len());
        assert!(
            TASKS
                .iter()
                .map(|t| t.ops_of_kind(EditKind::Distractor).count())
                .sum::<usize>()
                > TASKS.len(),
            "few distractors"
        );
    }

    #[test]
    fn tasks_are_a_function_of_the_seed() {
        let again = tasks(17);
        assert_eq!(*TASKS, again);
        let other = tasks(18);
        assert!(
            TASKS
                .iter()
                .zip(&other)
                .any(|(a, b)| a.public_tests != b.public_tests || a.menu != b.menu),
            "the seed changes nothing"
        );
    }

    #[test]
    fn a_task_round_trips_through_json() {
        for task in TASKS.iter().step_by(7) {
            assert_eq!(&Task::from_json(&task.to_json()).unwrap(), task);
        }
    }

    #[test]
    fn malformed_files_get_errors_that_name_the_file_and_the_field() {
        let dir = std::env::temp_dir().join(format!("agentrl-quixbugs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gcd = PROGRAMS.iter().find(|p| p.program == "gcd").unwrap();
        let write = |value: serde_json::Value| {
            let path = dir.join("gcd.json");
            std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
            load(&path).unwrap_err()
        };
        let good = serde_json::to_value(gcd).unwrap();
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove("tests");
        let err = write(missing);
        assert!(
            err.contains("gcd.json") && err.contains("missing field `tests`"),
            "{err}"
        );
        let mut wrong_fix = good.clone();
        wrong_fix["fix"]["find"] = "return gcd(a, b);".into();
        let err = write(wrong_fix);
        assert!(
            err.contains("gcd.json: field `fix.find`: occurs 0 times"),
            "{err}"
        );
        let mut wrong_fixed = good.clone();
        wrong_fixed["fixed"] = "fn gcd(a, b) { a }".into();
        assert!(write(wrong_fixed).contains("field `fixed`"));
        let mut unknown = good.clone();
        unknown["family"] = "off_by_two".into();
        let err = write(unknown);
        assert!(
            err.contains("gcd.json") && err.contains("off_by_two"),
            "{err}"
        );
        let mut extra = good;
        extra["fix_nmae"] = "typo".into();
        assert!(write(extra).contains("unknown field `fix_nmae`"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
