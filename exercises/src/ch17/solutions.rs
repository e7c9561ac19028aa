//! Reference solutions for the Chapter 17 exercises (the `solutions` feature).

use std::collections::HashSet;

// ANCHOR: ex1
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    assert!(c <= n && (1..=n).contains(&k));
    if n - c < k {
        return 1.0; // every draw of k holds a success
    }
    // C(n−c, k) / C(n, k) = ∏_{i=n−c+1}^{n} (1 − k/i): c factors, each in (0, 1].
    1.0 - (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product::<f64>()
}
// ANCHOR_END: ex1

// ANCHOR: ex2
pub fn pass_hat_k(n: usize, c: usize, k: usize) -> f64 {
    assert!(c <= n && (1..=n).contains(&k));
    // C(c, k) / C(n, k) = ∏_{i=0}^{k−1} (c − i) / (n − i); zero once c < k.
    (0..k).map(|i| c.saturating_sub(i) as f64 / (n - i) as f64).product()
}
// ANCHOR_END: ex2

// ANCHOR: ex3
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for ch in text.chars() {
        if ch.is_alphanumeric() || ch == '_' {
            word.push(ch);
            continue;
        }
        if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        if !ch.is_whitespace() {
            out.push(ch.to_string());
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn grams(text: &str) -> HashSet<Vec<String>> {
    let words = words(text);
    if words.len() < 5 {
        return HashSet::from([words]);
    }
    words.windows(5).map(|w| w.to_vec()).collect()
}

pub fn five_gram_jaccard(a: &str, b: &str) -> f64 {
    let (a, b) = (grams(a), grams(b));
    a.intersection(&b).count() as f64 / a.union(&b).count() as f64
}
// ANCHOR_END: ex3
