//! Grading tests for the Chapter 19 exercises: `cargo test -p exercises ch19`.

use super::*;
use agentrl::capstone::{split, CapstoneReport};
use agentrl::episode::parse_call;
use agentrl::gym::{Family, Gym};

/// `fails` holds on `found`, and on no string with one character fewer.
fn assert_one_minimal(found: &str, fails: &dyn Fn(&str) -> bool) {
    assert!(fails(found), "the shrunk input {found:?} no longer fails");
    let chars: Vec<char> = found.chars().collect();
    for i in 0..chars.len() {
        let shorter: String = chars[..i].iter().chain(&chars[i + 1..]).collect();
        assert!(!fails(&shorter), "{found:?} is not minimal: {shorter:?} still fails");
    }
}

// ---------------------------------------------------------------------------
// Exercise 19.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_shrinks_to_the_characters_that_matter() {
    let input = format!("{}\u{202E}{}x{}", "<call>".repeat(300), "é".repeat(77), " tail".repeat(40));
    let fails = |s: &str| s.contains('\u{202E}') && s.contains('x');
    let found = shrink(&input, &fails);
    assert_one_minimal(&found, &fails);
    assert_eq!(found, "\u{202E}x");
}

#[test]
fn ex1_shrinks_a_call_to_its_shortest_form() {
    let input = "Let me look.\n<call>   edit    swap_args   </call>\nThat should do it.";
    let fails = |s: &str| parse_call(s).is_some_and(|c| c.tool == "edit" && c.arg.as_deref() == Some("swap_args"));
    assert!(!fails(input), "text around the call makes it no call");
    let inner = "<call>   edit    swap_args   </call>";
    let found = shrink(inner, &fails);
    assert_one_minimal(&found, &fails);
    assert_eq!(found, "<call>edit swap_args</call>");
}

#[test]
fn ex1_uses_few_calls_on_a_long_input() {
    let input: String = (0..4_000).map(|i| if i == 2_718 { '!' } else { 'a' }).collect();
    let calls = std::cell::Cell::new(0usize);
    let fails = |s: &str| {
        calls.set(calls.get() + 1);
        s.contains('!')
    };
    let found = shrink(&input, &fails);
    assert_eq!(found, "!");
    assert!(calls.get() < 400, "{} calls of the property for one character in 4 000: delete chunks first", calls.get());
}

// ---------------------------------------------------------------------------
// Exercise 19.2
// ---------------------------------------------------------------------------

fn stored() -> CapstoneReport {
    CapstoneReport::read(&agentrl::book::data_path("capstone-report.json")).unwrap_or_else(|err| panic!("{err}"))
}

#[test]
fn ex2_gains_per_held_out_family() {
    let report = stored();
    let families = split(&Gym::standard()).families;
    for seed in 0..report.seeds.len() {
        let gains = family_gains(&report, &families, seed);
        let names: Vec<Family> = gains.iter().map(|g| g.0).collect();
        assert_eq!(names, vec![Family::WrongInit, Family::SwappedArgs], "seed {seed}: the two held-out families, in the report's order");
        let run = &report.seeds[seed];
        let mut weighted = 0.0;
        for &(family, mean, low, high) in &gains {
            // The mean gain is the difference of the family's success rates, from the counts.
            let ids: Vec<&str> = families.iter().filter(|t| t.family == family).map(|t| t.id.as_str()).collect();
            let rate = |scores: &[agentrl::evaluation::TaskScore]| {
                let mine: Vec<_> = scores.iter().filter(|s| ids.contains(&s.task.as_str())).collect();
                mine.iter().map(|s| s.successes as f64 / s.samples as f64).sum::<f64>() / mine.len() as f64
            };
            let want = rate(&run.trained[1].report.scores) - rate(&run.warm[1].report.scores);
            assert!((mean - want).abs() < 1e-12, "seed {seed}, {family:?}: mean gain {mean}, from the counts {want}");
            assert!(low <= mean && mean <= high && high - low < 2.0, "seed {seed}, {family:?}: [{low}, {high}] around {mean}");
            weighted += mean * ids.len() as f64 / families.len() as f64;
        }
        // The families together give the whole set's paired gain.
        let whole = agentrl::evaluation::compare(&run.warm[1].report, &run.trained[1].report, 1, 19).0;
        assert!((weighted - whole).abs() < 1e-12, "seed {seed}: families weighted {weighted}, whole set {whole}");
    }
}
