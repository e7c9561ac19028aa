//! Chapter 14: packing several trajectories into one row of the update
//! (a block-diagonal causal mask and positions that restart with each
//! sequence), and micro-batches whose gradients add up to the whole batch's.

use crate::book::REAL;
use crate::episode::Owner;
use crate::grpo::{grpo_loss, LossNorm};
use crate::pg::{at_actions, forward, Forward};
use crate::tinyagent::TinyAgent;
use crate::trajectory::{collate, Trajectory};
use tch::{Device, Kind, Tensor};

// ANCHOR: pack
/// First-fit decreasing: the sequences (indices into `lengths`) in bins
/// whose lengths add up to at most `capacity`. Each sequence, longest first,
/// goes into the first bin with room for it, or opens a new one. An error
/// names a sequence longer than a bin.
pub fn pack(lengths: &[usize], capacity: usize) -> Result<Vec<Vec<usize>>, String> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i])); // stable: equal lengths keep their order
    let mut bins: Vec<(usize, Vec<usize>)> = Vec::new(); // (room left, sequences)
    for i in order {
        if lengths[i] > capacity {
            return Err(format!(
                "sequence {i} has {} tokens, more than a row's {capacity}",
                lengths[i]
            ));
        }
        match bins.iter_mut().find(|(room, _)| *room >= lengths[i]) {
            Some((room, sequences)) => {
                *room -= lengths[i];
                sequences.push(i);
            }
            None => bins.push((capacity - lengths[i], vec![i])),
        }
    }
    Ok(bins.into_iter().map(|(_, sequences)| sequences).collect())
}
// ANCHOR_END: pack

// ANCHOR: packed
/// Trajectories packed into R rows of C tokens, several to a row, one after
/// the other, padding only at the end of a row.
pub struct Packed {
    pub ids: Tensor,       // [R, C] i64, 0 (`<|pad|>`) after a row's last sequence
    pub positions: Tensor, // [R, C] i64, 0 at the first token of every sequence
    pub allowed: Tensor, // [R, 1, C, C] bool: query i sees key j if both are in one sequence and j <= i
    pub mask: Tensor,    // [R, C] f64, 1 on tokens the policy sampled
    pub logprobs: Tensor, // [R, C] f64, sampling log-probs (0 off the mask)
    /// Where each trajectory lies, in their order: (row, offset, length).
    pub places: Vec<(usize, usize, usize)>,
}

/// Pack `trajectories` by `bins` (from [`pack`]): the rows are as wide as the
/// fullest one.
pub fn collate_packed(trajectories: &[Trajectory], bins: &[Vec<usize>], device: Device) -> Packed {
    let c = bins
        .iter()
        .map(|bin| {
            bin.iter()
                .map(|&i| trajectories[i].ids.len())
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);
    let r = bins.len();
    let (mut ids, mut positions, mut segment) =
        (vec![0i64; r * c], vec![0i64; r * c], vec![-1i64; r * c]);
    let (mut mask, mut logprobs) = (vec![0f64; r * c], vec![0f64; r * c]);
    let mut places = vec![(0, 0, 0); trajectories.len()];
    for (row, bin) in bins.iter().enumerate() {
        let mut offset = 0;
        for &i in bin {
            let tr = &trajectories[i];
            for (k, ((&id, &owner), &logprob)) in
                tr.ids.iter().zip(&tr.owners).zip(&tr.logprobs).enumerate()
            {
                let at = row * c + offset + k;
                (ids[at], positions[at], segment[at], logprobs[at]) =
                    (id as i64, k as i64, i as i64, logprob);
                mask[at] = if owner == Owner::Policy { 1.0 } else { 0.0 };
            }
            places[i] = (row, offset, tr.ids.len());
            offset += tr.ids.len();
        }
    }
    let shape = [r as i64, c as i64];
    let segment = Tensor::from_slice(&segment).view(shape).to_device(device); // [R, C], −1 on padding
    let same = segment.unsqueeze(2).eq_tensor(&segment.unsqueeze(1)); // [R, C, C]: query i, key j in one sequence
    let index = Tensor::arange(c as i64, (Kind::Int64, device));
    let causal = index.view([1, -1]).le_tensor(&index.view([-1, 1])); // [C, C]: j <= i
                                                                      // Padding attends to the padding before it, so that no query sees nothing (a softmax over no key is NaN).
    let allowed = same.logical_and(&causal.unsqueeze(0)).unsqueeze(1); // [R, 1, C, C]
    Packed {
        ids: Tensor::from_slice(&ids).view(shape).to_device(device),
        positions: Tensor::from_slice(&positions).view(shape).to_device(device),
        allowed,
        mask: Tensor::from_slice(&mask).view(shape).to_device(device),
        logprobs: Tensor::from_slice(&logprobs).view(shape).to_device(device),
        places,
    }
}
// ANCHOR_END: packed

// ANCHOR: forward_packed
/// [`crate::pg::forward`] on packed rows: log π_θ and the entropy at the
/// action tokens, [R, C] each in the packed layout, and the hidden states
/// [R, C, D]. A token sees only its own sequence, at the positions it would
/// have alone, so every number equals the padded computation's.
pub fn forward_packed(model: &TinyAgent, packed: &Packed) -> Forward {
    let hidden = model.hidden_with(&packed.ids, &packed.positions, &packed.allowed); // [R, C, D]
    at_actions(model, hidden, &packed.ids, &packed.mask)
}

/// Packed values [R, C] back in the padded layout [B, T] of
/// [`crate::trajectory::collate`] (T = the longest trajectory, 0 after the
/// end of each); differentiable.
pub fn unpack(values: &Tensor, places: &[(usize, usize, usize)]) -> Tensor {
    let c = values.size()[1] as usize;
    let t = places.iter().map(|p| p.2).max().unwrap_or(0);
    let (mut from, mut to) = (Vec::new(), Vec::new());
    for (b, &(row, offset, length)) in places.iter().enumerate() {
        for k in 0..length {
            from.push((row * c + offset + k) as i64);
            to.push((b * t + k) as i64);
        }
    }
    let device = values.device();
    let (from, to) = (
        Tensor::from_slice(&from).to_device(device),
        Tensor::from_slice(&to).to_device(device),
    );
    let picked = values.reshape([-1]).index_select(0, &from); // [Σ lengths]
    let zeros = Tensor::zeros([(places.len() * t) as i64], (values.kind(), device));
    zeros
        .index_put(&[Some(&to)], &picked, false)
        .view([places.len() as i64, t as i64]) // [B, T]
}
// ANCHOR_END: forward_packed

// ANCHOR: slots
/// Token slots an update computes on: padded to the longest of each
/// minibatch of `rows` sequences (in order), or packed into rows of
/// `capacity` tokens (each as wide as its fullest row). Returns (slots, real tokens).
pub fn slots_padded(lengths: &[usize], rows: usize) -> (usize, usize) {
    let slots = lengths
        .chunks(rows.max(1))
        .map(|chunk| chunk.len() * chunk.iter().max().unwrap_or(&0))
        .sum();
    (slots, lengths.iter().sum())
}

/// See [`slots_padded`]; an error if a sequence is longer than `capacity`.
pub fn slots_packed(lengths: &[usize], capacity: usize) -> Result<(usize, usize), String> {
    let bins = pack(lengths, capacity)?;
    let widest = bins
        .iter()
        .map(|bin| bin.iter().map(|&i| lengths[i]).sum::<usize>())
        .max()
        .unwrap_or(0);
    Ok((bins.len() * widest, lengths.iter().sum()))
}
// ANCHOR_END: slots

// ANCHOR: microbatch
/// How the losses of K micro-batches are weighted before their gradients are
/// added up into one optimiser step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accumulate {
    /// Each micro-batch's loss, averaged by the normalisation as if it were
    /// the whole batch, times its share of the whole batch's denominator.
    Share,
    /// Each micro-batch's loss divided by K (the mean of the micro-batches'
    /// losses): the whole batch's gradient only if they are all alike.
    Equal,
}

/// The weight of a micro-batch of `rows` sequences and `tokens` action
/// tokens, out of a batch of `batch_rows` and `batch_tokens`, split into `k`.
/// With [`Accumulate::Share`] the weighted losses add up to the loss of the
/// whole batch under `norm`, and so do their gradients:
/// sequence mean and constant: rows / batch_rows (both divide by a number of
/// sequences); token mean: tokens / batch_tokens.
pub fn microbatch_weight(
    rule: Accumulate,
    norm: LossNorm,
    (rows, tokens): (usize, f64),
    (batch_rows, batch_tokens): (usize, f64),
    k: usize,
) -> f64 {
    match (rule, norm) {
        (Accumulate::Equal, _) => 1.0 / k as f64,
        (Accumulate::Share, LossNorm::SequenceMean | LossNorm::Constant(_)) => {
            rows as f64 / batch_rows as f64
        }
        (Accumulate::Share, LossNorm::TokenMean) => tokens / batch_tokens.max(1.0),
    }
}
// ANCHOR_END: microbatch

// ANCHOR: gradient
/// The gradient of Chapter 9's clipped loss (clip range `eps`, averaged by
/// `norm`) for `trajectories` with one advantage each, its sampling
/// log-probs as π_old. With `micro` empty: the whole batch, padded, in one
/// pass. Otherwise: one packed pass per micro-batch (lists of trajectory
/// indices covering the batch), each loss weighted by `rule`, the gradients added up.
pub fn loss_gradient(
    model: &TinyAgent,
    trajectories: &[Trajectory],
    advantages: &[f64],
    (norm, eps): (LossNorm, (f64, f64)),
    micro: &[Vec<usize>],
    rule: Accumulate,
) -> Vec<Tensor> {
    let params = model.vs.trainable_variables();
    let action_tokens = |rows: &[usize]| {
        rows.iter()
            .map(|&i| {
                trajectories[i]
                    .owners
                    .iter()
                    .filter(|&&o| o == Owner::Policy)
                    .count()
            })
            .sum::<usize>() as f64
    };
    let spread = |rows: &[usize], mask: &Tensor| {
        Tensor::from_slice(&rows.iter().map(|&i| advantages[i]).collect::<Vec<_>>())
            .to_device(mask.device())
            .unsqueeze(1)
            * mask
    }; // [b, T]
    if micro.is_empty() {
        let batch = collate(trajectories, model.device());
        let all: Vec<usize> = (0..trajectories.len()).collect();
        let (loss, _) = grpo_loss(
            &forward(model, &batch).logp,
            &batch.logprobs,
            &spread(&all, &batch.mask),
            &batch.mask,
            eps,
            norm,
        );
        return Tensor::run_backward(&[loss], &params, false, false);
    }
    let whole = (
        trajectories.len(),
        action_tokens(&(0..trajectories.len()).collect::<Vec<_>>()),
    );
    let mut sum: Option<Vec<Tensor>> = None;
    for rows in micro {
        let picked: Vec<Trajectory> = rows.iter().map(|&i| trajectories[i].clone()).collect();
        let packed = collate_packed(&picked, &[(0..picked.len()).collect()], model.device()); // one row
        let mask = unpack(&packed.mask, &packed.places); // [b, T]
        let logp = unpack(&forward_packed(model, &packed).logp, &packed.places); // [b, T]
        let (loss, _) = grpo_loss(
            &logp,
            &unpack(&packed.logprobs, &packed.places),
            &spread(rows, &mask),
            &mask,
            eps,
            norm,
        );
        let w = microbatch_weight(
            rule,
            norm,
            (rows.len(), action_tokens(rows)),
            whole,
            micro.len(),
        );
        let grads = Tensor::run_backward(&[loss * w], &params, false, false);
        sum = Some(match sum {
            None => grads,
            Some(total) => total.iter().zip(&grads).map(|(a, b)| a + b).collect(),
        });
    }
    sum.unwrap_or_default()
}

/// ‖a − b‖ / ‖b‖ over all the parameters' gradients.
pub fn relative_error(a: &[Tensor], b: &[Tensor]) -> f64 {
    let squares = |xs: Vec<Tensor>| {
        xs.iter()
            .map(|x| x.square().sum(REAL).double_value(&[]))
            .sum::<f64>()
    };
    (squares(a.iter().zip(b).map(|(x, y)| x - y).collect())
        / squares(b.iter().map(|y| y.shallow_clone()).collect()))
    .sqrt()
}
// ANCHOR_END: gradient

/// Real tokens per padded token slot, as a share of all slots.
pub fn padding_share((slots, tokens): (usize, usize)) -> f64 {
    if slots == 0 {
        0.0
    } else {
        1.0 - tokens as f64 / slots as f64
    }
}

/// The rows of `per_token` values in the padded layout, summed: used by tests.
#[cfg(test)]
fn total(t: &Tensor) -> f64 {
    t.sum(REAL).double_value(&[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tinyagent::Config;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn model() -> TinyAgent {
        tch::manual_seed(3);
        TinyAgent::new(
            Config {
                vocab: 40,
                n_ctx: 64,
                d_model: 16,
                n_layer: 2,
                n_head: 2,
            },
            Device::Cpu,
        )
    }

    /// Trajectories of random lengths, owners and tokens.
    fn trajectories(n: usize, seed: u64) -> Vec<Trajectory> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let len = rng.random_range(3..40);
                let owners: Vec<Owner> = (0..len)
                    .map(|k| {
                        if k > 0 && rng.random_bool(0.4) {
                            Owner::Policy
                        } else {
                            Owner::Prompt
                        }
                    })
                    .collect();
                let logprobs = owners
                    .iter()
                    .map(|o| {
                        if *o == Owner::Policy {
                            -rng.random_range(0.1..2.0)
                        } else {
                            0.0
                        }
                    })
                    .collect();
                Trajectory {
                    task: 0,
                    ids: (0..len).map(|_| rng.random_range(1..40)).collect(),
                    owners,
                    logprobs,
                    reward: rng.random_range(0..2) as f64,
                    info: Default::default(),
                }
            })
            .collect()
    }

    #[test]
    fn first_fit_decreasing_fills_bins_without_overflow_and_keeps_every_sequence() {
        let lengths = [7, 3, 9, 2, 5, 5, 1, 8];
        let bins = pack(&lengths, 10).unwrap();
        assert_eq!(bins, vec![vec![2, 6], vec![7, 3], vec![0, 1], vec![4, 5]]);
        let mut seen: Vec<usize> = bins.concat();
        seen.sort();
        assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
        assert!(pack(&[4, 11], 10)
            .unwrap_err()
            .contains("sequence 1 has 11 tokens"));
        assert_eq!(slots_padded(&lengths, 4), (4 * 9 + 4 * 8, 40));
        assert_eq!(slots_packed(&lengths, 10).unwrap(), (4 * 10, 40));
    }

    #[test]
    fn packed_log_probs_and_entropies_equal_the_padded_ones() {
        let model = model();
        let trs = trajectories(9, 1);
        let padded = forward(&model, &collate(&trs, Device::Cpu));
        let lengths: Vec<usize> = trs.iter().map(|t| t.ids.len()).collect();
        let packed = collate_packed(&trs, &pack(&lengths, 64).unwrap(), Device::Cpu);
        assert!(packed.ids.size()[0] < 9, "several sequences share a row");
        let forward = forward_packed(&model, &packed);
        for (a, b) in [
            (&forward.logp, &padded.logp),
            (&forward.entropy, &padded.entropy),
        ] {
            let gap = (unpack(a, &packed.places) - b)
                .abs()
                .max()
                .double_value(&[]);
            assert!(gap < 1e-6, "packed and padded differ by {gap}");
        }
        // Without the block-diagonal mask, a sequence would read the one before it.
        let leaky = Packed {
            allowed: Tensor::ones_like(&packed.allowed).tril(0),
            ..collate_packed(&trs, &pack(&lengths, 64).unwrap(), Device::Cpu)
        };
        let gap = (unpack(&forward_packed(&model, &leaky).logp, &leaky.places) - &padded.logp)
            .abs()
            .max()
            .double_value(&[]);
        assert!(
            gap > 1e-3,
            "a causal mask across sequences changes the log-probs ({gap})"
        );
        assert!(
            total(&unpack(&packed.mask, &packed.places))
                == total(&padded.logp.ne(0.0).to_kind(REAL))
        );
    }

    #[test]
    fn micro_batches_weighted_by_their_share_give_the_whole_batch_gradient_for_every_normalisation()
    {
        let model = model();
        let trs = trajectories(12, 2);
        let advantages: Vec<f64> = (0..12).map(|i| (i as f64 - 5.5) / 4.0).collect();
        let micro: Vec<Vec<usize>> = vec![vec![0, 1, 2, 3, 4, 5, 6], vec![7, 8], vec![9, 10, 11]];
        for norm in [
            LossNorm::SequenceMean,
            LossNorm::TokenMean,
            LossNorm::Constant(10.0),
        ] {
            let whole = loss_gradient(
                &model,
                &trs,
                &advantages,
                (norm, (0.2, 0.28)),
                &[],
                Accumulate::Share,
            );
            let share = relative_error(
                &loss_gradient(
                    &model,
                    &trs,
                    &advantages,
                    (norm, (0.2, 0.28)),
                    &micro,
                    Accumulate::Share,
                ),
                &whole,
            );
            let equal = relative_error(
                &loss_gradient(
                    &model,
                    &trs,
                    &advantages,
                    (norm, (0.2, 0.28)),
                    &micro,
                    Accumulate::Equal,
                ),
                &whole,
            );
            assert!(share < 1e-12, "{norm:?}: {share}");
            assert!(
                equal > 1e-2,
                "{norm:?}: unequal micro-batches weighted 1/K are wrong ({equal})"
            );
        }
    }
}
