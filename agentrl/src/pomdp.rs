//! Chapter 2: partial observability, a repair task whose bug family is hidden.
//!
//! [`hidden_family`] builds a small POMDP: the bug is either of the `minmax`
//! family (fixed by `swap_minmax`) or of the `bounds` family (fixed by
//! `swap_bounds`), each with prior probability one half, and the agent cannot
//! see which. `test` leaves the file alone and shows the family's failure
//! pattern with probability `accuracy`, an inconclusive report otherwise.
//!
//! [`Pomdp::solve`] computes the optimal value of a turn budget by backward
//! induction over belief states; [`history_value`] computes the same number
//! without beliefs, from joint probabilities of histories, and
//! [`policy_value`] evaluates a given policy by enumerating every hidden
//! course of events. [`Pomdp::observed_value`] is the fully observed MDP on
//! the same states, for comparison.

// ANCHOR: pomdp
/// A finite POMDP as data.
#[derive(Clone, Debug)]
pub struct Pomdp {
    pub states: Vec<String>,
    pub actions: Vec<String>,
    pub observations: Vec<String>,
    /// $P(s' \mid s, a)$ as `transition[a][s][s']`.
    pub transition: Vec<Vec<Vec<f64>>>, // [A][S][S]
    /// $P(o \mid s', a)$: what the agent sees after `a` led to `s'`, as `observe[a][s'][o]`.
    pub observe: Vec<Vec<Vec<f64>>>, // [A][S][O]
    /// $r(s, a)$.
    pub reward: Vec<Vec<f64>>, // [S][A]
}

pub const FAMILY_STATES: [&str; 7] = [
    "minmax/buggy",
    "minmax/repaired",
    "minmax/mangled",
    "bounds/buggy",
    "bounds/repaired",
    "bounds/mangled",
    "done",
];
pub const FAMILY_ACTIONS: [&str; 4] = ["test", "swap_minmax", "swap_bounds", "submit"];
pub const FAMILY_OBSERVATIONS: [&str; 6] = [
    "none",
    "minmax pattern",
    "bounds pattern",
    "inconclusive",
    "all pass",
    "all fail",
];

/// The hidden-family repair task. An edit of the right family toggles the
/// file between buggy and repaired; an edit of the wrong family mangles it
/// for good. `submit` pays 1 on a repaired file and ends the episode.
pub fn hidden_family(accuracy: f64) -> Pomdp {
    let (n, done) = (FAMILY_STATES.len(), 6);
    let mut transition = vec![vec![vec![0.0; n]; n]; FAMILY_ACTIONS.len()];
    let mut observe = vec![vec![vec![0.0; FAMILY_OBSERVATIONS.len()]; n]; FAMILY_ACTIONS.len()];
    let mut reward = vec![vec![0.0; FAMILY_ACTIONS.len()]; n];
    for family in 0..2 {
        let [buggy, repaired, mangled] = [3 * family, 3 * family + 1, 3 * family + 2];
        for s in [buggy, repaired, mangled] {
            transition[0][s][s] = 1.0; // test
            transition[3][s][done] = 1.0; // submit
            for edit in [1, 2] {
                let right = edit - 1 == family;
                let next = match (s == buggy, s == repaired, right) {
                    (true, _, true) => repaired,
                    (_, true, true) => buggy,
                    _ => mangled,
                };
                transition[edit][s][next] = 1.0;
            }
        }
        reward[repaired][3] = 1.0;
        observe[0][buggy][1 + family] = accuracy;
        observe[0][buggy][3] = 1.0 - accuracy;
        observe[0][repaired][4] = 1.0;
        observe[0][mangled][5] = 1.0;
    }
    for a in 0..FAMILY_ACTIONS.len() {
        transition[a][done][done] = 1.0;
        for s in 0..n {
            if a != 0 || s == done {
                observe[a][s][0] = 1.0;
            }
        }
    }
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
    Pomdp {
        states: names(&FAMILY_STATES),
        actions: names(&FAMILY_ACTIONS),
        observations: names(&FAMILY_OBSERVATIONS),
        transition,
        observe,
        reward,
    }
}

/// Before the first turn: a buggy file of either family, one half each.
pub fn family_prior() -> Vec<f64> {
    vec![0.5, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0]
}
// ANCHOR_END: pomdp

impl Pomdp {
    // ANCHOR: belief
    /// Bayes' rule after taking `a` and seeing `o`: returns $P(o \mid b, a)$ and
    /// the new belief $b'(s') \propto P(o \mid s', a) \sum_s P(s' \mid s, a)\, b(s)$
    /// (the old belief if `o` cannot occur).
    pub fn update(&self, belief: &[f64], a: usize, o: usize) -> (f64, Vec<f64>) {
        let n = self.states.len();
        let joint: Vec<f64> = (0..n)
            .map(|next| {
                self.observe[a][next][o]
                    * (0..n)
                        .map(|s| belief[s] * self.transition[a][s][next])
                        .sum::<f64>()
            })
            .collect();
        let p_o: f64 = joint.iter().sum();
        if p_o == 0.0 {
            return (0.0, belief.to_vec());
        }
        (p_o, joint.iter().map(|p| p / p_o).collect())
    }
    // ANCHOR_END: belief

    // ANCHOR: solve
    /// Optimal value of `belief` with `horizon` turns left, using only the
    /// actions in `allowed`, and the best first action:
    /// $V_h(b) = \max_a \big[\sum_s b(s)\, r(s, a) + \gamma \sum_o P(o \mid b, a)\, V_{h-1}(b'_{a,o})\big]$.
    pub fn solve(
        &self,
        belief: &[f64],
        gamma: f64,
        horizon: usize,
        allowed: &[usize],
    ) -> (f64, usize) {
        if horizon == 0 {
            return (0.0, allowed[0]);
        }
        let mut best = (f64::NEG_INFINITY, allowed[0]);
        for &a in allowed {
            let mut value: f64 = (0..self.states.len())
                .map(|s| belief[s] * self.reward[s][a])
                .sum();
            for o in 0..self.observations.len() {
                let (p_o, next) = self.update(belief, a, o);
                if p_o > 0.0 {
                    value += gamma * p_o * self.solve(&next, gamma, horizon - 1, allowed).0;
                }
            }
            if value > best.0 + 1e-12 {
                best = (value, a);
            }
        }
        best
    }
    // ANCHOR_END: solve

    /// The fully observed MDP on the same states: $V_h(s)$ by backward
    /// induction, averaged over `belief` (the agent learns the state at once).
    pub fn observed_value(
        &self,
        belief: &[f64],
        gamma: f64,
        horizon: usize,
        allowed: &[usize],
    ) -> f64 {
        let n = self.states.len();
        let mut v = vec![0.0; n];
        for _ in 0..horizon {
            v = (0..n)
                .map(|s| {
                    allowed
                        .iter()
                        .map(|&a| {
                            self.reward[s][a]
                                + gamma
                                    * (0..n).map(|t| self.transition[a][s][t] * v[t]).sum::<f64>()
                        })
                        .fold(f64::NEG_INFINITY, f64::max)
                })
                .collect();
        }
        (0..n).map(|s| belief[s] * v[s]).sum()
    }
}

/// The optimal value again, without beliefs: a search over action-observation
/// histories that carries the unnormalised joint $P(s, o_{0:t} \mid a_{0:t})$
/// and never applies Bayes' rule. Independent of [`Pomdp::solve`] except for the model.
pub fn history_value(
    pomdp: &Pomdp,
    joint: &[f64],
    gamma: f64,
    horizon: usize,
    allowed: &[usize],
) -> f64 {
    if horizon == 0 {
        return 0.0;
    }
    let n = pomdp.states.len();
    allowed
        .iter()
        .map(|&a| {
            let now: f64 = (0..n).map(|s| joint[s] * pomdp.reward[s][a]).sum();
            let later: f64 = (0..pomdp.observations.len())
                .map(|o| {
                    let next: Vec<f64> = (0..n)
                        .map(|t| {
                            pomdp.observe[a][t][o]
                                * (0..n)
                                    .map(|s| joint[s] * pomdp.transition[a][s][t])
                                    .sum::<f64>()
                        })
                        .collect();
                    if next.iter().sum::<f64>() > 0.0 {
                        history_value(pomdp, &next, gamma, horizon - 1, allowed)
                    } else {
                        0.0
                    }
                })
                .sum();
            now + gamma * later
        })
        .fold(f64::NEG_INFINITY, f64::max)
}

/// The expected discounted reward of a policy that maps the history of
/// `(action, observation)` pairs to an action, by enumerating every hidden
/// start state, transition and observation (no beliefs involved).
pub fn policy_value(
    pomdp: &Pomdp,
    prior: &[f64],
    gamma: f64,
    horizon: usize,
    policy: &dyn Fn(&[(usize, usize)]) -> usize,
) -> f64 {
    fn walk(
        pomdp: &Pomdp,
        s: usize,
        history: &mut Vec<(usize, usize)>,
        gamma: f64,
        left: usize,
        policy: &dyn Fn(&[(usize, usize)]) -> usize,
    ) -> f64 {
        if left == 0 {
            return 0.0;
        }
        let a = policy(history);
        let mut value = pomdp.reward[s][a];
        for next in 0..pomdp.states.len() {
            let p_next = pomdp.transition[a][s][next];
            for o in 0..pomdp.observations.len() {
                let p = p_next * pomdp.observe[a][next][o];
                if p > 0.0 {
                    history.push((a, o));
                    value += gamma * p * walk(pomdp, next, history, gamma, left - 1, policy);
                    history.pop();
                }
            }
        }
        value
    }
    (0..prior.len())
        .filter(|&s| prior[s] > 0.0)
        .map(|s| prior[s] * walk(pomdp, s, &mut Vec::new(), gamma, horizon, policy))
        .sum()
}

/// The belief after a history, by repeated [`Pomdp::update`].
pub fn belief_after(pomdp: &Pomdp, prior: &[f64], history: &[(usize, usize)]) -> Vec<f64> {
    history
        .iter()
        .fold(prior.to_vec(), |b, &(a, o)| pomdp.update(&b, a, o).1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GAMMA: f64 = 0.9;
    const ALL: [usize; 4] = [0, 1, 2, 3];
    const NO_TEST: [usize; 3] = [1, 2, 3];

    #[test]
    fn the_model_is_normalised() {
        let m = hidden_family(0.8);
        for a in 0..4 {
            for s in 0..7 {
                assert!((m.transition[a][s].iter().sum::<f64>() - 1.0).abs() < 1e-12);
                assert!(
                    (m.observe[a][s].iter().sum::<f64>() - 1.0).abs() < 1e-12,
                    "a {a} s {s}"
                );
            }
        }
    }

    #[test]
    fn a_conclusive_test_settles_the_family() {
        let m = hidden_family(0.8);
        let (p, b) = m.update(&family_prior(), 0, 1);
        assert!((p - 0.4).abs() < 1e-12);
        assert!((b[0] - 1.0).abs() < 1e-12);
        let (p, b) = m.update(&family_prior(), 0, 3);
        assert!((p - 0.2).abs() < 1e-12);
        assert_eq!(b, family_prior());
    }

    #[test]
    fn beliefs_and_histories_give_the_same_optimum() {
        for accuracy in [0.3, 0.8, 1.0] {
            let m = hidden_family(accuracy);
            for allowed in [&ALL[..], &NO_TEST[..]] {
                for horizon in [1, 3, 6] {
                    let (v, _) = m.solve(&family_prior(), GAMMA, horizon, allowed);
                    let h = history_value(&m, &family_prior(), GAMMA, horizon, allowed);
                    assert!(
                        (v - h).abs() < 1e-12,
                        "accuracy {accuracy} horizon {horizon}: {v} vs {h}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_belief_policy_earns_its_value_by_enumeration() {
        let m = hidden_family(0.8);
        let prior = family_prior();
        let (v, _) = m.solve(&prior, GAMMA, 6, &ALL);
        let policy = |history: &[(usize, usize)]| {
            let b = belief_after(&m, &prior, history);
            m.solve(&b, GAMMA, 6 - history.len(), &ALL).1
        };
        let enumerated = policy_value(&m, &prior, GAMMA, 6, &policy);
        assert!((v - enumerated).abs() < 1e-12, "{v} vs {enumerated}");
    }

    #[test]
    fn test_is_worth_something_only_when_the_family_is_hidden() {
        let m = hidden_family(0.8);
        let prior = family_prior();
        let with = m.solve(&prior, GAMMA, 6, &ALL).0;
        let without = m.solve(&prior, GAMMA, 6, &NO_TEST).0;
        assert!((without - 0.45).abs() < 1e-12); // guess an edit, submit: gamma / 2
        assert!(with - without > 0.3);
        let observed = m.observed_value(&prior, GAMMA, 6, &ALL);
        assert!((observed - 0.9).abs() < 1e-12);
        assert!((m.observed_value(&prior, GAMMA, 6, &NO_TEST) - observed).abs() < 1e-12);
        assert!(with < observed);
        // Perfect tests: test, edit, submit is worth gamma^2.
        let perfect = hidden_family(1.0).solve(&prior, GAMMA, 6, &ALL).0;
        assert!((perfect - 0.81).abs() < 1e-12);
    }
}
