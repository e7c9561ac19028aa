//! Chapter 10 exercises: replace each `todo!()` with your answer, then run
//! `cargo test -p exercises ch10`.
//!
//! The tests compare your answers with `agentrl::regularization` (`exact_kl`,
//! `exact_moments`, the `Estimator`s and the reward penalty of `KlPenalty`),
//! with torch (`kl_div`, and autograd through `agentrl::tinyagent::entropy`),
//! with a grid search and with exact sums over small categorical
//! distributions. The answers themselves are plain `f64` arithmetic; do not
//! call the function an exercise is checked against.
#![allow(unused_variables)] // the parameters are unused until you write the bodies

// ---------------------------------------------------------------------------
// Exercise 10.1: the exact KL and its asymmetry
// ---------------------------------------------------------------------------

/// Exercise 10.1: the KL divergence of two categorical distributions over
/// the same `K` categories,
/// $$\mathrm{KL}(q \,\|\, p) = \sum_x q(x) \log \frac{q(x)}{p(x)} ,$$
/// in nats. `q` and `p` are probability vectors of the same length (panic
/// otherwise). A category with $q(x) = 0$ contributes nothing, whatever
/// $p(x)$ is (the convention $0 \log 0 = 0$); a category with $q(x) > 0$ and
/// $p(x) = 0$ makes the divergence infinite (`f64::INFINITY`).
pub fn kl_categorical(q: &[f64], p: &[f64]) -> f64 {
    todo!("Exercise 10.1: the sum of q log(q / p) over the categories where q > 0")
}

// ---------------------------------------------------------------------------
// Exercise 10.2: the bias of k2
// ---------------------------------------------------------------------------

/// Exercise 10.2: the bias of the k2 estimator of $\mathrm{KL}(q \,\|\, p)$,
/// computed exactly by summing over the categories:
/// $$\mathbb{E}_{x \sim q}\big[\tfrac12 (\log r(x))^2\big] - \mathrm{KL}(q \,\|\, p),
/// \qquad \log r(x) = \log p(x) - \log q(x) .$$
/// Both distributions give every category a positive probability, and they
/// have the same length (panic otherwise). The bias can have either sign.
pub fn k2_bias(q: &[f64], p: &[f64]) -> f64 {
    todo!("Exercise 10.2: E_q[(log r)^2 / 2] minus KL(q || p), exactly")
}

// ---------------------------------------------------------------------------
// Exercise 10.3: k3 as a control variate
// ---------------------------------------------------------------------------

/// Exercise 10.3 (first half): the k3 estimate of one sample, written as
/// the k1 estimate plus a control variate,
/// $$k_3 = k_1 + (r - 1), \qquad k_1 = -\log r, \quad r = e^{\log r} ,$$
/// from its log ratio `log_r` $= \log p(x) - \log q(x)$. Under $x \sim q$ the
/// added term $r - 1$ has mean zero, so it changes the variance of the
/// estimate and not its mean.
pub fn k3_from_k1(log_r: f64) -> f64 {
    todo!("Exercise 10.3: k1 plus (r - 1), from the log ratio")
}

/// Exercise 10.3 (second half): the coefficient $\lambda^\star$ that
/// minimises the variance of $k_1 + \lambda (r - 1)$ under $x \sim q$,
/// computed exactly by summing over the categories:
/// $$\lambda^\star = -\frac{\mathrm{Cov}_q(k_1,\ r - 1)}{\mathrm{Var}_q(r - 1)} .$$
/// Both distributions give every category a positive probability, have the
/// same length (panic otherwise), and differ (so that $r$ is not constant and
/// the variance in the denominator is positive). k3 is the choice
/// $\lambda = 1$.
pub fn optimal_control_coefficient(q: &[f64], p: &[f64]) -> f64 {
    todo!("Exercise 10.3: minus Cov(k1, r - 1) / Var(r - 1) under q")
}

// ---------------------------------------------------------------------------
// Exercise 10.4: the sequence KL from token KLs
// ---------------------------------------------------------------------------

/// Exercise 10.4: the k1 estimate of the KL between a policy and a reference
/// over one whole episode, the sum of the per-token estimates at the tokens
/// the policy wrote:
/// $$\sum_{t\,:\,\text{mask}_t} \big(\log \pi(x_t \mid x_{<t}) - \log \pi_{\text{ref}}(x_t \mid x_{<t})\big) .$$
/// The episode was sampled by the policy; position $t$ has the policy's
/// log-probability `policy_logprobs[t]`, the reference's
/// `reference_logprobs[t]` and `mask[t]`, true where the policy sampled the
/// token. Positions off the mask (prompt and environment tokens) may hold
/// any numbers and must not count. Panic if the three slices have different
/// lengths. This is the amount `KlPenalty` with `Placement::Reward` and
/// $\beta = 1$ subtracts from the episode's reward.
pub fn sequence_kl_k1(policy_logprobs: &[f64], reference_logprobs: &[f64], mask: &[bool]) -> f64 {
    todo!("Exercise 10.4: the sum of log pi - log pi_ref over the masked tokens")
}

// ---------------------------------------------------------------------------
// Exercise 10.5: the entropy bonus's gradient
// ---------------------------------------------------------------------------

/// Exercise 10.5: the gradient of the entropy of a softmax with respect to
/// its logits, in closed form. With $p = \mathrm{softmax}(z)$ for `logits`
/// $z$ (at least one) and
/// $$H(z) = -\sum_j p_j \log p_j ,$$
/// return $\partial H / \partial z_i$ for every $i$, in nats per unit of
/// logit. This is the direction in which an entropy bonus pushes the logits
/// of one position. Keep it finite for logits as large as 1000 (compute
/// $\log p$ without overflowing $e^z$, which `f64` cannot hold beyond
/// $z \approx 709$).
pub fn entropy_gradient(logits: &[f64]) -> Vec<f64> {
    todo!("Exercise 10.5: dH/dz_i for the softmax entropy, in closed form")
}
