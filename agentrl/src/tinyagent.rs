//! Chapter 4: TinyAgent, a small decoder-only transformer in tch, and what a
//! policy needs from a language model: log-probabilities of given tokens,
//! entropy, sampling with temperature and top-p from a seeded generator, and
//! batched generation with a KV cache.
//!
//! Shapes in comments: `B` sequences in a batch, `T` new positions, `S` key
//! positions (cached + new), `D` the model width, `n_head` heads of width
//! `d_head = D / n_head`, `V` the vocabulary.

use crate::book::REAL;
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::path::Path;
use tch::nn;
use tch::{Device, Kind, Tensor};

// ANCHOR: config
/// The shape of a TinyAgent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub vocab: i64,
    /// The longest context, in tokens (learned position embeddings).
    pub n_ctx: i64,
    pub d_model: i64,
    pub n_layer: i64,
    pub n_head: i64,
}

/// CUDA when libtorch sees a GPU, the CPU otherwise.
pub fn device() -> Device {
    Device::cuda_if_available()
}
// ANCHOR_END: config

// ANCHOR: block
/// A pre-LN transformer block: `x + attn(ln(x))`, then `x + mlp(ln(x))`.
#[derive(Debug)]
struct Block {
    ln1: nn::LayerNorm,
    qkv: nn::Linear,
    proj: nn::Linear,
    ln2: nn::LayerNorm,
    up: nn::Linear,
    down: nn::Linear,
    n_head: i64,
}

impl Block {
    fn new(p: nn::Path, d: i64, n_head: i64) -> Block {
        let c = nn::LinearConfig {
            ws_init: nn::Init::Randn {
                mean: 0.0,
                stdev: 0.02,
            },
            ..Default::default()
        };
        Block {
            ln1: nn::layer_norm(&p / "ln1", vec![d], Default::default()),
            qkv: nn::linear(&p / "qkv", d, 3 * d, c),
            proj: nn::linear(&p / "proj", d, d, c),
            ln2: nn::layer_norm(&p / "ln2", vec![d], Default::default()),
            up: nn::linear(&p / "up", d, 4 * d, c),
            down: nn::linear(&p / "down", 4 * d, d, c),
            n_head,
        }
    }

    /// `x`: [B, T, D]; `allowed`: [B, 1, T, S], or `None` for plain causal
    /// attention (no padding to hide, and no cache unless T = 1); `past`: this layer's cached keys and values,
    /// whose first `filled` = S - T positions are in use, extended in place.
    fn forward(
        &self,
        x: &Tensor,
        allowed: Option<&Tensor>,
        past: &mut Option<(Tensor, Tensor)>,
        filled: i64,
    ) -> Tensor {
        let x = x + self.attention(&x.apply(&self.ln1), allowed, past, filled);
        let hidden = x.apply(&self.ln2).apply(&self.up).gelu("none"); // [B, T, 4D]
        &x + hidden.apply(&self.down)
    }

    /// Multi-head causal self-attention of the normalised `x` [B, T, D], the
    /// output projection included: [B, T, D].
    fn attention(
        &self,
        x: &Tensor,
        allowed: Option<&Tensor>,
        past: &mut Option<(Tensor, Tensor)>,
        filled: i64,
    ) -> Tensor {
        let (b, t, d) = x.size3().unwrap();
        let heads = |z: Tensor| z.view([b, t, self.n_head, d / self.n_head]).transpose(1, 2); // [B, n_head, T, d_head]
        let qkv = x.apply(&self.qkv).split(d, -1); // 3 × [B, T, D]
        let (q, k, v) = (
            heads(qkv[0].shallow_clone()),
            heads(qkv[1].shallow_clone()),
            heads(qkv[2].shallow_clone()),
        );
        let (k, v) = append(past, k, v, filled); // [B, n_head, S, d_head] each
                                                 // softmax(q kᵀ / √d_head) v over the allowed keys, every head at once, in one fused kernel.
        let attended = match allowed {
            Some(mask) => Tensor::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                Some(mask),
                0.0,
                false,
                None,
                false,
            ),
            // Causal: query i sees keys up to i (a single new query sees all of them).
            None => Tensor::scaled_dot_product_attention::<Tensor>(
                &q,
                &k,
                &v,
                None,
                0.0,
                t > 1,
                None,
                false,
            ),
        }; // [B, n_head, T, d_head]
        let attended = attended.transpose(1, 2).reshape([b, t, d]); // [B, T, D]: the heads side by side
        attended.apply(&self.proj)
    }
}
// ANCHOR_END: block

// ANCHOR: reference_attention
impl Block {
    /// The same attention as [`Block::attention`], written out head by head
    /// from its definition, for checking the fused kernel (the model never
    /// calls it). `x`: [B, T, D], normalised; `valid`: [B, T], false on
    /// padding; no cache. Returns [B, T, D].
    fn attention_reference(&self, x: &Tensor, valid: &Tensor) -> Tensor {
        let (b, t, d) = x.size3().unwrap();
        let d_head = d / self.n_head;
        // Query i may see key i' if i' <= i and i' is a real token, and always itself.
        let query = Tensor::arange(t, (Kind::Int64, x.device())).view([t, 1]);
        let key = Tensor::arange(t, (Kind::Int64, x.device())).view([1, t]);
        let seen = key
            .le_tensor(&query)
            .unsqueeze(0)
            .logical_and(&valid.unsqueeze(1))
            .logical_or(&key.eq_tensor(&query).unsqueeze(0)); // [B, T, T]
        let mask = Tensor::zeros([b, t, t], (x.kind(), x.device()))
            .masked_fill(&seen.logical_not(), f64::NEG_INFINITY); // [B, T, T]: M, 0 or -inf
        let qkv = x.apply(&self.qkv); // [B, T, 3D]: X W_Q + b_Q, X W_K + b_K, X W_V + b_V side by side
        let heads: Vec<Tensor> = (0..self.n_head)
            .map(|u| {
                let q = qkv.narrow(2, u * d_head, d_head); // [B, T, d_head]: Q_u, head u's columns of the queries
                let k = qkv.narrow(2, d + u * d_head, d_head); // [B, T, d_head]: K_u
                let v = qkv.narrow(2, 2 * d + u * d_head, d_head); // [B, T, d_head]: V_u
                let scores = q.matmul(&k.transpose(1, 2)) / (d_head as f64).sqrt() + &mask; // [B, T, T]
                scores.softmax(-1, x.kind()).matmul(&v) // [B, T, d_head]: head_u, each row a weighted mean of values
            })
            .collect();
        Tensor::cat(&heads, 2).apply(&self.proj) // [B, T, D]: (head_1 ‖ … ‖ head_n_head) W_O + b_O
    }
}
// ANCHOR_END: reference_attention

// ANCHOR: cache
/// Write the new keys and values `k`, `v` [B, n_head, T, d_head] after the `filled`
/// positions in use of a layer's cache and return the keys and values of all
/// S = filled + T positions. Sampling appends one position at a time, so the
/// cache keeps spare room and writes into it, instead of copying everything
/// it holds at every step; when gradients flow (`k` requires them) it is
/// rebuilt by concatenation, which autograd can follow.
fn append(
    past: &mut Option<(Tensor, Tensor)>,
    k: Tensor,
    v: Tensor,
    filled: i64,
) -> (Tensor, Tensor) {
    let (b, h, t, e) = k.size4().unwrap();
    let s = filled + t;
    let (k_all, v_all) = match past.as_ref() {
        None => (k, v),
        Some((k_buf, v_buf)) if !k.requires_grad() && k_buf.size()[2] >= s => {
            k_buf.narrow(2, filled, t).copy_(&k);
            v_buf.narrow(2, filled, t).copy_(&v);
            return (k_buf.narrow(2, 0, s), v_buf.narrow(2, 0, s));
        }
        Some((k_buf, v_buf)) if !k.requires_grad() => {
            let room = (2 * s).max(64);
            let (k_new, v_new) = (
                k.new_zeros([b, h, room, e], (k.kind(), k.device())),
                v.new_zeros([b, h, room, e], (v.kind(), v.device())),
            );
            k_new
                .narrow(2, 0, filled)
                .copy_(&k_buf.narrow(2, 0, filled));
            v_new
                .narrow(2, 0, filled)
                .copy_(&v_buf.narrow(2, 0, filled));
            *past = Some((k_new, v_new));
            return append(past, k, v, filled);
        }
        Some((k_buf, v_buf)) => (
            Tensor::cat(&[k_buf.narrow(2, 0, filled), k], 2),
            Tensor::cat(&[v_buf.narrow(2, 0, filled), v], 2),
        ),
    };
    *past = Some((k_all.shallow_clone(), v_all.shallow_clone()));
    (k_all, v_all)
}

/// Keys and values of every layer for the positions seen so far (in buffers
/// that may have room for more), and which of those positions are real
/// tokens (not padding), kept on the host: the positions and masks of the
/// next tokens are worked out from it by counting, not by tensor operations
/// over every position.
#[derive(Debug, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    valid: Vec<Vec<bool>>, // [B][S]
    /// The real tokens of each row that the cache holds, in order (filled in
    /// by [`TinyAgent::generate_from`]), so that a caller can check that a new
    /// context extends them before reusing the cache.
    pub tokens: Vec<Vec<u32>>,
}

impl KvCache {
    /// Keep only the rows `keep` (indices into the current rows), in that
    /// order: e.g. the episodes that are still running.
    pub fn keep_rows(&mut self, keep: &[usize]) {
        let index = Tensor::from_slice(&keep.iter().map(|&i| i as i64).collect::<Vec<_>>());
        for (k, v) in self.layers.iter_mut().flatten() {
            let index = index.to_device(k.device());
            (*k, *v) = (k.index_select(0, &index), v.index_select(0, &index)); // [B', n_head, S, d_head]
        }
        self.valid = keep
            .iter()
            .map(|&i| std::mem::take(&mut self.valid[i]))
            .collect();
        self.tokens = keep
            .iter()
            .map(|&i| std::mem::take(&mut self.tokens[i]))
            .collect();
    }

    /// Cached positions (padding included).
    pub fn len(&self) -> i64 {
        self.valid.first().map_or(0, |row| row.len() as i64)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Numbers held in the cached keys and values of the positions seen, over all layers.
    pub fn stored_floats(&self) -> i64 {
        let per_position = |t: &Tensor| t.numel() as i64 / t.size()[2];
        self.layers
            .iter()
            .flatten()
            .map(|(k, v)| (per_position(k) + per_position(v)) * self.len())
            .sum()
    }
}
// ANCHOR_END: cache

// ANCHOR: mask
/// The additive mask M (0 where a query may see a key, −∞ where not) of the
/// last `t` of S positions, given which are real tokens (`valid` [B][S], the
/// first S − t in the cache): query i, at position S − t + i, sees the real
/// keys at positions <= S − t + i, and always itself. [B, 1, T, S] in the
/// weights' `kind`, or `None` when that is plain causal attention: no padding
/// before a real token and nothing cached, or one new query and no padding.
fn attention_mask(valid: &[Vec<bool>], t: i64, kind: Kind, device: Device) -> Option<Tensor> {
    let (b, s) = (valid.len() as i64, valid.first().map_or(0, Vec::len) as i64);
    let past = s - t;
    let padded = |row: &[bool]| row.iter().any(|&real| !real);
    let pad_then_real = |row: &[bool]| row.windows(2).any(|w| !w[0] && w[1]);
    if (past == 0 && !valid.iter().any(|row| pad_then_real(row)))
        || (t == 1 && !valid.iter().any(|row| padded(row)))
    {
        return None;
    }
    if t == 1 {
        // One query: a key mask, the query's own position always seen.
        let keys: Vec<f64> = valid
            .iter()
            .flat_map(|row| {
                row.iter().enumerate().map(move |(j, &real)| {
                    if real || j as i64 == s - 1 {
                        0.0
                    } else {
                        f64::NEG_INFINITY
                    }
                })
            })
            .collect();
        return Some(
            Tensor::from_slice(&keys)
                .view([b, 1, 1, s])
                .to_kind(kind)
                .to_device(device),
        );
    }
    let real = Tensor::from_slice(&valid.concat())
        .view([b, 1, s])
        .to_device(device); // [B, 1, S]
    let query = Tensor::arange_start(past, s, (Kind::Int64, device)).view([t, 1]);
    let key = Tensor::arange(s, (Kind::Int64, device)).view([1, s]);
    let seen = key
        .le_tensor(&query)
        .unsqueeze(0)
        .logical_and(&real)
        .logical_or(&key.eq_tensor(&query).unsqueeze(0)); // [B, T, S]
    Some(
        Tensor::zeros([b, 1, t, s], (kind, device))
            .masked_fill(&seen.logical_not().unsqueeze(1), f64::NEG_INFINITY),
    ) // [B, 1, T, S]
}
// ANCHOR_END: mask

/// Which computation [`TinyAgent::attention`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// libtorch's fused scaled-dot-product kernel, as in the model's forward pass.
    Fused,
    /// The definition written out head by head (`Block::attention_reference`).
    Reference,
}

/// The model: token and position embeddings, blocks, a final LayerNorm and an
/// output head tied to the token embedding.
#[derive(Debug)]
pub struct TinyAgent {
    pub vs: nn::VarStore,
    pub config: Config,
    wte: nn::Embedding,
    wpe: nn::Embedding,
    blocks: Vec<Block>,
    ln_f: nn::LayerNorm,
}

impl TinyAgent {
    /// A freshly initialised model; the weights come from libtorch's generator
    /// (seeded by `book::setup`).
    pub fn new(config: Config, device: Device) -> TinyAgent {
        let mut vs = nn::VarStore::new(device);
        vs.set_kind(REAL); // the weights are drawn and kept in 64 bits
        let root = vs.root();
        let e = nn::EmbeddingConfig {
            ws_init: nn::Init::Randn {
                mean: 0.0,
                stdev: 0.02,
            },
            ..Default::default()
        };
        let wte = nn::embedding(&root / "wte", config.vocab, config.d_model, e);
        let wpe = nn::embedding(&root / "wpe", config.n_ctx, config.d_model, e);
        let blocks = (0..config.n_layer)
            .map(|i| Block::new(&root / "blocks" / i, config.d_model, config.n_head))
            .collect();
        let ln_f = nn::layer_norm(&root / "ln_f", vec![config.d_model], Default::default());
        TinyAgent {
            vs,
            config,
            wte,
            wpe,
            blocks,
            ln_f,
        }
    }

    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// Trainable numbers, the tied head counted once.
    pub fn parameter_count(&self) -> i64 {
        self.vs
            .trainable_variables()
            .iter()
            .map(|t| t.numel() as i64)
            .sum()
    }

    /// A hash of the configuration and of every weight's name, shape and bits:
    /// equal for two models exactly when they compute the same thing (up to a
    /// hash collision). It names the starting point of a stored training run
    /// ([`crate::book::reuse`]).
    pub fn fingerprint(&self) -> u64 {
        use crate::book::{fnv1a, FNV_START};
        let mut hash = fnv1a(format!("{:?}", self.config).as_bytes(), FNV_START);
        let mut named: Vec<(String, Tensor)> = self.vs.variables().into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, tensor) in named {
            hash = fnv1a(format!("{name} {:?}", tensor.size()).as_bytes(), hash);
            let values = Vec::<f64>::try_from(tensor.to_kind(Kind::Double).flatten(0, -1))
                .expect("weights as numbers");
            for v in values {
                hash = fnv1a(&v.to_bits().to_le_bytes(), hash);
            }
        }
        hash
    }

    // ANCHOR: forward
    /// Logits for the new tokens `ids` [B, T] given everything in `cache`;
    /// `valid` [B, T] marks real tokens (false on padding). The cache grows by T.
    pub fn forward(&self, ids: &Tensor, valid: &Tensor, cache: &mut KvCache) -> Tensor {
        self.head(&self.hidden(ids, valid, cache)) // [B, T, V]
    }

    /// The output head, tied to the token embedding: [B, T, D] -> [B, T, V].
    pub fn head(&self, hidden: &Tensor) -> Tensor {
        hidden.matmul(&self.wte.ws.tr())
    }

    /// The final hidden states (after the last LayerNorm) of the new tokens: [B, T, D].
    pub fn hidden(&self, ids: &Tensor, valid: &Tensor, cache: &mut KvCache) -> Tensor {
        let (b, t) = ids.size2().unwrap();
        let past = cache.len();
        let new = Vec::<bool>::try_from(valid.to_device(Device::Cpu).reshape([-1]))
            .expect("a boolean mask"); // [B·T]
        cache
            .valid
            .resize_with(b as usize, || vec![true; past as usize]);
        // A token's position counts the real tokens before it, so left padding does not shift it.
        let mut positions = Vec::with_capacity((b * t) as usize);
        for (row, seen) in cache.valid.iter_mut().enumerate() {
            let mut count = seen.iter().filter(|&&real| real).count() as i64;
            for &real in &new[row * t as usize..(row + 1) * t as usize] {
                count += real as i64;
                positions.push((count - 1).max(0));
                seen.push(real);
            }
        }
        let positions = Tensor::from_slice(&positions)
            .view([b, t])
            .to_device(ids.device()); // [B, T]
        let allowed = attention_mask(&cache.valid, t, self.wte.ws.kind(), ids.device()); // [B, 1, T, S] or None
        let mut x = ids.apply(&self.wte) + positions.apply(&self.wpe); // [B, T, D]
        cache.layers.resize_with(self.blocks.len(), || None);
        for (block, past_kv) in self.blocks.iter().zip(cache.layers.iter_mut()) {
            x = block.forward(&x, allowed.as_ref(), past_kv, past);
        }
        x.apply(&self.ln_f) // [B, T, D]
    }
    // ANCHOR_END: forward

    // ANCHOR: hidden_with
    /// The final hidden states [R, C, D] of rows `ids` [R, C] whose positions
    /// [R, C] and attention mask `allowed` [R, 1, C, C] (true where a query may
    /// see a key) the caller chooses, no cache: the forward pass of packed
    /// rows, several sequences to a row (Chapter 14).
    pub fn hidden_with(&self, ids: &Tensor, positions: &Tensor, allowed: &Tensor) -> Tensor {
        let mut x = ids.apply(&self.wte) + positions.apply(&self.wpe); // [R, C, D]
        for block in &self.blocks {
            x = block.forward(&x, Some(allowed), &mut None, 0);
        }
        x.apply(&self.ln_f) // [R, C, D]
    }
    // ANCHOR_END: hidden_with

    /// The attention of block `layer` (its projections included, not its
    /// residual connection) on `x` [B, T, D], the block's normalised input,
    /// for sequences whose real tokens `valid` [B, T] marks, without a cache:
    /// computed by the fused kernel the model uses, or by the reference written
    /// out head by head. Returns [B, T, D].
    pub fn attention(&self, layer: usize, x: &Tensor, valid: &Tensor, kernel: Attention) -> Tensor {
        let block = &self.blocks[layer];
        match kernel {
            Attention::Fused => {
                let rows = Vec::<bool>::try_from(valid.to_device(Device::Cpu).reshape([-1]))
                    .expect("a boolean mask");
                let rows: Vec<Vec<bool>> = rows
                    .chunks(x.size()[1] as usize)
                    .map(<[bool]>::to_vec)
                    .collect();
                block.attention(
                    x,
                    attention_mask(&rows, x.size()[1], x.kind(), x.device()).as_ref(),
                    &mut None,
                    0,
                )
            }
            Attention::Reference => block.attention_reference(x, valid),
        }
    }

    /// Logits for whole sequences, no cache kept.
    pub fn logits(&self, ids: &Tensor, valid: &Tensor) -> Tensor {
        self.forward(ids, valid, &mut KvCache::default())
    }

    // ANCHOR: logprobs
    /// log π(x_{i+1} | x_{≤i}) for every next token of `ids` [B, T]: [B, T - 1].
    pub fn token_logprobs(&self, ids: &Tensor, valid: &Tensor) -> Tensor {
        let (_, t) = ids.size2().unwrap();
        let logits = self.logits(ids, valid).narrow(1, 0, t - 1); // [B, T-1, V]
        let next = ids.narrow(1, 1, t - 1).unsqueeze(-1); // [B, T-1, 1]
        logits
            .log_softmax(-1, REAL)
            .gather(-1, &next, false)
            .squeeze_dim(-1)
    }
    // ANCHOR_END: logprobs

    /// Write the weights as safetensors.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        self.vs
            .save(path)
            .map_err(|err| format!("cannot save {}: {err}", path.display()))
    }

    /// A model of shape `config` with the weights in `path`.
    pub fn load(config: Config, path: &Path, device: Device) -> Result<TinyAgent, String> {
        // The random initialisation is overwritten, but it draws from libtorch's one
        // generator: without the turn, a load on one thread would take numbers from
        // a seeded stretch on another (Chapter 16 grows a teacher while a second
        // thread loads the base model) and change what that stretch draws.
        let mut model = {
            let _turn = crate::book::generator_turn();
            TinyAgent::new(config, device)
        };
        model
            .vs
            .load(path)
            .map_err(|err| format!("cannot load {}: {err}", path.display()))?;
        Ok(model)
    }
}

// ANCHOR: entropy
/// The entropy of the softmax of `logits` [.., V]: [..], in nats.
pub fn entropy(logits: &Tensor) -> Tensor {
    let logp = logits.log_softmax(-1, REAL);
    -(logp.exp() * &logp).sum_dim_intlist(-1, false, REAL)
}
// ANCHOR_END: entropy

// ANCHOR: sampling
/// How the next token is drawn from the logits.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// Logits are divided by this; 0 means greedy (argmax).
    pub temperature: f64,
    /// Keep the most likely tokens until their probability reaches `top_p`.
    pub top_p: f64,
}

impl Sampling {
    /// Plain sampling from the model's distribution: what policy gradients assume.
    pub const PURE: Sampling = Sampling {
        temperature: 1.0,
        top_p: 1.0,
    };
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        top_p: 1.0,
    };

    /// Draw one token from `logits` (one row, length V). Returns the token and
    /// its log-probability under the distribution actually sampled from (after
    /// temperature and top-p); with `PURE` that is the model's own log π.
    pub fn draw(&self, logits: &[f64], rng: &mut StdRng) -> (u32, f64) {
        let best =
            (0..logits.len()).fold(0, |best, i| if logits[i] > logits[best] { i } else { best });
        if self.temperature == 0.0 {
            return (best as u32, 0.0);
        }
        let weights: Vec<f64> = logits
            .iter()
            .map(|&l| ((l - logits[best]) / self.temperature).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        if self.top_p >= 1.0 {
            // The whole vocabulary: invert the cumulative distribution in token order.
            let u = rng.random::<f64>() * total;
            let mut acc = 0.0;
            for (i, &w) in weights.iter().enumerate() {
                acc += w;
                if u < acc || i + 1 == weights.len() {
                    return (i as u32, (w / total).ln());
                }
            }
        }
        let mut order: Vec<usize> = (0..logits.len()).collect();
        // Most likely first; equal probabilities in index order, so the draw is reproducible.
        order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
        let (mut kept, mut mass) = (0, 0.0);
        while kept < order.len() && (kept == 0 || mass < self.top_p) {
            mass += weights[order[kept]] / total;
            kept += 1;
        }
        let u = rng.random::<f64>() * mass;
        let mut acc = 0.0;
        for &i in &order[..kept] {
            let p = weights[i] / total;
            acc += p;
            if u < acc || i == order[kept - 1] {
                return (i as u32, (p / mass).ln());
            }
        }
        unreachable!("the loop returns at the last kept token")
    }
}
// ANCHOR_END: sampling

/// One generated continuation: the tokens (a stop token included, if one was
/// drawn) and each one's sampling log-probability.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Generated {
    pub tokens: Vec<u32>,
    pub logprobs: Vec<f64>,
}

fn ids_tensor(rows: &[Vec<i64>], device: Device) -> Tensor {
    let width = rows[0].len() as i64;
    Tensor::from_slice(&rows.concat())
        .view([rows.len() as i64, width])
        .to_device(device)
}

/// A row of token ids left-padded to `width`, and its mask of real tokens.
fn left_pad(row: &[u32], width: usize) -> (Vec<i64>, Vec<i64>) {
    let fill = width - row.len();
    let ids = std::iter::repeat_n(0, fill)
        .chain(row.iter().map(|&t| t as i64))
        .collect();
    let valid = std::iter::repeat_n(0, fill)
        .chain(std::iter::repeat_n(1, row.len()))
        .collect();
    (ids, valid)
}

/// Sample the next token of every row that is not done from the logits of its
/// last position (`logits`: [B, T, V]); returns the tokens to feed next and 1
/// where that token is real (0 for rows that were already done).
fn sample_rows(
    logits: &Tensor,
    out: &mut [Generated],
    done: &mut [bool],
    stop: &[u32],
    sampling: Sampling,
    rng: &mut StdRng,
) -> (Vec<i64>, Vec<i64>) {
    let b = out.len();
    let last = logits.select(1, -1).to_kind(REAL).to_device(Device::Cpu); // [B, V]
    let rows = Vec::<f64>::try_from(last.reshape([-1])).expect("logits are real numbers");
    let v = rows.len() / b;
    let mut next = vec![0i64; b]; // padding for rows that were already done
    let mut fresh = vec![0i64; b]; // 1 where `next` is a real token
    for row in 0..b {
        if !done[row] {
            let (token, logprob) = sampling.draw(&rows[row * v..(row + 1) * v], rng);
            out[row].tokens.push(token);
            out[row].logprobs.push(logprob);
            done[row] = stop.contains(&token);
            (next[row], fresh[row]) = (token as i64, 1);
        }
    }
    (next, fresh)
}

impl TinyAgent {
    // ANCHOR: generate
    /// Continue every prompt by up to `max_new` tokens, stopping a row at any
    /// token of `stop`. Prompts are left-padded into one batch. With
    /// `use_cache`, each step feeds only the B new tokens and reuses the cached
    /// keys and values; without it, each step recomputes the whole sequence.
    pub fn generate(
        &self,
        prompts: &[Vec<u32>],
        max_new: usize,
        stop: &[u32],
        sampling: Sampling,
        rng: &mut StdRng,
        use_cache: bool,
    ) -> Vec<Generated> {
        if use_cache {
            return self.generate_from(
                &mut KvCache::default(),
                prompts,
                max_new,
                stop,
                sampling,
                rng,
            );
        }
        let _guard = tch::no_grad_guard();
        let (b, device) = (prompts.len(), self.device());
        let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let (mut ids, mut valid): (Vec<Vec<i64>>, Vec<Vec<i64>>) =
            prompts.iter().map(|p| left_pad(p, width)).unzip();
        let mut out = vec![Generated::default(); b];
        let mut done = vec![false; b];
        for step in 0..max_new {
            let hidden = self.hidden(
                &ids_tensor(&ids, device),
                &ids_tensor(&valid, device).to_kind(Kind::Bool),
                &mut KvCache::default(),
            ); // [B, T, D]
            let logits = self.head(&hidden.narrow(1, -1, 1)); // [B, 1, V]: only the last position is sampled from
            let (next, fresh) = sample_rows(&logits, &mut out, &mut done, stop, sampling, rng);
            if done.iter().all(|&d| d) || step + 1 == max_new {
                break;
            }
            for row in 0..b {
                ids[row].push(next[row]);
                valid[row].push(fresh[row]);
            }
        }
        out
    }

    /// [`generate`](Self::generate) with a KV cache that may already hold
    /// earlier tokens of every row: `new` (one chunk per row, left-padded into
    /// one batch) is appended to what the cache holds, then up to `max_new`
    /// tokens are sampled. An agent's next turn thus feeds only the tool output
    /// and the tokens sampled last, not the whole conversation again. The cache
    /// records the real tokens it holds in `cache.tokens`.
    pub fn generate_from(
        &self,
        cache: &mut KvCache,
        new: &[Vec<u32>],
        max_new: usize,
        stop: &[u32],
        sampling: Sampling,
        rng: &mut StdRng,
    ) -> Vec<Generated> {
        let _guard = tch::no_grad_guard();
        let (b, device) = (new.len(), self.device());
        cache.tokens.resize_with(b, Vec::new);
        let width = new.iter().map(Vec::len).max().unwrap_or(0);
        let (ids, valid): (Vec<Vec<i64>>, Vec<Vec<i64>>) =
            new.iter().map(|p| left_pad(p, width)).unzip();
        for (row, chunk) in cache.tokens.iter_mut().zip(new) {
            row.extend(chunk);
        }
        let mut out = vec![Generated::default(); b];
        let mut done = vec![false; b];
        // Only the last position is sampled from, so only it goes through the head.
        let last_logits = |hidden: Tensor| self.head(&hidden.narrow(1, -1, 1)); // [B, 1, V]
        let mut logits = last_logits(self.hidden(
            &ids_tensor(&ids, device),
            &ids_tensor(&valid, device).to_kind(Kind::Bool),
            cache,
        ));
        for step in 0..max_new {
            let (next, fresh) = sample_rows(&logits, &mut out, &mut done, stop, sampling, rng);
            if done.iter().all(|&d| d) || step + 1 == max_new {
                break; // nothing left to sample: no need for another forward pass
            }
            for row in (0..b).filter(|&row| fresh[row] == 1) {
                cache.tokens[row].push(next[row] as u32);
            }
            let step_ids = Tensor::from_slice(&next)
                .view([b as i64, 1])
                .to_device(device); // [B, 1]
            let step_valid = Tensor::from_slice(&fresh)
                .view([b as i64, 1])
                .to_device(device)
                .to_kind(Kind::Bool);
            logits = last_logits(self.hidden(&step_ids, &step_valid, cache));
        }
        out
    }
    // ANCHOR_END: generate
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn tiny() -> TinyAgent {
        let _turn = crate::book::seeded(7);
        TinyAgent::new(
            Config {
                vocab: 50,
                n_ctx: 64,
                d_model: 32,
                n_layer: 2,
                n_head: 4,
            },
            Device::Cpu,
        )
    }

    // ANCHOR: reference_test
    #[test]
    fn the_fused_kernel_computes_multi_head_attention() {
        let model = tiny(); // D = 32, n_head = 4, d_head = 8
                            // Larger query, key and value weights than at initialisation, so that the
                            // attention weights are far from uniform and a wrong scale or mask would show.
        for (name, mut w) in model.vs.variables() {
            if name.ends_with("qkv.weight") {
                tch::no_grad(|| w *= 10.0);
            }
        }
        let mut rng = StdRng::seed_from_u64(5);
        let (b, t, d) = (3, 7, 32);
        let xs: Vec<f64> = (0..b * t * d)
            .map(|_| rng.random_range(-2.0..2.0))
            .collect();
        let x = Tensor::from_slice(&xs).view([b, t, d]).to_kind(REAL); // [B, T, D]
                                                                       // Row 0 has no padding, row 1 is left-padded (as in generation), row 2 right-padded (as in pretraining).
        let valid = Tensor::from_slice(&[
            1i64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0,
        ])
        .view([b, t])
        .to_kind(Kind::Bool); // [B, T]
                              // The whole batch (an explicit mask) and row 0 alone (the kernel's causal flag, no mask).
        for (x, valid) in [
            (x.shallow_clone(), valid.shallow_clone()),
            (x.narrow(0, 0, 1), valid.narrow(0, 0, 1)),
        ] {
            for layer in 0..2 {
                let fused = model.attention(layer, &x, &valid, Attention::Fused); // [B, T, D]
                let reference = model.attention(layer, &x, &valid, Attention::Reference); // [B, T, D]
                                                                                          // Compared at the real tokens: nothing reads a padding position's output.
                let gap = ((&fused - &reference).abs() * valid.unsqueeze(-1))
                    .max()
                    .double_value(&[]);
                assert!(
                    gap < 1e-10,
                    "layer {layer}: fused and reference attention differ by {gap}"
                );
                assert!(
                    reference.abs().max().double_value(&[]) > 0.1,
                    "the outputs are not all near zero"
                );
            }
        }
    }
    // ANCHOR_END: reference_test

    #[test]
    fn cached_logits_match_recomputed_logits() {
        let model = tiny();
        let ids = Tensor::from_slice(&[5i64, 6, 7, 8, 9, 10, 0, 0, 11, 12, 13, 14]).view([2, 6]);
        let valid = Tensor::from_slice(&[1i64, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1])
            .view([2, 6])
            .to_kind(Kind::Bool);
        let full = model.logits(&ids, &valid); // [2, 6, V]
        let mut cache = KvCache::default();
        let mut pieces =
            vec![model.forward(&ids.narrow(1, 0, 3), &valid.narrow(1, 0, 3), &mut cache)];
        for i in 3..6 {
            pieces.push(model.forward(&ids.narrow(1, i, 1), &valid.narrow(1, i, 1), &mut cache));
        }
        let stepped = Tensor::cat(&pieces, 1);
        let gap = (&full - &stepped).abs().max().double_value(&[]);
        assert!(gap < 1e-5, "cache and recomputation differ by {gap}");
        assert_eq!(cache.len(), 6);
    }

    #[test]
    fn left_padding_does_not_change_a_sequence() {
        let model = tiny();
        let alone = model.logits(
            &Tensor::from_slice(&[11i64, 12, 13, 14]).view([1, 4]),
            &Tensor::ones([1, 4], (Kind::Bool, Device::Cpu)),
        );
        let padded = model.logits(
            &Tensor::from_slice(&[0i64, 0, 11, 12, 13, 14]).view([1, 6]),
            &Tensor::from_slice(&[0i64, 0, 1, 1, 1, 1])
                .view([1, 6])
                .to_kind(Kind::Bool),
        );
        let gap = (alone - padded.narrow(1, 2, 4))
            .abs()
            .max()
            .double_value(&[]);
        assert!(gap < 1e-5, "padding changed the logits by {gap}");
    }

    #[test]
    fn sampling_follows_the_distribution_and_top_p_cuts_the_tail() {
        let logits = [0.0f64, (2.0f64).ln(), (7.0f64).ln()]; // probabilities 0.1, 0.2, 0.7
        let mut rng = StdRng::seed_from_u64(1);
        let n = 20_000;
        let mut counts = [0usize; 3];
        for _ in 0..n {
            let (token, logprob) = Sampling::PURE.draw(&logits, &mut rng);
            counts[token as usize] += 1;
            let expected = [0.1f64, 0.2, 0.7][token as usize].ln();
            assert!((logprob - expected).abs() < 1e-5);
        }
        for (count, p) in counts.iter().zip([0.1, 0.2, 0.7]) {
            let sd = (p * (1.0 - p) / n as f64).sqrt();
            assert!(
                (*count as f64 / n as f64 - p).abs() < 4.0 * sd,
                "{counts:?}"
            );
        }
        // top_p = 0.8 keeps 0.7 and 0.2 and renormalises them.
        let nucleus = Sampling {
            temperature: 1.0,
            top_p: 0.8,
        };
        for _ in 0..1000 {
            let (token, logprob) = nucleus.draw(&logits, &mut rng);
            assert_ne!(token, 0);
            let expected = ([0.0, 0.2, 0.7][token as usize] / 0.9f64).ln();
            assert!((logprob - expected).abs() < 1e-5);
        }
        assert_eq!(Sampling::GREEDY.draw(&logits, &mut rng).0, 2);
    }

    #[test]
    fn generation_with_and_without_cache_agree() {
        let model = tiny();
        let prompts = vec![vec![3u32, 4, 5], vec![6u32, 7, 8, 9, 10]];
        let with = model.generate(
            &prompts,
            12,
            &[1],
            Sampling::PURE,
            &mut StdRng::seed_from_u64(3),
            true,
        );
        let without = model.generate(
            &prompts,
            12,
            &[1],
            Sampling::PURE,
            &mut StdRng::seed_from_u64(3),
            false,
        );
        for (a, b) in with.iter().zip(&without) {
            assert_eq!(a.tokens, b.tokens);
            for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
                assert!((x - y).abs() < 1e-4);
            }
        }
        // The sampling log-probs are the model's own: recompute them with one forward pass.
        let row = &with[1];
        let seq: Vec<i64> = prompts[1]
            .iter()
            .chain(&row.tokens)
            .map(|&t| t as i64)
            .collect();
        let n = seq.len() as i64;
        let recomputed = model.token_logprobs(
            &Tensor::from_slice(&seq).view([1, n]),
            &Tensor::ones([1, n], (Kind::Bool, Device::Cpu)),
        );
        let tail = Vec::<f64>::try_from(recomputed.view([-1]).narrow(
            0,
            prompts[1].len() as i64 - 1,
            row.tokens.len() as i64,
        ))
        .unwrap();
        for (x, y) in tail.iter().zip(&row.logprobs) {
            assert!((x - y).abs() < 1e-4, "{tail:?} vs {:?}", row.logprobs);
        }
    }

    /// Continue `cache` with `contexts` (each extending the row it holds) and
    /// compare with a full recomputation of the same contexts.
    fn continue_and_compare(
        model: &TinyAgent,
        cache: &mut KvCache,
        contexts: &[Vec<u32>],
        seed: u64,
    ) -> Vec<Generated> {
        let new: Vec<Vec<u32>> = contexts
            .iter()
            .zip(&cache.tokens)
            .map(|(c, held)| {
                assert!(c.starts_with(held));
                c[held.len()..].to_vec()
            })
            .collect();
        let cached = model.generate_from(
            cache,
            &new,
            6,
            &[1],
            Sampling::PURE,
            &mut StdRng::seed_from_u64(seed),
        );
        let full = model.generate(
            contexts,
            6,
            &[1],
            Sampling::PURE,
            &mut StdRng::seed_from_u64(seed),
            false,
        );
        for (a, b) in cached.iter().zip(&full) {
            assert_eq!(a.tokens, b.tokens);
            assert!(
                a.logprobs
                    .iter()
                    .zip(&b.logprobs)
                    .all(|(x, y)| (x - y).abs() < 1e-9),
                "{:?} vs {:?}",
                a.logprobs,
                b.logprobs
            );
        }
        cached
    }

    #[test]
    fn a_cache_carried_across_turns_gives_what_the_whole_conversation_gives() {
        let model = tiny();
        let mut cache = KvCache::default();
        let mut contexts = vec![
            vec![3u32, 4, 5],
            vec![6u32, 7, 8, 9, 10, 11, 12],
            vec![13u32],
        ];
        cache.tokens = vec![vec![]; 3];
        for turn in 0..3u32 {
            let generated = continue_and_compare(&model, &mut cache, &contexts, 10 + turn as u64);
            // The next turn: the sampled action, then a tool output of a different length per row.
            for (row, (context, g)) in contexts.iter_mut().zip(&generated).enumerate() {
                context.extend(&g.tokens);
                context.extend((0..row as u32 + 2).map(|k| 20 + k + turn));
            }
        }
        // The second conversation ends: the others go on from a cache without its row.
        cache.keep_rows(&[0, 2]);
        contexts.remove(1);
        continue_and_compare(&model, &mut cache, &contexts, 99);
    }

    #[test]
    fn entropy_of_a_uniform_row_is_log_v() {
        let h = entropy(&Tensor::zeros([2, 8], (REAL, Device::Cpu)));
        let values = Vec::<f64>::try_from(h).unwrap();
        assert!(values.iter().all(|v| (v - (8f64).ln()).abs() < 1e-6));
    }

    #[test]
    fn a_checkpoint_reloads_identically() {
        let model = tiny();
        let path =
            std::env::temp_dir().join(format!("tinyagent-{}.safetensors", std::process::id()));
        model.save(&path).unwrap();
        let again = TinyAgent::load(model.config, &path, Device::Cpu).unwrap(); // initialises (taking the generator turn), then loads
        std::fs::remove_file(&path).ok();
        let ids = Tensor::from_slice(&[1i64, 2, 3]).view([1, 3]);
        let valid = Tensor::ones([1, 3], (Kind::Bool, Device::Cpu));
        assert!(model
            .logits(&ids, &valid)
            .equal(&again.logits(&ids, &valid)));
    }
}
