//! Chapter 4: reference solutions. The model answers, with the numbers these
//! functions produce, are in `chapters/answers-04.md`.

use agentrl::tinyagent::{Config, TinyAgent};
use tch::{Device, Kind, Tensor};

/// Exercise 4.1: $V D + n_{ctx} D + L\,(12 D^2 + 13 D) + 2 D$.
pub fn parameter_count(config: &Config) -> i64 {
    let d = config.d_model;
    let embeddings = config.vocab * d + config.n_ctx * d;
    let layer_norm = 2 * d; // gain and bias
    let linear = |inputs: i64, outputs: i64| inputs * outputs + outputs; // weight and bias
    let block = 2 * layer_norm + linear(d, 3 * d) + linear(d, d) + linear(d, 4 * d) + linear(4 * d, d);
    embeddings + config.n_layer * block + layer_norm // the head reuses the token embedding
}

/// Exercise 4.2: sort by probability (ties by index), keep until the mass reaches `top_p`.
pub fn nucleus(probs: &[f64], top_p: f64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    let mut mass = 0.0;
    let mut kept = 0;
    while kept < order.len() && (kept == 0 || mass < top_p) {
        mass += probs[order[kept]];
        kept += 1;
    }
    order.truncate(kept);
    order
}

/// Exercise 4.3: shift by the largest logit before exponentiating; $0 \ln 0 = 0$.
pub fn temperature_entropy(logits: &[f64], temperature: f64) -> f64 {
    let top = logits.iter().map(|&l| l as f64).fold(f64::NEG_INFINITY, f64::max);
    let scaled: Vec<f64> = logits.iter().map(|&l| (l as f64 - top) / temperature).collect(); // all <= 0
    let log_total = scaled.iter().map(|s| s.exp()).sum::<f64>().ln(); // >= ln 1 = 0
    scaled
        .iter()
        .map(|s| {
            let logp = s - log_total;
            let p = logp.exp();
            if p == 0.0 { 0.0 } else { -p * logp }
        })
        .sum()
}

/// Exercise 4.4: one pass over prompt + continuation, then the last `len(continuation)` next-token log-probs.
pub fn sequence_logprob(model: &TinyAgent, prompt: &[u32], continuation: &[u32]) -> f64 {
    if continuation.is_empty() {
        return 0.0;
    }
    let _guard = tch::no_grad_guard();
    let ids: Vec<i64> = prompt.iter().chain(continuation).map(|&t| t as i64).collect();
    let n = ids.len() as i64;
    let device = model.device();
    let ids = Tensor::from_slice(&ids).view([1, n]).to_device(device);
    let valid = Tensor::ones([1, n], (Kind::Bool, device));
    let logprobs = model.token_logprobs(&ids, &valid); // [1, n - 1]: log pi(x_{t+1} | x_<=t)
    // The continuation's k-th token is predicted at position len(prompt) - 1 + k.
    let tail = logprobs.view([-1]).narrow(0, prompt.len() as i64 - 1, continuation.len() as i64);
    tail.to_device(Device::Cpu).sum(Kind::Double).double_value(&[])
}

/// Exercise 4.5: $i' \le \text{past} + i$ and `valid[b][i']`, or $i' = \text{past} + i$.
pub fn allowed_keys(valid: &[Vec<bool>], past: usize) -> Vec<Vec<Vec<bool>>> {
    valid
        .iter()
        .map(|row| {
            let s = row.len();
            (past..s).map(|query| (0..s).map(|key| (key <= query && row[key]) || key == query).collect()).collect()
        })
        .collect()
}

/// Exercise 4.6 (a): a key and a value of width $D$ ($n_{\text{head}}$ heads of $d_{\text{head}} = D / n_{\text{head}}$)
/// per layer, row and position.
pub fn kv_cache_floats(config: &Config, batch: i64, positions: i64) -> i64 {
    2 * config.n_layer * batch * positions * config.d_model
}

/// Exercise 4.6 (b): with a cache $P + (N - 1)$; without,
/// $\sum_{k=0}^{N-1} (P + k) = N P + N (N - 1) / 2$.
pub fn recompute_vs_cache_tokens(prompt: i64, new: i64) -> (i64, i64) {
    if new == 0 {
        return (0, 0);
    }
    (prompt + new - 1, new * prompt + new * (new - 1) / 2)
}
