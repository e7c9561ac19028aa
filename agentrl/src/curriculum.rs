//! Chapter 14: which training tasks to play. Each task's pass rate is
//! estimated from the policy's own recent episodes; tasks whose group is
//! predicted to carry no signal can be skipped before sampling, or tasks
//! drawn in proportion to the chance that their group carries one.

use crate::pg::{draw_tasks, wrapper_config, Algorithm, Forward, Report};
use crate::rollout::Played;
use crate::tinyagent::TinyAgent;
use crate::trajectory::{Batch, Trajectory};
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tch::Tensor;

// ANCHOR: rates
/// Each task's pass rate under the current policy, estimated from its recent
/// episodes: successes and trials, both multiplied by `decay` every
/// iteration (old episodes were played by an older policy), on top of a
/// Beta(1, 1) prior, so a task never played is estimated at 1/2.
#[derive(Clone, Debug, PartialEq)]
pub struct PassRates {
    pub successes: Vec<f64>,
    pub trials: Vec<f64>,
    pub decay: f64,
}

impl PassRates {
    pub fn new(tasks: usize, decay: f64) -> PassRates {
        PassRates {
            successes: vec![0.0; tasks],
            trials: vec![0.0; tasks],
            decay,
        }
    }

    /// p̂_j = (s_j + 1) / (n_j + 2).
    pub fn estimate(&self, task: usize) -> f64 {
        (self.successes[task] + 1.0) / (self.trials[task] + 2.0)
    }

    /// Age every count by `decay`, then add an iteration's episodes.
    pub fn update(&mut self, played: &[Played]) {
        for (s, n) in self.successes.iter_mut().zip(self.trials.iter_mut()) {
            (*s, *n) = (*s * self.decay, *n * self.decay);
        }
        for p in played {
            self.successes[p.task] += p.reward;
            self.trials[p.task] += 1.0;
        }
    }
}

/// The probability that a group of `g` episodes of a task with pass rate `p`
/// has two different rewards, so a non-zero advantage: 1 − p^g − (1 − p)^g.
pub fn signal_probability(p: f64, g: usize) -> f64 {
    1.0 - p.powi(g as i32) - (1.0 - p).powi(g as i32)
}

impl PassRates {
    /// The same probability for task `task`, averaged over what its episodes
    /// say about p (the Beta(s + 1, n − s + 1) posterior): 1 − E[p^g] − E[(1 − p)^g],
    /// with E[p^g] = Π_{i<g} (a + i) / (a + b + i). Few episodes leave it near 1.
    pub fn signal(&self, task: usize, g: usize) -> f64 {
        let (a, b) = (
            self.successes[task] + 1.0,
            self.trials[task] - self.successes[task] + 1.0,
        );
        let moment = |x: f64| {
            (0..g)
                .map(|i| (x + i as f64) / (a + b + i as f64))
                .product::<f64>()
        }; // E[p^g] for x = a, E[(1 − p)^g] for x = b
        1.0 - moment(a) - moment(b)
    }
}
// ANCHOR_END: rates

// ANCHOR: selection
/// How an iteration's tasks are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Selection {
    /// Uniformly from all the training tasks (the loop's default).
    Uniform,
    /// Uniformly from the tasks whose estimated signal probability is at
    /// least `min` (a task is skipped when it looks always solved or never
    /// solved), and from all tasks if none is left.
    Skip { min: f64 },
    /// With probability proportional to the estimated signal probability
    /// plus `floor` (so that no task is ever ruled out): a curriculum that
    /// favours the tasks the policy is learning, those whose pass rate is
    /// near 1/2 or still uncertain, over those it always or never solves.
    Frontier { floor: f64 },
}

/// `count` tasks of `n`, each repeated `group` times, under `selection`.
pub fn draw_selected(
    rates: &PassRates,
    selection: Selection,
    count: usize,
    group: usize,
    rng: &mut StdRng,
) -> Vec<usize> {
    let n = rates.trials.len();
    let signal = |j: usize| rates.signal(j, group);
    let weights: Vec<f64> = match selection {
        Selection::Uniform => return draw_tasks(n, count, group, rng),
        Selection::Skip { min } => {
            let kept: Vec<f64> = (0..n)
                .map(|j| if signal(j) >= min { 1.0 } else { 0.0 })
                .collect();
            if kept.iter().sum::<f64>() == 0.0 {
                vec![1.0; n]
            } else {
                kept
            }
        }
        Selection::Frontier { floor } => (0..n).map(|j| signal(j) + floor).collect(),
    };
    let total: f64 = weights.iter().sum();
    (0..count)
        .map(|_| {
            let mut u = rng.random::<f64>() * total;
            weights
                .iter()
                .position(|w| {
                    u -= w;
                    u < 0.0
                })
                .unwrap_or(n - 1)
        })
        .flat_map(|j| std::iter::repeat_n(j, group))
        .collect()
}
// ANCHOR_END: selection

// ANCHOR: algorithm
/// Any algorithm, with its tasks drawn by `selection` from pass rates that
/// its own episodes keep up to date.
pub struct Curriculum {
    pub inner: Box<dyn Algorithm + Send>,
    pub rates: PassRates,
    pub selection: Selection,
}

impl Curriculum {
    pub fn new(
        inner: Box<dyn Algorithm + Send>,
        tasks: usize,
        decay: f64,
        selection: Selection,
    ) -> Curriculum {
        Curriculum {
            inner,
            rates: PassRates::new(tasks, decay),
            selection,
        }
    }
}

impl Algorithm for Curriculum {
    fn draw(
        &mut self,
        _n: usize,
        tasks: usize,
        group: usize,
        _iteration: usize,
        rng: &mut StdRng,
    ) -> Vec<usize> {
        draw_selected(&self.rates, self.selection, tasks, group, rng)
    }

    fn keep(&mut self, played: &[Played], group: usize, report: &mut Report) -> Vec<usize> {
        self.rates.update(played); // the iteration's episodes, before any update
        self.inner.keep(played, group, report)
    }

    fn config_json(&self) -> Option<String> {
        wrapper_config(
            self.inner.as_ref(),
            serde_json::json!({ "selection": self.selection, "decay": self.rates.decay }),
        )
    }

    // The rest is the inner algorithm's.
    fn rewards(
        &mut self,
        played: &[Played],
        trajectories: &[Trajectory],
        report: &mut Report,
    ) -> Vec<f64> {
        self.inner.rewards(played, trajectories, report)
    }

    fn loss(
        &mut self,
        forward: &Forward,
        minibatch: &Batch,
        advantages: &Tensor,
        rows: &[usize],
        report: &mut Report,
    ) -> Tensor {
        self.inner
            .loss(forward, minibatch, advantages, rows, report)
    }

    fn advantages(
        &mut self,
        model: &TinyAgent,
        trajectories: &[Trajectory],
        rollout: &Batch,
        rewards: &[f64],
        group: usize,
        report: &mut Report,
    ) -> Tensor {
        self.inner
            .advantages(model, trajectories, rollout, rewards, group, report) // [N, T]
    }
}
// ANCHOR_END: algorithm

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn pass_rates_follow_the_episodes_and_forget_old_ones() {
        let mut rates = PassRates::new(3, 0.5);
        assert_eq!(rates.estimate(0), 0.5);
        let played = |task, reward| Played {
            task,
            segments: vec![],
            actions: vec![],
            reward,
            info: Default::default(),
            parse_errors: 0,
        };
        rates.update(&[
            played(0, 1.0),
            played(0, 1.0),
            played(1, 0.0),
            played(1, 0.0),
        ]);
        assert_eq!(
            (rates.estimate(0), rates.estimate(1), rates.estimate(2)),
            (0.75, 0.25, 0.5)
        );
        rates.update(&[]);
        assert_eq!(rates.estimate(0), 2.0 / 3.0); // (1 + 1) / (1 + 2)
        assert!((signal_probability(0.5, 8) - (1.0 - 2.0 / 256.0)).abs() < 1e-15);
        assert_eq!(signal_probability(1.0, 8), 0.0);
        // No episode yet: p uniform, E[p^g] = 1 / (g + 1).
        assert!((PassRates::new(1, 1.0).signal(0, 8) - (1.0 - 2.0 / 9.0)).abs() < 1e-15);
        // The posterior's answer tends to the plug-in one as episodes accumulate.
        let mut many = PassRates::new(1, 1.0);
        (many.successes, many.trials) = (vec![3000.0], vec![10000.0]);
        assert!((many.signal(0, 8) - signal_probability(0.3, 8)).abs() < 1e-3);
    }

    #[test]
    fn skipping_never_draws_a_task_predicted_to_carry_no_signal_and_the_frontier_prefers_uncertain_tasks(
    ) {
        let mut rates = PassRates::new(3, 1.0);
        (rates.successes, rates.trials) = (vec![40.0, 0.0, 5.0], vec![40.0, 40.0, 10.0]);
        assert!(rates.signal(0, 2) < 0.05 && rates.signal(2, 2) > 0.45);
        let mut rng = StdRng::seed_from_u64(0);
        let drawn = draw_selected(&rates, Selection::Skip { min: 0.3 }, 200, 2, &mut rng);
        assert!(drawn.iter().all(|&j| j == 2) && drawn.len() == 400);
        let drawn = draw_selected(
            &rates,
            Selection::Frontier { floor: 0.05 },
            2000,
            2,
            &mut rng,
        );
        let count = |j| drawn.iter().filter(|&&t| t == j).count();
        assert!(
            count(2) > 3 * count(0) && count(0) > 0 && count(1) > 0,
            "{} {} {}",
            count(0),
            count(1),
            count(2)
        );
        // Nothing left to skip to: all tasks.
        (rates.successes, rates.trials) = (vec![40.0, 0.0, 0.0], vec![40.0, 40.0, 40.0]);
        let drawn = draw_selected(&rates, Selection::Skip { min: 0.5 }, 300, 1, &mut rng);
        assert!((0..3).all(|j| drawn.contains(&j)));
    }
}
