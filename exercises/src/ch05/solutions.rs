//! Chapter 5: reference solutions. The model answers, with the reasoning
//! behind them, are in `chapters/answers-05.md`.

use agentrl::episode::Owner;
use agentrl::tokenizer::Bpe;
use agentrl::trajectory::{retokenized_action, Trajectory};
use tch::{Kind, Tensor};

/// Exercise 5.1: open a span at a policy token that follows a non-policy
/// token (or the start), close it at the next non-policy token (or the end).
pub fn action_spans(owners: &[Owner]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (t, &owner) in owners.iter().enumerate() {
        match (owner == Owner::Policy, start) {
            (true, None) => start = Some(t),
            (false, Some(s)) => {
                spans.push((s, t));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, owners.len()));
    }
    spans
}

/// Exercise 5.2: `width - len` pads, then the row.
pub fn left_pad(rows: &[Vec<u32>], pad: u32) -> (Vec<Vec<u32>>, Vec<Vec<bool>>) {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    rows.iter()
        .map(|row| {
            let missing = width - row.len();
            let ids = std::iter::repeat_n(pad, missing).chain(row.iter().copied()).collect();
            let valid = std::iter::repeat_n(false, missing).chain(std::iter::repeat_n(true, row.len())).collect();
            (ids, valid)
        })
        .unzip()
}

/// Exercise 5.3: multiply by the mask in double precision, sum over time.
pub fn sequence_logprobs(logprobs: &Tensor, mask: &Tensor) -> Vec<f64> {
    let logprobs = logprobs.detach().to_kind(Kind::Double);
    let mask = mask.detach().to_kind(Kind::Double);
    // Multiplying would turn a -inf or NaN under a 0 of the mask into NaN; select instead.
    let kept = logprobs.where_self(&mask.ne(0.0), &logprobs.zeros_like()) * &mask;
    let sums = kept.sum_dim_intlist(1, false, Kind::Double).to_device(tch::Device::Cpu);
    Vec::<f64>::try_from(sums).expect("a [B] tensor of doubles")
}

/// Exercise 5.4: re-encode each action's ids and compare.
pub fn retokenization_mismatches(bpe: &Bpe, trajectory: &Trajectory) -> Vec<usize> {
    action_spans(&trajectory.owners)
        .into_iter()
        .enumerate()
        .filter(|&(_, (start, end))| {
            let sampled = &trajectory.ids[start..end];
            retokenized_action(bpe, sampled) != sampled
        })
        .map(|(k, _)| k)
        .collect()
}

/// Exercise 5.5: count real positions and padded slots batch by batch.
pub fn padding_fraction(lengths: &[usize], batch: usize, sort_by_length: bool) -> f64 {
    let mut order = lengths.to_vec();
    if sort_by_length {
        order.sort(); // stable, shortest first (equal lengths are interchangeable anyway)
    }
    let (mut real, mut slots) = (0usize, 0usize);
    for chunk in order.chunks(batch) {
        real += chunk.iter().sum::<usize>();
        slots += chunk.len() * chunk.iter().copied().max().unwrap_or(0);
    }
    if slots == 0 {
        0.0
    } else {
        (slots - real) as f64 / slots as f64
    }
}
