//! Chapter 4 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch04`.
//!
//! Everything you need is in `agentrl::tinyagent` (`Config`, `TinyAgent` with
//! `forward`, `logits` and `token_logprobs`, `KvCache`, `entropy`,
//! `Sampling`). The tests build tiny models on the CPU; none of them trains.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

use agentrl::tinyagent::{Config, TinyAgent};

// ---------------------------------------------------------------------------
// Exercise 4.1: counting parameters
// ---------------------------------------------------------------------------

/// Exercise 4.1: the number of trainable parameters of `TinyAgent::new(config, ..)`.
///
/// Count every weight and bias from the model's description, without building
/// it: token and position embeddings, `n_layer` pre-LN blocks (two
/// LayerNorms, the `qkv` projection $D \to 3D$, the output projection
/// $D \to D$, the MLP $D \to 4D \to D$, every linear layer with a bias, every
/// LayerNorm with a gain and a bias), the final LayerNorm, and an output head
/// tied to the token embedding (so it adds nothing). The number of heads does
/// not appear in the answer; make sure you can say why.
pub fn parameter_count(config: &Config) -> i64 {
    todo!("Exercise 4.1: embeddings + n_layer blocks + final LayerNorm, the head tied")
}

// ---------------------------------------------------------------------------
// Exercise 4.2: the nucleus
// ---------------------------------------------------------------------------

/// Exercise 4.2: the tokens that top-p sampling keeps.
///
/// `probs` is a distribution over the vocabulary. Sort the indices by
/// probability, largest first, breaking ties by the smaller index; then keep
/// the shortest prefix of that order whose probabilities add up to at least
/// `top_p` (add them in that order), and always at least one index. If the
/// whole vocabulary does not reach `top_p`, keep all of it. Return the kept
/// indices in that order.
///
/// This is the rule `Sampling::draw` applies to the probabilities after
/// temperature.
pub fn nucleus(probs: &[f64], top_p: f64) -> Vec<usize> {
    todo!("Exercise 4.2: the most likely indices until their mass reaches top_p")
}

// ---------------------------------------------------------------------------
// Exercise 4.3: entropy and temperature
// ---------------------------------------------------------------------------

/// Exercise 4.3: the entropy, in nats, of $\mathrm{softmax}(z / \kappa)$.
///
/// `logits` is one row $z$ of length $V$ and `temperature` is $\kappa > 0$.
/// Return $\mathcal{H} = -\sum_v \pi_\kappa(v) \ln \pi_\kappa(v)$ with
/// $\pi_\kappa = \mathrm{softmax}(z / \kappa)$, computed in `f64`. It must stay
/// finite for very small and very large $\kappa$ (think about what
/// overflows, and about $0 \ln 0$).
pub fn temperature_entropy(logits: &[f64], temperature: f64) -> f64 {
    todo!("Exercise 4.3: -sum p ln p for p = softmax(logits / temperature), computed stably")
}

// ---------------------------------------------------------------------------
// Exercise 4.4: the log-probability of a continuation
// ---------------------------------------------------------------------------

/// Exercise 4.4: $\log \pi(y \mid x)$ for a prompt $x$ and a continuation $y$.
///
/// Return $\sum_{k} \log \pi(y_k \mid x, y_{<k})$ under `model` (temperature
/// 1, no top-p), summed in `f64`. `prompt` has at least one token, and the
/// prompt and continuation together fit in `model.config.n_ctx`. An empty
/// continuation has log-probability 0.
///
/// One forward pass over the concatenation is enough; do not count the
/// log-probabilities of the prompt's own tokens.
pub fn sequence_logprob(model: &TinyAgent, prompt: &[u32], continuation: &[u32]) -> f64 {
    todo!("Exercise 4.4: the sum of log pi over the continuation's tokens")
}

// ---------------------------------------------------------------------------
// Exercise 4.5: the attention pattern
// ---------------------------------------------------------------------------

/// Exercise 4.5: which keys each new query may attend to.
///
/// `valid[b]` has one entry per position of row `b`, cached and new
/// together ($S$ entries, the same for every row), true for a real token and
/// false for padding. The first `past` positions are already in the cache, so
/// there are $T = S - \text{past}$ new queries. Return
/// $\text{allowed}[b][i][i']$ for $i < T$ and $i' < S$: query $i$ sits at
/// absolute position $\text{past} + i$ and may see key $i'$ when
/// $i' \le \text{past} + i$ and key $i'$ is a real token; it may always see
/// itself (so that a padding query still has one key, and its softmax is
/// defined).
///
/// This is the pattern `TinyAgent::forward` builds for a left-padded batch
/// and for every step that uses the cache.
pub fn allowed_keys(valid: &[Vec<bool>], past: usize) -> Vec<Vec<Vec<bool>>> {
    todo!("Exercise 4.5: causal and real, or the query itself")
}

// ---------------------------------------------------------------------------
// Exercise 4.6: what the cache stores and what it saves
// ---------------------------------------------------------------------------

/// Exercise 4.6 (a): the numbers a `KvCache` holds for `batch` rows after
/// `positions` positions (padding included) have gone through a model of
/// shape `config`: the keys and values of every layer, and nothing else
/// (ignore the small `[B, S]` validity mask).
pub fn kv_cache_floats(config: &Config, batch: i64, positions: i64) -> i64 {
    todo!("Exercise 4.6: keys and values, every layer, every head, every position")
}

/// Exercise 4.6 (b): token positions pushed through the model to generate
/// `new` tokens after a prompt of `prompt` tokens, for one sequence.
///
/// The first pass feeds the whole prompt and gives the first new token; each
/// further token needs one more pass; the last token drawn needs none. With
/// a cache each further pass feeds one position; without one it feeds the
/// whole sequence so far. Return `(with_cache, without_cache)`, each counting
/// the prompt pass. Generating no tokens needs no pass at all: `(0, 0)`.
pub fn recompute_vs_cache_tokens(prompt: i64, new: i64) -> (i64, i64) {
    todo!("Exercise 4.6: positions fed with and without a KV cache")
}
