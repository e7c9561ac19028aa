//! Chapter 4: pretraining TinyAgent on transcripts of a well-formed but
//! uninformed policy, so that the base model speaks the action grammar while
//! knowing nothing about which edit fixes which bug. The transcripts come
//! from the BugFix gym of Chapter 3.

use crate::book::REAL;
use crate::episode::Owner;
use crate::gym::{BugFixEnv, Task};
use crate::policies::{run_episode, Policy};
use crate::rollout::progress;
use crate::tinyagent::{Config, TinyAgent};
use crate::tokenizer::{render, Bpe};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tch::nn::OptimizerConfig;
use tch::{nn, Device, Tensor};

// ANCHOR: uninformed
/// Knows the workflow, not the bug: it looks first (`read` or `test`), then
/// either looks again or edits with an op drawn uniformly from the menu, and
/// after an edit it tests or submits, each with even odds. It never writes a
/// malformed call and never prefers the fix, so it solves a task about once
/// in the menu's length.
pub struct Uninformed {
    rng: StdRng,
    edited: bool,
}

impl Uninformed {
    pub fn new(seed: u64) -> Self {
        Uninformed {
            rng: StdRng::seed_from_u64(seed),
            edited: false,
        }
    }
}

impl Policy for Uninformed {
    fn act(&mut self, env: &BugFixEnv, _observation: &str, turn: usize) -> String {
        if turn == 0 {
            self.edited = false;
        }
        let ops = &env.task().menu;
        let choice = match (turn, self.edited) {
            (0, _) => self.rng.random_range(0..2),     // read | test
            (_, false) => self.rng.random_range(0..4), // read | test | edit | edit
            (_, true) => 1 + 3 * self.rng.random_range(0..2), // test | submit
        };
        match choice {
            0 => "<call> read </call>".into(),
            1 => "<call> test </call>".into(),
            4 => "<call> submit </call>".into(),
            _ => {
                self.edited = true;
                format!(
                    "<call> edit {} </call>",
                    ops[self.rng.random_range(0..ops.len())].name
                )
            }
        }
    }
}

/// `episodes` transcripts of the uninformed policy, cycling through `tasks`.
pub fn corpus(tasks: &[Task], episodes: usize, seed: u64) -> Vec<Vec<(Owner, String)>> {
    corpus_of(tasks, episodes, &mut Uninformed::new(seed))
}

/// `episodes` transcripts of `policy`, cycling through `tasks`.
pub fn corpus_of(
    tasks: &[Task],
    episodes: usize,
    policy: &mut dyn Policy,
) -> Vec<Vec<(Owner, String)>> {
    let mut env = BugFixEnv::new(tasks.to_vec(), crate::gym::MAX_TURNS);
    (0..episodes)
        .map(|i| {
            let mut transcript = Vec::new();
            run_episode(&mut env, i % tasks.len(), policy, Some(&mut transcript));
            transcript
        })
        .collect()
}
// ANCHOR_END: uninformed

// ANCHOR: pretrain
/// Settings of a pretraining run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PretrainConfig {
    pub model: Config,
    pub vocab_size: usize,
    pub episodes: usize,
    pub steps: usize,
    pub batch: usize,
    pub lr: f64,
    /// Weight of the tokens the policy did not write (1 for plain language
    /// modelling, 0 to learn only the policy's messages).
    pub context_weight: f64,
    pub seed: u64,
}

/// A transcript's ids and the weight of each id's prediction in the loss.
pub struct Sequence {
    pub ids: Vec<u32>,
    pub weights: Vec<f64>,
}

impl Sequence {
    pub fn new(bpe: &Bpe, transcript: &[(Owner, String)], context_weight: f64) -> Sequence {
        let (ids, owners) = bpe.encode_transcript(transcript);
        let weights = owners
            .iter()
            .map(|&o| {
                if o == Owner::Policy {
                    1.0
                } else {
                    context_weight
                }
            })
            .collect();
        Sequence { ids, weights }
    }
}

/// Next-token training: the loss is the weighted mean cross-entropy of
/// each next token. Transcripts are sorted by length and cut into
/// batches of `batch` neighbours, so that little of a batch is padding; each
/// step draws one batch at random. The learning rate warms up for 5 % of the steps and then
/// decays linearly to zero. Returns the loss of every step. (Within the test
/// command, a run with the same starting weights, data and settings is read
/// back instead of trained again: [`crate::book::reuse`].)
pub fn pretrain(
    model: &mut TinyAgent,
    sequences: &[Sequence],
    config: &PretrainConfig,
) -> Vec<f64> {
    reuse_pretraining(
        crate::book::run_cache().as_deref(),
        model,
        sequences,
        config,
        next_token_steps,
    )
}

fn next_token_steps(
    model: &mut TinyAgent,
    sequences: &[Sequence],
    config: &PretrainConfig,
) -> Vec<f64> {
    let mut opt = nn::AdamW::default()
        .build(&model.vs, config.lr)
        .expect("an optimiser for the model");
    let mut rng = StdRng::seed_from_u64(config.seed);
    let n_ctx = model.config.n_ctx as usize;
    let mut by_length: Vec<&Sequence> = sequences.iter().collect();
    by_length.sort_by_key(|s| s.ids.len());
    let batches: Vec<&[&Sequence]> = by_length.chunks(config.batch).collect();
    let warmup = (config.steps / 20).max(1);
    let bar = progress(config.steps as u64, "pretraining");
    let mut losses = Vec::with_capacity(config.steps);
    for step in 0..config.steps {
        let scale = if step < warmup {
            (step + 1) as f64 / warmup as f64
        } else {
            (config.steps - step) as f64 / (config.steps - warmup) as f64
        };
        opt.set_lr(config.lr * scale);
        let batch = batches[rng.random_range(0..batches.len())];
        let ids: Vec<&[u32]> = batch
            .iter()
            .map(|s| &s.ids[..s.ids.len().min(n_ctx)])
            .collect();
        let (ids, valid) = pad_right(&ids, model.device()); // [B, T]
        let t = ids.size()[1];
        let weights = pad_weights(batch, t, model.device()); // [B, T]
        let logits = model.logits(&ids, &valid).narrow(1, 0, t - 1); // [B, T-1, V]
        let targets = ids.narrow(1, 1, t - 1); // [B, T-1]
        let w = weights.narrow(1, 1, t - 1); // [B, T-1], 0 on padding
        let logp = logits
            .log_softmax(-1, REAL)
            .gather(-1, &targets.unsqueeze(-1), false)
            .squeeze_dim(-1); // [B, T-1]
        let total = w.sum(REAL);
        assert!(
            total.double_value(&[]) > 0.0,
            "a batch has no weighted token within the model's window of {n_ctx} tokens (a sequence \
             longer than the window is cut at its end; see Sequence::windows)"
        );
        let loss = weighted_log_likelihood(&logp, &w, &total);
        opt.backward_step(&loss);
        losses.push(loss.double_value(&[]));
        bar.inc(1);
    }
    bar.finish_and_clear();
    losses
}

/// Sequences of different lengths as one right-padded batch: ids and a mask
/// of real tokens, both [B, T].
pub fn pad_right(rows: &[&[u32]], device: Device) -> (Tensor, Tensor) {
    let width = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut ids = vec![0i64; rows.len() * width];
    let mut valid = vec![false; rows.len() * width];
    for (i, row) in rows.iter().enumerate() {
        for (j, &token) in row.iter().enumerate() {
            (ids[i * width + j], valid[i * width + j]) = (token as i64, true);
        }
    }
    let shape = [rows.len() as i64, width as i64];
    (
        Tensor::from_slice(&ids).view(shape).to_device(device),
        Tensor::from_slice(&valid).view(shape).to_device(device),
    )
}
// ANCHOR: likelihood
/// The loss of every method that raises some tokens' log-probabilities and
/// lowers others' (Chapter 15's table): the weighted negative log-likelihood
///
/// loss = −Σ_{b,t} w_{b,t} log π_θ(x_{b,t} | x_{b,<t}) / N,
///
/// with `logp` [B, T] the log-probs of the tokens, `weights` [B, T] (0 where
/// a token takes no part) and `norm` a scalar tensor, the normaliser N.
/// Pretraining and SFT weigh a token by its owner and divide by the weights'
/// sum; REINFORCE and RFT (Chapter 6's `reinforce_loss`) weigh an action
/// token by its episode's advantage, or 1, and divide by the action tokens;
/// DPO's gradient is this one's with the weights of Chapter 15's Section 15.1
/// and N the number of pairs.
pub fn weighted_log_likelihood(logp: &Tensor, weights: &Tensor, norm: &Tensor) -> Tensor {
    -(logp * weights).sum(REAL) / norm // a scalar
}
// ANCHOR_END: likelihood
// ANCHOR_END: pretrain

// ANCHOR: windows
impl Sequence {
    /// The sequence as a policy with a window of `n_ctx` tokens reads it
    /// (Chapter 12's long episodes): before an action of at most `action`
    /// tokens it sees only the last `n_ctx − action` tokens (what
    /// [`crate::agent::LmPolicy`] keeps). One window holds the start and
    /// every action that the cut does not reach; each later action gets a
    /// window of its own, with only that action weighted. The actions are
    /// the runs of weighted tokens, so the context weight should be 0. A
    /// sequence that fits is returned whole.
    pub fn windows(&self, n_ctx: usize, action: usize) -> Vec<Sequence> {
        if self.ids.len() <= n_ctx {
            return vec![Sequence {
                ids: self.ids.clone(),
                weights: self.weights.clone(),
            }];
        }
        let room = n_ctx.saturating_sub(action);
        // The runs of weighted tokens: [start, end).
        let mut runs = Vec::new();
        let mut i = 0;
        while i < self.ids.len() {
            if self.weights[i] > 0.0 {
                let start = i;
                while i < self.ids.len() && self.weights[i] > 0.0 {
                    i += 1;
                }
                runs.push((start, i));
            } else {
                i += 1;
            }
        }
        let head = n_ctx.min(self.ids.len());
        let mut first = Sequence {
            ids: self.ids[..head].to_vec(),
            weights: vec![0.0; head],
        };
        let mut out = Vec::new();
        for &(start, end) in &runs {
            if start <= room && end <= head {
                first.weights[start..end].copy_from_slice(&self.weights[start..end]);
            } else {
                let from = start.saturating_sub(room).max(end.saturating_sub(n_ctx));
                let mut weights = vec![0.0; end - from];
                weights[start - from..].copy_from_slice(&self.weights[start..end]);
                out.push(Sequence {
                    ids: self.ids[from..end].to_vec(),
                    weights,
                });
            }
        }
        out.insert(0, first);
        out
    }
}
// ANCHOR_END: windows

/// `steps` on `model`, or, within the test command, the same run read back
/// with its final weights (see [`crate::book::reuse`]); the key names the
/// settings, every token and weight of the data, and the starting weights.
fn reuse_pretraining(
    cache: Option<&Path>,
    model: &mut TinyAgent,
    sequences: &[Sequence],
    config: &PretrainConfig,
    steps: fn(&mut TinyAgent, &[Sequence], &PretrainConfig) -> Vec<f64>,
) -> Vec<f64> {
    use crate::book::{fnv1a, FNV_START};
    if cache.is_none() {
        return steps(model, sequences, config);
    }
    let data = sequences.iter().fold(FNV_START, |h, s| {
        let h = s
            .ids
            .iter()
            .fold(fnv1a(&(s.ids.len() as u64).to_le_bytes(), h), |h, id| {
                fnv1a(&id.to_le_bytes(), h)
            });
        s.weights
            .iter()
            .fold(h, |h, w| fnv1a(&w.to_bits().to_le_bytes(), h))
    });
    let key = format!(
        "pretrain\n{config:?}\n{data:016x}\n{:016x}",
        model.fingerprint()
    );
    let mut trained = false;
    let train = || {
        trained = true;
        let losses = steps(model, sequences, config);
        (
            losses,
            model
                .vs
                .variables()
                .into_iter()
                .collect::<Vec<(String, Tensor)>>(),
        )
    };
    let write = |(losses, weights): &(Vec<f64>, Vec<(String, Tensor)>), stored: &Path| {
        Tensor::write_safetensors(weights, stored.join("weights.safetensors"))
            .map_err(|err| err.to_string())?;
        std::fs::write(
            stored.join("losses.json"),
            serde_json::to_string(losses).map_err(|err| err.to_string())?,
        )
        .map_err(|err| err.to_string())
    };
    let read = |stored: &Path| {
        let text =
            std::fs::read_to_string(stored.join("losses.json")).map_err(|err| err.to_string())?;
        let losses: Vec<f64> = serde_json::from_str(&text).map_err(|err| err.to_string())?;
        Ok((
            losses,
            Tensor::read_safetensors(stored.join("weights.safetensors"))
                .map_err(|err| err.to_string())?,
        ))
    };
    let (losses, weights) = crate::book::reuse(cache, &key, train, write, read)
        .unwrap_or_else(|err| panic!("the run cache: {err}"));
    if !trained {
        let mut variables = model.vs.variables();
        tch::no_grad(|| {
            for (name, stored) in &weights {
                variables
                    .get_mut(name)
                    .unwrap_or_else(|| {
                        panic!("the stored run has a weight {name} that the model lacks")
                    })
                    .copy_(stored);
            }
        });
    }
    losses
}

fn pad_weights(batch: &[&Sequence], t: i64, device: Device) -> Tensor {
    let mut w = vec![0f64; batch.len() * t as usize];
    for (i, s) in batch.iter().enumerate() {
        let n = s.weights.len().min(t as usize);
        w[i * t as usize..i * t as usize + n].copy_from_slice(&s.weights[..n]);
    }
    Tensor::from_slice(&w)
        .view([batch.len() as i64, t])
        .to_device(device)
}

// ANCHOR: base
/// The book's base model: the tokenizer and TinyAgent pretrained with
/// `BASE` on the gym's train tasks.
pub const BASE: PretrainConfig = PretrainConfig {
    model: Config {
        vocab: 1024,
        n_ctx: 768,
        d_model: 64,
        n_layer: 2,
        n_head: 4,
    },
    vocab_size: 1024,
    episodes: 4000,
    steps: 600,
    batch: 16,
    lr: 1e-2,
    context_weight: 1.0,
    seed: 0,
};

/// Train the tokenizer and the model from scratch with `config`.
pub fn train_base(tasks: &[Task], config: &PretrainConfig) -> (Bpe, TinyAgent, Vec<f64>) {
    let transcripts = corpus(tasks, config.episodes, config.seed);
    let bpe = Bpe::train(transcripts.iter().map(|t| render(t)), config.vocab_size)
        .expect("the tokenizer trains");
    let sequences: Vec<Sequence> = transcripts
        .iter()
        .map(|t| Sequence::new(&bpe, t, config.context_weight))
        .collect();
    tch::manual_seed(config.seed as i64);
    let model_config = Config {
        vocab: bpe.vocab_size() as i64,
        ..config.model
    };
    let mut model = TinyAgent::new(model_config, crate::tinyagent::device());
    let losses = pretrain(&mut model, &sequences, config);
    (bpe, model, losses)
}

/// Where the base model is kept between chapters: `target/agentrl-base/`.
pub fn base_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/agentrl-base")
}

/// The settings the base model was trained with, and the kind of its weights, as stored next to it.
fn stamp() -> String {
    let settings = serde_json::to_string(&BASE).expect("the config serialises");
    format!("{settings}\n{:?}", crate::book::REAL)
}

/// Store `bpe` and `model` in `base_dir()` as the book's base model (they
/// must have been trained with `BASE`, as Chapter 4 does).
/// If a base model with the same settings is stored already, it is kept: the
/// chapters and notebooks of one test command must all start from the same
/// weights, whichever CPU setting trained them first (two settings agree to
/// about 1e-9 after pretraining, enough to flip a sampled token now and then).
pub fn save_as_base(bpe: &Bpe, model: &TinyAgent) {
    let dir = base_dir();
    if !stamped(&dir, &stamp()) {
        save_base(&dir, bpe, model, &stamp());
    }
}

/// The repository's copies of the book's two stored models (`data/models/`):
/// `base`, and `context-weight-0`, Chapter 4's comparison model. Pretraining
/// from an initialization is where the order of a matrix product's sums grows
/// into weights that later flip sampled tokens, and no setting of MKL keeps
/// that order the same on Intel and AMD processors. So the weights one
/// pretraining produced are kept, every chapter starts from them, and Chapter 4
/// pretrains again and prints how close it comes (see `weight_gap`).
pub fn kept_dir() -> PathBuf {
    crate::book::data_path("models")
}

/// Whether `dir` holds a model stored with `stamp`.
fn stamped(dir: &Path, stamp: &str) -> bool {
    std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .as_deref()
        == Some(stamp)
        && dir.join("tinyagent.safetensors").exists()
        && dir.join("tokenizer.json").exists()
}

/// The base model from `base_dir()`. When it is not there (or was trained
/// with other settings), it is first copied from the repository's kept copy
/// (`kept_dir()/base`) if that one's stamp is `BASE`'s, and otherwise trained
/// and saved.
pub fn base_model(tasks: &[Task]) -> (Bpe, TinyAgent) {
    let dir = base_dir();
    let stamp = stamp();
    if stamped(&dir, &stamp) {
        if let Ok(found) = load_model(&dir) {
            return found;
        }
    }
    let kept = kept_dir().join("base");
    if stamped(&kept, &stamp) {
        copy_files(
            &kept,
            &dir,
            &["tokenizer.json", "tinyagent.safetensors", "config.json"],
        )
        .unwrap_or_else(|err| panic!("{err}"));
        return load_model(&dir)
            .unwrap_or_else(|err| panic!("the kept base model does not load: {err}"));
    }
    let (bpe, model, _) = train_base(tasks, &BASE);
    save_base(&dir, &bpe, &model, &stamp);
    (bpe, model)
}

/// Copy `names` from `from` to `to`, each through a temporary file and a
/// rename, so that a process reading `to` never sees half a file.
fn copy_files(from: &Path, to: &Path, names: &[&str]) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|err| format!("cannot create {}: {err}", to.display()))?;
    for name in names {
        let part = to.join(format!("{name}.part-{}", std::process::id()));
        std::fs::copy(from.join(name), &part)
            .map_err(|err| format!("cannot copy {}: {err}", from.join(name).display()))?;
        std::fs::rename(&part, to.join(name))
            .map_err(|err| format!("cannot write {}: {err}", to.join(name).display()))?;
    }
    Ok(())
}

/// The largest absolute difference between the weights of two models of one
/// architecture: how far a fresh pretraining lands from the kept one.
pub fn weight_gap(a: &TinyAgent, b: &TinyAgent) -> f64 {
    let theirs = b.vs.variables();
    a.vs.variables()
        .iter()
        .map(|(name, w)| (w - &theirs[name]).abs().max().double_value(&[]))
        .fold(0.0, f64::max)
}

fn save_base(dir: &Path, bpe: &Bpe, model: &TinyAgent, stamp: &str) {
    save_model(dir, bpe, model).unwrap_or_else(|err| panic!("{err}"));
    std::fs::write(dir.join("config.json"), stamp)
        .unwrap_or_else(|err| panic!("cannot write the base model's config: {err}"));
}

/// The file in which [`save_model`] writes the model's fingerprint, last.
pub const FINGERPRINT_FILE: &str = "fingerprint.txt";

/// Store a tokenizer and a model with `BASE`'s architecture in `dir`. Each
/// file is written beside its place and renamed into it, and the model's
/// fingerprint is written last, so that a process killed part way leaves
/// nothing that [`saved_model`] accepts.
pub fn save_model(dir: &Path, bpe: &Bpe, model: &TinyAgent) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    let _ = std::fs::remove_file(dir.join(FINGERPRINT_FILE)); // what is there is no longer whole
    let files = [
        ("tokenizer.part.json", "tokenizer.json"),
        ("tinyagent.part.safetensors", "tinyagent.safetensors"),
    ];
    bpe.save(&dir.join(files[0].0))?;
    model.save(&dir.join(files[1].0))?;
    crate::book::kill_point("saving a model");
    for (part, name) in files {
        std::fs::rename(dir.join(part), dir.join(name))
            .map_err(|err| format!("cannot complete {}: {err}", dir.join(name).display()))?;
    }
    let part = dir.join("fingerprint.part.txt");
    std::fs::write(&part, format!("{:016x}\n", model.fingerprint()))
        .map_err(|err| format!("cannot write {}: {err}", part.display()))?;
    std::fs::rename(&part, dir.join(FINGERPRINT_FILE))
        .map_err(|err| format!("cannot complete the fingerprint: {err}"))
}

/// The tokenizer and model in `dir` if [`save_model`] finished storing them:
/// the weights read back must have the fingerprint it wrote last.
pub fn saved_model(dir: &Path) -> Result<(Bpe, TinyAgent), String> {
    let stored = std::fs::read_to_string(dir.join(FINGERPRINT_FILE))
        .map_err(|_| format!("{} holds no whole model (no fingerprint)", dir.display()))?;
    let (bpe, model) = load_model(dir)?;
    let found = format!("{:016x}", model.fingerprint());
    if stored.trim() != found {
        return Err(format!(
            "{}: the weights have fingerprint {found}, the save wrote {}",
            dir.display(),
            stored.trim()
        ));
    }
    Ok((bpe, model))
}

/// The tokenizer and the model that [`save_model`] stored in `dir`.
pub fn load_model(dir: &Path) -> Result<(Bpe, TinyAgent), String> {
    let bpe = Bpe::load(&dir.join("tokenizer.json"))?;
    let model_config = Config {
        vocab: bpe.vocab_size() as i64,
        ..BASE.model
    };
    let model = TinyAgent::load(
        model_config,
        &dir.join("tinyagent.safetensors"),
        crate::tinyagent::device(),
    )?;
    Ok((bpe, model))
}
// ANCHOR_END: base

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::parse_call;
    use crate::gym::{Gym, MAX_TURNS};
    use crate::policies::rates;

    #[test]
    fn the_uninformed_policy_writes_only_valid_calls_and_solves_at_chance() {
        let gym = Gym::standard();
        let mut env = BugFixEnv::new(gym.held_out.clone(), MAX_TURNS);
        let mut policy = Uninformed::new(3);
        for task in 0..env.tasks().len() {
            let mut transcript = Vec::new();
            run_episode(&mut env, task, &mut policy, Some(&mut transcript));
            for (owner, message) in &transcript {
                if *owner == Owner::Policy {
                    let call = parse_call(message).expect("a valid call");
                    if call.tool == "edit" {
                        assert!(env.tasks()[task].op(call.arg.as_deref().unwrap()).is_some());
                    }
                }
            }
        }
        let r = rates(&mut env, None, &mut Uninformed::new(4), 50);
        // Four or five ops per menu, one of them the fix: about 1/4.5, minus truncated episodes.
        assert!((0.15..0.22).contains(&r.success()), "{}", r.success());
    }

    /// A tokenizer of `vocab` ids and the sequences of `episodes` uninformed
    /// transcripts on each of the first `tasks` training tasks.
    fn small_corpus(
        tasks: usize,
        episodes: usize,
        vocab: usize,
        context_weight: f64,
    ) -> (Bpe, Vec<Sequence>) {
        let gym = Gym::standard();
        let transcripts = corpus(&gym.train[..tasks], episodes, 0);
        let bpe = Bpe::train(transcripts.iter().map(|t| render(t)), vocab).unwrap();
        let sequences = transcripts
            .iter()
            .map(|t| Sequence::new(&bpe, t, context_weight))
            .collect();
        (bpe, sequences)
    }

    #[test]
    fn pretraining_lowers_the_loss_on_the_policy_tokens() {
        let (bpe, sequences) = small_corpus(8, 64, 400, 0.0);
        assert!(sequences
            .iter()
            .all(|s| s.weights.contains(&1.0) && s.weights.contains(&0.0)));
        let mut model = {
            let _turn = crate::book::seeded(0);
            TinyAgent::new(
                Config {
                    vocab: bpe.vocab_size() as i64,
                    n_ctx: 512,
                    d_model: 32,
                    n_layer: 1,
                    n_head: 2,
                },
                Device::Cpu,
            )
        };
        let config = PretrainConfig {
            steps: 60,
            batch: 8,
            lr: 1e-2,
            ..BASE
        };
        let losses = pretrain(&mut model, &sequences, &config);
        let first: f64 = losses[..5].iter().sum::<f64>() / 5.0;
        let last: f64 = losses[55..].iter().sum::<f64>() / 5.0;
        assert!(last < 0.5 * first, "loss {first} -> {last}");
    }

    #[test]
    fn a_long_sequence_is_trained_through_the_windows_the_policy_reads() {
        // Three actions of two tokens in 30 ids; a window of 12 tokens, actions of at most 3.
        let ids: Vec<u32> = (0..30).collect();
        let actions = [(5, 7), (14, 16), (25, 27)];
        let weights: Vec<f64> = (0..30)
            .map(|i| f64::from(actions.iter().any(|&(a, b)| (a..b).contains(&i))))
            .collect();
        let long = Sequence { ids, weights };
        let windows = long.windows(12, 3);
        assert_eq!(windows.len(), 3);
        for w in &windows {
            assert!(w.ids.len() <= 12);
        }
        // Every action is weighted once, after the context the policy had: all
        // of what came before it, or its last 12 - 3 = 9 tokens.
        let mut trained = Vec::new();
        for w in &windows {
            for (k, &weight) in w.weights.iter().enumerate() {
                if weight > 0.0 {
                    trained.push(w.ids[k]);
                    let at = w.ids[k] as usize;
                    let context = w.ids[..k].len()
                        - w.weights[..k]
                            .iter()
                            .rev()
                            .take_while(|&&x| x > 0.0)
                            .count();
                    let action_start = at
                        - w.weights[..k]
                            .iter()
                            .rev()
                            .take_while(|&&x| x > 0.0)
                            .count();
                    assert_eq!(context, action_start.min(9), "token {at}");
                    assert_eq!(
                        w.ids[0] as usize,
                        action_start - context,
                        "a window ends its context just before its action"
                    );
                }
            }
        }
        assert_eq!(trained, vec![5, 6, 14, 15, 25, 26]);
        // A sequence that fits is one window, itself.
        let short = Sequence {
            ids: vec![1, 2, 3],
            weights: vec![0.0, 1.0, 1.0],
        };
        let same = short.windows(12, 3);
        assert_eq!(
            (same.len(), &same[0].ids, &same[0].weights),
            (1, &short.ids, &short.weights)
        );
    }

    #[test]
    #[should_panic(expected = "no weighted token within the model's window")]
    fn a_batch_with_nothing_to_learn_in_the_window_is_refused() {
        let sequences = vec![Sequence {
            ids: (0..20).collect(),
            weights: (0..20).map(|i| f64::from(i >= 16)).collect(),
        }];
        let mut model = {
            let _turn = crate::book::seeded(0);
            TinyAgent::new(
                Config {
                    vocab: 32,
                    n_ctx: 16,
                    d_model: 8,
                    n_layer: 1,
                    n_head: 2,
                },
                Device::Cpu,
            )
        };
        next_token_steps(
            &mut model,
            &sequences,
            &PretrainConfig {
                steps: 1,
                batch: 1,
                ..BASE
            },
        );
    }

    #[test]
    fn a_stored_pretraining_run_is_read_back_only_for_the_same_start_data_and_settings() {
        let (bpe, sequences) = small_corpus(4, 16, 300, 1.0);
        let fresh = || {
            let _turn = crate::book::seeded(1);
            TinyAgent::new(
                Config {
                    vocab: bpe.vocab_size() as i64,
                    n_ctx: 512,
                    d_model: 16,
                    n_layer: 1,
                    n_head: 2,
                },
                Device::Cpu,
            )
        };
        let config = PretrainConfig {
            steps: 6,
            batch: 4,
            lr: 1e-2,
            ..BASE
        };
        let cache =
            std::env::temp_dir().join(format!("agentrl-pretrain-reuse-{}", std::process::id()));
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        fn counting(
            model: &mut TinyAgent,
            sequences: &[Sequence],
            config: &PretrainConfig,
        ) -> Vec<f64> {
            CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            next_token_steps(model, sequences, config)
        }
        let (mut a, mut b) = (fresh(), fresh());
        let first = reuse_pretraining(Some(&cache), &mut a, &sequences, &config, counting);
        let again = reuse_pretraining(Some(&cache), &mut b, &sequences, &config, counting);
        assert_eq!(
            CALLS.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the second run is read back"
        );
        assert_eq!(
            (first.clone(), a.fingerprint()),
            (again, b.fingerprint()),
            "the same losses and the same final weights"
        );
        assert_ne!(
            a.fingerprint(),
            fresh().fingerprint(),
            "the weights did move"
        );
        let other = PretrainConfig { seed: 5, ..config };
        reuse_pretraining(Some(&cache), &mut fresh(), &sequences, &other, counting);
        reuse_pretraining(Some(&cache), &mut a, &sequences, &config, counting);
        assert_eq!(
            CALLS.load(std::sync::atomic::Ordering::SeqCst),
            3,
            "other settings and other starting weights train"
        );
        let plain = reuse_pretraining(None, &mut fresh(), &sequences, &config, counting);
        assert_eq!(
            (CALLS.load(std::sync::atomic::Ordering::SeqCst), plain),
            (4, first),
            "without a cache every run trains, to the same losses"
        );
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn the_kept_models_carry_the_recipes_stamps_and_load() {
        // A change of `BASE` without new kept models would make every machine pretrain its own.
        let kept = kept_dir().join("base");
        assert!(stamped(&kept, &stamp()), "data/models/base was not made with BASE: run Chapter 4 without it and keep what it writes");
        let (bpe, model) = load_model(&kept).expect("the kept base model loads");
        assert_eq!(model.config.vocab, bpe.vocab_size() as i64);
        let zero = PretrainConfig {
            context_weight: 0.0,
            ..BASE
        };
        assert_eq!(
            std::fs::read_to_string(kept_dir().join("context-weight-0/config.txt")).unwrap(),
            format!("{zero:?}")
        );
        let policy = TinyAgent::load(
            model.config,
            &kept_dir().join("context-weight-0/tinyagent.safetensors"),
            Device::Cpu,
        )
        .expect("the kept weight-0 model loads");
        assert!(weight_gap(&model, &policy) > 0.1, "two different models");
    }

    #[test]
    fn weight_gap_is_the_largest_absolute_difference() {
        let config = Config {
            vocab: 32,
            n_ctx: 16,
            d_model: 8,
            n_layer: 1,
            n_head: 2,
        };
        let a = {
            let _turn = crate::book::seeded(3);
            TinyAgent::new(config, Device::Cpu)
        };
        let b = {
            let _turn = crate::book::seeded(3);
            TinyAgent::new(config, Device::Cpu)
        };
        assert_eq!(weight_gap(&a, &b), 0.0);
        tch::no_grad(|| {
            let w = b.vs.variables()["wte.weight"].shallow_clone();
            let _ = w.get(2).get(5).f_add_(&Tensor::from(-0.25)).unwrap();
            let _ = w.get(0).get(0).f_add_(&Tensor::from(0.125)).unwrap();
        });
        assert!(
            (weight_gap(&a, &b) - 0.25).abs() < 1e-12,
            "{}",
            weight_gap(&a, &b)
        );
        assert_eq!(weight_gap(&a, &b), weight_gap(&b, &a));
    }
}
