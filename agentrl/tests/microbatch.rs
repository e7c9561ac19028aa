//! The update without padding (Chapters 6 and 14): the training loop's
//! forward pass runs over micro-batches of similar length
//! ([`agentrl::pg::forward`]) and puts the pieces back in the batch's shape,
//! so the loss is computed once, as defined. Here, for every loss the book
//! trains with, the gradient through the micro-batched forward pass equals
//! the gradient through one padded pass to 1e-9 relative (64-bit weights),
//! and a planted mistake (a micro-batch cut one token short) is caught.

use agentrl::advantage::{Credit, Critic};
use agentrl::book::REAL;
use agentrl::distill::OnPolicyDistill;
use agentrl::episode::Owner;
use agentrl::grpo::{Grpo, LossNorm, Plain, TrainConfig};
use agentrl::gym::Info;
use agentrl::pg::{
    forward, forward_in, length_buckets, padded_forward, row_lengths, Algorithm, Forward,
    Reinforce, Report,
};
use agentrl::ppo::Ppo;
use agentrl::preference::{sequence_logp, Dpo};
use agentrl::regularization::{KlPenalty, Placement};
use agentrl::tinyagent::{Config, TinyAgent};
use agentrl::trajectory::{collate, Batch, Trajectory};
use std::cell::RefCell;
use std::rc::Rc;
use tch::{Device, Tensor};

const CONFIG: Config = Config {
    vocab: 32,
    n_ctx: 64,
    d_model: 16,
    n_layer: 2,
    n_head: 2,
};

fn model(seed: i64) -> TinyAgent {
    let _turn = agentrl::book::seeded(seed);
    let mut model = TinyAgent::new(CONFIG, Device::Cpu);
    model.vs.set_kind(REAL);
    model
}

/// An episode of `length` tokens: a prompt of 3, then turns of 2 policy
/// tokens and 3 environment tokens; ids and sampling log-probs from `seed`.
fn episode(length: usize, seed: u64, reward: f64) -> Trajectory {
    let owners: Vec<Owner> = (0..length)
        .map(|i| {
            if i < 3 {
                Owner::Prompt
            } else if (i - 3) % 5 < 2 {
                Owner::Policy
            } else {
                Owner::Env
            }
        })
        .collect();
    let ids = (0..length)
        .map(|i| ((seed as usize * 7 + i * 13) % 31 + 1) as u32)
        .collect();
    let logprobs = owners
        .iter()
        .enumerate()
        .map(|(i, &o)| {
            if o == Owner::Policy {
                -0.1 - ((i as u64 * 3 + seed) % 7) as f64 * 0.3
            } else {
                0.0
            }
        })
        .collect();
    Trajectory {
        task: seed as usize % 3,
        ids,
        owners,
        logprobs,
        reward,
        info: Info::default(),
    }
}

/// Twelve episodes of very different lengths (so that they fall into several micro-batches).
fn batch() -> (Vec<Trajectory>, Batch) {
    let lengths = [60, 9, 33, 58, 12, 41, 20, 60, 5, 27, 50, 14];
    let episodes: Vec<Trajectory> = lengths
        .iter()
        .enumerate()
        .map(|(i, &l)| episode(l, i as u64, (i % 3) as f64 / 2.0))
        .collect();
    let batch = collate(&episodes, Device::Cpu);
    (episodes, batch)
}

/// d loss / d θ, flattened over every weight (zeroed first).
fn gradient(model: &TinyAgent, loss: &Tensor) -> Vec<f64> {
    for v in model.vs.trainable_variables() {
        let mut g = v.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
    loss.backward();
    model
        .vs
        .trainable_variables()
        .iter()
        .flat_map(|v| {
            let g = v.grad();
            if g.defined() {
                Vec::<f64>::try_from(g.reshape([-1])).unwrap()
            } else {
                vec![0.0; v.numel()]
            }
        })
        .collect()
}

/// ‖a − b‖ / ‖b‖.
fn relative_gap(a: &[f64], b: &[f64]) -> f64 {
    let gap: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    assert!(norm > 1e-8, "a gradient of zero proves nothing");
    gap / norm
}

/// The gradient of `loss` through the padded pass and through the
/// micro-batched one (with `buckets`, or the loop's own), for a fresh copy of
/// the algorithm each time (some keep state, e.g. a critic).
fn both(
    buckets: Option<Vec<(Vec<usize>, usize)>>,
    mut make: impl FnMut() -> Box<dyn FnMut(&TinyAgent, &Forward, &Batch) -> Tensor>,
) -> (Vec<f64>, Vec<f64>) {
    let policy = model(1);
    let (_, mut batch) = batch();
    // Sampled by the policy itself: every ratio starts at 1, as in an iteration's first step.
    batch.logprobs = tch::no_grad(|| padded_forward(&policy, &batch).logp);
    let padded = padded_forward(&policy, &batch);
    let reference = gradient(&policy, &make()(&policy, &padded, &batch));
    let micro = match buckets {
        Some(buckets) => forward_in(&policy, &batch, &buckets),
        None => forward(&policy, &batch),
    };
    (
        gradient(&policy, &make()(&policy, &micro, &batch)),
        reference,
    )
}

/// An algorithm's loss on the whole batch as one minibatch, and what it reported.
fn loss_of(
    algorithm: &mut dyn Algorithm,
    policy: &TinyAgent,
    forward: &Forward,
    batch: &Batch,
    episodes: &[Trajectory],
) -> (Tensor, Report) {
    let mut report = Report::new();
    let rewards: Vec<f64> = episodes.iter().map(|e| e.reward).collect();
    let rows: Vec<usize> = (0..episodes.len()).collect();
    let advantages = algorithm.advantages(policy, episodes, batch, &rewards, 4, &mut report);
    let loss = algorithm.loss(forward, batch, &advantages, &rows, &mut report);
    (loss, report)
}

/// A fresh algorithm from `make` each time, as a loss of the forward pass;
/// what it reports goes to `reports`.
fn algorithm_loss(
    make: fn() -> Box<dyn Algorithm>,
    reports: Rc<RefCell<Vec<Report>>>,
) -> impl FnMut() -> Box<dyn FnMut(&TinyAgent, &Forward, &Batch) -> Tensor> {
    move || {
        let mut algorithm = make();
        let reports = reports.clone();
        Box::new(
            move |policy: &TinyAgent, forward: &Forward, batch: &Batch| {
                let (loss, report) = loss_of(
                    algorithm.as_mut(),
                    policy,
                    forward,
                    batch,
                    &batch_episodes(),
                );
                reports.borrow_mut().push(report);
                loss
            },
        )
    }
}

fn quiet(
    make: fn() -> Box<dyn Algorithm>,
) -> impl FnMut() -> Box<dyn FnMut(&TinyAgent, &Forward, &Batch) -> Tensor> {
    algorithm_loss(make, Rc::default())
}

fn batch_episodes() -> Vec<Trajectory> {
    batch().0
}

fn grpo(norm: LossNorm) -> TrainConfig {
    TrainConfig {
        norm,
        ..TrainConfig::grpo()
    }
}

#[test]
fn the_batch_falls_into_several_micro_batches() {
    let (_, batch) = batch();
    let buckets = length_buckets(&row_lengths(&batch));
    assert!(buckets.len() >= 4, "{buckets:?}");
    let mut rows: Vec<usize> = buckets.iter().flat_map(|(r, _)| r.clone()).collect();
    rows.sort();
    assert_eq!(rows, (0..12).collect::<Vec<_>>(), "every row exactly once");
    let lengths = row_lengths(&batch);
    for (members, width) in &buckets {
        assert!(members.iter().all(|&r| lengths[r] <= *width));
        let real: usize = members.iter().map(|&r| lengths[r]).sum();
        assert!(
            8 * real >= 7 * members.len() * width,
            "at most an eighth padding: {members:?} width {width}"
        );
    }
}

#[test]
fn the_forward_pass_is_the_same_with_and_without_padding() {
    let policy = model(1);
    let (_, batch) = batch();
    let (a, b) = (padded_forward(&policy, &batch), forward(&policy, &batch));
    for (x, y, what) in [
        (&a.logp, &b.logp, "log-probs"),
        (&a.entropy, &b.entropy, "entropies"),
        (&a.log_probs, &b.log_probs, "next-token distributions"),
    ] {
        assert_eq!(x.size(), y.size());
        let gap = (x - y).abs().max().double_value(&[]);
        assert!(gap < 1e-12, "{what} differ by {gap}");
    }
    // Hidden states agree on every real token (padding is zero in the micro-batched pass).
    let valid = batch.valid.to_kind(REAL).unsqueeze(-1);
    let gap = ((&a.hidden - &b.hidden) * valid)
        .abs()
        .max()
        .double_value(&[]);
    assert!(gap < 1e-12, "hidden states differ by {gap}");
}

#[test]
fn every_loss_norm_and_the_kl_term_get_the_padded_gradient() {
    for norm in [
        LossNorm::SequenceMean,
        LossNorm::TokenMean,
        LossNorm::Constant(128.0),
    ] {
        let (micro, padded) = both(
            None,
            quiet(match norm {
                LossNorm::SequenceMean => || {
                    Box::new(Grpo {
                        config: grpo(LossNorm::SequenceMean),
                        regularizer: Box::new(Plain),
                    }) as Box<dyn Algorithm>
                },
                LossNorm::TokenMean => || {
                    Box::new(Grpo {
                        config: grpo(LossNorm::TokenMean),
                        regularizer: Box::new(Plain),
                    }) as Box<dyn Algorithm>
                },
                LossNorm::Constant(_) => || {
                    Box::new(Grpo {
                        config: grpo(LossNorm::Constant(128.0)),
                        regularizer: Box::new(Plain),
                    }) as Box<dyn Algorithm>
                },
            }),
        );
        let gap = relative_gap(&micro, &padded);
        assert!(gap < 1e-9, "{norm:?}: relative gap {gap}");
    }
    // GRPO++'s normalisation with Chapter 10's KL term in the loss (the reference's pass is micro-batched too).
    let (micro, padded) = both(
        None,
        quiet(|| {
            let penalty = KlPenalty {
                reference: model(2),
                beta: 0.1,
                placement: Placement::Loss,
            };
            Box::new(Grpo {
                config: TrainConfig::grpo_plus_plus(),
                regularizer: Box::new(penalty),
            })
        }),
    );
    assert!(relative_gap(&micro, &padded) < 1e-9);
    let (micro, padded) = both(None, quiet(|| Box::new(Reinforce::plain())));
    assert!(relative_gap(&micro, &padded) < 1e-9);
}

#[test]
fn ppo_with_a_critic_gets_the_padded_gradient_and_value_loss() {
    let reports: Rc<RefCell<Vec<Report>>> = Rc::default();
    let (micro, padded) = both(
        None,
        algorithm_loss(
            || {
                Box::new(Ppo {
                    critic: Critic::new(1e-2, Credit::Turn, 0.95),
                    clip: 0.2,
                })
            },
            reports.clone(),
        ),
    );
    assert!(relative_gap(&micro, &padded) < 1e-9);
    // The critic's own step reads the hidden states: its loss agrees too.
    let reports = reports.borrow();
    let (a, b) = (reports[0]["value_loss"], reports[1]["value_loss"]);
    assert!(
        a > 0.0 && (a - b).abs() < 1e-9 * a,
        "value losses {a} and {b}"
    );
}

#[test]
fn dpo_gets_the_padded_gradient() {
    let (micro, padded) = both(None, || {
        let reference = model(2);
        Box::new(
            move |_policy: &TinyAgent, forward: &Forward, batch: &Batch| {
                // Rows 0-5 chosen, 6-11 rejected; the reference's pass is micro-batched.
                let policy = sequence_logp(&forward.logp, &batch.mask); // [12]
                let fixed = tch::no_grad(|| {
                    sequence_logp(&agentrl::pg::forward(&reference, batch).logp, &batch.mask)
                });
                Dpo {
                    beta: 0.5,
                    label_smoothing: 0.1,
                }
                .loss(
                    &policy.narrow(0, 0, 6),
                    &policy.narrow(0, 6, 6),
                    &fixed.narrow(0, 0, 6),
                    &fixed.narrow(0, 6, 6),
                )
                .loss
            },
        )
    });
    assert!(relative_gap(&micro, &padded) < 1e-9);
}

#[test]
fn on_policy_distillation_gets_the_padded_gradient() {
    let (micro, padded) = both(
        None,
        quiet(|| {
            Box::new(OnPolicyDistill {
                teacher: model(3),
                teacher_path: "teacher".into(),
            })
        }),
    );
    assert!(relative_gap(&micro, &padded) < 1e-9);
}

#[test]
fn a_micro_batch_cut_one_token_short_is_caught() {
    // The loop's buckets, but the widest one cut one token short: its longest
    // row loses its last token (an action or an observation token).
    let (_, batch) = batch();
    let mut buckets = length_buckets(&row_lengths(&batch));
    buckets[0].1 -= 1;
    for make in [
        || {
            Box::new(Grpo {
                config: grpo(LossNorm::TokenMean),
                regularizer: Box::new(Plain),
            }) as Box<dyn Algorithm>
        },
        || Box::new(Reinforce::plain()) as Box<dyn Algorithm>,
    ] {
        let (micro, padded) = both(Some(buckets.clone()), quiet(make));
        let gap = relative_gap(&micro, &padded);
        assert!(
            gap > 1e-3,
            "the planted mistake went unnoticed: relative gap {gap}"
        );
    }
    // And rows swapped between micro-batches (each row cut to the other's width) are caught too.
    let mut swapped = length_buckets(&row_lengths(&batch));
    let last = swapped.len() - 1;
    let (a, b) = (swapped[0].0[0], swapped[last].0[0]);
    swapped[0].0[0] = b;
    swapped[last].0[0] = a;
    let (micro, padded) = both(
        Some(swapped),
        quiet(|| {
            Box::new(Grpo {
                config: grpo(LossNorm::TokenMean),
                regularizer: Box::new(Plain),
            })
        }),
    );
    let gap = relative_gap(&micro, &padded);
    assert!(
        gap > 1e-3,
        "the planted mistake went unnoticed: relative gap {gap}"
    );
}
