//! `cargo xtask exercises N`: grade one chapter's exercises and report them by
//! name, one line each (solved or not, with the first failing check's
//! message), with the places of the stub to edit and of the model answer.
//!
//! The grading is `cargo test -p exercises --lib -- chNN::tests::`, the tests
//! CI runs (see `site::grade_exercises`); this module only names what they
//! say. A chapter's exercises are read from three files: the grading tests
//! `exercises/src/chNN/tests.rs` (a test `exK_...` grades Exercise N.K), the
//! stubs `exercises/src/chNN/stubs.rs` (each exercise's function opens its doc
//! comment with `/// Exercise N.K`) and the answers `chapters/answers-NN.md`
//! (one `## Exercise N.K: title` section each, prose exercises included).

use crate::chapter::{self, Chapter};
use crate::setup;
use crate::util::{self, capture, root, step, Result};
use std::collections::BTreeMap;
use std::process::{Command, Stdio};

/// One exercise of a chapter, and where its pieces live.
#[derive(Debug, Clone, PartialEq)]
pub struct Exercise {
    /// Its number within the chapter (K of Exercise N.K).
    pub number: u32,
    /// Its title, from the answers' heading or else the chapter's list of exercises.
    pub title: String,
    /// The names of the tests that grade it (`exK_...`), in the order of `tests.rs`.
    pub tests: Vec<String>,
    /// `(line, function)` of each function of `stubs.rs` that it asks for.
    pub stubs: Vec<(usize, String)>,
    /// The line of its section in the answers file.
    pub answer: Option<usize>,
}

/// What one graded test did.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Whether it passed.
    pub passed: bool,
    /// The message of its failure (the panic's, or libtest's note), if it failed.
    pub message: Option<String>,
}

/// An exercise's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// Every test of the exercise passed.
    Solved,
    /// A test failed: the first one, in the order of `tests.rs`, and its message.
    NotSolved { test: String, message: String },
    /// A test of the exercise did not run (it is missing from cargo's report).
    NotRun { test: String },
    /// A question answered in prose: no test grades it.
    Prose,
}

/// One chapter's exercises with their verdicts.
pub struct Report {
    /// The chapter's two-digit number, as in `chNN`.
    pub nn: String,
    /// The exercises in order, each with its verdict.
    pub exercises: Vec<(Exercise, Status)>,
    /// Whether the reference solutions were graded instead of the stubs.
    pub solutions: bool,
}

/// `cargo xtask exercises CHAPTER [--solutions]`: install libtorch if it is
/// missing, grade the chapter's exercises, print the report, and fail if any
/// graded exercise is not solved.
pub fn exercises(query: &str, solutions: bool) -> Result<()> {
    let chapter = find(query)?;
    let nn = chapter.name[..2].to_string();
    if !root()
        .join("exercises/src")
        .join(format!("ch{nn}"))
        .is_dir()
    {
        let exercises = read_exercises(&chapter)?;
        println!("{}", heading(&chapter, false));
        for exercise in &exercises {
            println!("{}", line(&nn, exercise, &Status::Prose));
        }
        println!("Chapter {} has no graded exercises (there is no exercises/src/ch{nn}/): its model answers are in chapters/answers-{nn}.md", number(&nn));
        return Ok(());
    }
    setup::solving()?;
    step(&format!(
        "grading Chapter {}'s exercises: cargo test -p exercises --lib{} -- ch{nn}::tests::",
        number(&nn),
        if solutions {
            " --features solutions"
        } else {
            ""
        }
    ));
    let report = grade(&chapter, solutions, true)?;
    println!("{}", heading(&chapter, report.solutions));
    for (exercise, status) in &report.exercises {
        println!("{}", line(&report.nn, exercise, status));
    }
    let graded: Vec<&Status> = report
        .exercises
        .iter()
        .map(|(_, s)| s)
        .filter(|s| **s != Status::Prose)
        .collect();
    let solved = graded.iter().filter(|s| ***s == Status::Solved).count();
    println!("{solved} of {} graded exercises solved; the reference solutions are in exercises/src/ch{nn}/solutions.rs", graded.len());
    if solved == graded.len() {
        Ok(())
    } else {
        Err(format!(
            "{} of Chapter {}'s {} graded exercises not solved yet",
            graded.len() - solved,
            number(&nn),
            graded.len()
        ))
    }
}

/// The chapter that `query` names: a number (`7`, `07`), `ch07`, or a chapter
/// file's name or its beginning (`07-advantages`).
pub fn find(query: &str) -> Result<Chapter> {
    let q = query.trim();
    let q = q.strip_prefix("chapters/").unwrap_or(q);
    let q = q.strip_suffix(".md").unwrap_or(q);
    let q = q
        .strip_prefix("ch")
        .filter(|rest| rest.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .unwrap_or(q);
    chapter::find(q)
}

/// Grade `chapter`'s exercises: run its tests (the stubs, or the reference
/// solutions with `solutions`) and match what they did to the exercises.
/// `show_cargo` lets cargo's progress and compiler errors through to the
/// terminal; otherwise they are kept and shown only if the build fails.
pub fn grade(chapter: &Chapter, solutions: bool, show_cargo: bool) -> Result<Report> {
    let nn = chapter.name[..2].to_string();
    let exercises = read_exercises(chapter)?;
    let mut cmd = Command::new("cargo");
    // As `site::grade_exercises` runs them, so that each reuses the other's build.
    cmd.args(["test", "-p", "exercises", "--lib"])
        .env("OMP_WAIT_POLICY", "PASSIVE")
        .current_dir(root());
    // The messages, not where they came from (a backtrace would bury them).
    cmd.env("RUST_BACKTRACE", "0");
    if solutions {
        cmd.args(["--features", "solutions"]);
    }
    cmd.args(["--", &format!("ch{nn}::tests::")]);
    if show_cargo {
        cmd.stderr(Stdio::inherit());
    }
    let out = capture(&mut cmd)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !stdout.contains("test result:") {
        let errors = if show_cargo {
            "cargo's errors are above".to_string()
        } else {
            String::from_utf8_lossy(&out.stderr).to_string()
        };
        return Err(format!(
            "the exercises crate did not build ({}), so no exercise could be graded (it compiles every chapter's stubs together: an error in any of them stops the grading): {errors}",
            out.status
        ));
    }
    let outcomes = parse_libtest(&stdout);
    let exercises = exercises
        .into_iter()
        .map(|exercise| {
            let status = status(&nn, &exercise, &outcomes);
            (exercise, status)
        })
        .collect();
    Ok(Report {
        nn,
        exercises,
        solutions,
    })
}

/// The verdict on `exercise` from the tests' `outcomes` (keyed by full test name).
fn status(nn: &str, exercise: &Exercise, outcomes: &BTreeMap<String, Outcome>) -> Status {
    if exercise.tests.is_empty() {
        return Status::Prose;
    }
    for test in &exercise.tests {
        match outcomes.get(&format!("ch{nn}::tests::{test}")) {
            None => return Status::NotRun { test: test.clone() },
            Some(Outcome {
                passed: false,
                message,
            }) => {
                return Status::NotSolved {
                    test: test.clone(),
                    message: message
                        .clone()
                        .unwrap_or_else(|| "failed (no message)".into()),
                }
            }
            Some(_) => {}
        }
    }
    Status::Solved
}

/// The report's first line.
fn heading(chapter: &Chapter, solutions: bool) -> String {
    let title = chapter
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("# "))
        .unwrap_or(&chapter.name)
        .to_string();
    let what = if solutions {
        ", graded on the reference solutions"
    } else {
        ""
    };
    format!("\x1b[1mChapter {title}: exercises{what}\x1b[0m")
}

/// The chapter's number without its leading zero.
fn number(nn: &str) -> String {
    nn.parse::<u32>()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| nn.to_string())
}

/// Longest message shown on an exercise's line.
const MESSAGE_CHARS: usize = 300;

/// One exercise's line of the report (its status and first failing check),
/// and under it where its stub and its model answer live.
pub fn line(nn: &str, exercise: &Exercise, status: &Status) -> String {
    let n = number(nn);
    let verdict = match status {
        Status::Solved => format!(
            "\x1b[32msolved\x1b[0m ({} checks pass)",
            exercise.tests.len()
        ),
        Status::NotSolved { test, message } => {
            let mut shown: String = message.chars().take(MESSAGE_CHARS).collect();
            if message.chars().count() > MESSAGE_CHARS {
                shown.push('…');
            }
            format!("\x1b[31mnot solved\x1b[0m: {test}: {shown}")
        }
        Status::NotRun { test } => {
            format!("\x1b[31mnot graded\x1b[0m: its test {test} did not run")
        }
        Status::Prose => "no test (a question answered in prose)".to_string(),
    };
    let mut places = Vec::new();
    if let Some((first, _)) = exercise.stubs.first() {
        let names: Vec<&str> = exercise.stubs.iter().map(|(_, f)| f.as_str()).collect();
        places.push(format!(
            "stub exercises/src/ch{nn}/stubs.rs:{first} ({})",
            names.join(", ")
        ));
    }
    if let Some(answer) = exercise.answer {
        places.push(format!("answer chapters/answers-{nn}.md:{answer}"));
    }
    format!(
        "Exercise {n}.{} {}: {verdict}\n    {}",
        exercise.number,
        exercise.title,
        places.join(" · ")
    )
}

/// A chapter's exercises, from its grading tests, stubs, answers and its own
/// list of exercises (for titles the answers do not give), in order.
pub fn read_exercises(chapter: &Chapter) -> Result<Vec<Exercise>> {
    let nn = &chapter.name[..2];
    let n: u32 = nn
        .parse()
        .map_err(|_| format!("chapter {} does not start with its number", chapter.name))?;
    let dir = root().join("exercises/src").join(format!("ch{nn}"));
    let read_if = |path: std::path::PathBuf| {
        if path.exists() {
            util::read(&path)
        } else {
            Ok(String::new())
        }
    };
    let tests = read_if(dir.join("tests.rs"))?;
    let stubs = read_if(dir.join("stubs.rs"))?;
    let answers = read_if(root().join("chapters").join(format!("answers-{nn}.md")))?;
    Ok(exercises_from(
        n,
        &tests,
        &stubs,
        &answers,
        &chapter.lines.join("\n"),
    ))
}

/// The exercises of chapter `n` from the texts of its tests, stubs, answers
/// and chapter (any may be empty).
fn exercises_from(n: u32, tests: &str, stubs: &str, answers: &str, chapter: &str) -> Vec<Exercise> {
    let mut by_number: BTreeMap<u32, Exercise> = BTreeMap::new();
    fn entry(map: &mut BTreeMap<u32, Exercise>, k: u32) -> &mut Exercise {
        map.entry(k).or_insert_with(|| Exercise {
            number: k,
            title: String::new(),
            tests: Vec::new(),
            stubs: Vec::new(),
            answer: None,
        })
    }
    // Answers: `## Exercise N.K: title` (the title may be missing).
    for (i, line) in answers.lines().enumerate() {
        if let Some((k, rest)) = line
            .strip_prefix("## Exercise ")
            .and_then(|rest| exercise_number(n, rest))
        {
            let e = entry(&mut by_number, k);
            e.answer.get_or_insert(i + 1);
            let title = rest.trim_start_matches(':').trim();
            if e.title.is_empty() && !title.is_empty() {
                e.title = title.to_string();
            }
        }
    }
    // Stubs: a doc comment that opens with `/// Exercise N.K`, then its `pub fn`.
    let lines: Vec<&str> = stubs.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let opens = i == 0 || !lines[i - 1].trim_start().starts_with("///");
        let Some((k, _)) = line
            .strip_prefix("/// Exercise ")
            .and_then(|rest| exercise_number(n, rest))
            .filter(|_| opens)
        else {
            continue;
        };
        let Some((at, function)) = lines.iter().enumerate().skip(i).find_map(|(j, l)| {
            let rest = l.strip_prefix("pub fn ")?;
            Some((j + 1, rest.split(['(', '<']).next()?.trim().to_string()))
        }) else {
            continue;
        };
        entry(&mut by_number, k).stubs.push((at, function));
    }
    // Tests: `#[test]` then `fn exK_...`.
    let lines: Vec<&str> = tests.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = line
            .trim_start()
            .strip_prefix("fn ")
            .and_then(|rest| rest.split('(').next())
        else {
            continue;
        };
        let Some(k) = name
            .strip_prefix("ex")
            .and_then(|rest| rest.split('_').next())
            .and_then(|digits| digits.parse::<u32>().ok())
        else {
            continue;
        };
        let attributes = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.trim_start().starts_with("#["));
        if attributes.clone().any(|l| l.trim() == "#[test]") {
            entry(&mut by_number, k).tests.push(name.to_string());
        }
    }
    // Titles the answers do not give: the chapter's list, `K. **Title.** ...`.
    if let Some(start) = chapter.lines().position(|l| l.trim() == "## Exercises") {
        for line in chapter
            .lines()
            .skip(start + 1)
            .take_while(|l| !l.starts_with("## "))
        {
            let Some((k, rest)) = line.split_once(". **") else {
                continue;
            };
            let Ok(k) = k.parse::<u32>() else { continue };
            if let (Some(e), Some((title, _))) = (by_number.get_mut(&k), rest.split_once("**")) {
                if e.title.is_empty() {
                    e.title = title.trim_end_matches('.').to_string();
                }
            }
        }
    }
    by_number.into_values().collect()
}

/// `K` and the rest of the line, if `text` starts with `N.K` for chapter `n`
/// (and not, say, `N.K0` when the chapter is asked for `N.K`).
fn exercise_number(n: u32, text: &str) -> Option<(u32, &str)> {
    let rest = text.strip_prefix(&format!("{n}."))?;
    let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
    Some((rest[..digits].parse().ok()?, &rest[digits..]))
}

/// What each test did, from libtest's output: its `test NAME ... ok|FAILED`
/// lines, and the first line of each failure's message from its
/// `---- NAME stdout ----` section.
pub fn parse_libtest(stdout: &str) -> BTreeMap<String, Outcome> {
    let mut outcomes: BTreeMap<String, Outcome> = BTreeMap::new();
    for line in stdout.lines() {
        let Some((name, verdict)) = line
            .strip_prefix("test ")
            .and_then(|rest| rest.rsplit_once(" ... "))
        else {
            continue;
        };
        let verdict = verdict.trim();
        if verdict == "ok" || verdict.starts_with("FAILED") {
            outcomes.insert(
                name.trim().to_string(),
                Outcome {
                    passed: verdict == "ok",
                    message: None,
                },
            );
        }
    }
    let mut lines = stdout.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|rest| rest.strip_suffix(" stdout ----"))
        else {
            continue;
        };
        let mut section = Vec::new();
        while let Some(next) = lines.peek() {
            if next.starts_with("---- ") || next.trim_end() == "failures:" {
                break;
            }
            section.push(lines.next().unwrap());
        }
        if let Some(outcome) = outcomes.get_mut(name.trim()) {
            outcome.message = failure_message(&section);
        }
    }
    outcomes
}

/// The message of one failure section: the lines after `panicked at ...:`
/// up to libtest's notes, joined; else libtest's own note (a test that should
/// have panicked and did not).
fn failure_message(section: &[&str]) -> Option<String> {
    let backtrace_note = |l: &str| l.starts_with("note: run with `RUST_BACKTRACE");
    if let Some(at) = section.iter().position(|l| l.contains("panicked at ")) {
        let head = section[at];
        // Before Rust 1.73 the message stood on the same line: `panicked at 'message', file:line:col`.
        let inline = head
            .split_once("panicked at '")
            .and_then(|(_, rest)| rest.rsplit_once("', "))
            .map(|(m, _)| m.to_string());
        let message = inline.unwrap_or_else(|| {
            let end = |l: &&str| l.starts_with("note: ") || l.starts_with("stack backtrace:");
            let body: Vec<&str> = section[at + 1..]
                .iter()
                .copied()
                .take_while(|l| !end(l))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            body.join(" ")
        });
        return (!message.is_empty()).then_some(message);
    }
    section
        .iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty() && !backtrace_note(l))
        .map(|l| l.trim_start_matches("note: ").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBTEST: &str = "
running 3 tests
test ch07::tests::ex1_minimises ... FAILED
test ch07::tests::ex2_recovers ... ok
test ch07::tests::ex3_matches ... FAILED

failures:

---- ch07::tests::ex1_minimises stdout ----

thread 'ch07::tests::ex1_minimises' (4711) panicked at exercises/src/ch07/stubs.rs:30:5:
not yet implemented: Exercise 7.1: the baseline
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

---- ch07::tests::ex3_matches stdout ----
thread 'ch07::tests::ex3_matches' panicked at exercises/src/ch07/tests.rs:80:9:
assertion `left == right` failed: GAE at t = 0
  left: 1.0
 right: 0.5
stack backtrace:
   0: __rustc::rust_begin_unwind
note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.

failures:
    ch07::tests::ex1_minimises
    ch07::tests::ex3_matches

test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 70 filtered out; finished in 0.01s
";

    #[test]
    fn libtest_output_gives_each_test_its_verdict_and_message() {
        let got = parse_libtest(LIBTEST);
        assert_eq!(got.len(), 3);
        assert_eq!(
            got["ch07::tests::ex1_minimises"],
            Outcome {
                passed: false,
                message: Some("not yet implemented: Exercise 7.1: the baseline".into())
            }
        );
        assert_eq!(
            got["ch07::tests::ex2_recovers"],
            Outcome {
                passed: true,
                message: None
            }
        );
        assert_eq!(
            got["ch07::tests::ex3_matches"].message.as_deref(),
            Some("assertion `left == right` failed: GAE at t = 0 left: 1.0 right: 0.5")
        );
        let old = "---- a stdout ----\nthread 'a' panicked at 'wrong sum', src/x.rs:1:2\n";
        assert_eq!(
            failure_message(&old.lines().skip(1).collect::<Vec<_>>()).as_deref(),
            Some("wrong sum")
        );
        assert_eq!(
            failure_message(&["note: test did not panic as expected at src/x.rs:3:4"]).as_deref(),
            Some("test did not panic as expected at src/x.rs:3:4")
        );
    }

    #[test]
    fn exercises_come_from_tests_stubs_answers_and_the_chapter() {
        let tests = "#[test]\nfn ex1_a() {}\n\nfn ex1_helper_not_a_test() {}\n#[test]\n#[should_panic]\nfn ex2_b() {}\n#[test]\nfn ex1_c() {}\n";
        let stubs = "/// Exercise 7.1: first.\n/// More, as in Exercise 7.2.\npub fn first(x: f64) -> f64 {\n    todo!()\n}\n\n/// Exercise 7.2 (a): second.\npub fn second<T>(x: T) {}\n/// Exercise 7.2 (b): third.\npub fn third() {}\n";
        let answers = "# Answers\n\n## Exercise 7.1: the first one\n\ntext\n## Exercise 7.3\n";
        let chapter = "# 7. Title\n## Exercises\n\n1. **One.** Write it.\n2. **Two.** Write it.\n3. **Design: three.** Think.\n## In real systems\n4. **Not an exercise.**";
        let got = exercises_from(7, tests, stubs, answers, chapter);
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[0],
            Exercise {
                number: 1,
                title: "the first one".into(),
                tests: vec!["ex1_a".into(), "ex1_c".into()],
                stubs: vec![(3, "first".into())],
                answer: Some(3)
            }
        );
        assert_eq!(
            got[1],
            Exercise {
                number: 2,
                title: "Two".into(),
                tests: vec!["ex2_b".into()],
                stubs: vec![(8, "second".into()), (10, "third".into())],
                answer: None
            }
        );
        assert_eq!(
            got[2],
            Exercise {
                number: 3,
                title: "Design: three".into(),
                tests: vec![],
                stubs: vec![],
                answer: Some(6)
            }
        );
        let outcomes = parse_libtest("test ch07::tests::ex1_a ... ok\ntest ch07::tests::ex1_c ... FAILED\n---- ch07::tests::ex1_c stdout ----\nthread 'x' panicked at a.rs:1:1:\nwrong\n");
        assert_eq!(
            status("07", &got[0], &outcomes),
            Status::NotSolved {
                test: "ex1_c".into(),
                message: "wrong".into()
            }
        );
        assert_eq!(
            status("07", &got[1], &outcomes),
            Status::NotRun {
                test: "ex2_b".into()
            }
        );
        assert_eq!(status("07", &got[2], &outcomes), Status::Prose);
        assert_eq!(number("07"), "7");
        assert_eq!(number("00"), "0");
        assert_eq!(number("14"), "14");
    }

    #[test]
    fn a_chapter_is_found_by_number_by_module_name_and_by_file_name() {
        for query in [
            "7",
            "07",
            "ch07",
            "07-advantages",
            "chapters/07-advantages-and-credit-assignment.md",
        ] {
            assert_eq!(
                find(query).unwrap().name,
                "07-advantages-and-credit-assignment",
                "{query}"
            );
        }
        assert!(find("ch99").is_err());
    }

    /// The report on Chapter 7's stubs (every exercise unsolved, each with its
    /// first failing check's message) and on the reference solutions (every
    /// exercise solved), from real runs of the grading tests. Needs libtorch
    /// (`cargo xtask setup`), as the exercises crate links it.
    #[test]
    fn the_report_on_stubs_and_on_the_reference_solutions() {
        assert!(
            setup::libtorch().join("lib").is_dir(),
            "no libtorch at {}: run `cargo xtask setup` first",
            setup::libtorch().display()
        );
        let chapter = find("7").unwrap();
        let exercises = read_exercises(&chapter).unwrap();
        let graded = exercises.iter().filter(|e| !e.tests.is_empty()).count();
        assert_eq!(graded, 5, "Exercises 7.1 to 7.5 are graded by tests");
        assert!(
            exercises
                .iter()
                .all(|e| !e.title.is_empty() && e.answer.is_some()),
            "every exercise has a title and a model answer: {exercises:?}"
        );

        let stubs = grade(&chapter, false, false).unwrap();
        let shown: Vec<String> = stubs
            .exercises
            .iter()
            .map(|(e, s)| line(&stubs.nn, e, s))
            .collect();
        eprintln!("the report on the stubs:\n{}", shown.join("\n"));
        for ((exercise, status), text) in stubs.exercises.iter().zip(&shown) {
            if exercise.tests.is_empty() {
                assert_eq!(*status, Status::Prose);
                continue;
            }
            match status {
                Status::NotSolved { message, .. } => assert!(
                    message.contains(&format!("Exercise 7.{}", exercise.number)),
                    "the stub's todo!() names its exercise: {message}"
                ),
                other => panic!("Exercise 7.{} on the stubs: {other:?}", exercise.number),
            }
            assert!(
                text.contains("not solved")
                    && text.contains("exercises/src/ch07/stubs.rs:")
                    && text.contains("chapters/answers-07.md:"),
                "{text}"
            );
        }

        let solutions = grade(&chapter, true, false).unwrap();
        assert!(solutions.solutions);
        let shown: Vec<String> = solutions
            .exercises
            .iter()
            .map(|(e, s)| line(&solutions.nn, e, s))
            .collect();
        eprintln!(
            "the report on the reference solutions:\n{}",
            shown.join("\n")
        );
        for (exercise, status) in &solutions.exercises {
            let want = if exercise.tests.is_empty() {
                Status::Prose
            } else {
                Status::Solved
            };
            assert_eq!(
                *status, want,
                "Exercise 7.{} on the reference solutions",
                exercise.number
            );
        }
    }
}
