//! Chapter 11: reference solutions. The model answers, with the reasoning
//! behind them, are in `chapters/answers-11.md`.

/// Exercise 11.1: one pass, each episode indexed into the 2 × 2 table by
/// (accepted, solved).
pub fn confusion(truth: &[bool], scores: &[f64], threshold: f64) -> [usize; 4] {
    assert_eq!(truth.len(), scores.len(), "one score per episode");
    let mut counts = [0; 4];
    for (&solved, &score) in truth.iter().zip(scores) {
        let accepted = score >= threshold;
        let cell = match (accepted, solved) {
            (true, true) => 0,
            (true, false) => 1,
            (false, true) => 2,
            (false, false) => 3,
        };
        counts[cell] += 1;
    }
    counts
}

/// Exercise 11.2: a 1 is reported for a success that is kept or a failure
/// that is flipped, $p (1 - \varphi) + (1 - p) \varphi = \varphi + (1 - 2\varphi) p$.
pub fn flipped_mean(p: f64, flip: f64) -> f64 {
    flip + (1.0 - 2.0 * flip) * p
}

/// Exercise 11.2: the reported rewards are independent Bernoulli($p'$)
/// draws, so the group is uninformative when all are 1 or all are 0.
pub fn informative_share(p: f64, flip: f64, g: usize) -> f64 {
    assert!(g >= 1, "a group has at least one episode");
    let reported = flipped_mean(p, flip);
    1.0 - reported.powi(g as i32) - (1.0 - reported).powi(g as i32)
}

/// Whether a trimmed statement is `return <integer literal>;`.
fn is_literal_return(statement: &str) -> bool {
    let Some(rest) = statement.strip_prefix("return") else { return false };
    let Some(value) = rest.strip_suffix(';') else { return false };
    if !rest.starts_with(char::is_whitespace) {
        return false; // `returned;`, `return_value;`
    }
    let value = value.trim();
    let digits = value.strip_prefix('-').map_or(value, str::trim_start);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// (header, first statement) of every function of `source`, both trimmed.
fn first_statements(source: &str) -> Vec<(&str, &str)> {
    let lines: Vec<&str> = source.lines().map(str::trim).collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.starts_with("fn ") && line.ends_with('{'))
        .filter_map(|(i, header)| Some((*header, *lines[i + 1..].iter().find(|line| !line.is_empty())?)))
        .collect()
}

/// Exercise 11.3: a literal return that opens a function body of `edited`
/// and did not open the same function in `original`.
pub fn returns_literal_first(original: &str, edited: &str) -> bool {
    let before = first_statements(original);
    first_statements(edited).into_iter().any(|pair| is_literal_return(pair.1) && !before.contains(&pair))
}

/// Exercise 11.4: the longest common subsequence by dynamic programming,
/// one row of the table at a time: `row[j]` is the LCS length of the
/// prefix of `a` read so far and the first `j` characters of `b`.
pub fn similarity_ratio(a: &str, b: &str) -> f64 {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let mut row = vec![0usize; b.len() + 1];
    for &x in &a {
        let mut diagonal = 0; // the previous row's value at j - 1
        for (j, &y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y { diagonal + 1 } else { above.max(row[j]) };
            diagonal = above;
        }
    }
    2.0 * row[b.len()] as f64 / (a.len() + b.len()) as f64
}
