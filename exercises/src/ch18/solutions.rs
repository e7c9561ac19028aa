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
    if mean(&values(run, Panel::ClipFraction)) > 2.0 * mean(&values(healthy, Panel::ClipFraction)) {
        return Some(Bug::StaleLogprobs); // ratios far from 1 from the first minibatch on
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
    // Two sequences: a prompt token, then 2 and 5 action tokens with tool output between.
    let owners = [
        vec![Owner::Prompt, Owner::Policy, Owner::Policy, Owner::Env, Owner::Env, Owner::Env, Owner::Env],
        vec![Owner::Prompt, Owner::Policy, Owner::Policy, Owner::Env, Owner::Policy, Owner::Policy, Owner::Policy],
    ];
    let trajectories: Vec<Trajectory> = owners
        .iter()
        .enumerate()
        .map(|(k, o)| Trajectory { task: k, ids: (3..3 + o.len() as u32).collect(), owners: o.clone(), logprobs: o.iter().map(|&w| if w == Owner::Policy { -0.5 } else { 0.0 }).collect(), reward: 1.0, info: Default::default() })
        .collect();
    let batch = collate(&trajectories, Device::Cpu);
    let logp = batch.logprobs.detach().copy().set_requires_grad(true); // [2, 7], ratio 1 everywhere
    let forward = Forward { logp: logp.shallow_clone(), entropy: logp.zeros_like(), hidden: Tensor::zeros([2, 7, 1], (Kind::Double, Device::Cpu)), log_probs: Tensor::zeros([7, 1], (Kind::Double, Device::Cpu)) };
    let advantages = per_token(&[1.0, 1.0], &batch.mask); // [2, 7]
    algorithm.loss(&forward, &batch, &advantages, &[0, 1], &mut Report::new()).backward();
    let grad = Vec::<f64>::try_from(logp.grad().view([-1])).map_err(|e| e.to_string())?;
    let mask = Vec::<f64>::try_from(batch.mask.view([-1])).map_err(|e| e.to_string())?;
    let want = -1.0 / (2.0 * MAX_ACTION_TOKENS);
    for (i, (&g, &m)) in grad.iter().zip(&mask).enumerate() {
        let expected = if m == 1.0 { want } else { 0.0 };
        if (g - expected).abs() > 1e-9 * want.abs().max(1.0) {
            return Err(format!("token {} of sequence {}: gradient {g:.6e}, expected {expected:.6e}", i % 7, i / 7));
        }
    }
    Ok(())
}
// ANCHOR_END: ex2
