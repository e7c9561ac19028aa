//! Chapter 2: reference solutions. The model answers, with the numbers these
//! functions produce, are in `chapters/answers-02.md`.

use agentrl::bandit::softmax;
use agentrl::mdp::{repair_mdp, Mdp, Outcome, Policy, Verifier, SWAP};
use agentrl::pomdp::{family_prior, hidden_family};

/// Exercise 2.1: fold from the back, $G_t = r_t + \gamma G_{t+1}$.
pub fn returns_to_go(rewards: &[f64], gamma: f64) -> Vec<f64> {
    let mut returns = vec![0.0; rewards.len()];
    let mut g = 0.0;
    for t in (0..rewards.len()).rev() {
        g = rewards[t] + gamma * g;
        returns[t] = g;
    }
    returns
}

/// Exercise 2.2: synchronous sweeps of the Bellman expectation equation.
pub fn iterative_evaluation(mdp: &Mdp, policy: &Policy, gamma: f64, tol: f64) -> (Vec<f64>, usize) {
    let n = mdp.n_states();
    let mut v = vec![0.0; n];
    let mut sweeps = 0;
    loop {
        sweeps += 1;
        let new: Vec<f64> = (0..n)
            .map(|s| {
                if mdp.terminal[s] {
                    return 0.0;
                }
                (0..mdp.n_actions())
                    .map(|a| policy[s][a] * mdp.outcomes[s][a].iter().map(|o| o.prob * (o.reward + gamma * v[o.next])).sum::<f64>())
                    .sum()
            })
            .collect();
        let change = new.iter().zip(&v).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        v = new;
        if change <= tol {
            return (v, sweeps);
        }
    }
}

/// Exercise 2.3: with probability `q` the swap does nothing.
pub fn flaky_repair_mdp(q: f64, verifier: Verifier) -> Mdp {
    let mut mdp = repair_mdp(verifier);
    for s in 0..mdp.n_states() {
        if mdp.terminal[s] {
            continue;
        }
        let works = mdp.outcomes[s][SWAP][0].clone();
        mdp.outcomes[s][SWAP] = vec![
            Outcome { prob: 1.0 - q, ..works },
            Outcome { prob: q, next: s, reward: 0.0 },
        ];
    }
    mdp
}

/// Exercise 2.4: $\partial J / \partial z(b) = \pi(b)\,(Q(b) - J)$.
pub fn softmax_policy_gradient(z: &[f64], means: &[f64]) -> Vec<f64> {
    let pi = softmax(z);
    let j: f64 = pi.iter().zip(means).map(|(p, m)| p * m).sum();
    pi.iter().zip(means).map(|(p, m)| p * (m - j)).collect()
}

/// Exercise 2.5: bisection on the accuracy; testing first is optimal above 1/9.
pub fn break_even_accuracy() -> f64 {
    let tests_first = |accuracy: f64| hidden_family(accuracy).solve(&family_prior(), 0.9, 6, &[0, 1, 2, 3]).1 == 0;
    let (mut low, mut high) = (0.0, 1.0);
    while high - low > 1e-7 {
        let mid = 0.5 * (low + high);
        if tests_first(mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    high
}
