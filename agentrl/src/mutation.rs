//! Chapter 12: bug families at scale. Correct Rhai programs with public and
//! hidden tests ([`Program`], stored in `data/programs/`), mutation operators
//! that each make one kind of small defect ([`Operator`], [`mutations`]),
//! the mutants that both test suites catch ([`mutants`]), a task format in
//! which only reading can find the fix ([`task`]: candidate edits as diffs
//! under neutral labels, shuffled, with `undo`, more candidates than a blind
//! search can try, and distractors of the same shapes as fixes), the splits
//! by instance, program and operator ([`split`]), and the baselines every
//! agent is compared with ([`baselines`]).

use crate::book::{fnv1a, FNV_START};
use crate::episode::{parse_call, Call, Owner};
use crate::gym::{BugFixEnv, Edit, EditKind, Family, Task};
use crate::horizon::{neutral, Searcher};
use crate::policies::{run_episode, Policy};
use crate::pretrain::{pretrain, PretrainConfig, Sequence, BASE};
use crate::rollout::{Played, Segment};
use crate::runner::{Guarded, Test, TestRunner};
use crate::sandbox::all_pass;
use crate::tinyagent::TinyAgent;
use crate::tokenizer::Bpe;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rhai::AST;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

// ANCHOR: program
/// A correct program: what its entry point should do (one sentence, the
/// start of every issue about it), its source, and its tests. The public
/// tests are the ones the agent's `test` tool runs; the hidden tests decide
/// the reward together with them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    pub name: String,
    pub function: String,
    pub what: String,
    pub source: String,
    pub public: Vec<Test>,
    pub hidden: Vec<Test>,
}
// ANCHOR_END: program

/// Every program in `dir` (one JSON file each), sorted by name, each checked:
/// its source compiles and passes all its tests.
pub fn load_programs(dir: &Path) -> Result<Vec<Program>, String> {
    let mut programs = Vec::new();
    let entries =
        std::fs::read_dir(dir).map_err(|err| format!("cannot list {}: {err}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|err| err.to_string())?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let program: Program = serde_json::from_str(&text)
            .map_err(|err| format!("{} is not a program: {err}", path.display()))?;
        let lines = Guarded::shared().run(&program.source, &program.tests());
        if !all_pass(&lines) {
            let failed: Vec<String> = lines
                .iter()
                .filter(|l| !l.passed)
                .map(|l| l.text.clone())
                .collect();
            return Err(format!(
                "{}: the correct source fails its own tests: {}",
                path.display(),
                failed.join("; ")
            ));
        }
        programs.push(program);
    }
    programs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(programs)
}

/// The programs of `data/programs/`.
pub fn programs() -> Vec<Program> {
    load_programs(&crate::book::data_path("programs")).unwrap_or_else(|err| panic!("{err}"))
}

impl Program {
    /// Public then hidden tests.
    pub fn tests(&self) -> Vec<Test> {
        self.public.iter().chain(&self.hidden).cloned().collect()
    }
}

// ---------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ident,
    Int,
    Str,
    Punct,
}

/// A token of a Rhai source: its kind and its byte range.
#[derive(Clone, Copy, Debug)]
struct Token {
    kind: Kind,
    start: usize,
    end: usize,
}

const KEYWORDS: [&str; 15] = [
    "let", "fn", "if", "else", "while", "for", "in", "return", "true", "false", "loop", "break",
    "continue", "do", "until",
];

/// Multi-character punctuation, longest first.
const PUNCTS: [&str; 17] = [
    "..=", "..", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "=>", "->",
    "::", "**",
];

/// The tokens of `source` (comments and white space skipped). Good enough for
/// the programs of this module: identifiers, integers, strings and
/// characters, punctuation.
fn lex(source: &str) -> Vec<Token> {
    let bytes = source.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if source[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let kind = if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            Kind::Ident
        } else if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'_') {
                i += 1;
            }
            Kind::Int
        } else if c == b'"' || c == b'\'' || c == b'`' {
            i += 1;
            while i < bytes.len() && bytes[i] != c {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(bytes.len());
            Kind::Str
        } else {
            let len = PUNCTS
                .iter()
                .find(|p| source[i..].starts_with(*p))
                .map_or_else(
                    || source[i..].chars().next().map_or(1, char::len_utf8),
                    |p| p.len(),
                );
            i += len;
            Kind::Punct
        };
        tokens.push(Token {
            kind,
            start,
            end: i,
        });
    }
    tokens
}

// ---------------------------------------------------------------------------
// Operators
// ---------------------------------------------------------------------------

// ANCHOR: operator
/// The mutation operators: each makes one kind of small defect at a site of
/// a correct program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    /// `<` becomes `<=`.
    LessToLessEqual,
    /// `<=` becomes `<`.
    LessEqualToLess,
    /// `>` becomes `>=`.
    GreaterToGreaterEqual,
    /// `>=` becomes `>`.
    GreaterEqualToGreater,
    /// A comparison points the other way (`<` and `>`, `<=` and `>=`).
    FlipComparison,
    /// `==` and `!=` trade places.
    EqualityFlip,
    /// A binary `+` and `-` trade places.
    PlusMinus,
    /// `*` and `/` trade places.
    TimesDivide,
    /// `/` and `%` trade places.
    DivideModulo,
    /// `+=` and `-=` trade places.
    CompoundFlip,
    /// An integer constant (not an initial value) one larger.
    ConstantUp,
    /// An integer constant (not an initial value) one smaller.
    ConstantDown,
    /// `let x = n` starts from another value (0 becomes 1, anything else 0).
    WrongInit,
    /// The two arguments of a call trade places.
    SwapArgs,
    /// The condition of an `if` is negated.
    NegateCondition,
    /// `&&` and `||` trade places.
    AndOr,
    /// `min` and `max` trade places.
    MinMax,
    /// A variable is read where another of the function's variables belongs.
    WrongVariable,
    /// `return` gives another of the function's variables.
    WrongReturn,
    /// A statement line (an assignment, an update, a push) is gone.
    MissingStatement,
    /// A range's end is included where it should not be, or the reverse.
    RangeBound,
    /// `true` and `false` trade places.
    BoolFlip,
    /// An index is one too far (`xs[i]` becomes `xs[i + 1]` or `xs[i - 1]`).
    IndexShift,
    /// The operands of a binary `-` trade places.
    SwapOperands,
}
// ANCHOR_END: operator

impl Operator {
    pub const ALL: [Operator; 24] = [
        Operator::LessToLessEqual,
        Operator::LessEqualToLess,
        Operator::GreaterToGreaterEqual,
        Operator::GreaterEqualToGreater,
        Operator::FlipComparison,
        Operator::EqualityFlip,
        Operator::PlusMinus,
        Operator::TimesDivide,
        Operator::DivideModulo,
        Operator::CompoundFlip,
        Operator::ConstantUp,
        Operator::ConstantDown,
        Operator::WrongInit,
        Operator::SwapArgs,
        Operator::NegateCondition,
        Operator::AndOr,
        Operator::MinMax,
        Operator::WrongVariable,
        Operator::WrongReturn,
        Operator::MissingStatement,
        Operator::RangeBound,
        Operator::BoolFlip,
        Operator::IndexShift,
        Operator::SwapOperands,
    ];

    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// One mutation: `source[start..end]` becomes `replacement`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutation {
    pub operator: Operator,
    pub start: usize,
    pub end: usize,
    pub replacement: String,
}

impl Mutation {
    pub fn apply(&self, source: &str) -> String {
        format!(
            "{}{}{}",
            &source[..self.start],
            self.replacement,
            &source[self.end..]
        )
    }
}

/// The variables of each function: (byte range of the function, names), the
/// names in order of first declaration (parameters, `let`, `for` variables).
fn functions(source: &str, tokens: &[Token]) -> Vec<((usize, usize), Vec<String>)> {
    let text = |t: &Token| &source[t.start..t.end];
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if text(&tokens[i]) != "fn" {
            i += 1;
            continue;
        }
        let start = tokens[i].start;
        let mut names: Vec<String> = Vec::new();
        let mut j = i + 2; // past `fn name`
        while j < tokens.len() && text(&tokens[j]) != ")" {
            if tokens[j].kind == Kind::Ident {
                names.push(text(&tokens[j]).to_string());
            }
            j += 1;
        }
        // The body: from the first `{` to its matching `}`.
        while j < tokens.len() && text(&tokens[j]) != "{" {
            j += 1;
        }
        let mut depth = 0;
        let mut end = source.len();
        while j < tokens.len() {
            match text(&tokens[j]) {
                "{" => depth += 1,
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        end = tokens[j].end;
                        break;
                    }
                }
                "let" | "for" => {
                    if let Some(next) = tokens.get(j + 1).filter(|t| t.kind == Kind::Ident) {
                        let name = text(next).to_string();
                        if !names.contains(&name) {
                            names.push(name);
                        }
                    }
                }
                _ => {}
            }
            j += 1;
        }
        out.push(((start, end), names));
        i = j + 1;
    }
    out
}

/// The end of the expression that starts at token `from`: the index of the
/// first token at depth 0 that is one of `stops`.
fn expression_end(source: &str, tokens: &[Token], from: usize, stops: &[&str]) -> Option<usize> {
    let mut depth = 0i32;
    for (k, t) in tokens.iter().enumerate().skip(from) {
        let s = &source[t.start..t.end];
        if depth == 0 && stops.contains(&s) {
            return Some(k);
        }
        match s {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth -= 1;
                if depth < 0 {
                    return None;
                }
            }
            _ => {}
        }
    }
    None
}

// ANCHOR: mutations
/// Every mutation of `source` that some operator makes, site by site.
pub fn mutations(source: &str) -> Vec<Mutation> {
    let tokens = lex(source);
    let text = |k: usize| &source[tokens[k].start..tokens[k].end];
    let functions = functions(source, &tokens);
    let names_at = |at: usize| {
        functions
            .iter()
            .find(|((s, e), _)| (*s..*e).contains(&at))
            .map(|(_, names)| names.clone())
            .unwrap_or_default()
    };
    // A binary operator follows an operand: a name, a number, `)` or `]`.
    let operand_before = |k: usize| {
        k > 0 && {
            let p = text(k - 1);
            (tokens[k - 1].kind == Kind::Ident && !KEYWORDS.contains(&p))
                || tokens[k - 1].kind == Kind::Int
                || p == ")"
                || p == "]"
        }
    };
    let mut out = Vec::new();
    // Token k becomes `replacement`.
    let token = |operator: Operator, k: usize, replacement: &str| Mutation {
        operator,
        start: tokens[k].start,
        end: tokens[k].end,
        replacement: replacement.to_string(),
    };
    for k in 0..tokens.len() {
        let mut add = |m: Mutation| out.push(m);
        let s = text(k);
        match s {
            "<" => {
                add(token(Operator::LessToLessEqual, k, "<="));
                add(token(Operator::FlipComparison, k, ">"));
            }
            "<=" => {
                add(token(Operator::LessEqualToLess, k, "<"));
                add(token(Operator::FlipComparison, k, ">="));
            }
            ">" => {
                add(token(Operator::GreaterToGreaterEqual, k, ">="));
                add(token(Operator::FlipComparison, k, "<"));
            }
            ">=" => {
                add(token(Operator::GreaterEqualToGreater, k, ">"));
                add(token(Operator::FlipComparison, k, "<="));
            }
            "==" => add(token(Operator::EqualityFlip, k, "!=")),
            "!=" => add(token(Operator::EqualityFlip, k, "==")),
            "+" if operand_before(k) => add(token(Operator::PlusMinus, k, "-")),
            "-" if operand_before(k) => add(token(Operator::PlusMinus, k, "+")),
            "*" => add(token(Operator::TimesDivide, k, "/")),
            "/" => {
                add(token(Operator::TimesDivide, k, "*"));
                add(token(Operator::DivideModulo, k, "%"));
            }
            "%" => add(token(Operator::DivideModulo, k, "/")),
            "+=" => add(token(Operator::CompoundFlip, k, "-=")),
            "-=" => add(token(Operator::CompoundFlip, k, "+=")),
            "&&" => add(token(Operator::AndOr, k, "||")),
            "||" => add(token(Operator::AndOr, k, "&&")),
            ".." => add(token(Operator::RangeBound, k, "..=")),
            "..=" => add(token(Operator::RangeBound, k, "..")),
            "true" => add(token(Operator::BoolFlip, k, "false")),
            "false" => add(token(Operator::BoolFlip, k, "true")),
            _ => {}
        }
        if tokens[k].kind == Kind::Int {
            let Ok(n) = s.replace('_', "").parse::<i64>() else {
                continue;
            };
            let initial = k >= 3 && text(k - 1) == "=" && text(k - 3) == "let";
            if initial {
                add(token(
                    Operator::WrongInit,
                    k,
                    if n == 0 { "1" } else { "0" },
                ));
            } else {
                add(token(Operator::ConstantUp, k, &(n + 1).to_string()));
                if n > 0 {
                    add(token(Operator::ConstantDown, k, &(n - 1).to_string()));
                }
            }
        }
        if (s == "min" || s == "max") && tokens.get(k + 1).is_some_and(|_| text(k + 1) == "(") {
            add(token(
                Operator::MinMax,
                k,
                if s == "min" { "max" } else { "min" },
            ));
        }
        let is_name = tokens[k].kind == Kind::Ident && !KEYWORDS.contains(&s);
        // A call with exactly two arguments: swap them.
        if is_name && k + 1 < tokens.len() && text(k + 1) == "(" && (k == 0 || text(k - 1) != "fn")
        {
            if let Some(comma) = expression_end(source, &tokens, k + 2, &[",", ")"]) {
                if text(comma) == "," {
                    if let Some(close) = expression_end(source, &tokens, comma + 1, &[",", ")"]) {
                        if text(close) == ")" && comma > k + 2 && close > comma + 1 {
                            let first = &source[tokens[k + 2].start..tokens[comma - 1].end];
                            let second = &source[tokens[comma + 1].start..tokens[close - 1].end];
                            add(Mutation {
                                operator: Operator::SwapArgs,
                                start: tokens[k + 2].start,
                                end: tokens[close - 1].end,
                                replacement: format!("{second}, {first}"),
                            });
                        }
                    }
                }
            }
        }
        // `if cond {` becomes `if !(cond) {`.
        if s == "if" {
            if let Some(brace) = expression_end(source, &tokens, k + 1, &["{"]) {
                if brace > k + 1 {
                    let (start, end) = (tokens[k + 1].start, tokens[brace - 1].end);
                    add(Mutation {
                        operator: Operator::NegateCondition,
                        start,
                        end,
                        replacement: format!("!({})", &source[start..end]),
                    });
                }
            }
        }
        // `return e;` gives another variable.
        if s == "return" {
            if let Some(semi) = expression_end(source, &tokens, k + 1, &[";", "}"]) {
                if semi > k + 1 {
                    let (start, end) = (tokens[k + 1].start, tokens[semi - 1].end);
                    let returned = &source[start..end];
                    for name in names_at(start).iter().filter(|n| *n != returned) {
                        add(Mutation {
                            operator: Operator::WrongReturn,
                            start,
                            end,
                            replacement: name.clone(),
                        });
                    }
                }
            }
        }
        // A variable read where another belongs: not a declaration, a callee,
        // a method or a function's name.
        if is_name && k > 0 {
            let before = text(k - 1);
            let declared = matches!(before, "let" | "fn" | "for" | ".");
            let called = tokens.get(k + 1).is_some_and(|_| text(k + 1) == "(");
            let names = names_at(tokens[k].start);
            let in_params = {
                // Inside the parameter list of `fn name(...)`.
                let mut j = k;
                let mut inside = false;
                while j > 0 {
                    j -= 1;
                    match text(j) {
                        "(" => {
                            inside = j >= 2 && text(j - 2) == "fn";
                            break;
                        }
                        ")" | "{" | "}" | ";" => break,
                        _ => {}
                    }
                }
                inside
            };
            let assigned = tokens
                .get(k + 1)
                .is_some_and(|_| matches!(text(k + 1), "=" | "+=" | "-=" | "*=" | "/=" | "%="));
            if !declared && !called && !in_params && !assigned && names.iter().any(|n| n == s) {
                for name in names.iter().filter(|n| *n != s) {
                    add(token(Operator::WrongVariable, k, name));
                }
            }
        }
        // `xs[i]` becomes `xs[i + 1]` and `xs[i - 1]`.
        if s == "["
            && operand_before(k)
            && tokens.get(k + 2).is_some_and(|_| text(k + 2) == "]")
            && tokens[k + 1].kind == Kind::Ident
        {
            let index = text(k + 1);
            for shifted in [format!("{index} + 1"), format!("{index} - 1")] {
                add(token(Operator::IndexShift, k + 1, &shifted));
            }
        }
        // `a - b` becomes `b - a` for single-token operands.
        if s == "-"
            && operand_before(k)
            && k + 1 < tokens.len()
            && matches!(tokens[k + 1].kind, Kind::Ident | Kind::Int)
            && matches!(tokens[k - 1].kind, Kind::Ident | Kind::Int)
            && !tokens
                .get(k + 2)
                .is_some_and(|_| matches!(text(k + 2), "(" | "[" | "." | "*" | "/" | "%"))
            && !(k >= 2 && matches!(text(k - 2), "*" | "/" | "%" | "." | "-"))
        {
            add(Mutation {
                operator: Operator::SwapOperands,
                start: tokens[k - 1].start,
                end: tokens[k + 1].end,
                replacement: format!("{} - {}", text(k + 1), text(k - 1)),
            });
        }
    }
    // Statement lines that are not declarations or returns: deleted.
    let mut offset = 0;
    for line in source.split_inclusive('\n') {
        let body = line.trim();
        let statement = body.ends_with(';')
            && !body.starts_with("let ")
            && !body.starts_with("return")
            && !body.starts_with("fn ");
        if statement {
            out.push(Mutation {
                operator: Operator::MissingStatement,
                start: offset,
                end: offset + line.len(),
                replacement: String::new(),
            });
        }
        offset += line.len();
    }
    out
}
// ANCHOR_END: mutations

// ---------------------------------------------------------------------------
// Mutants and line edits
// ---------------------------------------------------------------------------

/// The edit that turns `before` into `after` as the gym applies edits: the
/// lines that differ (with one line of context when lines were only added or
/// only removed), extended by a line of context at a time until the text to
/// find occurs exactly once in `before`. `None` when the sources are equal.
pub fn line_edit(before: &str, after: &str) -> Option<(String, String)> {
    if before == after {
        return None;
    }
    let a: Vec<&str> = before.split_inclusive('\n').collect();
    let b: Vec<&str> = after.split_inclusive('\n').collect();
    let (prefix, suffix) = common_ends(&a, &b);
    let (mut lo, mut a_hi, mut b_hi) = (prefix, a.len() - suffix, b.len() - suffix);
    loop {
        let find: String = a[lo..a_hi].concat();
        let unique = !find.is_empty() && before.matches(find.as_str()).count() == 1;
        if unique {
            return Some((find, b[lo..b_hi].concat()));
        }
        if lo > 0 {
            lo -= 1;
        } else if a_hi < a.len() {
            a_hi += 1;
            b_hi += 1;
        } else {
            return None;
        }
    }
}

/// Mutants per operator and program at most.
pub const MAX_PER_OPERATOR: usize = 4;

/// A defect made by one operator at one site, that the tests catch.
#[derive(Clone, Debug, PartialEq)]
pub struct Mutant {
    pub program: String,
    pub operator: Operator,
    /// The buggy source.
    pub source: String,
    /// The repair, as the gym's edit of the buggy source.
    pub find: String,
    pub replace: String,
    /// Indices of the public tests the buggy source fails.
    pub failing_public: Vec<usize>,
}

// ANCHOR: mutants
/// The mutants of `program` that both test suites catch: the mutated source
/// compiles, fails at least one public test (so `test` shows the defect) and
/// at least one hidden test. Each operator gives at most
/// [`MAX_PER_OPERATOR`] mutants per program, its sites tried in an order
/// fixed by a hash (a program has dozens of variable reads, and each could be
/// any other variable: without a cap one operator would be most of the
/// set). Two mutations that give the same source count once.
pub fn mutants(program: &Program) -> Vec<Mutant> {
    let runner = Guarded::shared();
    let key = |m: &Mutation| {
        let text = format!("{} {} {}", program.name, m.start, m.replacement);
        (m.operator, fnv1a(text.as_bytes(), FNV_START))
    };
    let mut all = mutations(&program.source);
    all.sort_by_key(key);
    let mut seen = HashSet::new();
    let mut per_operator: HashMap<Operator, usize> = HashMap::new();
    let mut out = Vec::new();
    for mutation in all {
        if per_operator.get(&mutation.operator) == Some(&MAX_PER_OPERATOR) {
            continue;
        }
        let source = mutation.apply(&program.source);
        if !seen.insert(source.clone()) || runner.compile(&source).is_err() {
            continue;
        }
        let public = runner.run(&source, &program.public);
        let failing_public: Vec<usize> = (0..public.len()).filter(|&i| !public[i].passed).collect();
        if failing_public.is_empty() || all_pass(&runner.run(&source, &program.hidden)) {
            continue;
        }
        let Some((find, replace)) = line_edit(&source, &program.source) else {
            continue;
        };
        *per_operator.entry(mutation.operator).or_insert(0) += 1;
        out.push(Mutant {
            program: program.name.clone(),
            operator: mutation.operator,
            source,
            find,
            replace,
            failing_public,
        });
    }
    out
}
// ANCHOR_END: mutants

// ---------------------------------------------------------------------------
// Tasks
// ---------------------------------------------------------------------------

/// The shape of the task format: how many candidate edits the menu offers
/// and how many turns an episode has.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Format {
    pub candidates: usize,
    pub max_turns: usize,
}

/// Ten candidates and twelve turns: a blind test-driven search (test, then
/// edit, test and undo per candidate) tries at most three of the ten
/// before it runs out, while an agent that reads the diffs and the failing
/// test can edit, test and submit in three turns.
pub const FORMAT: Format = Format {
    candidates: 10,
    max_turns: 12,
};

/// A value as Rhai prints it, strings quoted.
fn shown(value: &rhai::Dynamic) -> String {
    if value.is_string() {
        format!("{:?}", value.to_string())
    } else {
        value.to_string()
    }
}

// ANCHOR: task
/// `mutant` of `program` as a task, drawn from `seed`: [`candidates_task`]
/// with the mutant's source and repair.
pub fn task(program: &Program, mutant: &Mutant, format: &Format, seed: u64) -> Option<Task> {
    let id = format!("mutant-{}-{}", program.name, mutant.operator.name());
    candidates_task(
        program,
        &mutant.source,
        (&mutant.find, &mutant.replace),
        &id,
        format,
        seed,
    )
}

/// A buggy version `buggy` of `program` (whose source is the correct one),
/// repaired by the edit `fix`, as a task drawn from `seed`. The issue is the
/// program's sentence and the first public test the buggy source fails, with
/// what it returned; the menu is the repair and `format.candidates − 1`
/// distractors: edits of the buggy source by the operators at other lines,
/// each leaving some test failing, so every candidate has the shape of some
/// fix. Candidates are shuffled and shown as diffs under neutral labels, with
/// `undo` on ([`neutral`]). `None` when the program offers too few
/// distractors or no public test fails.
pub fn candidates_task(
    program: &Program,
    buggy: &str,
    fix: (&str, &str),
    id: &str,
    format: &Format,
    seed: u64,
) -> Option<Task> {
    let mut rng = StdRng::seed_from_u64(seed);
    let runner = Guarded::shared();
    let (fix_find, fix_replace) = fix;
    // Candidates by operator; the distractors take the operators in turn, in
    // a shuffled order, so that no operator's shape is mostly distractors.
    // The repaired line(s) are left to the fix.
    let mut by_operator: BTreeMap<Operator, Vec<(String, String)>> = BTreeMap::new();
    for m in mutations(buggy) {
        let Some((find, replace)) = line_edit(buggy, &m.apply(buggy)) else {
            continue;
        };
        let overlaps = find.contains(fix_find) || fix_find.contains(find.as_str());
        if !overlaps {
            by_operator
                .entry(m.operator)
                .or_default()
                .push((find, replace));
        }
    }
    let mut queues: Vec<Vec<(String, String)>> = by_operator
        .into_values()
        .map(|mut edits| {
            edits.sort();
            edits.dedup();
            edits.shuffle(&mut rng);
            edits
        })
        .collect();
    queues.shuffle(&mut rng);
    let mut candidates = Vec::new();
    while queues.iter().any(|q| !q.is_empty()) {
        for queue in &mut queues {
            candidates.extend(queue.pop());
        }
    }
    let mut menu = vec![Edit {
        name: "fix".into(),
        kind: EditKind::Fix,
        find: fix_find.to_string(),
        replace: fix_replace.to_string(),
    }];
    for (find, replace) in candidates {
        if menu.len() == format.candidates {
            break;
        }
        if menu.iter().any(|e| e.find == find && e.replace == replace) {
            continue;
        }
        let edited = buggy.replacen(find.as_str(), &replace, 1);
        // A distractor must compile and must not repair the program; most
        // fail a public test, and then the hidden ones need not run.
        let repairs = || {
            all_pass(&runner.run(&edited, &program.public))
                && all_pass(&runner.run(&edited, &program.hidden))
        };
        if runner.compile(&edited).is_err() || repairs() {
            continue;
        }
        menu.push(Edit {
            name: String::new(),
            kind: EditKind::Distractor,
            find,
            replace,
        });
    }
    if menu.len() < format.candidates {
        return None;
    }
    menu.shuffle(&mut rng);
    let public = runner.run(buggy, &program.public);
    let shown_test = &program.public[(0..public.len()).find(|&i| !public[i].passed)?];
    let got = runner
        .compile(buggy)
        .ok()
        .and_then(|ast| runner.call(&ast, &shown_test.call).ok())
        .map(|v| shown(&v))
        .unwrap_or_else(|| "an error".into());
    let expected = runner
        .call(&AST::empty(), &shown_test.expected)
        .map(|v| shown(&v))
        .unwrap_or_else(|_| shown_test.expected.clone());
    let plain = Task {
        id: id.to_string(),
        family: Family::Mutation,
        issue: format!(
            "{}, but {} returns {got} instead of {expected}.",
            program.what, shown_test.call
        ),
        source: buggy.to_string(),
        fixed: program.source.clone(),
        public_tests: program.public.clone(),
        hidden_tests: program.hidden.clone(),
        menu,
        undo: true,
        terse: false,
    };
    let mut task = neutral(&plain);
    task.id = id.to_string();
    Some(task)
}
// ANCHOR_END: task

// ---------------------------------------------------------------------------
// Splits
// ---------------------------------------------------------------------------

/// The operators no training task uses: five kinds of defect an agent meets
/// only at evaluation.
pub const HELD_OUT_OPERATORS: [Operator; 5] = [
    Operator::WrongInit,
    Operator::AndOr,
    Operator::WrongReturn,
    Operator::MissingStatement,
    Operator::IndexShift,
];

/// The operator left out of training to choose settings with (leave one
/// operator out), never one of [`HELD_OUT_OPERATORS`].
pub const VALIDATION_OPERATOR: Operator = Operator::MinMax;

/// One program in six is held out, one in six validates.
const PROGRAM_FOLDS: u64 = 6;

/// Which fold a program is in: 0 held out, 1 validation, others training.
fn program_fold(name: &str) -> u64 {
    fnv1a(name.as_bytes(), FNV_START) % PROGRAM_FOLDS
}

/// The task sets of the mutation gym.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Split {
    /// Training programs, training operators.
    pub train: Vec<Task>,
    /// Choosing settings: validation programs with training operators, and
    /// [`VALIDATION_OPERATOR`] on training programs.
    pub validation: Vec<Task>,
    /// New mutants of training programs by training operators.
    pub held_out_instances: Vec<Task>,
    /// Held-out programs, training operators.
    pub held_out_programs: Vec<Task>,
    /// [`HELD_OUT_OPERATORS`] on every program.
    pub held_out_operators: Vec<Task>,
}

/// [`sort_into_splits`], read back from the test command's run cache when
/// it made the same split earlier in the same command
/// ([`crate::book::reuse`]): making one checks every candidate of about
/// 1 300 tasks against its tests, and the split is pure Rhai, so the second
/// setting could not change it.
pub fn split(programs: &[Program], format: &Format, seed: u64) -> Split {
    let mut fingerprint = FNV_START;
    for program in programs {
        fingerprint = fnv1a(program.name.as_bytes(), fingerprint);
        fingerprint = fnv1a(program.source.as_bytes(), fingerprint);
        for test in program.public.iter().chain(&program.hidden) {
            fingerprint = fnv1a(test.call.as_bytes(), fingerprint);
            fingerprint = fnv1a(test.expected.as_bytes(), fingerprint);
        }
    }
    let key = format!("mutation::split programs {fingerprint:016x} format {format:?} seed {seed}");
    let file = |dir: &Path| dir.join("split.json");
    crate::book::reuse(
        crate::book::run_cache().as_deref(),
        &key,
        || sort_into_splits(programs, format, seed),
        |made, dir| {
            let text = serde_json::to_string(made).map_err(|err| err.to_string())?;
            std::fs::write(file(dir), text).map_err(|err| err.to_string())
        },
        |dir| {
            let text = std::fs::read_to_string(file(dir)).map_err(|err| err.to_string())?;
            serde_json::from_str(&text).map_err(|err| err.to_string())
        },
    )
    .unwrap_or_else(|_| sort_into_splits(programs, format, seed))
}

// ANCHOR: split
/// Every mutant of every program as a task (in `format`, drawn from `seed`),
/// sorted into the splits: by program (a fold of the name's hash), by operator
/// ([`HELD_OUT_OPERATORS`], [`VALIDATION_OPERATOR`]) and, within training
/// programs and operators, by instance (one mutant in five held out).
pub fn sort_into_splits(programs: &[Program], format: &Format, seed: u64) -> Split {
    let mut out = Split::default();
    for program in programs {
        let fold = program_fold(&program.name);
        for (i, mutant) in mutants(program).iter().enumerate() {
            let task_seed = seed ^ fnv1a(mutant.source.as_bytes(), FNV_START);
            let Some(mut task) = task(program, mutant, format, task_seed) else {
                continue;
            };
            task.id = format!("{}-{i}", task.id);
            let held_op = HELD_OUT_OPERATORS.contains(&mutant.operator);
            let set = match (fold, held_op, mutant.operator == VALIDATION_OPERATOR) {
                (_, true, _) => &mut out.held_out_operators,
                (1, false, _) | (_, false, true) => &mut out.validation,
                (0, false, false) => &mut out.held_out_programs,
                _ if task_seed.is_multiple_of(5) => &mut out.held_out_instances,
                _ => &mut out.train,
            };
            set.push(task);
        }
    }
    out
}
// ANCHOR_END: split

// ---------------------------------------------------------------------------
// Baselines
// ---------------------------------------------------------------------------

/// Whether `edit` alone repairs `task` (public and hidden tests pass).
pub fn repairs(task: &Task, edit: &Edit) -> bool {
    repairs_with(Guarded::shared(), task, edit)
}

fn repairs_with(runner: &dyn TestRunner, task: &Task, edit: &Edit) -> bool {
    edit.apply(&task.source).is_some_and(|source| {
        all_pass(&runner.run(&source, &task.public_tests))
            && all_pass(&runner.run(&source, &task.hidden_tests))
    })
}

/// The shared runner with every suite's result kept: a source and its tests
/// always give the same lines, and the baselines play the same sources many
/// times (every order of the search meets the buggy source and most edits).
#[derive(Default)]
struct Remembering {
    seen: std::sync::Mutex<HashMap<(String, String), Vec<crate::sandbox::TestLine>>>,
}

impl TestRunner for Remembering {
    fn run(&self, source: &str, tests: &[Test]) -> Vec<crate::sandbox::TestLine> {
        let calls: String = tests
            .iter()
            .map(|t| format!("{}\n{}\n", t.call, t.expected))
            .collect();
        let key = (source.to_string(), calls);
        if let Some(lines) = self.seen.lock().expect("the memo").get(&key) {
            return lines.clone();
        }
        let lines = Guarded::shared().run(source, tests);
        self.seen
            .lock()
            .expect("the memo")
            .insert(key, lines.clone());
        lines
    }
}

/// How many words `a` and `b` share at their start, and then at their end
/// (not counting the shared start twice).
fn common_ends<T: PartialEq>(a: &[T], b: &[T]) -> (usize, usize) {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    (prefix, suffix)
}

/// What a candidate edit looks like with names and numbers blanked: the
/// tokens it removes and the tokens it adds (`< -> <=`, `x -> x + 1`). Only
/// what the agent can read; the lookup baseline keys on it.
pub fn diff_shape(edit: &Edit) -> String {
    let words = |s: &str| -> Vec<String> {
        lex(s)
            .iter()
            .map(|t| match t.kind {
                Kind::Ident if !KEYWORDS.contains(&&s[t.start..t.end]) => "x".to_string(),
                Kind::Int => "n".to_string(),
                _ => s[t.start..t.end].to_string(),
            })
            .collect()
    };
    let (a, b) = (words(&edit.find), words(&edit.replace));
    let (prefix, suffix) = common_ends(&a, &b);
    format!(
        "{} -> {}",
        a[prefix..a.len() - suffix].join(" "),
        b[prefix..b.len() - suffix].join(" ")
    )
}

// ANCHOR: compact
/// A candidate in one short line: the line of `source` where its change
/// starts, then the tokens it removes and the tokens it puts in, each with
/// one token of context on either side (`line 7: i < xs => i <= xs`).
pub fn compact_diff(edit: &Edit, source: &str) -> String {
    let tokens = lex(&edit.find);
    let words = |s: &str| -> Vec<String> {
        lex(s)
            .iter()
            .map(|t| s[t.start..t.end].to_string())
            .collect()
    };
    let (a, b) = (words(&edit.find), words(&edit.replace));
    let (prefix, suffix) = common_ends(&a, &b);
    let (from, to) = (prefix.saturating_sub(1), suffix.saturating_sub(1));
    let side = |w: &[String]| match w[from..w.len() - to].join(" ") {
        shown if shown.is_empty() => "(nothing)".to_string(),
        shown => shown,
    };
    // Lines are counted from 1: the edit's first line in the source, moved
    // down to the line of its first changed token.
    let changed_at = tokens
        .get(prefix.min(tokens.len().saturating_sub(1)))
        .map_or(0, |t| t.start);
    let line = source.find(edit.find.as_str()).map_or(0, |at| {
        1 + source[..at].matches('\n').count() + edit.find[..changed_at].matches('\n').count()
    });
    format!("line {line}: {} => {}", side(&a), side(&b))
}

/// `task` (a task of [`candidates_task`]) as a compact task: the issue's
/// first line, each candidate as one [`compact_diff`] line, and `test`
/// showing only the first failing test and how many more fail, so that an episode of the scripted
/// search fits the book model's window of 768 tokens. A label is followed by
/// a colon (`op 9: line 5: ...`): the book's tokenizer merges a digit and a
/// comma into one token, and a label must be the token that `edit 9` writes.
pub fn compact(task: &Task) -> Task {
    let first = task.issue.lines().next().unwrap_or_default();
    let menu: String = task
        .menu
        .iter()
        .map(|edit| format!("\nop {}: {}", edit.name, compact_diff(edit, &task.source)))
        .collect();
    Task {
        issue: format!("{first}{menu}"),
        terse: true,
        ..task.clone()
    }
}
// ANCHOR_END: compact

/// The best lookup rule from what a candidate looks like: each shape's rate
/// of being the fix among the training tasks' candidates.
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    rates: HashMap<String, f64>,
}

impl Lookup {
    pub fn fit(train: &[Task]) -> Lookup {
        let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
        for task in train {
            for edit in &task.menu {
                let entry = counts.entry(diff_shape(edit)).or_default();
                entry.0 += usize::from(edit.kind == EditKind::Fix);
                entry.1 += 1;
            }
        }
        Lookup {
            rates: counts
                .into_iter()
                .map(|(k, (fix, all))| (k, fix as f64 / all as f64))
                .collect(),
        }
    }

    /// The chance that the rule's pick repairs `task`: it takes a candidate
    /// of the highest rate, uniformly among ties (unseen shapes rate 0).
    pub fn success(&self, task: &Task) -> f64 {
        self.success_with(Guarded::shared(), task)
    }

    fn success_with(&self, runner: &dyn TestRunner, task: &Task) -> f64 {
        let top = self.picks(task);
        top.iter().filter(|e| repairs_with(runner, task, e)).count() as f64 / top.len() as f64
    }

    /// The positions of `task`'s candidates from the highest rate to the
    /// lowest, ties in menu order: the order a search that reads the diffs'
    /// shapes tries them in ([`Searcher::in_order`]).
    pub fn ranking(&self, task: &Task) -> Vec<usize> {
        let mut order: Vec<usize> = (0..task.menu.len()).collect();
        order.sort_by(|&a, &b| {
            self.rate(&task.menu[b])
                .total_cmp(&self.rate(&task.menu[a]))
        });
        order
    }

    /// The candidates of `task` the rule would pick: those of the highest rate.
    pub fn picks<'t>(&self, task: &'t Task) -> Vec<&'t Edit> {
        let best = task
            .menu
            .iter()
            .map(|e| self.rate(e))
            .fold(f64::NEG_INFINITY, f64::max);
        task.menu.iter().filter(|e| self.rate(e) == best).collect()
    }

    /// The rate of `edit`'s shape among the training tasks' candidates (0 if unseen).
    fn rate(&self, edit: &Edit) -> f64 {
        self.rates.get(&diff_shape(edit)).copied().unwrap_or(0.0)
    }
}

/// Per-task success of the four baselines on a task set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Baselines {
    /// One uniformly random candidate, then `submit`: exact.
    pub chance: Vec<f64>,
    /// The test-driven search over the candidates in a random order, within
    /// the turn budget: the mean over `orders` random orders.
    pub search: Vec<f64>,
    /// The lookup rule's pick, then `submit`: exact over its ties.
    pub lookup: Vec<f64>,
    /// The repair, then `submit`.
    pub oracle: Vec<f64>,
}

/// Edits the repair and submits.
struct Repairer;

impl Policy for Repairer {
    fn act(&mut self, env: &BugFixEnv, _observation: &str, turn: usize) -> String {
        if turn == 0 {
            format!("<call> edit {} </call>", env.task().fix_op())
        } else {
            "<call> submit </call>".into()
        }
    }
}

/// [`play_baselines`], read back from the test command's run cache when the
/// same tasks, lookup rule, format, orders and seed were played earlier in the
/// same command ([`crate::book::reuse`]; see [`split`]).
pub fn baselines(
    tasks: &[Task],
    lookup: &Lookup,
    format: &Format,
    orders: usize,
    seed: u64,
) -> Baselines {
    let play = || play_baselines(tasks, lookup, format, orders, seed);
    let Ok(tasks_text) = serde_json::to_string(tasks) else {
        return play();
    };
    let mut rates: Vec<(&String, &f64)> = lookup.rates.iter().collect();
    rates.sort_by(|a, b| a.0.cmp(b.0));
    let lookup_text = format!("{rates:?}");
    let key = format!(
        "mutation::baselines tasks {:016x} lookup {:016x} format {format:?} orders {orders} seed {seed}",
        fnv1a(tasks_text.as_bytes(), FNV_START),
        fnv1a(lookup_text.as_bytes(), FNV_START)
    );
    let file = |dir: &Path| dir.join("baselines.json");
    crate::book::reuse(
        crate::book::run_cache().as_deref(),
        &key,
        play,
        |made, dir| {
            let text = serde_json::to_string(made).map_err(|err| err.to_string())?;
            std::fs::write(file(dir), text).map_err(|err| err.to_string())
        },
        |dir| {
            let text = std::fs::read_to_string(file(dir)).map_err(|err| err.to_string())?;
            serde_json::from_str(&text).map_err(|err| err.to_string())
        },
    )
    .unwrap_or_else(|_| play_baselines(tasks, lookup, format, orders, seed))
}

// ANCHOR: baselines
/// The baselines on `tasks` with the turn budget of `format`; the search
/// plays `orders` random orders of each menu, drawn from `seed`.
pub fn play_baselines(
    tasks: &[Task],
    lookup: &Lookup,
    format: &Format,
    orders: usize,
    seed: u64,
) -> Baselines {
    let mut out = Baselines::default();
    let mut rng = StdRng::seed_from_u64(seed);
    for task in tasks {
        // One memory per task: its sources recur across the orders.
        let runner = std::sync::Arc::new(Remembering::default());
        let menu = task.menu.len() as f64;
        let repairing = task
            .menu
            .iter()
            .filter(|e| repairs_with(runner.as_ref(), task, e))
            .count();
        out.chance.push(repairing as f64 / menu);
        out.lookup.push(lookup.success_with(runner.as_ref(), task));
        let env =
            |task: Task| BugFixEnv::new(vec![task], format.max_turns).with_runner(runner.clone());
        out.oracle
            .push(run_episode(&mut env(task.clone()), 0, &mut Repairer, None).reward);
        // The searcher tries the menu in its order: shuffle the menu.
        let mut solved = 0.0;
        for _ in 0..orders {
            let mut shuffled = task.clone();
            shuffled.menu.shuffle(&mut rng);
            solved += run_episode(&mut env(shuffled), 0, &mut Searcher::new(), None).reward;
        }
        out.search.push(solved / orders as f64);
    }
    out
}
// ANCHOR_END: baselines

// ---------------------------------------------------------------------------
// A search learned from transcripts
// ---------------------------------------------------------------------------

// ANCHOR: learned_search
/// The search of `lookup` on `task`: candidates in the order of the rule's
/// rates ([`Lookup::ranking`]); without a rule, in the menu's order.
pub fn searcher(task: &Task, lookup: Option<&Lookup>) -> Searcher {
    Searcher::in_order(lookup.map_or_else(Vec::new, |rule| rule.ranking(task)))
}

/// Per-task success of the test-driven search that tries the candidates in
/// the order of `lookup`'s rates, within the turn budget of `format`.
pub fn ordered_search(tasks: &[Task], lookup: &Lookup, format: &Format) -> Vec<f64> {
    let mut env = BugFixEnv::new(tasks.to_vec(), format.max_turns);
    (0..tasks.len())
        .map(|t| run_episode(&mut env, t, &mut searcher(&tasks[t], Some(lookup)), None).reward)
        .collect()
}

/// `n` transcripts of the scripted test-driven search ([`Searcher`]) with
/// the turn budget of `format`, on `tasks` taken in passes over an order
/// shuffled by `rng`, trying the candidates in the menu's order or, with a
/// `lookup` rule, in the order of its rates. The search reads every test's
/// answer: it undoes an edit after a failing test and submits after a
/// passing one.
pub fn search_transcripts(
    tasks: &[Task],
    n: usize,
    format: &Format,
    lookup: Option<&Lookup>,
    rng: &mut StdRng,
) -> Vec<Vec<(Owner, String)>> {
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    order.shuffle(rng);
    let mut env = BugFixEnv::new(tasks.to_vec(), format.max_turns);
    order
        .into_iter()
        .cycle()
        .take(n)
        .map(|t| {
            let mut transcript = Vec::new();
            run_episode(
                &mut env,
                t,
                &mut searcher(&tasks[t], lookup),
                Some(&mut transcript),
            );
            transcript
        })
        .collect()
}

/// The settings of [`warm_start_search`]: transcripts and steps of further
/// pretraining on the policy's tokens only.
pub const SEARCH_WARM_START: PretrainConfig = PretrainConfig {
    episodes: 1000,
    steps: 600,
    batch: 8,
    lr: 3e-3,
    context_weight: 0.0,
    seed: 12,
    ..BASE
};

/// The base model trained further on transcripts of the scripted search on
/// `tasks` (compact ones, [`compact`]; in the order of `lookup`'s rates if
/// given), each seen through the windows the policy reads it with
/// ([`Sequence::windows`], actions of at most `max_action` tokens). Returns
/// the losses of its steps.
pub fn warm_start_search(
    model: &mut TinyAgent,
    bpe: &Bpe,
    tasks: &[Task],
    lookup: Option<&Lookup>,
    config: &PretrainConfig,
    max_action: usize,
) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(config.seed);
    let n_ctx = model.config.n_ctx as usize;
    let sequences: Vec<Sequence> =
        search_transcripts(tasks, config.episodes, &FORMAT, lookup, &mut rng)
            .iter()
            .flat_map(|t| Sequence::new(bpe, t, config.context_weight).windows(n_ctx, max_action))
            .collect();
    pretrain(model, &sequences, config)
}

/// What an agent did with the answers of `test`, counted over episodes: after
/// each test that directly follows an edit, whether the test showed a failure
/// and what the agent did next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Behaviour {
    pub episodes: usize,
    pub solved: usize,
    /// Tests after an edit that showed a failing test, and the next action.
    pub failing: usize,
    pub undo_after_failing: usize,
    pub submit_after_failing: usize,
    /// Tests after an edit that showed every test passing, and the next action.
    pub passing: usize,
    pub undo_after_passing: usize,
    pub submit_after_passing: usize,
    /// Edits, and edits of an op the episode had edited before.
    pub edits: usize,
    pub repeated_edits: usize,
}

impl std::ops::AddAssign for Behaviour {
    /// Counts of two sets of episodes, pooled.
    fn add_assign(&mut self, other: Behaviour) {
        self.episodes += other.episodes;
        self.solved += other.solved;
        self.failing += other.failing;
        self.undo_after_failing += other.undo_after_failing;
        self.submit_after_failing += other.submit_after_failing;
        self.passing += other.passing;
        self.undo_after_passing += other.undo_after_passing;
        self.submit_after_passing += other.submit_after_passing;
        self.edits += other.edits;
        self.repeated_edits += other.repeated_edits;
    }
}

/// The [`Behaviour`] of `played` (episodes on `tasks` with a budget of
/// `max_turns`), read by replaying each episode's actions in the gym, which
/// gives the same observations again.
pub fn behaviour(tasks: &[Task], played: &[Played], max_turns: usize) -> Behaviour {
    let mut b = Behaviour::default();
    let mut env = BugFixEnv::new(tasks.to_vec(), max_turns);
    for p in played {
        b.episodes += 1;
        b.solved += usize::from(p.reward == 1.0);
        env.reset(p.task);
        let calls: Vec<Option<Call>> = p.actions.iter().map(|a| parse_call(a)).collect();
        let tool = |k: usize| calls.get(k)?.as_ref().map(|c| c.tool.as_str());
        let mut edited = HashSet::new();
        for (i, action) in p.actions.iter().enumerate() {
            let observation = env.step(action).observation;
            if let Some(Call {
                tool,
                arg: Some(op),
            }) = &calls[i]
            {
                if tool == "edit" {
                    b.edits += 1;
                    b.repeated_edits += usize::from(!edited.insert(op.clone()));
                }
            }
            if tool(i) == Some("test") && i > 0 && tool(i - 1) == Some("edit") {
                let next = tool(i + 1);
                if crate::horizon::failures(&observation) > 0 {
                    b.failing += 1;
                    b.undo_after_failing += usize::from(next == Some("undo"));
                    b.submit_after_failing += usize::from(next == Some("submit"));
                } else {
                    b.passing += 1;
                    b.undo_after_passing += usize::from(next == Some("undo"));
                    b.submit_after_passing += usize::from(next == Some("submit"));
                }
            }
        }
    }
    b
}

/// The first candidate an agent edits in each episode, beside the lookup
/// rule's picks: whether it is the fix, and whether it is one of the
/// candidates the rule would pick, with the number of such episodes expected
/// if the first edit were drawn uniformly from the menu.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FirstEdits {
    /// Episodes with at least one edit of a candidate on the menu.
    pub episodes: usize,
    pub fix: usize,
    pub lookups_pick: usize,
    /// Σ over those episodes of (the rule's picks) / (the menu's size).
    pub lookups_pick_by_chance: f64,
}

impl std::ops::AddAssign for FirstEdits {
    /// Counts of two sets of episodes, pooled.
    fn add_assign(&mut self, other: FirstEdits) {
        self.episodes += other.episodes;
        self.fix += other.fix;
        self.lookups_pick += other.lookups_pick;
        self.lookups_pick_by_chance += other.lookups_pick_by_chance;
    }
}

/// [`FirstEdits`] of `played` (episodes on `tasks`), read from their actions.
pub fn first_edits(tasks: &[Task], played: &[Played], lookup: &Lookup) -> FirstEdits {
    let mut f = FirstEdits::default();
    for p in played {
        let task = &tasks[p.task];
        let first = p.actions.iter().find_map(|a| match parse_call(a) {
            Some(Call {
                tool,
                arg: Some(op),
            }) if tool == "edit" => task.menu.iter().find(|e| e.name == op),
            _ => None,
        });
        if let Some(edit) = first {
            let picks = lookup.picks(task);
            f.episodes += 1;
            f.fix += usize::from(edit.kind == EditKind::Fix);
            f.lookups_pick += usize::from(picks.iter().any(|e| e.name == edit.name));
            f.lookups_pick_by_chance += picks.len() as f64 / task.menu.len() as f64;
        }
    }
    f
}

/// A harness that freezes the test's answer: the policy reads every output
/// of `test` as the first one of its episode (for the search, the output
/// before any edit), while the gym still runs the tests and scores the
/// episode. An agent that acts on the test's answers acts differently under
/// it; one that ignores them does not.
pub fn frozen_tests(bpe: &Bpe) -> impl Fn(&[Segment]) -> Vec<u32> + Sync + '_ {
    move |segments| {
        let mut first: Option<&[u32]> = None;
        let mut after_test = false;
        let mut ids = Vec::new();
        for segment in segments {
            match segment.owner {
                Owner::Policy => {
                    after_test = bpe.decode(&segment.ids).contains("<call> test </call>");
                    ids.extend(&segment.ids);
                }
                Owner::Env if after_test => {
                    let shown = *first.get_or_insert(&segment.ids);
                    ids.extend(shown);
                }
                _ => ids.extend(&segment.ids),
            }
        }
        ids
    }
}
// ANCHOR_END: learned_search

/// Baselines for files with several bugs that two edits repair (Section
/// 12.5's files with two bugs), each ending with `submit` well within the
/// turn budget: chance, two distinct candidates drawn at random (exact: the
/// mean over every ordered pair of the menu); the lookup rule's two
/// candidates of highest rate (exact over its ties); and the oracle, the two
/// repairs. Per-task success, in the shape of [`Baselines`] without a search.
pub fn pair_baselines(tasks: &[Task], lookup: &Lookup) -> Baselines {
    let mut out = Baselines::default();
    for (t, task) in tasks.iter().enumerate() {
        let mut env = BugFixEnv::new(tasks.to_vec(), crate::gym::MAX_TURNS);
        let mut solved = |a: &Edit, b: &Edit| -> f64 {
            env.reset(t);
            env.step(&format!("<call> edit {} </call>", a.name));
            env.step(&format!("<call> edit {} </call>", b.name));
            env.step("<call> submit </call>").reward
        };
        let pairs = |among: &[&Edit], with: &[&Edit]| -> Vec<(Edit, Edit)> {
            among
                .iter()
                .flat_map(|a| {
                    with.iter()
                        .filter(|b| b.name != a.name)
                        .map(|b| ((*a).clone(), (*b).clone()))
                })
                .collect()
        };
        let mean = |solved: &mut dyn FnMut(&Edit, &Edit) -> f64, pairs: &[(Edit, Edit)]| {
            pairs.iter().map(|(a, b)| solved(a, b)).sum::<f64>() / pairs.len().max(1) as f64
        };
        let menu: Vec<&Edit> = task.menu.iter().collect();
        out.chance.push(mean(&mut solved, &pairs(&menu, &menu)));
        // The lookup rule: the highest rate first, then the next; a tie is broken at random.
        let rate = |e: &Edit| lookup.rates.get(&diff_shape(e)).copied().unwrap_or(0.0);
        let mut values: Vec<f64> = menu.iter().map(|e| rate(e)).collect();
        values.sort_by(|a, b| b.total_cmp(a));
        let (first, second) = (values[0], values[1]);
        let at = |v: f64| -> Vec<&Edit> { menu.iter().copied().filter(|e| rate(e) == v).collect() };
        out.lookup
            .push(mean(&mut solved, &pairs(&at(first), &at(second))));
        let fixes: Vec<&Edit> = menu
            .iter()
            .copied()
            .filter(|e| e.kind == EditKind::Fix)
            .collect();
        out.oracle
            .push(mean(&mut solved, &pairs(&fixes[..1], &fixes)));
    }
    out
}

/// Mutants per operator over `programs`: how the defects spread.
pub fn operator_counts(programs: &[Program]) -> BTreeMap<Operator, usize> {
    let mut counts = BTreeMap::new();
    for program in programs {
        for mutant in mutants(program) {
            *counts.entry(mutant.operator).or_insert(0) += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_files_with_two_bugs_the_oracle_repairs_and_chance_counts_the_ordered_pairs() {
        let gym = crate::gym::Gym::standard();
        let tasks = crate::horizon::multi_bug_tasks(&gym.held_out, 2, 3, 5);
        let lookup = Lookup::fit(&tasks);
        let b = pair_baselines(&tasks, &lookup);
        assert_eq!(b.oracle, vec![1.0; 3]);
        for (task, chance) in tasks.iter().zip(&b.chance) {
            // Only the two repairs, in either order, fix both bugs: 2 of m (m - 1) ordered pairs.
            let m = task.menu.len() as f64;
            assert!(
                (chance - 2.0 / (m * (m - 1.0))).abs() < 1e-12,
                "{chance} for a menu of {m}"
            );
        }
        // A rule that rates exactly the repairs' shapes (1) picks among the k candidates of those
        // shapes: both repairs in 2 of its k (k - 1) ordered pairs.
        let fix_shapes: HashMap<String, f64> = tasks
            .iter()
            .flat_map(|t| {
                t.menu
                    .iter()
                    .filter(|e| e.kind == EditKind::Fix)
                    .map(|e| (diff_shape(e), 1.0))
            })
            .collect();
        let knows = pair_baselines(
            &tasks,
            &Lookup {
                rates: fix_shapes.clone(),
            },
        );
        for (task, lookup) in tasks.iter().zip(&knows.lookup) {
            let k = task
                .menu
                .iter()
                .filter(|e| fix_shapes.contains_key(&diff_shape(e)))
                .count() as f64;
            assert!(
                (lookup - 2.0 / (k * (k - 1.0))).abs() < 1e-12,
                "{lookup} with {k} top candidates"
            );
        }
    }

    const SUM: &str = "fn total(xs, limit) {\n    let s = 0;\n    let i = 0;\n    while i < xs.len() {\n        if xs[i] <= limit && xs[i] > 0 {\n            s += xs[i];\n        }\n        i += 1;\n    }\n    return max(s, 0);\n}\n";

    fn program() -> Program {
        let t = |call: &str, expected: &str| Test::new(call, expected);
        Program {
            name: "total".into(),
            function: "total".into(),
            what: "total(xs, limit) should add the positive entries of xs that are at most limit"
                .into(),
            source: SUM.into(),
            public: vec![
                t("total([1, 2, 3], 2)", "3"),
                t("total([5, -1, 4], 9)", "9"),
            ],
            hidden: vec![
                t("total([], 3)", "0"),
                t("total([2, 2, 7], 2)", "4"),
                t("total([-3, 0, 1], 1)", "1"),
                t("total([4, 1, 3], 3)", "4"),
                t("total([9, 8], 7)", "0"),
            ],
        }
    }

    #[test]
    fn the_programs_give_every_operator_mutants_and_every_split_tasks() {
        let programs = programs();
        assert!(programs.len() >= 40, "{} programs", programs.len());
        let counts = operator_counts(&programs);
        assert!(counts.len() >= 20, "operators with mutants: {counts:?}");
        for operator in HELD_OUT_OPERATORS {
            let n = counts.get(&operator).copied().unwrap_or(0);
            assert!(n >= 30, "{operator:?}: {n} mutants");
        }
        // The splits and the baselines on a third of the programs (the chapter runs them all).
        let some: Vec<Program> = programs.iter().step_by(3).cloned().collect();
        let split = split(&some, &FORMAT, 12);
        for (name, set) in [
            ("train", &split.train),
            ("validation", &split.validation),
            ("instances", &split.held_out_instances),
            ("programs", &split.held_out_programs),
            ("operators", &split.held_out_operators),
        ] {
            assert!(!set.is_empty(), "{name}: no tasks");
        }
        let lookup = Lookup::fit(&split.train);
        let b = baselines(&split.held_out_operators[..20], &lookup, &FORMAT, 2, 5);
        assert!(b.oracle.iter().all(|&r| r == 1.0));
        assert!(b.chance.iter().all(|&r| (r - 0.1).abs() < 1e-12));
        // What the run cache stores reads back as the same split and baselines.
        let text = serde_json::to_string(&split).unwrap();
        assert_eq!(serde_json::from_str::<Split>(&text).unwrap(), split);
        let text = serde_json::to_string(&b).unwrap();
        assert_eq!(serde_json::from_str::<Baselines>(&text).unwrap(), b);
    }

    #[test]
    fn the_lexer_keeps_every_token_and_its_place() {
        let tokens = lex("let i = 0..=n; // c\nif a<=b && s != \"x<y\" { }");
        let texts: Vec<&str> = tokens
            .iter()
            .map(|t| &"let i = 0..=n; // c\nif a<=b && s != \"x<y\" { }"[t.start..t.end])
            .collect();
        assert_eq!(
            texts,
            [
                "let", "i", "=", "0", "..=", "n", ";", "if", "a", "<=", "b", "&&", "s", "!=",
                "\"x<y\"", "{", "}"
            ]
        );
    }

    #[test]
    fn every_operator_finds_its_sites_and_only_them() {
        let all = mutations(SUM);
        let of = |op: Operator| all.iter().filter(|m| m.operator == op).count();
        assert_eq!(of(Operator::LessToLessEqual), 1);
        assert_eq!(of(Operator::LessEqualToLess), 1);
        assert_eq!(of(Operator::GreaterToGreaterEqual), 1);
        assert_eq!(of(Operator::FlipComparison), 3);
        assert_eq!(of(Operator::WrongInit), 2, "let s = 0 and let i = 0");
        assert_eq!(
            of(Operator::ConstantUp),
            3,
            "0 in xs[i] > 0, 1 in i += 1, 0 in max"
        );
        assert_eq!(of(Operator::CompoundFlip), 2);
        assert_eq!(of(Operator::AndOr), 1);
        assert_eq!(of(Operator::MinMax), 1);
        assert_eq!(of(Operator::SwapArgs), 1, "max(s, 0)");
        assert_eq!(of(Operator::NegateCondition), 1);
        assert_eq!(of(Operator::MissingStatement), 2, "s += xs[i]; and i += 1;");
        assert_eq!(of(Operator::IndexShift), 6, "three xs[i], two shifts each");
        // Variables of the function: xs, limit, s, i; a read of one becomes each other one.
        assert!(of(Operator::WrongVariable) >= 3 * 8);
        let negated = all
            .iter()
            .find(|m| m.operator == Operator::NegateCondition)
            .unwrap();
        assert!(negated
            .apply(SUM)
            .contains("if !(xs[i] <= limit && xs[i] > 0) {"));
        let swapped = all
            .iter()
            .find(|m| m.operator == Operator::SwapArgs)
            .unwrap();
        assert!(swapped.apply(SUM).contains("return max(0, s);"));
    }

    #[test]
    fn a_line_edit_is_unique_and_undoes_the_mutation() {
        for m in mutations(SUM) {
            let buggy = m.apply(SUM);
            let Some((find, replace)) = line_edit(&buggy, SUM) else {
                assert_eq!(buggy, SUM, "{m:?}");
                continue;
            };
            assert_eq!(buggy.matches(find.as_str()).count(), 1, "{m:?}");
            assert_eq!(buggy.replacen(find.as_str(), &replace, 1), SUM, "{m:?}");
        }
    }

    #[test]
    fn mutants_fail_public_and_hidden_tests_and_their_repair_passes() {
        let program = program();
        let found = mutants(&program);
        assert!(found.len() >= 15, "{}", found.len());
        let runner = Guarded::shared();
        for mutant in &found {
            assert!(!mutant.failing_public.is_empty());
            assert!(!all_pass(&runner.run(&mutant.source, &program.hidden)));
            let repaired = mutant.source.replacen(&mutant.find, &mutant.replace, 1);
            assert_eq!(repaired, program.source);
        }
        // `max(s, 0)` and `max(0, s)` agree: that swap is no defect.
        assert!(found.iter().all(|m| m.operator != Operator::SwapArgs));
    }

    #[test]
    fn a_task_hides_the_fix_among_candidates_of_the_same_shapes() {
        let program = program();
        let found = mutants(&program);
        let mut tasks = 0;
        for (i, mutant) in found.iter().enumerate() {
            let Some(task) = task(&program, mutant, &FORMAT, i as u64) else {
                continue;
            };
            tasks += 1;
            assert_eq!(task.menu.len(), FORMAT.candidates);
            assert!(task.undo);
            let fixes: Vec<&Edit> = task.menu.iter().filter(|e| repairs(&task, e)).collect();
            assert_eq!(fixes.len(), 1, "{}", task.issue);
            assert_eq!(fixes[0].kind, EditKind::Fix);
            // Neutral labels 1..=10, the diffs in the issue, the failing test named.
            let names: Vec<String> = (1..=FORMAT.candidates).map(|n| n.to_string()).collect();
            assert_eq!(
                task.menu.iter().map(|e| e.name.clone()).collect::<Vec<_>>(),
                names
            );
            assert!(task.issue.contains("but total(") && task.issue.contains("op 10:"));
        }
        assert!(tasks >= 10, "{tasks}");
    }

    #[test]
    fn the_baselines_bracket_what_an_agent_can_do() {
        let program = program();
        let tasks: Vec<Task> = mutants(&program)
            .iter()
            .enumerate()
            .filter_map(|(i, m)| task(&program, m, &FORMAT, i as u64))
            .collect();
        let lookup = Lookup::fit(&tasks);
        let b = baselines(&tasks, &lookup, &FORMAT, 20, 1);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert_eq!(mean(&b.oracle), 1.0);
        assert!((mean(&b.chance) - 0.1).abs() < 1e-12, "one fix in ten");
        // Test, then three turns per candidate: at most four of ten within 12 turns.
        assert!(
            mean(&b.search) > 0.15 && mean(&b.search) < 0.45,
            "{}",
            mean(&b.search)
        );
    }

    #[test]
    fn a_compact_task_shows_each_change_in_one_line_and_the_first_failing_test() {
        let source =
            "fn f(x) {\n    let s = 0;\n    if x < 3 {\n        s += 1;\n    }\n    s\n}\n";
        let edit = |find: &str, replace: &str| Edit {
            name: "1".into(),
            kind: EditKind::Distractor,
            find: find.into(),
            replace: replace.into(),
        };
        assert_eq!(
            compact_diff(&edit("    if x < 3 {", "    if x <= 3 {"), source),
            "line 3: x < 3 => x <= 3"
        );
        assert_eq!(
            compact_diff(&edit("    let s = 0;", "    let s = 1;"), source),
            "line 2: = 0 ; => = 1 ;"
        );
        assert_eq!(
            compact_diff(&edit("        s += 1;\n", ""), source),
            "line 4: s += 1 ; => (nothing)"
        );
        // Every candidate of a mutation task in one line; `test` shows the failing tests only.
        // A mutant that fails some public tests and passes others.
        let program = program();
        let runner = Guarded::shared();
        let full = mutants(&program)
            .iter()
            .filter(|m| {
                runner
                    .run(&m.source, &program.public)
                    .iter()
                    .any(|l| l.passed)
            })
            .find_map(|m| task(&program, m, &FORMAT, 3))
            .expect("a task");
        let short = compact(&full);
        assert_eq!(short.issue.lines().count(), 1 + FORMAT.candidates);
        assert_eq!(short.menu, full.menu);
        let mut env = BugFixEnv::new(vec![full.clone(), short.clone()], FORMAT.max_turns);
        env.reset(0);
        let all = env.step("<call> test </call>").observation;
        env.reset(1);
        let terse = env.step("<call> test </call>").observation;
        let failing: Vec<&str> = all.lines().filter(|l| l.starts_with("FAIL")).collect();
        assert!(!failing.is_empty() && failing.len() < all.lines().count());
        assert_eq!(terse.lines().next(), Some(failing[0]));
        assert_eq!(crate::horizon::failures(&terse), failing.len());
        assert_eq!(crate::horizon::failures(&all), failing.len());
        assert_eq!(
            crate::horizon::failures("FAIL f(1) -> 2\n3 more failing"),
            4,
            "a terse output counts the failures it does not show"
        );
        let fix = short.menu.iter().find(|e| e.kind == EditKind::Fix).unwrap();
        env.step(&format!("<call> edit {} </call>", fix.name));
        let passing = env.step("<call> test </call>").observation;
        assert_eq!(
            &*passing,
            &format!("all {} public tests pass", program.public.len())
        );
    }

    #[test]
    fn a_compact_label_is_the_token_that_its_edit_action_writes() {
        // With the book's tokenizer, a label written as "op 1," would be read as the token
        // " 1," while the action `edit 1` writes " 1": the model would have to learn a mapping
        // between two tokens for some labels and copy one token for others.
        let bpe = Bpe::load(
            &crate::pretrain::kept_dir()
                .join("base")
                .join("tokenizer.json"),
        )
        .expect("the kept base model's tokenizer");
        let program = program();
        let short = mutants(&program)
            .iter()
            .find_map(|m| task(&program, m, &FORMAT, 3))
            .map(|t| compact(&t))
            .expect("a task");
        assert_eq!(short.menu.len(), 10, "labels 1 to 10");
        let prompt = bpe.encode(&short.prompt());
        let op = bpe.id("op").expect("a token for op");
        let edit_id = bpe.id("Ġedit").expect("a token for edit");
        for edit in &short.menu {
            let action = bpe.encode(&format!("<call> edit {} </call>", edit.name));
            let label = action[action.iter().position(|&i| i == edit_id).unwrap() + 1];
            assert_eq!(
                bpe.token(label),
                format!("Ġ{}", edit.name),
                "one token per label"
            );
            assert!(
                prompt.windows(2).any(|w| w == [op, label]),
                "op {} is not written as the action's token {:?}",
                edit.name,
                bpe.token(label)
            );
        }
    }

    #[test]
    fn the_search_transcripts_read_every_answer_and_the_frozen_harness_hides_them() {
        let program = program();
        let tasks: Vec<Task> = mutants(&program)
            .iter()
            .enumerate()
            .filter_map(|(i, m)| task(&program, m, &FORMAT, i as u64))
            .map(|t| compact(&t))
            .collect();
        let transcripts = search_transcripts(
            &tasks,
            2 * tasks.len(),
            &FORMAT,
            None,
            &mut StdRng::seed_from_u64(0),
        );
        // Two passes over one shuffled order: every task once in each pass.
        assert_eq!(transcripts.len(), 2 * tasks.len());
        let prompts = |pass: &[Vec<(Owner, String)>]| -> Vec<String> {
            let mut p: Vec<String> = pass.iter().map(|t| t[0].1.clone()).collect();
            p.sort();
            p
        };
        let mut all: Vec<String> = tasks.iter().map(|t| t.prompt()).collect();
        all.sort();
        assert_eq!(prompts(&transcripts[..tasks.len()]), all);
        assert_eq!(transcripts[..tasks.len()], transcripts[tasks.len()..]);
        // The search's episodes, and what `behaviour` reads in them: it undoes after a failing
        // test and submits after a passing one, and never edits an op twice.
        let mut env = BugFixEnv::new(tasks.clone(), FORMAT.max_turns);
        let mut play = |lookup: Option<&Lookup>| -> Vec<Played> {
            (0..tasks.len())
                .map(|t| {
                    let mut transcript = Vec::new();
                    let mut search = searcher(&tasks[t], lookup);
                    let outcome = run_episode(&mut env, t, &mut search, Some(&mut transcript));
                    Played {
                        task: t,
                        segments: vec![],
                        actions: transcript
                            .iter()
                            .filter(|(o, _)| *o == Owner::Policy)
                            .map(|(_, a)| a.clone())
                            .collect(),
                        reward: outcome.reward,
                        info: Default::default(),
                        parse_errors: 0,
                    }
                })
                .collect()
        };
        let played = play(None);
        let b = behaviour(&tasks, &played, FORMAT.max_turns);
        // (A failing test is not undone when it fails fewer tests than before, or when the
        // budget ends there; nor is a passing one submitted then.)
        assert!(b.failing > 0 && b.passing > 0, "{b:?}");
        assert!(
            b.undo_after_failing as f64 > 0.7 * b.failing as f64,
            "{b:?}"
        );
        assert!(
            b.submit_after_passing as f64 > 0.7 * b.passing as f64,
            "{b:?}"
        );
        assert_eq!(
            (
                b.undo_after_passing,
                b.submit_after_failing,
                b.repeated_edits
            ),
            (0, 0, 0)
        );
        assert!(b.solved > 0 && b.solved <= b.submit_after_passing, "{b:?}");
        // Pooled counts are the counts of the pooled episodes.
        let mut pooled = b;
        pooled += b;
        let twice = [played.clone(), played.clone()].concat();
        assert_eq!(pooled, behaviour(&tasks, &twice, FORMAT.max_turns));
        // The search's first edits: one per episode, in a random order, so the fix about as
        // often as one in ten. An agent that first edits the lookup's pick matches it every time.
        let lookup = Lookup::fit(&tasks);
        let f = first_edits(&tasks, &played, &lookup);
        let mut pooled = f;
        pooled += f;
        let twice = [played.clone(), played.clone()].concat();
        let again = first_edits(&tasks, &twice, &lookup);
        assert_eq!(
            (pooled.episodes, pooled.fix, pooled.lookups_pick),
            (again.episodes, again.fix, again.lookups_pick)
        );
        assert!((pooled.lookups_pick_by_chance - again.lookups_pick_by_chance).abs() < 1e-9);
        assert_eq!(f.episodes, tasks.len());
        assert!(f.fix < f.episodes && f.lookups_pick < f.episodes, "{f:?}");
        let follower: Vec<Played> = (0..tasks.len())
            .map(|t| Played {
                task: t,
                actions: vec![
                    "<call> test </call>".into(),
                    format!("<call> edit {} </call>", lookup.picks(&tasks[t])[0].name),
                ],
                ..played[t].clone()
            })
            .collect();
        let f = first_edits(&tasks, &follower, &lookup);
        assert_eq!((f.episodes, f.lookups_pick), (tasks.len(), tasks.len()));
        assert!(f.lookups_pick_by_chance < tasks.len() as f64);
        // The search in the order of the rule's rates edits one of its picks first, every
        // time, and still reads the answers; `ordered_search` scores those episodes.
        let ranked = play(Some(&lookup));
        let f = first_edits(&tasks, &ranked, &lookup);
        assert_eq!((f.episodes, f.lookups_pick), (tasks.len(), tasks.len()));
        let b = behaviour(&tasks, &ranked, FORMAT.max_turns);
        assert_eq!((b.undo_after_passing, b.submit_after_failing), (0, 0));
        let rewards: Vec<f64> = ranked.iter().map(|p| p.reward).collect();
        assert_eq!(ordered_search(&tasks, &lookup, &FORMAT), rewards);
        for task in &tasks {
            let mut order = lookup.ranking(task);
            let rate = |i: usize| lookup.rates[&diff_shape(&task.menu[i])];
            assert!(order.windows(2).all(|w| rate(w[0]) >= rate(w[1])));
            order.sort();
            assert_eq!(order, (0..task.menu.len()).collect::<Vec<_>>());
        }
        // The frozen harness shows the first test's answer after every later test, and
        // leaves everything else as it was.
        let seg = |owner: Owner, ids: Vec<u32>| Segment {
            owner,
            ids,
            logprobs: vec![],
        };
        let bpe = Bpe::train(
            ["<call> test </call> <call> edit 1 </call> FAIL PASS".to_string()].into_iter(),
            300,
        )
        .expect("a tokenizer");
        let test = bpe.encode("<call> test </call>");
        let edit = bpe.encode("<call> edit 1 </call>");
        let segments = vec![
            seg(Owner::Prompt, vec![1]),
            seg(Owner::Policy, test.clone()),
            seg(Owner::Env, vec![7]),
            seg(Owner::Policy, edit.clone()),
            seg(Owner::Env, vec![8]),
            seg(Owner::Policy, test.clone()),
            seg(Owner::Env, vec![9]),
        ];
        let view = frozen_tests(&bpe)(&segments);
        let expected = [vec![1], test.clone(), vec![7], edit, vec![8], test, vec![7]].concat();
        assert_eq!(view, expected);
    }
}
