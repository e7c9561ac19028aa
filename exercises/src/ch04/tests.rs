//! Grading tests for the Chapter 4 exercises: `cargo test -p exercises ch04`.
//!
//! Each test is named after its exercise (`ex3_...` grades Exercise 4.3) and
//! checks consequences of the exercise's statement, computed here from the
//! `agentrl` library (tiny models on the CPU, never trained), not values
//! copied from one particular solution.

use super::*;
use agentrl::mdp::seeded_rng;
use agentrl::tinyagent::{entropy, Config, KvCache, Sampling, TinyAgent};
use tch::{Device, Kind, Tensor};

use crate::testkit::assert_close;

const TINY: Config = Config { vocab: 50, n_ctx: 32, d_model: 16, n_layer: 2, n_head: 4 };

/// A fresh model of shape `config` with weights from `seed`.
fn model(config: Config, seed: i64) -> TinyAgent {
    let _turn = agentrl::book::seeded(seed);
    TinyAgent::new(config, Device::Cpu)
}

/// A [B, T] tensor of ids and its [B, T] validity mask.
fn batch(ids: &[Vec<i64>], valid: &[Vec<bool>]) -> (Tensor, Tensor) {
    let (b, t) = (ids.len() as i64, ids[0].len() as i64);
    let flags: Vec<i64> = valid.concat().iter().map(|&v| v as i64).collect();
    (Tensor::from_slice(&ids.concat()).view([b, t]), Tensor::from_slice(&flags).view([b, t]).to_kind(Kind::Bool))
}

/// The logits of one all-real sequence: [T, V].
fn logits_alone(model: &TinyAgent, ids: &[i64]) -> Tensor {
    let n = ids.len() as i64;
    model.logits(&Tensor::from_slice(ids).view([1, n]), &Tensor::ones([1, n], (Kind::Bool, Device::Cpu))).squeeze_dim(0)
}

fn max_gap(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

// ---------------------------------------------------------------------------
// Exercise 4.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_matches_the_built_model() {
    let configs = [
        TINY,
        Config { vocab: 7, n_ctx: 5, d_model: 4, n_layer: 1, n_head: 1 },
        Config { vocab: 300, n_ctx: 64, d_model: 24, n_layer: 3, n_head: 6 },
        Config { vocab: 50, n_ctx: 32, d_model: 16, n_layer: 0, n_head: 4 },
    ];
    for config in configs {
        let built = model(config, 1).parameter_count();
        assert_eq!(parameter_count(&config), built, "{config:?}");
    }
}

#[test]
fn ex1_heads_change_nothing_and_layers_add_equal_amounts() {
    let base = Config { vocab: 40, n_ctx: 16, d_model: 32, n_layer: 2, n_head: 1 };
    for n_head in [1, 2, 4, 8] {
        let config = Config { n_head, ..base };
        assert_eq!(parameter_count(&config), model(config, 2).parameter_count(), "{n_head} heads");
    }
    let per_layer = model(Config { n_layer: 3, ..base }, 3).parameter_count() - model(base, 3).parameter_count();
    for n_layer in [1, 4, 6] {
        let config = Config { n_layer, ..base };
        assert_eq!(parameter_count(&config) - parameter_count(&Config { n_layer: n_layer - 1, ..base }), per_layer);
    }
}

// ---------------------------------------------------------------------------
// Exercise 4.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_small_cases() {
    assert_eq!(nucleus(&[0.1, 0.6, 0.3], 0.7), vec![1, 2]);
    assert_eq!(nucleus(&[0.1, 0.6, 0.3], 0.5), vec![1], "0.6 already reaches 0.5");
    assert_eq!(nucleus(&[0.1, 0.6, 0.3], 0.0), vec![1], "at least one token, the most likely");
    assert_eq!(nucleus(&[0.1, 0.6, 0.3], 1.0), vec![1, 2, 0]);
    assert_eq!(nucleus(&[0.1, 0.6, 0.3], 2.0), vec![1, 2, 0], "more than the total keeps everything");
    assert_eq!(nucleus(&[0.25, 0.25, 0.25, 0.25], 0.5), vec![0, 1], "ties go to the smaller index");
    assert_eq!(nucleus(&[0.2, 0.3, 0.2, 0.3], 0.55), vec![1, 3]);
    assert_eq!(nucleus(&[0.2, 0.3, 0.2, 0.3], 0.65), vec![1, 3, 0]);
    assert_eq!(nucleus(&[1.0], 0.9), vec![0]);
}

/// The probabilities `Sampling::draw` computes for `logits` at `temperature`.
fn draw_probs(logits: &[f64], temperature: f64) -> Vec<f64> {
    let top = logits.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
    let scaled: Vec<f64> = logits.iter().map(|&l| (l - top) / temperature).collect();
    let total: f64 = scaled.iter().map(|s| s.exp()).sum();
    scaled.iter().map(|s| s.exp() / total).collect()
}

#[test]
fn ex2_draw_samples_exactly_the_nucleus() {
    // Twelve logits with a few ties.
    let logits: Vec<f64> = (0..12).map(|i| ((i * 7 % 11) as f64 - 5.0) * 0.45).collect();
    let mut rng = seeded_rng(3);
    for temperature in [1.0, 0.6, 2.0] {
        let probs = draw_probs(&logits, temperature);
        for top_p in [0.0, 0.3, 0.62, 0.9, 0.99, 1.0] {
            let kept = nucleus(&probs, top_p);
            let what = format!("κ = {temperature}, ν = {top_p}");
            assert!(!kept.is_empty(), "{what}: at least one token");
            let mass: f64 = kept.iter().map(|&i| probs[i]).sum();
            let sampling = Sampling { temperature, top_p };
            let mut seen = vec![0usize; logits.len()];
            let n = 3000;
            for _ in 0..n {
                let (token, logprob) = sampling.draw(&logits, &mut rng);
                let token = token as usize;
                assert!(kept.contains(&token), "{what}: draw returned {token}, outside the nucleus {kept:?}");
                assert_close(&format!("{what}: log-prob of {token}"), logprob, (probs[token] / mass).ln(), 1e-5);
                seen[token] += 1;
            }
            for &i in &kept {
                if probs[i] / mass > 0.01 {
                    assert!(seen[i] > 0, "{what}: token {i} is in your nucleus {kept:?} but draw never picks it");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Exercise 4.3
// ---------------------------------------------------------------------------

fn library_entropy(logits: &[f64], temperature: f64) -> f64 {
    entropy(&(Tensor::from_slice(logits).to_kind(Kind::Double) / temperature)).double_value(&[])
}

#[test]
fn ex3_matches_the_library_entropy() {
    let rows: [&[f64]; 4] = [&[0.0, 1.0, 2.0, 3.0], &[2.5, -1.0, 0.3, 0.3, 4.0, -3.0], &[0.0; 5], &[10.0, -10.0, 0.0]];
    for row in rows {
        for temperature in [0.25, 0.5, 1.0, 2.5, 10.0] {
            let got = temperature_entropy(row, temperature);
            assert_close(&format!("{row:?} at κ = {temperature}"), got, library_entropy(row, temperature), 1e-5);
        }
    }
}

#[test]
fn ex3_temperature_moves_entropy_between_zero_and_ln_v() {
    let row = [1.0f64, -0.5, 2.0, 0.2, 1.7, -2.0, 0.9];
    let ln_v = (row.len() as f64).ln();
    let mut last = -1.0;
    for temperature in [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 20.0, 100.0] {
        let h = temperature_entropy(&row, temperature);
        assert!(h > last, "entropy must rise with κ: {h} at κ = {temperature} after {last}");
        assert!((0.0..=ln_v + 1e-12).contains(&h), "entropy {h} outside [0, ln V]");
        last = h;
    }
    assert_close("T -> infinity", temperature_entropy(&row, 1e7), ln_v, 1e-6);
    assert_close("T -> 0", temperature_entropy(&row, 1e-3), 0.0, 1e-9);
    assert_close("T -> 0 with two tied maxima", temperature_entropy(&[3.0, 1.0, 3.0, -2.0], 1e-3), 2f64.ln(), 1e-9);
    assert_close("a uniform row", temperature_entropy(&[0.7; 9], 0.01), 9f64.ln(), 1e-9);
    // Large logits at a small temperature overflow a naive exp.
    let big = temperature_entropy(&[80.0, 79.0, -80.0], 0.01);
    assert!(big.is_finite() && big >= 0.0, "got {big} for large logits at κ = 0.01");
    let shifted = temperature_entropy(&[81.0, 80.0, 78.5], 1.0);
    assert_close("adding a constant to every logit", shifted, library_entropy(&[1.0, 0.0, -1.5], 1.0), 1e-5);
}

// ---------------------------------------------------------------------------
// Exercise 4.4
// ---------------------------------------------------------------------------

#[test]
fn ex4_agrees_with_one_pass_and_with_stepping_the_cache() {
    let model = model(TINY, 4);
    let (prompt, continuation) = (vec![3u32, 17, 4, 9], vec![21u32, 5, 5, 40, 1]);
    let got = sequence_logprob(&model, &prompt, &continuation);
    assert!(got < 0.0, "a log-probability of tokens from 50 choices is negative: {got}");

    // One pass over the whole sequence: the next-token log-probs of the continuation.
    let all: Vec<i64> = prompt.iter().chain(&continuation).map(|&t| t as i64).collect();
    let n = all.len() as i64;
    let per_token = model.token_logprobs(&Tensor::from_slice(&all).view([1, n]), &Tensor::ones([1, n], (Kind::Bool, Device::Cpu)));
    let per_token = Vec::<f64>::try_from(per_token.view([-1])).unwrap();
    let want: f64 = per_token[prompt.len() - 1..].iter().sum();
    assert_close("against token_logprobs", got, want, 1e-4);

    // One token at a time through the cache: the chain rule.
    let mut cache = KvCache::default();
    let ids: Vec<i64> = prompt.iter().map(|&t| t as i64).collect();
    let p = ids.len() as i64;
    let mut logits = model.forward(&Tensor::from_slice(&ids).view([1, p]), &Tensor::ones([1, p], (Kind::Bool, Device::Cpu)), &mut cache);
    let mut chained = 0.0;
    for &token in &continuation {
        let last = logits.select(1, -1).log_softmax(-1, Kind::Double); // [1, V]
        chained += last.double_value(&[0, token as i64]);
        let step = Tensor::from_slice(&[token as i64]).view([1, 1]);
        logits = model.forward(&step, &Tensor::ones([1, 1], (Kind::Bool, Device::Cpu)), &mut cache);
    }
    assert_close("against the cached chain", got, chained, 1e-4);
    assert_eq!(sequence_logprob(&model, &prompt, &[]), 0.0, "an empty continuation is certain");
}

#[test]
fn ex4_is_a_distribution_and_follows_the_chain_rule() {
    let model = model(TINY, 5);
    let prompt = [8u32, 2, 33];
    let total: f64 = (0..TINY.vocab as u32).map(|v| sequence_logprob(&model, &prompt, &[v]).exp()).sum();
    assert_close("the probabilities of all one-token continuations", total, 1.0, 1e-4);

    let (a, b) = ([12u32, 0, 7], [44u32, 44]);
    let joint = sequence_logprob(&model, &prompt, &[a.as_slice(), b.as_slice()].concat());
    let first = sequence_logprob(&model, &prompt, &a);
    let then = sequence_logprob(&model, &[prompt.as_slice(), a.as_slice()].concat(), &b);
    assert_close("log pi(ab | x) = log pi(a | x) + log pi(b | xa)", joint, first + then, 1e-4);
}

#[test]
fn ex4_scores_what_pure_sampling_generated() {
    let model = model(TINY, 6);
    let prompts = vec![vec![4u32, 5, 6], vec![10u32, 11, 12, 13, 14, 15]];
    let generated = model.generate(&prompts, 8, &[], Sampling::PURE, &mut seeded_rng(9), true);
    for (prompt, g) in prompts.iter().zip(&generated) {
        let sampled: f64 = g.logprobs.iter().copied().sum();
        assert_close(&format!("generated {:?}", g.tokens), sequence_logprob(&model, prompt, &g.tokens), sampled, 1e-4);
    }
}

// ---------------------------------------------------------------------------
// Exercise 4.5
// ---------------------------------------------------------------------------

/// Rows of '1' (allowed) and '.' (masked) as booleans.
fn pattern(rows: &[&str]) -> Vec<Vec<bool>> {
    rows.iter().map(|r| r.chars().map(|c| c == '1').collect()).collect()
}

#[test]
fn ex5_small_patterns() {
    let t = true;
    let f = false;
    assert_eq!(allowed_keys(&[vec![t, t, t]], 0), vec![pattern(&["1..", "11.", "111"])], "plain causal");
    assert_eq!(allowed_keys(&[vec![f, f, t, t]], 0), vec![pattern(&["1...", ".1..", "..1.", "..11"])], "left padding");
    assert_eq!(allowed_keys(&[vec![t, t, f, t, t]], 3), vec![pattern(&["11.1.", "11.11"])], "a cached pad");
    assert_eq!(allowed_keys(&[vec![t, f, t]], 1), vec![pattern(&["11.", "1.1"])], "a padding query sees the real keys before it and itself");
    assert_eq!(allowed_keys(&[vec![f, f]], 0), vec![pattern(&["1.", ".1"])], "an all-padding row");
    assert_eq!(allowed_keys(&[vec![t, t, t, t]], 4), vec![Vec::<Vec<bool>>::new()], "no new queries");
    let two = allowed_keys(&[vec![t, t, t, f], vec![f, t, t, t]], 2);
    assert_eq!(two, vec![pattern(&["111.", "1111"]), pattern(&[".11.", ".111"])], "a batch of two");
}

#[test]
fn ex5_the_model_attends_where_the_pattern_says() {
    // For a real query, the keys it may see, taken alone and in order, are a
    // sequence whose last logits must equal the query's logits in the batch.
    let model = model(TINY, 7);
    let (t, f) = (true, false);
    let ids = vec![
        vec![0i64, 0, 0, 11, 12, 13, 14, 15],
        vec![21, 22, 23, 24, 25, 0, 26, 27],
        vec![0, 31, 32, 33, 34, 35, 36, 0],
    ];
    let valid = vec![vec![f, f, f, t, t, t, t, t], vec![t, t, t, t, t, f, t, t], vec![f, t, t, t, t, t, t, f]];
    let (ids_t, valid_t) = batch(&ids, &valid);
    let first = 5; // positions fed in the first pass; the rest go through the cache
    let mut cache = KvCache::default();
    let chunks = [
        (0, model.forward(&ids_t.narrow(1, 0, first), &valid_t.narrow(1, 0, first), &mut cache)),
        (first as usize, model.forward(&ids_t.narrow(1, first, 8 - first), &valid_t.narrow(1, first, 8 - first), &mut cache)),
    ];
    let mut checked = 0;
    for (past, logits) in chunks {
        let s = past + logits.size()[1] as usize;
        let seen: Vec<Vec<bool>> = valid.iter().map(|row| row[..s].to_vec()).collect();
        let allowed = allowed_keys(&seen, past);
        for b in 0..ids.len() {
            for (i, sees) in allowed[b].iter().enumerate() {
                let query = past + i;
                let left_pad = !valid[b][..=query].iter().any(|&v| v);
                if !valid[b][query] && !left_pad {
                    continue; // a pad after real tokens: its logits are never used
                }
                let keys: Vec<i64> = (0..s).filter(|&j| sees[j]).map(|j| ids[b][j]).collect();
                assert!(!keys.is_empty(), "row {b}, query {query} sees no key at all");
                let alone = logits_alone(&model, &keys).get(keys.len() as i64 - 1);
                let gap = max_gap(&alone, &logits.get(b as i64).get(i as i64));
                assert!(gap < 1e-5, "row {b}, query {query}: the keys {keys:?} alone give other logits (gap {gap})");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 22);
}

// ---------------------------------------------------------------------------
// Exercise 4.6
// ---------------------------------------------------------------------------

#[test]
fn ex6_the_cache_holds_what_the_formula_says() {
    for config in [TINY, Config { vocab: 30, n_ctx: 20, d_model: 24, n_layer: 3, n_head: 2 }] {
        let model = model(config, 8);
        let (ids, valid) = batch(&[vec![0, 0, 5, 6, 7], vec![8, 9, 10, 11, 12]], &[vec![false, false, true, true, true], vec![true; 5]]);
        let mut cache = KvCache::default();
        let _ = model.forward(&ids, &valid, &mut cache);
        for step in 0..4 {
            let expected = 5 + step;
            assert_eq!(cache.len(), expected);
            let stored = cache.stored_floats();
            assert!(stored > 0, "no key or value tensors in the cache");
            assert_eq!(kv_cache_floats(&config, 2, cache.len()), stored, "{config:?} after {expected} positions");
            let next = Tensor::from_slice(&[1i64, 2]).view([2, 1]);
            let _ = model.forward(&next, &Tensor::ones([2, 1], (Kind::Bool, Device::Cpu)), &mut cache);
        }
    }
    assert_eq!(kv_cache_floats(&TINY, 0, 10), 0);
    assert_eq!(kv_cache_floats(&TINY, 3, 20), 3 * kv_cache_floats(&TINY, 1, 20));
}

#[test]
fn ex6_counts_of_a_real_generation_loop() {
    let model = model(TINY, 10);
    let ones = |n: i64| Tensor::ones([1, n], (Kind::Bool, Device::Cpu));
    for (prompt_len, new) in [(1i64, 1i64), (4, 1), (3, 6), (7, 10)] {
        let mut tokens: Vec<i64> = (0..prompt_len).map(|i| 3 + i).collect();
        // With the cache: the prompt, then one position per further token.
        let mut cache = KvCache::default();
        let mut fed_cached = prompt_len;
        let mut logits = model.forward(&Tensor::from_slice(&tokens).view([1, prompt_len]), &ones(prompt_len), &mut cache);
        // Without: the whole sequence every time.
        let mut fed_full = prompt_len;
        for k in 1..=new {
            let next = logits.select(1, -1).argmax(-1, false).int64_value(&[0]); // greedy, to have tokens
            tokens.push(next);
            if k == new {
                break; // the last token needs no pass
            }
            logits = model.forward(&Tensor::from_slice(&[next]).view([1, 1]), &ones(1), &mut cache);
            fed_cached += 1;
            let n = tokens.len() as i64;
            let full = model.logits(&Tensor::from_slice(&tokens).view([1, n]), &ones(n));
            fed_full += n;
            assert!(max_gap(&full.select(1, -1), &logits.select(1, -1)) < 1e-5, "the two loops must agree");
        }
        assert_eq!(cache.len(), prompt_len + new - 1);
        assert_eq!(recompute_vs_cache_tokens(prompt_len, new), (fed_cached, fed_full), "prompt {prompt_len}, {new} new");
    }
    assert_eq!(recompute_vs_cache_tokens(50, 0), (0, 0), "no tokens, no pass");
    for (p, n) in [(100i64, 2i64), (100, 50), (2000, 1000)] {
        let (with, without) = recompute_vs_cache_tokens(p, n);
        let (with_before, without_before) = recompute_vs_cache_tokens(p, n - 1);
        assert_eq!(with - with_before, 1, "each further token adds one position with the cache");
        assert_eq!(without - without_before, p + n - 1, "token {n} re-reads the prompt and the {} tokens before it", n - 1);
    }
}
