//! Chapter 9 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch09`.
//!
//! The tests compare your answers with `agentrl::grpo` (the gradients of
//! `grpo_loss` and `clipped_surrogate` by autograd, and
//! `informative_groups` on simulated groups) and with
//! `agentrl::advantage::group_advantages`. The answers themselves are plain
//! `f64` arithmetic; do not call the function an exercise is checked against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

use agentrl::advantage::GroupBaseline;
use agentrl::grpo::LossNorm;

// ---------------------------------------------------------------------------
// Exercise 9.1: the per-token weights of each normalisation
// ---------------------------------------------------------------------------

/// Exercise 9.1: the weight that every action token's log-probability
/// receives from the GRPO loss, in closed form.
///
/// A batch holds $B$ = `lengths.len()` sequences; sequence $b$ has
/// $|o_b|$ = `lengths[b]` action tokens (possibly 0) and the advantage $A_b$ =
/// `advantages[b]`, shared by all its tokens. The loss is the one
/// `agentrl::grpo::grpo_loss` returns,
/// $$\mathcal{L} = -\operatorname{aggregate}_{\text{norm}}\big(\min(\rho_{b,t} A_b,\ \operatorname{clip}(\rho_{b,t}, 1 - \epsilon_{\text{low}}, 1 + \epsilon_{\text{high}})\, A_b)\big),$$
/// evaluated where the policy has not moved yet: every ratio
/// $\rho_{b,t} = 1$, as on the first minibatch of an iteration. Return
/// $-\partial \mathcal{L} / \partial \log \pi_\theta(o_{b,t})$ for every
/// action token: one vector per sequence, of length `lengths[b]`, in token
/// order. `norm` is one of
///
/// - `SequenceMean`: $\frac{1}{B} \sum_b \frac{1}{|o_b|} \sum_t \ell_{b,t}$
///   (a sequence without tokens contributes 0 but still counts in $B$);
/// - `TokenMean`: $\sum_{b,t} \ell_{b,t} / \sum_b |o_b|$;
/// - `Constant(c)`: $\sum_{b,t} \ell_{b,t} / (B c)$.
///
/// Mind the sign: this is *minus* the derivative of the loss, the direction
/// in which gradient descent moves the token's log-probability, as the
/// table of Section 9.2 prints it. A token of a sequence with $A_b > 0$
/// gets a positive weight. Panic if the two slices have different lengths.
pub fn token_weights(lengths: &[usize], advantages: &[f64], norm: LossNorm) -> Vec<Vec<f64>> {
    todo!("Exercise 9.1: minus d loss / d log-prob of every action token, at ratio 1")
}

// ---------------------------------------------------------------------------
// Exercise 9.2: the length bias
// ---------------------------------------------------------------------------

/// Exercise 9.2: the total weight each sequence of the batch gets, the sum
/// of its tokens' weights from Exercise 9.1 (so 0 for a sequence without
/// action tokens, and positive when $A_b > 0$). Since a sequence's
/// log-probability is the sum of its tokens' log-probabilities, this is how
/// hard one update pushes the sequence as a whole. Same inputs as Exercise
/// 9.1; one number per sequence. Panic if the two slices have different
/// lengths.
pub fn sequence_push(lengths: &[usize], advantages: &[f64], norm: LossNorm) -> Vec<f64> {
    todo!("Exercise 9.2: the sum of each sequence's token weights")
}

// ---------------------------------------------------------------------------
// Exercise 9.3: how often a group is uninformative
// ---------------------------------------------------------------------------

/// Exercise 9.3 (first half): the probability that a group of `g` episodes
/// ($G \ge 1$) on a task the policy solves with probability `p` (each
/// episode independently, reward 1 for success and 0 for failure) has all
/// its rewards equal, and so no gradient under any group baseline.
pub fn uninformative_probability(p: f64, g: usize) -> f64 {
    todo!("Exercise 9.3: the probability that all g rewards agree")
}

/// Exercise 9.3 (second half): the expected number of informative groups
/// (rewards not all equal) in an iteration of `groups` groups of `g`
/// episodes each, every task solved with probability `p`. This is the
/// mean of `agentrl::grpo::informative_groups(...).len()`.
pub fn expected_informative(p: f64, g: usize, groups: usize) -> f64 {
    todo!("Exercise 9.3: groups times the probability that a group is informative")
}

// ---------------------------------------------------------------------------
// Exercise 9.4: how far clip-higher lets a token rise
// ---------------------------------------------------------------------------

/// Exercise 9.4: the highest probability that a token which had probability
/// `old_prob` $\in (0, 1]$ under $\pi_{\text{old}}$ can reach while the
/// clipped surrogate with upper range `eps_high` $\ge 0$ still gives it a
/// gradient, for a positive advantage.
///
/// With $A > 0$ the clipped term $\min(\rho A, \operatorname{clip}(\rho, 1 -
/// \epsilon_{\text{low}}, 1 + \epsilon_{\text{high}}) A)$ goes flat once the
/// ratio $\rho = \pi_\theta / \pi_{\text{old}}$ passes $1 + \epsilon_{\text{high}}$;
/// translate that edge into a probability, remembering that no probability
/// exceeds 1 (when the edge lies above 1 the token is pushed all the way).
pub fn probability_ceiling(old_prob: f64, eps_high: f64) -> f64 {
    todo!("Exercise 9.4: the probability at which the clip stops a good token, at most 1")
}

// ---------------------------------------------------------------------------
// Exercise 9.5: the standard deviation reweights groups
// ---------------------------------------------------------------------------

/// Exercise 9.5 (first half): the advantages of a batch of groups.
///
/// `rewards` holds consecutive groups of `g` episodes each (episodes `0..g`
/// are the first group, `g..2 * g` the second, and so on); `g >= 1` and
/// `rewards.len()` is a multiple of `g` (panic otherwise). Return one
/// advantage per episode, each computed from its own group's rewards
/// $R_1, \dots, R_G$ with mean $\bar R$, as Chapter 7 defined the baselines:
///
/// - `None`: $A_i = R_i$;
/// - `Mean`: $A_i = R_i - \bar R$;
/// - `LeaveOneOut`: $A_i = R_i - \frac{1}{G - 1} \sum_{j \ne i} R_j$ (0 when $G = 1$);
/// - `MeanStd`: $A_i = (R_i - \bar R) / (\sigma + 10^{-6})$, with
///   $\sigma = \sqrt{\frac1G \sum_j (R_j - \bar R)^2}$ (the population
///   standard deviation, dividing by $G$).
///
/// Do not call `group_advantages`: the tests compare with it.
pub fn grpo_advantages(rewards: &[f64], g: usize, baseline: GroupBaseline) -> Vec<f64> {
    todo!("Exercise 9.5: every group's advantages under the baseline, in order")
}

/// Exercise 9.5 (second half): the factor by which `MeanStd` scales a
/// group's `Mean` advantages, $1 / (\sigma + 10^{-6})$, with $\sigma$ the
/// population standard deviation of the group's `rewards` (non-empty), as
/// above. Every episode of the group is scaled by the same factor, so it is
/// the weight that the standard deviation gives the group as a whole.
pub fn group_weight(rewards: &[f64]) -> f64 {
    todo!("Exercise 9.5: 1 / (std + 1e-6) of the group's rewards")
}
