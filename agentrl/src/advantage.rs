//! Chapter 7: advantages and credit assignment. Baselines for the score
//! function estimator; group baselines (the group mean, leave-one-out, std
//! normalisation); TD errors and generalised advantage estimation; a TD(0)
//! critic for the repair MDP; a value head as critic for TinyAgent, with
//! advantages at the granularity of episodes, turns or tokens.
//!
//! Shapes: `G` episodes in a group, `T` steps of an episode.

use crate::book::REAL;
use crate::mdp::{sample_action, Mdp, Policy};
use crate::pg::{reinforce_loss, Algorithm, Forward, Report};
use crate::tinyagent::TinyAgent;
use crate::trajectory::{Batch, Trajectory};
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tch::nn::{Module, OptimizerConfig};
use tch::{nn, Device, Kind, Tensor};

// ANCHOR: baseline
/// REINFORCE on the softmax bandit with a constant baseline `b`:
/// (1/n) Σ_i (R_i − b) ∇ log π_θ(a_i). Unbiased for every b, since
/// E[∇ log π] = 0; its variance depends on b.
pub fn reinforce_gradient_with_baseline(
    theta: &[f64],
    p: &[f64],
    n: usize,
    baseline: f64,
    rng: &mut StdRng,
) -> Vec<f64> {
    let theta = Tensor::from_slice(theta).set_requires_grad(true); // [K]
    let probs =
        Vec::<f64>::try_from(theta.softmax(-1, Kind::Double).detach()).expect("probabilities");
    let (mut actions, mut advantages) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let a = sample_action(&probs, rng);
        actions.push(a as i64);
        advantages.push(f64::from(rng.random::<f64>() < p[a]) - baseline);
    }
    let logp = theta
        .log_softmax(-1, Kind::Double)
        .index_select(0, &Tensor::from_slice(&actions)); // [N]
    (Tensor::from_slice(&advantages) * logp)
        .mean(Kind::Double)
        .backward();
    Vec::<f64>::try_from(theta.grad()).expect("a gradient per arm")
}
// ANCHOR_END: baseline

// ANCHOR: group
/// How the rewards of a group of episodes on the same task become advantages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupBaseline {
    /// A_i = R_i: plain REINFORCE.
    None,
    /// A_i = R_i − mean(R): the group mean, the episode's own reward included.
    Mean,
    /// A_i = R_i − mean_{j≠i} R_j: leave-one-out (RLOO), independent of R_i.
    LeaveOneOut,
    /// A_i = (R_i − mean(R)) / (std(R) + ε): GRPO's normalisation.
    MeanStd,
}

/// Advantages for one group of rewards.
pub fn group_advantages(rewards: &[f64], baseline: GroupBaseline) -> Vec<f64> {
    let g = rewards.len() as f64;
    let mean = rewards.iter().sum::<f64>() / g;
    match baseline {
        GroupBaseline::None => rewards.to_vec(),
        GroupBaseline::Mean => rewards.iter().map(|r| r - mean).collect(),
        GroupBaseline::LeaveOneOut => {
            if rewards.len() < 2 {
                return vec![0.0; rewards.len()];
            }
            let total: f64 = rewards.iter().sum();
            rewards
                .iter()
                .map(|r| r - (total - r) / (g - 1.0))
                .collect()
        }
        GroupBaseline::MeanStd => {
            let std = (rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / g).sqrt();
            rewards.iter().map(|r| (r - mean) / (std + 1e-6)).collect()
        }
    }
}
// ANCHOR_END: group

/// The bandit's gradient estimated from `groups` groups of `g` draws each, with
/// a group baseline: (1/(groups·g)) Σ A_i ∇ log π_θ(a_i).
pub fn group_gradient(
    theta: &[f64],
    p: &[f64],
    groups: usize,
    g: usize,
    baseline: GroupBaseline,
    rng: &mut StdRng,
) -> Vec<f64> {
    let theta = Tensor::from_slice(theta).set_requires_grad(true); // [K]
    let probs =
        Vec::<f64>::try_from(theta.softmax(-1, Kind::Double).detach()).expect("probabilities");
    let (mut actions, mut advantages) = (Vec::new(), Vec::new());
    for _ in 0..groups {
        let mut rewards = Vec::with_capacity(g);
        for _ in 0..g {
            let a = sample_action(&probs, rng);
            actions.push(a as i64);
            rewards.push(f64::from(rng.random::<f64>() < p[a]));
        }
        advantages.extend(group_advantages(&rewards, baseline));
    }
    let logp = theta
        .log_softmax(-1, Kind::Double)
        .index_select(0, &Tensor::from_slice(&actions)); // [groups·G]
    (Tensor::from_slice(&advantages) * logp)
        .mean(Kind::Double)
        .backward();
    Vec::<f64>::try_from(theta.grad()).expect("a gradient per arm")
}

// ANCHOR: gae
/// One-step TD errors δ_t = r_t + γ V(s_{t+1}) − V(s_t) of an episode, given
/// the values of its states `values` (length T + 1; the last is the value
/// after the final step, 0 at a terminal state).
pub fn td_errors(rewards: &[f64], values: &[f64], gamma: f64) -> Vec<f64> {
    assert_eq!(
        values.len(),
        rewards.len() + 1,
        "one value per state, the final one included"
    );
    (0..rewards.len())
        .map(|t| rewards[t] + gamma * values[t + 1] - values[t])
        .collect()
}

/// Generalised advantage estimation: Â_t = Σ_k (γλ)^k δ_{t+k}, computed
/// backwards as Â_t = δ_t + γλ Â_{t+1}. λ = 0 gives the TD errors; λ = 1
/// gives the Monte Carlo return minus the value.
pub fn gae(rewards: &[f64], values: &[f64], gamma: f64, lambda: f64) -> Vec<f64> {
    let deltas = td_errors(rewards, values, gamma);
    let mut advantages = vec![0.0; deltas.len()];
    let mut next = 0.0;
    for t in (0..deltas.len()).rev() {
        next = deltas[t] + gamma * lambda * next;
        advantages[t] = next;
    }
    advantages
}
// ANCHOR_END: gae

// ANCHOR: critic
/// A tabular critic learned by TD(0): V(s) ← V(s) + α (r + γ V(s') − V(s)),
/// from episodes of `policy` on `mdp`.
pub fn td0_critic(
    mdp: &Mdp,
    policy: &Policy,
    start: usize,
    gamma: f64,
    alpha: f64,
    episodes: usize,
    rng: &mut StdRng,
) -> Vec<f64> {
    let mut v = vec![0.0; mdp.n_states()];
    for _ in 0..episodes {
        let mut s = start;
        for _ in 0..50 {
            if mdp.terminal[s] {
                break;
            }
            let a = sample_action(&policy[s], rng);
            let (next, r) = mdp.step(s, a, rng);
            let target = r + if mdp.terminal[next] {
                0.0
            } else {
                gamma * v[next]
            };
            v[s] += alpha * (target - v[s]);
            s = next;
        }
    }
    v
}
// ANCHOR_END: critic

// ANCHOR: value_head
/// A critic: a linear map from TinyAgent's final hidden state to the expected
/// return. It reads the hidden states detached, so its loss does not move the
/// policy, and it has its own parameters and optimiser.
pub struct ValueHead {
    pub vs: nn::VarStore,
    linear: nn::Linear,
}

impl ValueHead {
    pub fn new(d_model: i64, device: Device) -> ValueHead {
        let mut vs = nn::VarStore::new(device);
        vs.set_kind(REAL);
        // Zero weights: V = 0 everywhere at first, so the first updates are plain REINFORCE.
        let zero = nn::LinearConfig {
            ws_init: nn::Init::Const(0.0),
            bs_init: Some(nn::Init::Const(0.0)),
            bias: true,
        };
        let linear = nn::linear(vs.root() / "value", d_model, 1, zero);
        ValueHead { vs, linear }
    }

    /// V at every position: [B, T, D] -> [B, T].
    pub fn values(&self, hidden: &Tensor) -> Tensor {
        self.linear.forward(&hidden.detach()).squeeze_dim(-1)
    }
}

/// The runs of action tokens of a trajectory, with the position whose value is
/// the value of the state before each: (state position, first action token, end).
/// The state is the token just before the run (the `<|assistant|>`).
pub fn action_states(trajectory: &Trajectory) -> Vec<(usize, usize, usize)> {
    let mask = trajectory.action_mask();
    let mut spans = Vec::new();
    let mut t = 0;
    while t < mask.len() {
        if mask[t] {
            let start = t;
            while t < mask.len() && mask[t] {
                t += 1;
            }
            spans.push((start - 1, start, t));
        } else {
            t += 1;
        }
    }
    spans
}

/// Which state's value is the baseline of an action token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Credit {
    /// The state before the episode's first action, for every token: one advantage per episode.
    Episode,
    /// The state before the token's own action: one advantage per turn.
    Turn,
    /// The prefix just before the token: one advantage per token.
    Token,
}

/// For one trajectory: (state position, action tokens it baselines) pairs under `credit`.
pub fn credit_states(
    trajectory: &Trajectory,
    credit: Credit,
) -> Vec<(usize, std::ops::Range<usize>)> {
    let spans = action_states(trajectory);
    match credit {
        Credit::Episode => spans
            .first()
            .map(|&(state, _, _)| {
                spans
                    .iter()
                    .map(|&(_, start, end)| (state, start..end))
                    .collect()
            })
            .unwrap_or_default(),
        Credit::Turn => spans
            .iter()
            .map(|&(state, start, end)| (state, start..end))
            .collect(),
        Credit::Token => spans
            .iter()
            .flat_map(|&(_, start, end)| (start..end).map(|t| (t - 1, t..t + 1)))
            .collect(),
    }
}

/// Advantages on every action token, [B, T], from the critic's `values`
/// [B, T]: the states that `credit` assigns form the episode's steps, the
/// reward arrives after the last, and GAE(γ = 1, λ) runs over them (λ = 1:
/// A = R − V(s)). Also each episode's value targets, (state position, A + V):
/// the λ-returns the critic learns towards.
pub fn critic_advantages(
    values: &Tensor,
    trajectories: &[Trajectory],
    credit: Credit,
    lambda: f64,
) -> (Tensor, Vec<Vec<(usize, f64)>>) {
    let (b, t) = values.size2().unwrap();
    let v =
        Vec::<f64>::try_from(values.detach().to_device(Device::Cpu).reshape([-1])).expect("values");
    let mut advantages = vec![0f64; (b * t) as usize];
    let mut targets = Vec::with_capacity(trajectories.len());
    for (row, trajectory) in trajectories.iter().enumerate() {
        let base = row * t as usize;
        let assigned = credit_states(trajectory, credit);
        let mut states: Vec<usize> = assigned.iter().map(|(state, _)| *state).collect();
        states.dedup(); // episode credit: one state for every turn
        let mut state_values: Vec<f64> = states.iter().map(|&s| v[base + s]).collect();
        let mut rewards = vec![0.0; states.len()];
        if let Some(last) = rewards.last_mut() {
            *last = trajectory.reward;
        }
        state_values.push(0.0); // after the episode
        let step_advantages = gae(&rewards, &state_values, 1.0, lambda);
        for (state, tokens) in assigned {
            let k = states
                .iter()
                .position(|&s| s == state)
                .expect("a listed state");
            advantages[base + tokens.start..base + tokens.end].fill(step_advantages[k]);
        }
        targets.push(
            states
                .iter()
                .zip(&step_advantages)
                .zip(&state_values)
                .map(|((&s, &a), &value)| (s, a + value))
                .collect(),
        );
    }
    (
        Tensor::from_slice(&advantages)
            .view([b, t])
            .to_device(values.device()),
        targets,
    )
}
// ANCHOR_END: value_head

// ANCHOR: credit_train
/// A critic as a part of the training loop: once per rollout, the value head
/// reads the policy's hidden states and gives advantages at the granularity
/// `credit` ([`critic_advantages`]); on every minibatch it takes one Adam step
/// on (V(s) − target)² over the minibatch's states. The head is made, at zero,
/// for the first model it reads.
pub struct Critic {
    pub lr: f64,
    pub credit: Credit,
    pub lambda: f64,
    head: Option<(ValueHead, nn::Optimizer)>,
    /// The value targets of the current rollout's episodes.
    targets: Vec<Vec<(usize, f64)>>,
}

impl Critic {
    pub fn new(lr: f64, credit: Credit, lambda: f64) -> Critic {
        Critic {
            lr,
            credit,
            lambda,
            head: None,
            targets: Vec::new(),
        }
    }

    /// The advantages of a rollout [N, T], before any update; keeps the targets.
    pub fn rollout_advantages(
        &mut self,
        model: &TinyAgent,
        trajectories: &[Trajectory],
        rollout: &Batch,
    ) -> Tensor {
        let lr = self.lr;
        let (head, _) = self.head.get_or_insert_with(|| {
            let head = ValueHead::new(model.config.d_model, model.device());
            let opt = nn::Adam::default()
                .build(&head.vs, lr)
                .expect("an optimiser for the critic");
            (head, opt)
        });
        let hidden = tch::no_grad(|| crate::pg::forward(model, rollout).hidden); // [N, T, D], without computing on padding
        let (advantages, targets) = critic_advantages(
            &head.values(&hidden),
            trajectories,
            self.credit,
            self.lambda,
        );
        self.targets = targets;
        advantages // [N, T]
    }

    /// One step of the value head on the episodes `rows`, whose hidden states are `hidden` [b, T, D].
    pub fn value_step(&mut self, hidden: &Tensor, rows: &[usize]) -> f64 {
        let (head, opt) = self.head.as_mut().expect("advantages before a value step");
        let values = head.values(hidden); // [b, T]
        let (mut at_row, mut at_position, mut target) = (Vec::new(), Vec::new(), Vec::new());
        for (j, &i) in rows.iter().enumerate() {
            for &(state, value) in &self.targets[i] {
                at_row.push(j as i64);
                at_position.push(state as i64);
                target.push(value);
            }
        }
        let device = values.device();
        let index = [
            Some(Tensor::from_slice(&at_row).to_device(device)),
            Some(Tensor::from_slice(&at_position).to_device(device)),
        ];
        let loss = (values.index(&index) - Tensor::from_slice(&target).to_device(device))
            .square()
            .mean(REAL); // []
        opt.backward_step(&loss);
        loss.double_value(&[])
    }
}

/// REINFORCE with a critic: Chapter 6's loss with the critic's advantages.
impl Algorithm for Critic {
    fn advantages(
        &mut self,
        model: &TinyAgent,
        trajectories: &[Trajectory],
        rollout: &Batch,
        _rewards: &[f64],
        _group: usize,
        _report: &mut Report,
    ) -> Tensor {
        self.rollout_advantages(model, trajectories, rollout)
    }

    fn loss(
        &mut self,
        forward: &Forward,
        minibatch: &Batch,
        advantages: &Tensor,
        rows: &[usize],
        report: &mut Report,
    ) -> Tensor {
        report.insert("value_loss".into(), self.value_step(&forward.hidden, rows));
        reinforce_loss(&forward.logp, &minibatch.mask, advantages)
    }
}
// ANCHOR_END: credit_train

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mdp::{discounted_return, evaluate_policy, q_from_v, repair_mdp, Verifier, BUGGY};
    use rand::SeedableRng;

    #[test]
    fn gae_interpolates_between_td_errors_and_monte_carlo() {
        let rewards = [0.0, 0.5, -0.2, 1.0];
        let values = [0.3, 0.1, 0.7, 0.4, 0.0];
        let gamma = 0.9;
        assert_eq!(
            gae(&rewards, &values, gamma, 0.0),
            td_errors(&rewards, &values, gamma)
        );
        let mc = gae(&rewards, &values, gamma, 1.0);
        for t in 0..rewards.len() {
            let g = discounted_return(&rewards[t..], gamma);
            assert!((mc[t] - (g - values[t])).abs() < 1e-12, "t = {t}");
        }
    }

    #[test]
    fn leave_one_out_ignores_the_episodes_own_reward_and_the_mean_does_not() {
        let rewards = [1.0, 0.0, 0.0, 1.0];
        let loo = group_advantages(&rewards, GroupBaseline::LeaveOneOut);
        assert_eq!(
            loo,
            vec![1.0 - 1.0 / 3.0, -2.0 / 3.0, -2.0 / 3.0, 1.0 - 1.0 / 3.0]
        );
        // The mean baseline is the leave-one-out one scaled by (G − 1) / G.
        let mean = group_advantages(&rewards, GroupBaseline::Mean);
        for (m, l) in mean.iter().zip(&loo) {
            assert!((m - l * 3.0 / 4.0).abs() < 1e-12);
        }
        // A group with equal rewards has no signal under any baseline.
        for baseline in [
            GroupBaseline::Mean,
            GroupBaseline::LeaveOneOut,
            GroupBaseline::MeanStd,
        ] {
            assert!(group_advantages(&[1.0; 5], baseline)
                .iter()
                .all(|a| a.abs() < 1e-9));
        }
    }

    #[test]
    fn with_the_exact_values_the_td_error_is_an_unbiased_advantage() {
        // E[δ_t | s, a] = Q(s, a) − V(s) when V is the policy's value.
        let mdp = repair_mdp(Verifier::Hidden);
        let policy = mdp.uniform_policy();
        let gamma = 0.9;
        let v = evaluate_policy(&mdp, &policy, gamma);
        let q = q_from_v(&mdp, &v, gamma);
        let mut rng = StdRng::seed_from_u64(0);
        let (mut sum, mut count) = (vec![0.0; mdp.n_actions()], vec![0usize; mdp.n_actions()]);
        for _ in 0..20_000 {
            let a = sample_action(&policy[BUGGY], &mut rng);
            let (next, r) = mdp.step(BUGGY, a, &mut rng);
            sum[a] += r + gamma * v[next] - v[BUGGY];
            count[a] += 1;
        }
        for a in 0..mdp.n_actions() {
            let mean = sum[a] / count[a] as f64;
            assert!(
                (mean - (q[BUGGY][a] - v[BUGGY])).abs() < 0.02,
                "action {a}: {mean} vs {}",
                q[BUGGY][a] - v[BUGGY]
            );
        }
    }

    #[test]
    fn the_td0_critic_converges_to_the_policy_value() {
        let mdp = repair_mdp(Verifier::Hidden);
        let policy = mdp.uniform_policy();
        let v = evaluate_policy(&mdp, &policy, 0.9);
        let learned = td0_critic(
            &mdp,
            &policy,
            BUGGY,
            0.9,
            0.02,
            20_000,
            &mut StdRng::seed_from_u64(1),
        );
        assert!(
            (learned[BUGGY] - v[BUGGY]).abs() < 0.05,
            "{} vs {}",
            learned[BUGGY],
            v[BUGGY]
        );
    }

    #[test]
    fn critic_advantages_use_the_state_each_credit_assigns() {
        use crate::episode::Owner::{Env, Policy, Prompt};
        let owners = vec![Prompt, Prompt, Policy, Policy, Env, Env, Policy, Env];
        let trajectory = Trajectory {
            task: 0,
            ids: vec![1; 8],
            owners,
            logprobs: vec![0.0; 8],
            reward: 1.0,
            info: Default::default(),
        };
        assert_eq!(action_states(&trajectory), vec![(1, 2, 4), (5, 6, 7)]);
        let values =
            Tensor::from_slice(&[0.0f64, 0.25, 0.5, 0.0, 0.0, 0.75, 0.0, 0.0]).view([1, 8]);
        let cases = [
            // Episode: V(before the first action) for every token.
            (
                Credit::Episode,
                vec![0.0, 0.0, 0.75, 0.75, 0.0, 0.0, 0.75, 0.0],
                vec![(1, 1.0)],
            ),
            // Turn: V(before each action) for its tokens.
            (
                Credit::Turn,
                vec![0.0, 0.0, 0.75, 0.75, 0.0, 0.0, 0.25, 0.0],
                vec![(1, 1.0), (5, 1.0)],
            ),
            // Token: V(just before each token).
            (
                Credit::Token,
                vec![0.0, 0.0, 0.75, 0.5, 0.0, 0.0, 0.25, 0.0],
                vec![(1, 1.0), (2, 1.0), (5, 1.0)],
            ),
        ];
        for (credit, expected, targets) in cases {
            let (adv, episode_targets) =
                critic_advantages(&values, std::slice::from_ref(&trajectory), credit, 1.0);
            assert_eq!(
                Vec::<f64>::try_from(adv.view([-1])).unwrap(),
                expected,
                "{credit:?}"
            );
            assert_eq!(episode_targets, vec![targets], "{credit:?}");
        }
        // λ = 0 at turn level: the first turn's advantage is the TD error V(s_2) − V(s_1).
        let (adv, targets) = critic_advantages(
            &values,
            std::slice::from_ref(&trajectory),
            Credit::Turn,
            0.0,
        );
        assert_eq!(
            Vec::<f64>::try_from(adv.view([-1])).unwrap(),
            vec![0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.25, 0.0]
        );
        assert_eq!(targets, vec![vec![(1, 0.75), (5, 1.0)]]);
    }

    #[test]
    fn adamw_cancels_the_scale_between_the_group_mean_and_leave_one_out() {
        // Leave-one-out is the group mean baseline times G/(G − 1): the same gradient up to a
        // constant factor, which AdamW divides out (up to its ε). Three steps of each on the
        // same batch end at the same weights.
        use crate::episode::Owner::{Env, Policy, Prompt};
        use crate::pg::forward;
        use crate::trajectory::collate;
        let rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]; // two groups of 4
        let trajectories: Vec<Trajectory> = rewards
            .iter()
            .enumerate()
            .map(|(i, &reward)| Trajectory {
                task: 0,
                ids: vec![1, 2 + i as u32 % 5, 3, 4 + i as u32 % 3, 5, 6],
                owners: vec![Prompt, Prompt, Policy, Policy, Env, Policy],
                logprobs: vec![0.0; 6],
                reward,
                info: Default::default(),
            })
            .collect();
        let batch = collate(&trajectories, Device::Cpu);
        let weights_after = |baseline: GroupBaseline| -> Vec<Tensor> {
            let model = {
                let _turn = crate::book::seeded(0);
                TinyAgent::new(
                    crate::tinyagent::Config {
                        vocab: 16,
                        n_ctx: 8,
                        d_model: 16,
                        n_layer: 1,
                        n_head: 2,
                    },
                    Device::Cpu,
                )
            };
            let mut opt = nn::AdamW::default().build(&model.vs, 1e-2).unwrap();
            let advantages: Vec<f64> = rewards
                .chunks(4)
                .flat_map(|g| group_advantages(g, baseline))
                .collect();
            for _ in 0..3 {
                let loss = reinforce_loss(
                    &forward(&model, &batch).logp,
                    &batch.mask,
                    &crate::pg::per_token(&advantages, &batch.mask),
                );
                opt.backward_step(&loss);
            }
            model.vs.trainable_variables()
        };
        let (mean, loo) = (
            weights_after(GroupBaseline::Mean),
            weights_after(GroupBaseline::LeaveOneOut),
        );
        let initial = {
            let _turn = crate::book::seeded(0);
            TinyAgent::new(
                crate::tinyagent::Config {
                    vocab: 16,
                    n_ctx: 8,
                    d_model: 16,
                    n_layer: 1,
                    n_head: 2,
                },
                Device::Cpu,
            )
        }
        .vs
        .trainable_variables();
        // Distances between weight sets, as the norm over all parameters.
        let distance = |a: &[Tensor], b: &[Tensor]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).square().sum(REAL).double_value(&[]))
                .sum::<f64>()
                .sqrt()
        };
        let moved = distance(&mean, &initial);
        assert!(moved > 1e-2, "the steps must move the weights ({moved})");
        // Equal up to ε's share of tiny gradients; a baseline that is not a rescaling differs by far more.
        let none = weights_after(GroupBaseline::None);
        let (same, different) = (
            distance(&mean, &loo) / moved,
            distance(&mean, &none) / moved,
        );
        assert!(
            same < 0.01 && different > 0.2,
            "relative distances: leave-one-out {same}, no baseline {different}"
        );
    }
}
