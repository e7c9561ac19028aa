//! Chapter 2 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch02`.
//!
//! Everything you need is in `agentrl::mdp` (the repair MDP, `Outcome`,
//! `evaluate_policy`, `value_iteration`, `q_from_v`), `agentrl::bandit`
//! (`softmax`, `gradient_step`) and `agentrl::pomdp` (`hidden_family`,
//! `family_prior`, `Pomdp::solve`).
#![allow(unused_variables)] // the parameters are unused until you write the bodies

use agentrl::mdp::{Mdp, Policy, Verifier};

// ---------------------------------------------------------------------------
// Exercise 2.1: returns to go
// ---------------------------------------------------------------------------

/// Exercise 2.1: every return of an episode.
///
/// Given the rewards $r_0, \dots, r_{n-1}$, return $G_0, \dots, G_{n-1}$ with
/// $G_t = \sum_{k \ge 0} \gamma^k r_{t+k}$, computed in one backward pass with
/// $G_t = r_t + \gamma G_{t+1}$ (and $G_n = 0$). An empty episode has no returns.
pub fn returns_to_go(rewards: &[f64], gamma: f64) -> Vec<f64> {
    todo!("Exercise 2.1: G_t for every t, from the back")
}

// ---------------------------------------------------------------------------
// Exercise 2.2: policy evaluation by iteration
// ---------------------------------------------------------------------------

/// Exercise 2.2: iterative policy evaluation.
///
/// Start from $V = 0$ and apply the Bellman expectation equation to every
/// state at once (one *sweep*):
/// $V_{new}(s) = \sum_a \pi(a \mid s) \sum_{s'} P(s' \mid s, a)\,[r + \gamma V(s')]$,
/// with terminal states kept at 0. Stop after the first sweep in which no
/// value changed by more than `tol`. Return the values and the number of
/// sweeps done.
///
/// Compare with `agentrl::mdp::evaluate_policy`, and count the sweeps for
/// the uniform policy of the repair MDP at $\gamma = 0.9$ and $\gamma = 0.99$.
pub fn iterative_evaluation(mdp: &Mdp, policy: &Policy, gamma: f64, tol: f64) -> (Vec<f64>, usize) {
    todo!("Exercise 2.2: sweep the Bellman expectation equation until it stops changing")
}

// ---------------------------------------------------------------------------
// Exercise 2.3: a flaky edit
// ---------------------------------------------------------------------------

/// Exercise 2.3: the repair MDP with a flaky `swap_minmax`.
///
/// Start from `agentrl::mdp::repair_mdp(verifier)` and change one thing: in
/// every live state (`buggy`, `repaired`, `rote`, `rote+repaired`) the action
/// `swap_minmax` leaves the file unchanged with probability `q`, and does
/// what it did before with probability `1 - q`. Keep everything else,
/// including the state and action order, as it is. (For `q = 0` the result
/// behaves exactly like `repair_mdp`.)
///
/// Then derive $V^*(\text{buggy})$ as a function of `q` and $\gamma$, and
/// look at the optimal action in `buggy` under `Verifier::Public`.
pub fn flaky_repair_mdp(q: f64, verifier: Verifier) -> Mdp {
    todo!("Exercise 2.3: swap_minmax fails with probability q")
}

// ---------------------------------------------------------------------------
// Exercise 2.4: the exact softmax policy gradient
// ---------------------------------------------------------------------------

/// Exercise 2.4: the gradient of the expected reward of a softmax bandit policy.
///
/// With $\pi = \mathrm{softmax}(z)$ and arm means `means` $= Q(a)$, return the
/// vector $\partial J / \partial z(b)$ for $J(z) = \sum_a \pi(a)\, Q(a)$, one
/// entry per arm, in closed form (no finite differences).
pub fn softmax_policy_gradient(z: &[f64], means: &[f64]) -> Vec<f64> {
    todo!("Exercise 2.4: dJ/dz for J = sum_a softmax(z)_a Q(a)")
}

// ---------------------------------------------------------------------------
// Exercise 2.5: when is a test worth running?
// ---------------------------------------------------------------------------

/// Exercise 2.5: the break-even accuracy of `test`.
///
/// In `agentrl::pomdp::hidden_family(accuracy)`, with the prior
/// `family_prior()`, a turn budget of 6 and $\gamma = 0.9$, the optimal first
/// action (the second value of `Pomdp::solve` with all four actions allowed)
/// is `test` (index 0) when the test is accurate enough, and an edit when it
/// is not. Return the smallest accuracy at which it is `test`, to within
/// `1e-4`.
pub fn break_even_accuracy() -> f64 {
    todo!("Exercise 2.5: the smallest accuracy at which testing first is optimal")
}
