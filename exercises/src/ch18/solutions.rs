//! Reference solutions for the Chapter 18 exercises (the `solutions` feature).

use agentrl::debugging::{Bug, Panel};
use agentrl::episode::Owner;
use agentrl::grpo::MAX_ACTION_TOKENS;
use agentrl::pg::{per_token, Algorithm, Forward, Report, TrainRecord};
use agentrl::trajectory::{collate, Trajectory};
use tch::{Device, Kind, Tensor};

// ANCHOR: ex1
pub fn diagnose(run: &[TrainRecord], healthy: &[TrainRecord]) -> Option<Bug> {
    let training = run.len().min(healthy.len()) - 1; // the last line only evaluates
    let values = |records: &[TrainRecord], panel: Panel| -> Vec<f64> { (0..training).filter_map(|i| panel.value(records, i, 1)).collect() };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    // Invariants first: each holds exactly in a healthy run.
    if mean(&values(run, Panel::MaskCoverage)) > 0.5 {
        return Some(Bug::MaskOff); // the loss sees almost every token
    }
    if values(run, Panel::IdsDiffer).iter().any(|&n| n > 0.0) {
        return Some(Bug::Retokenized); // trained ids are not the sampled ones
    }
    if values(run, Panel::GroupAdvantageMean).iter().any(|&m| m > 1e-6) {
        return Some(Bug::GroupShift); // advantages do not average to 0 within a group
    }
    let kl = values(run, Panel::Kl);
    if kl.iter().all(|&k| k == 0.0) && values(healthy, Panel::Kl).iter().any(|&k| k > 0.0) {
        return Some(Bug::ReferenceAliased); // the policy never moves away from its "reference"
    }
    // Then comparisons with the healthy run of the same seed.
    if mean(&values(run, Panel::ClipFraction)) > 2.5 * mean(&values(healthy, Panel::ClipFraction)) {
        return Some(Bug::MisalignedLogprobs); // ratios far from 1 from the first minibatch on
    }
    // A bug that leaves iteration 0 alone gives the same numbers there as the healthy run of its seed
    // (same weights, tasks and sampling stream), and at iteration 1 both runs score the same tokens: a
    // difference there is the bug's; later iterations add run-to-run differences the margin must absorb.
    let first = |records: &[TrainRecord]| -> Vec<Option<f64>> {
        [Panel::Reward, Panel::Entropy, Panel::ClipFraction, Panel::ApproxKl, Panel::GradNorm].iter().map(|&p| p.value(records, 0, 1)).collect()
    };
    let later = |records: &[TrainRecord]| mean(&values(records, Panel::ApproxKl)[1..]);
    if first(run) == first(healthy) && later(run) > 1.5 * later(healthy) {
        return Some(Bug::StaleWeights); // π_old lags: each iteration starts with ratios away from 1
    }
    let late = |records: &[TrainRecord]| mean(&values(records, Panel::Reward)[training / 2..]);
    if late(run) < late(healthy) - 0.2 {
        return Some(Bug::AdvantageSignFlipped); // reward falls while the healthy run's rises
    }
    None
}
// ANCHOR_END: ex1

// ANCHOR: ex2
pub fn check_normalisation(algorithm: &mut dyn Algorithm) -> Result<(), String> {
    // Three sequences: a prompt token, then 2, 5 and 2 action tokens, tool output between. The third
    // is short, so the forward pass would run the batch as two micro-batches of 2 and 1 episodes:
    // a loss that averages micro-batch means weighs the third episode differently from the others.
    let owners = [
        vec![Owner::Prompt, Owner::Policy, Owner::Policy, Owner::Env, Owner::Env, Owner::Env, Owner::Env],
        vec![Owner::Prompt, Owner::Policy, Owner::Policy, Owner::Env, Owner::Policy, Owner::Policy, Owner::Policy],
        vec![Owner::Prompt, Owner::Policy, Owner::Policy],
    ];
    let trajectories: Vec<Trajectory> = owners
        .iter()
        .enumerate()
        .map(|(k, o)| Trajectory { task: k, ids: (3..3 + o.len() as u32).collect(), owners: o.clone(), logprobs: o.iter().map(|&w| if w == Owner::Policy { -0.5 } else { 0.0 }).collect(), reward: 1.0, info: Default::default() })
        .collect();
    let batch = collate(&trajectories, Device::Cpu);
    let (b, t) = (owners.len(), owners[0].len());
    let logp = batch.logprobs.detach().copy().set_requires_grad(true); // [B, T], ratio 1 everywhere
    let forward = Forward { logp: logp.shallow_clone(), entropy: logp.zeros_like(), hidden: Tensor::zeros([b as i64, t as i64, 1], (Kind::Double, Device::Cpu)), log_probs: Tensor::zeros([t as i64, 1], (Kind::Double, Device::Cpu)) };
    let advantages = per_token(&vec![1.0; b], &batch.mask); // [B, T]
    algorithm.loss(&forward, &batch, &advantages, &(0..b).collect::<Vec<_>>(), &mut Report::new()).backward();
    let grad = Vec::<f64>::try_from(logp.grad().view([-1])).map_err(|e| e.to_string())?;
    let mask = Vec::<f64>::try_from(batch.mask.view([-1])).map_err(|e| e.to_string())?;
    let want = -1.0 / (b as f64 * MAX_ACTION_TOKENS);
    for (i, (&g, &m)) in grad.iter().zip(&mask).enumerate() {
        let expected = if m == 1.0 { want } else { 0.0 };
        if (g - expected).abs() > 1e-9 * want.abs().max(1.0) {
            return Err(format!("token {} of sequence {}: gradient {g:.6e}, expected {expected:.6e}", i % t, i / t));
        }
    }
    Ok(())
}
// ANCHOR_END: ex2
