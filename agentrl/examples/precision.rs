//! Chapter 0: how far the CPU setting moves a training run, in 32 and in 64 bits.
//!
//! `cargo run -p agentrl --example precision -- f32|f64 [steps]` pretrains a
//! TinyAgent for `steps` steps (default 200) with the base model's recipe and
//! prints the final loss and a checksum of the weights at full precision. With
//! `f32` the weights, and so every product and activation of the network, are
//! 32-bit (the loss is still summed in `book::REAL`). Run it
//! under different settings (`ATEN_CPU_CAPABILITY`, `MKL_CBWR`,
//! `OMP_NUM_THREADS`) to see which digits the setting changes: in 32 bits the
//! third or fourth significant digit of the loss, in 64 bits the thirteenth or
//! later.

use agentrl::gym::Gym;
use agentrl::pretrain::{corpus, pretrain, PretrainConfig, Sequence, BASE};
use agentrl::tinyagent::{Config, TinyAgent};
use agentrl::tokenizer::{render, Bpe};
use tch::{Device, Kind};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let kind = match args.first().map(String::as_str) {
        Some("f32") => Kind::Float,
        Some("f64") | None => Kind::Double,
        Some(other) => panic!("unknown precision {other:?}: f32 or f64"),
    };
    let steps: usize = args
        .get(1)
        .map(|s| s.parse().expect("steps is a number"))
        .unwrap_or(200);
    let threads: i32 = std::env::var("OMP_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    tch::set_num_threads(threads);
    let gym = Gym::standard();
    let config = PretrainConfig { steps, ..BASE };
    let transcripts = corpus(&gym.train, config.episodes, config.seed);
    let bpe = Bpe::train(transcripts.iter().map(|t| render(t)), config.vocab_size)
        .expect("the tokenizer trains");
    let sequences: Vec<Sequence> = transcripts
        .iter()
        .map(|t| Sequence::new(&bpe, t, config.context_weight))
        .collect();
    tch::manual_seed(config.seed as i64);
    let mut model = TinyAgent::new(
        Config {
            vocab: bpe.vocab_size() as i64,
            ..config.model
        },
        Device::Cpu,
    );
    model.vs.set_kind(kind);
    let losses = pretrain(&mut model, &sequences, &config);
    let checksum: f64 = model
        .vs
        .trainable_variables()
        .iter()
        .map(|w| w.abs().sum(Kind::Double).double_value(&[]))
        .sum();
    println!(
        "{kind:?} threads {threads}: final loss {:.17e}  sum|w| {checksum:.17e}",
        losses.last().unwrap()
    );
}
