//! Chapter 2: the one-step case, a k-armed bandit and three ways to play it.
//!
//! A [`Bandit`] has `k` arms with Bernoulli rewards (an arm's mean is its pass
//! rate). [`Strategy`] names the three learners of Section 2.6: $\xi$-greedy
//! on sample means, UCB1, and the gradient bandit (a softmax policy over
//! preferences $z$, trained with a baseline). [`play`] runs one learner for a
//! number of steps and returns its per-step regret; [`mean_cumulative_regret`]
//! averages the cumulative regret over seeded runs.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `k` arms; pulling arm `a` pays 1 with probability `means[a]`, else 0.
#[derive(Clone, Debug)]
pub struct Bandit {
    pub means: Vec<f64>,
}

impl Bandit {
    pub fn k(&self) -> usize {
        self.means.len()
    }

    /// The best arm's mean, $\max_a Q(a)$.
    pub fn best_mean(&self) -> f64 {
        self.means.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }

    pub fn pull(&self, a: usize, rng: &mut StdRng) -> f64 {
        if rng.random::<f64>() < self.means[a] {
            1.0
        } else {
            0.0
        }
    }
}

/// A learner for the bandit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Strategy {
    /// Greedy on sample means (ties broken uniformly at random), a uniformly
    /// random arm with probability `xi`.
    Greedy { xi: f64 },
    /// UCB1: the arm with the highest $\hat Q(a) + c \sqrt{\ln t / N(a)}$.
    Ucb { c: f64 },
    /// Softmax over preferences $z$, updated with step size `alpha` and a mean-reward baseline.
    Gradient { alpha: f64 },
}

impl Strategy {
    pub fn label(&self) -> String {
        match self {
            Strategy::Greedy { xi } => format!("xi-greedy, xi = {xi}"),
            Strategy::Ucb { c } => format!("UCB, c = {c}"),
            Strategy::Gradient { alpha } => format!("gradient, alpha = {alpha}"),
        }
    }
}

/// $\pi(a) = e^{z_a} / \sum_b e^{z_b}$, computed stably.
pub fn softmax(z: &[f64]) -> Vec<f64> {
    let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|&v| (v - top).exp()).collect();
    let total: f64 = e.iter().sum();
    e.iter().map(|v| v / total).collect()
}

// ANCHOR: gradient_step
/// One gradient-bandit update after pulling `a` and receiving `r`:
/// $z_b \leftarrow z_b + \alpha (r - \bar r)(\mathbf{1}[b = a] - \pi(b))$ for every arm $b$.
pub fn gradient_step(z: &mut [f64], a: usize, r: f64, baseline: f64, alpha: f64) {
    let pi = softmax(z);
    for b in 0..z.len() {
        let indicator = if b == a { 1.0 } else { 0.0 };
        z[b] += alpha * (r - baseline) * (indicator - pi[b]);
    }
}
// ANCHOR_END: gradient_step

// ANCHOR: play
/// Play `strategy` for `steps` pulls; returns the regret of every pull,
/// $\max_b Q(b) - Q(a_t)$ (from the true means, so it is free of sampling noise).
pub fn play(bandit: &Bandit, strategy: Strategy, steps: usize, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let k = bandit.k();
    let mut counts = vec![0usize; k]; // N(a)
    let mut means = vec![0.0; k]; // sample means Q-hat(a)
    let mut z = vec![0.0; k]; // preferences of the gradient bandit
    let mut baseline = 0.0; // mean of all rewards so far
    let mut regret = Vec::with_capacity(steps);
    for t in 1..=steps {
        let a = match strategy {
            Strategy::Greedy { xi } => {
                if rng.random::<f64>() < xi {
                    rng.random_range(0..k)
                } else {
                    argmax_random_tie(&means, &mut rng)
                }
            }
            Strategy::Ucb { c } => match counts.iter().position(|&n| n == 0) {
                Some(untried) => untried,
                None => {
                    let bonus =
                        |a: usize| means[a] + c * ((t as f64).ln() / counts[a] as f64).sqrt();
                    argmax(&(0..k).map(bonus).collect::<Vec<_>>())
                }
            },
            Strategy::Gradient { .. } => crate::mdp::sample_action(&softmax(&z), &mut rng),
        };
        let r = bandit.pull(a, &mut rng);
        counts[a] += 1;
        means[a] += (r - means[a]) / counts[a] as f64;
        if let Strategy::Gradient { alpha } = strategy {
            gradient_step(&mut z, a, r, baseline, alpha);
        }
        baseline += (r - baseline) / t as f64;
        regret.push(bandit.best_mean() - bandit.means[a]);
    }
    regret
}
// ANCHOR_END: play

/// The first index of the largest value.
pub fn argmax(values: &[f64]) -> usize {
    (0..values.len()).fold(0, |best, a| if values[a] > values[best] { a } else { best })
}

// ANCHOR: argmax_random_tie
/// An index of the largest value, chosen uniformly among all indices that
/// share it. The generator is drawn from only when there is a tie, so a
/// run's random stream depends on its history but stays reproducible.
pub fn argmax_random_tie(values: &[f64], rng: &mut StdRng) -> usize {
    let top = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let tied: Vec<usize> = (0..values.len()).filter(|&a| values[a] == top).collect();
    match tied.len() {
        0 => panic!("argmax of no values (or only NaN)"),
        1 => tied[0],
        n => tied[rng.random_range(0..n)],
    }
}
// ANCHOR_END: argmax_random_tie

/// Cumulative regret after every step, averaged over `runs` runs with seeds
/// `seed, seed + 1, ...`.
pub fn mean_cumulative_regret(
    bandit: &Bandit,
    strategy: Strategy,
    steps: usize,
    runs: usize,
    seed: u64,
) -> Vec<f64> {
    let mut total = vec![0.0; steps];
    for run in 0..runs {
        let mut cumulative = 0.0;
        for (t, r) in play(bandit, strategy, steps, seed + run as u64)
            .iter()
            .enumerate()
        {
            cumulative += r;
            total[t] += cumulative;
        }
    }
    total.iter().map(|v| v / runs as f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bandit() -> Bandit {
        Bandit {
            means: vec![0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7],
        }
    }

    #[test]
    fn softmax_is_a_distribution() {
        let p = softmax(&[1.0, 2.0, 3.0, 1000.0]);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((p[3] - 1.0).abs() < 1e-12);
        let q = softmax(&[0.0, (2.0f64).ln()]);
        assert!((q[1] - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_gradient_step_follows_the_expected_gradient() {
        // The expected update over a ~ pi, with r = mean(a) and baseline 0,
        // is alpha times the exact gradient of sum_a pi(a) mean(a) w.r.t. z.
        let means = [0.2, 0.5, 0.9];
        let z0 = [0.3, -0.1, 0.2];
        let pi = softmax(&z0);
        let alpha = 0.1;
        let mut expected = [0.0; 3];
        for a in 0..3 {
            let mut z = z0;
            gradient_step(&mut z, a, means[a], 0.0, alpha);
            for b in 0..3 {
                expected[b] += pi[a] * (z[b] - z0[b]);
            }
        }
        let value = |z: &[f64]| {
            softmax(z)
                .iter()
                .zip(means)
                .map(|(p, m)| p * m)
                .sum::<f64>()
        };
        for b in 0..3 {
            let h = 1e-6;
            let (mut up, mut down) = (z0, z0);
            up[b] += h;
            down[b] -= h;
            let numeric = (value(&up) - value(&down)) / (2.0 * h);
            assert!((expected[b] - alpha * numeric).abs() < 1e-8, "arm {b}");
        }
    }

    #[test]
    fn ucb_and_gradient_beat_xi_greedy_on_a_seeded_run() {
        let bandit = bandit();
        let last = |s: Strategy| {
            *mean_cumulative_regret(&bandit, s, 2000, 50, 0)
                .last()
                .unwrap()
        };
        let greedy = last(Strategy::Greedy { xi: 0.1 });
        let ucb = last(Strategy::Ucb { c: 0.5 });
        let gradient = last(Strategy::Gradient { alpha: 0.25 });
        let pure_greedy = last(Strategy::Greedy { xi: 0.0 });
        assert!(
            ucb < gradient && gradient < greedy,
            "ucb {ucb}, gradient {gradient}, greedy {greedy}"
        );
        assert!(
            greedy < pure_greedy,
            "greedy {greedy}, pure greedy {pure_greedy}"
        );
        // Regret grows more slowly at the end than at the start for UCB.
        let curve = mean_cumulative_regret(&bandit, Strategy::Ucb { c: 0.5 }, 2000, 50, 0);
        assert!(curve[1999] - curve[1799] < curve[199] - curve[0]);
    }

    #[test]
    fn greedy_ties_are_broken_among_all_tied_arms() {
        let values = [0.5, 0.2, 0.5, 0.5, 0.1];
        let mut rng = StdRng::seed_from_u64(7);
        let draws = 30_000;
        let mut counts = [0usize; 5];
        for _ in 0..draws {
            counts[argmax_random_tie(&values, &mut rng)] += 1;
        }
        assert_eq!((counts[1], counts[4]), (0, 0), "{counts:?}");
        // Each tied arm: 10,000 expected, standard deviation sqrt(30,000 * 1/3 * 2/3) = 82.
        for a in [0, 2, 3] {
            assert!(
                (counts[a] as f64 - draws as f64 / 3.0).abs() < 4.0 * 82.0,
                "{counts:?}"
            );
        }
        // A unique maximum is returned without touching the generator.
        let before = rng.clone();
        assert_eq!(argmax_random_tie(&[0.1, 0.9, 0.3], &mut rng), 1);
        assert_eq!(rng.random::<u64>(), before.clone().random::<u64>());
        // The old rule for comparison: always the first of the tied arms.
        assert_eq!(argmax(&values), 0);
    }

    #[test]
    fn pure_greedy_locks_onto_the_first_arm_that_pays() {
        // All estimates start at 0, so greedy pulls uniformly random arms until one
        // pays; that arm's estimate is then above 0 for ever, and every other stays 0.
        // The first arm to pay is arm a with probability means[a] / sum(means).
        let bandit = bandit();
        let total: f64 = bandit.means.iter().sum();
        let runs = 4000;
        let mut locked = vec![0usize; bandit.k()];
        for seed in 0..runs {
            let regret = play(&bandit, Strategy::Greedy { xi: 0.0 }, 60, seed);
            // Without a payout in 40 pulls (probability 0.585^40 < 1e-9) this would not be locked.
            let last = regret[59];
            assert!(
                regret[40..].iter().all(|&r| r == last),
                "seed {seed}: {regret:?}"
            );
            let arm = (0..bandit.k())
                .find(|&a| (bandit.best_mean() - bandit.means[a] - last).abs() < 1e-12)
                .unwrap();
            locked[arm] += 1;
        }
        for (a, &n) in locked.iter().enumerate() {
            let p = bandit.means[a] / total;
            let sd = (runs as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (n as f64 - runs as f64 * p).abs() < 4.5 * sd,
                "arm {a}: {n} of {runs}, expected {:.0}; {locked:?}",
                runs as f64 * p
            );
        }
    }

    #[test]
    fn play_is_reproducible() {
        let s = Strategy::Gradient { alpha: 0.1 };
        assert_eq!(play(&bandit(), s, 500, 3), play(&bandit(), s, 500, 3));
        assert_ne!(play(&bandit(), s, 500, 3), play(&bandit(), s, 500, 4));
    }
}
