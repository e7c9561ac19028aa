//! Chapter 8 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch08`.
//!
//! The tests compare your answers with `agentrl::ppo` (`clipped_surrogate`
//! and its gradients by autograd, `ppo_policy_loss` and its `Diagnostics`)
//! and with exact expectations over small categorical distributions sampled
//! by `agentrl::mdp::sample_action`. The answers themselves are plain `f64`
//! arithmetic; do not call the function an exercise is checked against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

// ---------------------------------------------------------------------------
// Exercise 8.1: the clipped objective and its slope
// ---------------------------------------------------------------------------

/// Exercise 8.1 (first half): PPO's clipped objective for one token,
/// $$\min\big(\rho A,\ \mathrm{clip}(\rho, 1 - \epsilon, 1 + \epsilon)\, A\big) ,$$
/// with the importance ratio $\rho$ = `ratio` $> 0$, the advantage $A$ =
/// `advantage` and $\epsilon$ = `eps` in $(0, 1)$.
pub fn clipped_objective(ratio: f64, advantage: f64, eps: f64) -> f64 {
    todo!("Exercise 8.1: min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)")
}

/// Exercise 8.1 (second half): the slope of [`clipped_objective`] with
/// respect to the *log* ratio, $\partial / \partial \log \rho$, in closed
/// form (no finite differences). This is the gradient that one token's
/// log-probability $\log \pi_\theta(a)$ receives, since
/// $\rho = \exp(\log \pi_\theta - \log \pi_{\text{old}})$.
///
/// Where the unclipped term $\rho A$ is the one in force the slope is
/// $\rho A$ (recall $d\rho / d\log\rho = \rho$); where the clipped constant
/// is, it is 0. At the kinks, $\rho = 1 \pm \epsilon$ exactly, use the
/// convention that the clip range is closed: the slope there is $\rho A$,
/// the value from inside the range.
pub fn clipped_slope(ratio: f64, advantage: f64, eps: f64) -> f64 {
    todo!("Exercise 8.1: d objective / d log ratio, ratio * A or 0")
}

// ---------------------------------------------------------------------------
// Exercise 8.2: importance sampling
// ---------------------------------------------------------------------------

/// Exercise 8.2: the importance-sampling estimate of
/// $\mathbb{E}_{a \sim \pi_{\text{new}}}[f(a)]$ from $n$ actions sampled by
/// $\pi_{\text{old}}$.
///
/// Sample $i$ has the value `values[i]` $= f(a_i)$ and the log-probabilities
/// `logp_new[i]` $= \log \pi_{\text{new}}(a_i)$ and `logp_old[i]`
/// $= \log \pi_{\text{old}}(a_i)$. Return the ordinary (not self-normalised)
/// estimate
/// $$\frac{1}{n} \sum_{i=1}^n \rho_i\, f(a_i), \qquad \rho_i = \exp(\log \pi_{\text{new}}(a_i) - \log \pi_{\text{old}}(a_i)) .$$
/// Panic if the three slices have different lengths; an empty input gives 0.
pub fn importance_weighted_mean(values: &[f64], logp_new: &[f64], logp_old: &[f64]) -> f64 {
    todo!("Exercise 8.2: the mean of ratio * value over the samples")
}

// ---------------------------------------------------------------------------
// Exercise 8.3: the k3 estimator of KL
// ---------------------------------------------------------------------------

/// Exercise 8.3: the "k3" estimate of $\mathrm{KL}(\pi_{\text{old}} \,\|\, \pi_{\text{new}})$
/// from actions sampled by $\pi_{\text{old}}$: the mean over the samples of
/// $$(\rho_i - 1) - \log \rho_i, \qquad \log \rho_i = \log \pi_{\text{new}}(a_i) - \log \pi_{\text{old}}(a_i) .$$
/// This is what PPO reports as its approximate KL. Panic if the two slices
/// have different lengths; an empty input gives 0.
pub fn k3_kl(logp_new: &[f64], logp_old: &[f64]) -> f64 {
    todo!("Exercise 8.3: the mean of (ratio - 1) - log ratio")
}

// ---------------------------------------------------------------------------
// Exercise 8.4: the clip fraction
// ---------------------------------------------------------------------------

/// Exercise 8.4: the clip fraction of a batch of action tokens, the share
/// of `ratios` that lie strictly outside $[1 - \epsilon, 1 + \epsilon]$,
/// that is with $|\rho - 1| > \epsilon$. Both sides count, whatever the
/// sign of the advantage. An empty batch has clip fraction 0.
pub fn clip_fraction(ratios: &[f64], eps: f64) -> f64 {
    todo!("Exercise 8.4: the share of ratios with |ratio - 1| > eps")
}

// ---------------------------------------------------------------------------
// Exercise 8.5: which tokens are still pushed
// ---------------------------------------------------------------------------

/// Exercise 8.5: for every token, whether the clipped objective still gives
/// its log-probability a nonzero gradient.
///
/// Token $i$ has the ratio `ratios[i]` $> 0$ and the advantage
/// `advantages[i]`. Return `true` where the slope of Exercise 8.1 is not
/// zero: the advantage is nonzero and the clip is not the term in force. A
/// good token ($A > 0$) is no longer pushed once its ratio is above
/// $1 + \epsilon$, a bad one ($A < 0$) once it is below $1 - \epsilon$; in
/// the other direction a token is always pushed back. Use the closed-range
/// convention of Exercise 8.1 at $\rho = 1 \pm \epsilon$ exactly (pushed).
/// Panic if the two slices have different lengths.
pub fn tokens_still_pushed(ratios: &[f64], advantages: &[f64], eps: f64) -> Vec<bool> {
    todo!("Exercise 8.5: true where the clipped objective's gradient is nonzero")
}
