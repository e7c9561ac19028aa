//! Chapter 6 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch06`.
//!
//! Everything you need is in `agentrl::pg` (`exact_gradient`,
//! `reinforce_gradient`, `TabularSoftmax`, `reinforce_loss`) and
//! `agentrl::mdp` (`sample_action`, `StdRng`, `seeded_rng`). The answers are
//! plain `f64` / `f32` arithmetic; the tests compare them with automatic
//! differentiation on tiny tensors and with the library's REINFORCE step.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

use agentrl::mdp::StdRng;

// ---------------------------------------------------------------------------
// Exercise 6.1: the score of a softmax policy
// ---------------------------------------------------------------------------

/// Exercise 6.1: the score function $\nabla_\theta \log \pi_\theta(a)$ of a
/// softmax policy $\pi_\theta = \operatorname{softmax}(\theta)$ over
/// `theta.len()` actions, in closed form.
///
/// Return one partial derivative per logit: $\partial \log \pi_\theta(a) /
/// \partial \theta_b$ for every $b$. Work it out from $\log \pi_\theta(a) =
/// \theta_a - \log \sum_b e^{\theta_b}$; no autograd. It must stay finite for
/// logits as far apart as $\pm 1000$.
pub fn softmax_score(theta: &[f64], a: usize) -> Vec<f64> {
    todo!("Exercise 6.1: the gradient of log softmax(theta)[a], in closed form")
}

// ---------------------------------------------------------------------------
// Exercise 6.2: the exact bandit gradient
// ---------------------------------------------------------------------------

/// Exercise 6.2: $\nabla J(\theta)$ for the softmax bandit, in closed form.
///
/// Arm $a$ pays 1 with probability `p[a]` and 0 otherwise, and the policy is
/// $\pi_\theta = \operatorname{softmax}(\theta)$, so $J(\theta) = \sum_a
/// \pi_\theta(a)\, p_a$. Return $\partial J / \partial \theta_a$ for every
/// arm, derived by hand (Exercise 6.1 helps); the test compares it with
/// `agentrl::pg::exact_gradient`, which differentiates $J$ by autograd.
pub fn exact_bandit_gradient(theta: &[f64], p: &[f64]) -> Vec<f64> {
    todo!("Exercise 6.2: dJ/dtheta_a for every arm, in closed form")
}

// ---------------------------------------------------------------------------
// Exercise 6.3: REINFORCE with a baseline
// ---------------------------------------------------------------------------

/// Exercise 6.3: the score-function estimate of $\nabla J(\theta)$ with a
/// constant baseline `b`, from `n` samples.
///
/// Draw $n$ independent pairs: an arm $a_i \sim \pi_\theta$ and a reward
/// $R_i \in \{0, 1\}$ that is 1 with probability `p[a_i]`. Return
/// $\frac{1}{n} \sum_i (R_i - b)\, \nabla_\theta \log \pi_\theta(a_i)$.
///
/// Take every random draw from `rng` with `agentrl::mdp::sample_action`: the
/// arm as `sample_action(&probs, rng)`, and the reward as
/// `sample_action(&[1.0 - p[a], p[a]], rng)` (which is 1 with probability
/// `p[a]`). With `n == 0` return zeros.
pub fn reinforce_with_baseline(theta: &[f64], p: &[f64], n: usize, b: f64, rng: &mut StdRng) -> Vec<f64> {
    todo!("Exercise 6.3: the mean of (R_i - b) times the score of a_i")
}

// ---------------------------------------------------------------------------
// Exercise 6.4: the weights of a tabular REINFORCE step
// ---------------------------------------------------------------------------

/// Exercise 6.4: the weight of each step of one episode in the tabular
/// REINFORCE update.
///
/// Given the rewards $r_0, \dots, r_{T-1}$ of an episode, return
/// $w_t = \gamma^t G_t$ for every $t$, where $G_t = \sum_{k \ge 0} \gamma^k
/// r_{t+k}$ is the return from step $t$. These are the numbers that
/// `TabularSoftmax::reinforce_step` multiplies $\nabla \log \pi(a_t \mid s_t)$
/// by (before its learning rate and the $1/B$ of the batch). An empty episode
/// has no weights.
pub fn returns_to_go_weights(rewards: &[f64], gamma: f64) -> Vec<f64> {
    todo!("Exercise 6.4: gamma^t times the return from t, for every t")
}

// ---------------------------------------------------------------------------
// Exercise 6.5: the gradient of the masked token loss
// ---------------------------------------------------------------------------

/// Exercise 6.5: $\partial L / \partial \ell_{b,t}$ for the loss of
/// `agentrl::pg::reinforce_loss`, in closed form.
///
/// `mask` is `B` rows of `T` entries, each 0 or 1 (1 on the tokens the policy
/// sampled), and `returns` holds one return $R_b$ per row. The loss is
/// $L = -\sum_{b,t} m_{b,t} R_b \ell_{b,t} / \max(1, \sum_{b,t} m_{b,t})$,
/// with $\ell$ the `[B, T]` log-probs. Return the derivative of $L$ with
/// respect to every $\ell_{b,t}$, in the shape of `mask`.
pub fn masked_token_loss_grad(mask: &[Vec<f32>], returns: &[f32]) -> Vec<Vec<f32>> {
    todo!("Exercise 6.5: the gradient of the masked REINFORCE loss per log-prob")
}
