//! Chapter 7 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch07`.
//!
//! The tests compare your answers with `agentrl::advantage`
//! (`reinforce_gradient_with_baseline`, `group_advantages`, `td_errors`,
//! `gae`, `td0_critic`), with `agentrl::pg::exact_gradient` and with exact
//! values on the repair MDP of `agentrl::mdp`. The answers themselves are
//! plain `f64` arithmetic; do not call the function an exercise is checked
//! against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

// ---------------------------------------------------------------------------
// Exercise 7.1: the optimal constant baseline
// ---------------------------------------------------------------------------

/// Exercise 7.1: the constant baseline $b^*$ that minimises the variance of
/// the single-sample estimator $(R - b)\, \nabla_\theta \log \pi_\theta(a)$
/// on the softmax bandit.
///
/// The policy is $\pi_\theta = \operatorname{softmax}(\theta)$ over
/// `theta.len()` arms (at least 2), arm $a$ pays 1 with probability `p[a]`
/// and 0 otherwise. "Variance" means the trace of the covariance matrix, the
/// expected squared distance of the estimate from its mean $\nabla J(\theta)$.
/// Since the mean does not depend on $b$, minimise $\mathbb{E}[(R - b)^2
/// \lVert \nabla \log \pi_\theta(a) \rVert^2]$, which gives
/// $$b^* = \frac{\mathbb{E}[R\, \lVert \nabla \log \pi_\theta(a) \rVert^2]}{\mathbb{E}[\lVert \nabla \log \pi_\theta(a) \rVert^2]} .$$
/// Compute it exactly, by summing over the arms (no sampling); the score is
/// $e_a - \pi_\theta$ (Exercise 6.1).
pub fn optimal_constant_baseline(theta: &[f64], p: &[f64]) -> f64 {
    todo!("Exercise 7.1: E[R |score|^2] / E[|score|^2], summed over the arms")
}

// ---------------------------------------------------------------------------
// Exercise 7.2: leave-one-out from the group mean
// ---------------------------------------------------------------------------

/// Exercise 7.2: the leave-one-out (RLOO) advantages of a group, recovered
/// from its group-mean advantages alone.
///
/// `mean_advantages` holds $A_i = R_i - \frac{1}{G}\sum_j R_j$ for a group
/// of $G$ episodes (what `group_advantages` returns with
/// `GroupBaseline::Mean`); the rewards themselves are not given. Return
/// $R_i - \frac{1}{G - 1}\sum_{j \ne i} R_j$ for every $i$. A group of one
/// has no other episode to compare with: return `[0.0]`, as the library does.
/// An empty group gives an empty vector.
pub fn rloo_from_mean(mean_advantages: &[f64]) -> Vec<f64> {
    todo!("Exercise 7.2: the leave-one-out advantages, from the mean-baseline ones")
}

// ---------------------------------------------------------------------------
// Exercise 7.3: GAE as an explicit sum
// ---------------------------------------------------------------------------

/// Exercise 7.3: generalised advantage estimation written as the sum that
/// defines it, without the backward recursion.
///
/// `rewards` holds $r_0, \dots, r_{T-1}$ and `values` holds
/// $V(s_0), \dots, V(s_T)$ (length $T + 1$; the last one is 0 if the
/// episode ended in a terminal state, the critic's value of $s_T$ if it was
/// cut off). With $\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t)$, return
/// $$\hat A_t = \sum_{k=0}^{T-1-t} (\gamma\lambda)^k\, \delta_{t+k}$$
/// for every $t$, computing each $\hat A_t$ as that sum (a loop over $k$),
/// not as $\delta_t + \gamma\lambda \hat A_{t+1}$. Panic if
/// `values.len() != rewards.len() + 1`.
pub fn gae_by_sum(rewards: &[f64], values: &[f64], gamma: f64, lambda: f64) -> Vec<f64> {
    todo!("Exercise 7.3: the sum over k of (gamma lambda)^k delta_(t+k), for every t")
}

// ---------------------------------------------------------------------------
// Exercise 7.4: the lambda-return
// ---------------------------------------------------------------------------

/// Exercise 7.4: the $\lambda$-return $G^\lambda_t$ of every step of an
/// episode, as a weighted average of $n$-step returns.
///
/// Same inputs as Exercise 7.3. The $n$-step return from $t$ takes $n$ real
/// rewards and then trusts the critic:
/// $G^{(n)}_t = \sum_{k=0}^{n-1} \gamma^k r_{t+k} + \gamma^n V(s_{t+n})$, for
/// $n = 1, \dots, T - t$ (the longest one ends at $s_T$). The $\lambda$-return
/// weighs them geometrically, the remaining weight going to the longest:
/// $$G^\lambda_t = (1 - \lambda) \sum_{n=1}^{T-t-1} \lambda^{n-1} G^{(n)}_t + \lambda^{T-t-1} G^{(T-t)}_t .$$
/// Return $G^\lambda_t$ for every $t$ (take $0^0 = 1$, so $\lambda = 0$ gives
/// the one-step target at the last step). Panic if
/// `values.len() != rewards.len() + 1`.
pub fn lambda_return(rewards: &[f64], values: &[f64], gamma: f64, lambda: f64) -> Vec<f64> {
    todo!("Exercise 7.4: the geometric average of the n-step returns from every t")
}

// ---------------------------------------------------------------------------
// Exercise 7.5: groups without signal
// ---------------------------------------------------------------------------

/// Exercise 7.5: the groups whose rewards are all equal.
///
/// `rewards` holds the rewards of consecutive groups of `group` episodes
/// each (episodes `0..group` are group 0, `group..2 * group` group 1, and so
/// on); `group >= 1` and `rewards.len()` is a multiple of `group`. Return, in
/// increasing order, the index of every group whose rewards are all exactly
/// equal. These are the groups that a group baseline gives no gradient at all.
pub fn zero_variance_groups(rewards: &[f64], group: usize) -> Vec<usize> {
    todo!("Exercise 7.5: the indices of the groups with all rewards equal")
}
