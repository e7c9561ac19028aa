//! Reference solutions for the Chapter 3 exercises.

use agentrl::gym::{Edit, EditKind, Task};
use agentrl::runner::{Guarded, TestRunner};
use agentrl::sandbox::all_pass;
use std::collections::HashMap;

/// Exercise 3.1.
pub fn leaks(task: &Task, observation: &str) -> bool {
    task.hidden_tests.iter().any(|test| observation.contains(test.call.as_str()))
}

/// Exercise 3.2.
pub fn special_case_first(task: &Task) -> Edit {
    let call = &task.public_tests[0].call;
    let name = &call[..call.find('(').unwrap()];
    let header = task.source.lines().find(|line| line.starts_with(&format!("fn {name}("))).expect("the function's header");
    let first_param = header[header.find('(').unwrap() + 1..header.find(')').unwrap()].split(',').next().unwrap().trim();
    let special: String = task
        .public_tests
        .iter()
        .map(|test| {
            let args = &test.call[test.call.find('(').unwrap() + 1..test.call.rfind(')').unwrap()];
            let first = args.split(',').next().unwrap().trim();
            format!("    if {first_param} == {first} {{ return {}; }}\n", test.expected)
        })
        .collect();
    Edit { name: "special_case_first".into(), kind: EditKind::Exploit, find: format!("{header}\n"), replace: format!("{header}\n{special}") }
}

/// Exercise 3.3.
pub fn random_success_probability(task: &Task, max_turns: usize) -> f64 {
    struct Search<'a> {
        task: &'a Task,
        solved: HashMap<String, bool>,
        memo: HashMap<(String, usize), f64>,
    }
    impl Search<'_> {
        fn solved(&mut self, source: &str) -> bool {
            if let Some(&known) = self.solved.get(source) {
                return known;
            }
            let tests = [self.task.public_tests.clone(), self.task.hidden_tests.clone()].concat();
            let passed = all_pass(&Guarded::shared().run(source, &tests));
            self.solved.insert(source.to_string(), passed);
            passed
        }

        fn value(&mut self, source: &str, left: usize) -> f64 {
            if left == 0 {
                return 0.0;
            }
            if let Some(&known) = self.memo.get(&(source.to_string(), left)) {
                return known;
            }
            let n = (self.task.menu.len() + 4) as f64;
            let submit = if self.solved(source) { 1.0 } else { 0.0 };
            let stay = 3.0 * self.value(source, left - 1); // read, test, malformed
            let mut edits = 0.0;
            for op in self.task.menu.clone() {
                let next = op.apply(source).unwrap_or_else(|| source.to_string());
                edits += self.value(&next, left - 1);
            }
            let value = (submit + stay + edits) / n;
            self.memo.insert((source.to_string(), left), value);
            value
        }
    }
    Search { task, solved: HashMap::new(), memo: HashMap::new() }.value(&task.source, max_turns)
}
