//! Grading tests for the Chapter 5 exercises: `cargo test -p exercises ch05`.
//!
//! Each test is named after its exercise (`ex3_...` grades Exercise 5.3) and
//! checks consequences of the exercise's statement, computed here from the
//! `agentrl` library (a small tokenizer, tiny untrained models on the CPU,
//! episodes played by them), not values copied from one particular solution.

use super::*;
use agentrl::agent::LmPolicy;
use agentrl::episode::Owner;
use agentrl::gym::{Gym, Info, Task};
use agentrl::mdp::seeded_rng;
use agentrl::pretrain::{corpus, pad_right};
use agentrl::rollout::{play, Played};
use agentrl::tinyagent::{Config, Sampling, TinyAgent};
use agentrl::tokenizer::{render, Bpe};
use agentrl::trajectory::{collate, policy_logprobs, retokenized_action, weighted_nll, Trajectory};
use tch::{Device, Kind, Tensor};

use crate::testkit::assert_close;

/// Six held-out tasks and a 400-token BPE trained on their scripted transcripts.
fn setup() -> (Vec<Task>, Bpe) {
    let tasks = Gym::standard().held_out[..6].to_vec();
    let transcripts = corpus(&tasks, 30, 0);
    let bpe = Bpe::train(transcripts.iter().map(|t| render(t)), 400).unwrap();
    (tasks, bpe)
}

/// An untrained TinyAgent for `bpe`, weights from `seed`.
fn tiny(bpe: &Bpe, seed: i64) -> TinyAgent {
    let _turn = agentrl::book::seeded(seed);
    TinyAgent::new(Config { vocab: bpe.vocab_size() as i64, n_ctx: 512, d_model: 32, n_layer: 2, n_head: 4 }, Device::Cpu)
}

/// Episodes played by `model` on every task, at most three turns each.
fn played(tasks: &[Task], bpe: &Bpe, model: &TinyAgent, seed: u64) -> Vec<Played> {
    let policy = LmPolicy { model, bpe, sampling: Sampling::PURE, max_action_tokens: 5 };
    let which: Vec<usize> = (0..tasks.len()).collect();
    tch::no_grad(|| play(&policy, tasks, &which, 3, &mut seeded_rng(seed)))
}

/// Where each policy segment of `played` sits in its token stream, with its segment.
fn policy_segments(played: &Played) -> Vec<(usize, usize, &agentrl::rollout::Segment)> {
    let mut at = 0;
    let mut found = Vec::new();
    for segment in &played.segments {
        if segment.owner == Owner::Policy && !segment.ids.is_empty() {
            found.push((at, at + segment.ids.len(), segment));
        }
        at += segment.ids.len();
    }
    found
}

/// The half-open range of each message body in `bpe.encode_transcript(transcript)`
/// (each body follows its one role token), with the message's author.
fn message_bodies(bpe: &Bpe, transcript: &[(Owner, String)]) -> Vec<(Owner, usize, usize)> {
    let mut at = 0;
    let mut bodies = Vec::new();
    for (owner, message) in transcript {
        let n = bpe.encode(message).len();
        bodies.push((*owner, at + 1, at + 1 + n));
        at += 1 + n;
    }
    bodies
}

fn from_transcript(bpe: &Bpe, transcript: &[(Owner, String)]) -> Trajectory {
    Trajectory::from_transcript(bpe, 0, transcript, 0.0, Info::default())
}

// ---------------------------------------------------------------------------
// Exercise 5.1
// ---------------------------------------------------------------------------

#[test]
fn ex1_small_cases() {
    use Owner::{Env, Policy, Prompt};
    assert_eq!(action_spans(&[]), vec![]);
    assert_eq!(action_spans(&[Prompt, Env, Env]), vec![]);
    assert_eq!(action_spans(&[Policy]), vec![(0, 1)]);
    assert_eq!(action_spans(&[Policy, Policy, Prompt]), vec![(0, 2)]);
    assert_eq!(action_spans(&[Prompt, Policy, Policy, Env, Policy]), vec![(1, 3), (4, 5)]);
    assert_eq!(action_spans(&[Prompt, Policy, Env, Policy, Prompt, Policy, Policy]), vec![(1, 2), (3, 4), (5, 7)]);
}

#[test]
fn ex1_spans_are_the_played_actions() {
    let (tasks, bpe) = setup();
    let model = tiny(&bpe, 1);
    for p in played(&tasks, &bpe, &model, 0) {
        let trajectory = Trajectory::from_played(&p);
        let expected: Vec<(usize, usize)> = policy_segments(&p).iter().map(|&(s, e, _)| (s, e)).collect();
        assert_eq!(expected.len(), p.actions.len(), "every turn wrote at least one token");
        let spans = action_spans(&trajectory.owners);
        assert_eq!(spans, expected, "task {}", p.task);
        for ((start, end), (_, _, segment)) in spans.iter().zip(policy_segments(&p)) {
            assert_eq!(&trajectory.ids[*start..*end], &segment.ids[..]);
        }
    }
}

#[test]
fn ex1_spans_are_the_policy_messages_and_cover_the_mask() {
    let (tasks, bpe) = setup();
    for transcript in corpus(&tasks, 3, 7) {
        let trajectory = from_transcript(&bpe, &transcript);
        let spans = action_spans(&trajectory.owners);
        let bodies: Vec<(usize, usize)> = message_bodies(&bpe, &transcript).into_iter().filter(|b| b.0 == Owner::Policy).map(|b| (b.1, b.2)).collect();
        assert_eq!(spans, bodies, "one span per assistant message, the message's tokens exactly");
        let mut covered = vec![false; trajectory.ids.len()];
        for &(start, end) in &spans {
            covered[start..end].iter_mut().for_each(|c| *c = true);
        }
        assert_eq!(covered, trajectory.action_mask(), "the spans together are the action mask");
    }
}

// ---------------------------------------------------------------------------
// Exercise 5.2
// ---------------------------------------------------------------------------

#[test]
fn ex2_pads_come_first() {
    let rows = vec![vec![5, 6, 7], vec![1], vec![], vec![2, 3]];
    for pad in [0, 9] {
        let (ids, valid) = left_pad(&rows, pad);
        assert_eq!(ids.len(), rows.len());
        assert_eq!(valid.len(), rows.len());
        for ((row, padded), flags) in rows.iter().zip(&ids).zip(&valid) {
            assert_eq!(padded.len(), 3, "every row as long as the longest");
            assert_eq!(flags.len(), 3);
            let missing = 3 - row.len();
            assert_eq!(&padded[missing..], &row[..], "the row's ids end the padded row");
            assert!(padded[..missing].iter().all(|&id| id == pad), "{padded:?}");
            assert_eq!(flags, &(0..3).map(|j| j >= missing).collect::<Vec<_>>());
        }
    }
    assert_eq!(left_pad(&[], 0), (vec![], vec![]));
    assert_eq!(left_pad(&[vec![], vec![]], 0), (vec![vec![], vec![]], vec![vec![], vec![]]));
}

#[test]
fn ex2_every_row_gets_its_own_logits() {
    let config = Config { vocab: 50, n_ctx: 32, d_model: 16, n_layer: 2, n_head: 4 };
    let model = {
        let _turn = agentrl::book::seeded(3);
        TinyAgent::new(config, Device::Cpu)
    };
    let _guard = tch::no_grad_guard();
    let rows: Vec<Vec<u32>> = [9usize, 4, 1, 12, 7].iter().enumerate().map(|(r, &n)| (0..n).map(|j| ((7 * r + 3 * j + 1) % 50) as u32).collect()).collect();
    let alone = |row: &[u32]| -> Tensor {
        let ids: Vec<i64> = row.iter().map(|&t| t as i64).collect();
        let n = ids.len() as i64;
        model.logits(&Tensor::from_slice(&ids).view([1, n]), &Tensor::ones([1, n], (Kind::Bool, Device::Cpu))).squeeze_dim(0) // [n, V]
    };
    let (ids, valid) = left_pad(&rows, 0);
    let width = ids[0].len() as i64;
    let flat_ids: Vec<i64> = ids.concat().iter().map(|&t| t as i64).collect();
    let flat_valid: Vec<bool> = valid.concat();
    let shape = [rows.len() as i64, width];
    let logits = model.logits(&Tensor::from_slice(&flat_ids).view(shape), &Tensor::from_slice(&flat_valid).view(shape)); // [B, T, V]
    for (r, row) in rows.iter().enumerate() {
        let own = alone(row);
        let n = row.len() as i64;
        let batched = logits.get(r as i64).narrow(0, width - n, n);
        let gap = (&batched - &own).abs().max().double_value(&[]);
        assert!(gap < 1e-4, "row {r}: left-padded logits differ from the row alone by {gap}");
    }
    // Right padding keeps each row's logits too, but the next-token logits of a
    // shorter row are then in its own last column, not in the batch's last one.
    let refs: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
    let (right_ids, right_valid) = pad_right(&refs, Device::Cpu);
    let right = model.logits(&right_ids, &right_valid);
    let short = 2; // one token
    let own_next = alone(&rows[short]).get(0);
    assert!((right.get(short as i64).get(0) - &own_next).abs().max().double_value(&[]) < 1e-4);
    assert!((right.get(short as i64).get(width - 1) - &own_next).abs().max().double_value(&[]) > 1e-3);
    assert!((logits.get(short as i64).get(width - 1) - &own_next).abs().max().double_value(&[]) < 1e-4);
}

// ---------------------------------------------------------------------------
// Exercise 5.3
// ---------------------------------------------------------------------------

#[test]
fn ex3_small_cases() {
    let logprobs = Tensor::from_slice(&[-1.0f32, -2.0, -3.0, -0.5, -100.0, -0.25]).view([2, 3]);
    let mask = Tensor::from_slice(&[0.0f32, 1.0, 1.0, 1.0, 0.0, 1.0]).view([2, 3]);
    let got = sequence_logprobs(&logprobs, &mask);
    assert_eq!(got.len(), 2);
    assert_close("row 0", got[0], -5.0, 1e-9);
    assert_close("row 1", got[1], -0.75, 1e-9);
    assert_eq!(sequence_logprobs(&logprobs, &mask.zeros_like()), vec![0.0, 0.0]);
    // Garbage off the mask (and gradients on) change nothing.
    let garbage = logprobs.where_self(&mask.ne(0.0), &Tensor::full([2, 3], 1e6, (Kind::Float, Device::Cpu))).set_requires_grad(true);
    assert_eq!(sequence_logprobs(&garbage, &mask), got);
}

#[test]
fn ex3_sums_the_sampling_logprobs_of_each_episode() {
    let (tasks, bpe) = setup();
    let model = tiny(&bpe, 2);
    let episodes = played(&tasks, &bpe, &model, 1);
    let trajectories: Vec<Trajectory> = episodes.iter().map(Trajectory::from_played).collect();
    let batch = collate(&trajectories, Device::Cpu);
    let sampled: Vec<f64> = episodes.iter().map(|p| policy_segments(p).iter().flat_map(|(_, _, s)| s.logprobs.iter()).copied().sum()).collect();
    let stored = sequence_logprobs(&batch.logprobs, &batch.mask);
    let recomputed = sequence_logprobs(&policy_logprobs(&model, &batch), &batch.mask); // with gradients
    assert_eq!(stored.len(), episodes.len());
    assert_eq!(recomputed.len(), episodes.len());
    for (b, want) in sampled.iter().enumerate() {
        assert_close(&format!("stored, episode {b}"), stored[b], *want, 1e-4);
        assert_close(&format!("recomputed, episode {b}"), recomputed[b], *want, 1e-3);
    }
}

#[test]
fn ex3_agrees_with_the_masked_loss() {
    let (tasks, bpe) = setup();
    let model = tiny(&bpe, 4);
    let _guard = tch::no_grad_guard();
    let trajectories: Vec<Trajectory> = corpus(&tasks, 4, 5).iter().map(|t| from_transcript(&bpe, t)).collect();
    let batch = collate(&trajectories, Device::Cpu);
    let per_episode = sequence_logprobs(&policy_logprobs(&model, &batch), &batch.mask);
    let loss = weighted_nll(&model, &batch, &batch.mask).double_value(&[]);
    let tokens = batch.mask.sum(Kind::Double).double_value(&[]);
    assert_close("-(sum of the sequence log-probs) / action tokens", -per_episode.iter().sum::<f64>() / tokens, loss, 1e-4);
    // Every action token costs something under an untrained model.
    assert!(per_episode.iter().all(|&l| l < 0.0), "{per_episode:?}");
}

// ---------------------------------------------------------------------------
// Exercise 5.4
// ---------------------------------------------------------------------------

/// Two tokens whose strings, joined, are the string of token `id` (so they
/// decode to the same text), if the vocabulary has such a pair.
fn split(bpe: &Bpe, id: u32) -> Option<(u32, u32)> {
    if id < agentrl::tokenizer::SPECIAL.len() as u32 {
        return None;
    }
    let chars: Vec<char> = bpe.token(id).chars().collect();
    (1..chars.len()).find_map(|i| {
        let left: String = chars[..i].iter().collect();
        let right: String = chars[i..].iter().collect();
        Some((bpe.id(&left)?, bpe.id(&right)?))
    })
}

#[test]
fn ex4_the_template_encodes_canonically() {
    let (tasks, bpe) = setup();
    for transcript in corpus(&tasks, 4, 11) {
        assert_eq!(retokenization_mismatches(&bpe, &from_transcript(&bpe, &transcript)), Vec::<usize>::new());
    }
}

#[test]
fn ex4_a_split_token_is_caught() {
    let (tasks, bpe) = setup();
    let mut tried = 0;
    for transcript in corpus(&tasks, 3, 13) {
        let canonical = from_transcript(&bpe, &transcript);
        let actions: Vec<(usize, usize)> = message_bodies(&bpe, &transcript).into_iter().filter(|b| b.0 == Owner::Policy).map(|b| (b.1, b.2)).collect();
        // In each action, the first token that splits into two vocabulary tokens.
        let splits: Vec<(usize, usize, (u32, u32))> = actions
            .iter()
            .enumerate()
            .filter_map(|(k, &(start, end))| (start..end).find_map(|t| split(&bpe, canonical.ids[t]).map(|pair| (k, t, pair))))
            .collect();
        let apply = |chosen: &[(usize, usize, (u32, u32))]| -> Trajectory {
            let mut tr = canonical.clone();
            for &(_, t, (a, b)) in chosen.iter().rev() {
                assert_eq!(bpe.decode(&[a, b]), bpe.decode(&[tr.ids[t]]), "the split decodes to the same text");
                tr.ids.splice(t..t + 1, [a, b]);
                tr.owners.insert(t, Owner::Policy);
                tr.logprobs.insert(t, 0.0);
            }
            assert_eq!(bpe.decode(&tr.ids), bpe.decode(&canonical.ids), "the text is unchanged");
            tr
        };
        for one in &splits {
            assert_eq!(retokenization_mismatches(&bpe, &apply(std::slice::from_ref(one))), vec![one.0], "only action {} was split", one.0);
            tried += 1;
        }
        let every: Vec<usize> = splits.iter().map(|s| s.0).collect();
        assert_eq!(retokenization_mismatches(&bpe, &apply(&splits)), every);
    }
    assert!(tried >= 3, "the test found only {tried} splittable actions");
}

#[test]
fn ex4_agrees_with_the_played_segments() {
    let (tasks, bpe) = setup();
    let model = tiny(&bpe, 5);
    let mut seen = 0;
    for p in played(&tasks, &bpe, &model, 2) {
        let expected: Vec<usize> = policy_segments(&p).iter().enumerate().filter(|(_, (_, _, s))| retokenized_action(&bpe, &s.ids) != s.ids).map(|(k, _)| k).collect();
        seen += expected.len();
        assert_eq!(retokenization_mismatches(&bpe, &Trajectory::from_played(&p)), expected, "task {}", p.task);
    }
    eprintln!("{seen} mismatched actions in the played episodes");
}

// ---------------------------------------------------------------------------
// Exercise 5.5
// ---------------------------------------------------------------------------

/// A trajectory of `n` placeholder tokens (only its length matters here).
fn of_length(n: usize) -> Trajectory {
    Trajectory { task: 0, ids: vec![3; n], owners: vec![Owner::Env; n], logprobs: vec![0.0; n], reward: 0.0, info: Info::default() }
}

/// The padding share, counted from the `valid` masks of `collate` on
/// consecutive chunks of `batch` trajectories.
fn collated_padding(lengths: &[usize], batch: usize) -> f64 {
    let (mut pad, mut slots) = (0i64, 0i64);
    for chunk in lengths.chunks(batch) {
        let trajectories: Vec<Trajectory> = chunk.iter().map(|&n| of_length(n)).collect();
        let collated = collate(&trajectories, Device::Cpu);
        slots += collated.valid.numel() as i64;
        pad += collated.valid.logical_not().sum(Kind::Int64).int64_value(&[]);
    }
    pad as f64 / slots as f64
}

/// Pseudo-random lengths from 1 to 300 (a small LCG, so that the test needs no crate).
fn lengths(n: usize, seed: u64) -> Vec<usize> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            1 + ((state >> 33) % 300) as usize
        })
        .collect()
}

#[test]
fn ex5_small_cases() {
    assert_close("[5, 1, 5, 1] by 2", padding_fraction(&[5, 1, 5, 1], 2, false), 8.0 / 20.0, 1e-12);
    assert_close("[5, 1, 5, 1] by 2, sorted", padding_fraction(&[5, 1, 5, 1], 2, true), 0.0, 1e-12);
    // Shortest first: the three short ones share a batch, the long one is alone.
    assert_close("[10, 1, 1, 1] by 3, sorted", padding_fraction(&[10, 1, 1, 1], 3, true), 0.0, 1e-12);
    assert_close("[10, 1, 1, 1] by 3", padding_fraction(&[10, 1, 1, 1], 3, false), 18.0 / 31.0, 1e-12);
    assert_eq!(padding_fraction(&[], 4, false), 0.0);
    assert_eq!(padding_fraction(&[0, 0, 0], 2, true), 0.0);
    assert_eq!(padding_fraction(&[7], 4, false), 0.0);
}

#[test]
fn ex5_limits() {
    let some = lengths(37, 1);
    for sort in [false, true] {
        assert_eq!(padding_fraction(&[12; 20], 6, sort), 0.0, "equal lengths need no padding");
        assert_eq!(padding_fraction(&some, 1, sort), 0.0, "a batch of one needs no padding");
        // One batch for everything: the order cannot matter.
        let longest = *some.iter().max().unwrap();
        let one_batch = 1.0 - some.iter().sum::<usize>() as f64 / (some.len() * longest) as f64;
        assert_close("a single batch", padding_fraction(&some, 64, sort), one_batch, 1e-12);
    }
}

#[test]
fn ex5_agrees_with_collate() {
    for (n, batch, seed) in [(32, 8, 2), (13, 4, 3), (9, 16, 4)] {
        let mut lens = lengths(n, seed);
        assert_close(&format!("{n} by {batch}"), padding_fraction(&lens, batch, false), collated_padding(&lens, batch), 1e-12);
        let sorted = padding_fraction(&lens, batch, true);
        lens.sort();
        assert_close(&format!("{n} by {batch}, sorted"), sorted, collated_padding(&lens, batch), 1e-12);
    }
}

#[test]
fn ex5_sorting_helps_when_the_batches_are_full() {
    for seed in 10..20 {
        let lens = lengths(48, seed);
        for batch in [4, 8, 16] {
            let (as_given, sorted) = (padding_fraction(&lens, batch, false), padding_fraction(&lens, batch, true));
            assert!(sorted <= as_given + 1e-12, "seed {seed}, batch {batch}: sorted {sorted} > unsorted {as_given}");
            // Sorting forgets the order it was given.
            let reversed: Vec<usize> = lens.iter().rev().copied().collect();
            assert_close("sorted, from the reversed order", padding_fraction(&reversed, batch, true), sorted, 1e-12);
        }
        assert!(padding_fraction(&lens, 8, true) < padding_fraction(&lens, 8, false), "seed {seed}: random lengths always waste less once sorted");
    }
}
