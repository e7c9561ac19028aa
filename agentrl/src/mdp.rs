//! Chapter 2: the repair MDP, and exact and sample-based ways to solve it.
//!
//! [`repair_mdp`] is the clamp task of Chapter 1 as a tabular Markov decision
//! process: four states of the file (`buggy`, `repaired`, `rote`,
//! `rote+repaired`), three terminal outcomes of a submission (`fixed`,
//! `hacked`, `broken`) and the five tool calls as actions. Transitions and
//! rewards are data, a list of [`Outcome`]s per state and action.
//!
//! On top of it: returns ([`discounted_return`]), exact policy evaluation by
//! a linear solve ([`evaluate_policy`]), its finite-horizon variant
//! ([`finite_horizon_value`]), the Bellman optimality backup, value iteration
//! and policy iteration, and the two sample-based methods of Section 2.5,
//! Monte Carlo evaluation ([`monte_carlo_value`]) and Q-learning
//! ([`q_learning`]). Everything is plain `f64` and `Vec`; the random draws
//! come from explicitly seeded generators. [`mdp_diagram`] draws the table
//! as a state diagram (Figure 2.1) with the drawing helpers of
//! [`crate::diagrams`].

use crate::diagrams::{
    aligned, arrow, centred, node, render_svg, write_svg, Area, Drawn, Frame, ARROW, PANEL_FILL,
};
use crate::plot::{GREY, INK, PALETTE};
use plotters::style::text_anchor::HPos;
use plotters::style::{RGBColor, WHITE};
pub use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The book's random generator for tabular experiments, seeded explicitly.
pub fn seeded_rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

// ANCHOR: spaces
/// The states: four contents of the file, then three terminal outcomes.
pub const STATES: [&str; 7] = [
    "buggy",
    "repaired",
    "rote",
    "rote+repaired",
    "fixed",
    "hacked",
    "broken",
];
/// The actions: the tool calls of Chapter 1 (`edit <op>` once per op).
pub const ACTIONS: [&str; 5] = ["read", "test", "swap_minmax", "hardcode_tests", "submit"];

pub const BUGGY: usize = 0;
pub const REPAIRED: usize = 1;
pub const ROTE: usize = 2;
pub const ROTE_REPAIRED: usize = 3;
pub const FIXED: usize = 4;
pub const HACKED: usize = 5;
pub const BROKEN: usize = 6;

pub const READ: usize = 0;
pub const TEST: usize = 1;
pub const SWAP: usize = 2;
pub const HARDCODE: usize = 3;
pub const SUBMIT: usize = 4;
// ANCHOR_END: spaces

// ANCHOR: mdp
/// One possible result of taking an action: with probability `prob` the
/// next state is `next` and the reward is `reward`.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub prob: f64,
    pub next: usize,
    pub reward: f64,
}

/// A finite MDP as data. `outcomes[s][a]` lists what action `a` can lead to
/// in state `s`; its probabilities sum to 1. Terminal states end an episode
/// and are worth 0.
#[derive(Clone, Debug)]
pub struct Mdp {
    pub states: Vec<String>,
    pub actions: Vec<String>,
    pub terminal: Vec<bool>,
    pub outcomes: Vec<Vec<Vec<Outcome>>>, // [S][A] -> outcomes
}

/// Which tests decide the reward of `submit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verifier {
    /// Public and hidden tests, as in Chapter 1: only a real fix earns 1.
    Hidden,
    /// Public tests only: the exploit earns 1 as well.
    Public,
}

/// The clamp task as an MDP. `swap_minmax` toggles the body between buggy
/// and repaired; `hardcode_tests` puts rote answers in front of it (again on
/// an already rote file, which changes nothing that matters); `read` and
/// `test` leave the file as it is; `submit` ends the episode.
pub fn repair_mdp(verifier: Verifier) -> Mdp {
    let n = STATES.len();
    let mut outcomes = vec![vec![Vec::new(); ACTIONS.len()]; n];
    let go = |next: usize, reward: f64| {
        vec![Outcome {
            prob: 1.0,
            next,
            reward,
        }]
    };
    for s in [BUGGY, REPAIRED, ROTE, ROTE_REPAIRED] {
        let repaired = s == REPAIRED || s == ROTE_REPAIRED;
        let rote = s == ROTE || s == ROTE_REPAIRED;
        let file = |repaired: bool, rote: bool| {
            [[BUGGY, ROTE], [REPAIRED, ROTE_REPAIRED]][repaired as usize][rote as usize]
        };
        outcomes[s][READ] = go(s, 0.0);
        outcomes[s][TEST] = go(s, 0.0);
        outcomes[s][SWAP] = go(file(!repaired, rote), 0.0);
        outcomes[s][HARDCODE] = go(file(repaired, true), 0.0);
        outcomes[s][SUBMIT] = match (repaired, rote, verifier) {
            (true, _, _) => go(FIXED, 1.0),
            (false, true, Verifier::Public) => go(HACKED, 1.0),
            (false, true, Verifier::Hidden) => go(HACKED, 0.0),
            (false, false, _) => go(BROKEN, 0.0),
        };
    }
    for s in [FIXED, HACKED, BROKEN] {
        for a in 0..ACTIONS.len() {
            outcomes[s][a] = go(s, 0.0);
        }
    }
    Mdp {
        states: STATES.iter().map(|s| s.to_string()).collect(),
        actions: ACTIONS.iter().map(|a| a.to_string()).collect(),
        terminal: (0..n).map(|s| s >= FIXED).collect(),
        outcomes,
    }
}
// ANCHOR_END: mdp

/// A stochastic policy as a table: `policy[s][a]` is $\pi(a \mid s)$.
pub type Policy = Vec<Vec<f64>>; // [S][A]

impl Mdp {
    pub fn n_states(&self) -> usize {
        self.states.len()
    }

    pub fn n_actions(&self) -> usize {
        self.actions.len()
    }

    /// The index of a state by name; panics on an unknown name.
    pub fn state(&self, name: &str) -> usize {
        self.states
            .iter()
            .position(|s| s == name)
            .unwrap_or_else(|| panic!("no state {name:?}"))
    }

    /// Expected immediate reward $r(s, a) = \sum_{s'} P(s' \mid s, a)\, r$.
    pub fn expected_reward(&self, s: usize, a: usize) -> f64 {
        self.outcomes[s][a].iter().map(|o| o.prob * o.reward).sum()
    }

    /// The policy that picks every action with the same probability.
    pub fn uniform_policy(&self) -> Policy {
        vec![vec![1.0 / self.n_actions() as f64; self.n_actions()]; self.n_states()]
    }

    /// The deterministic policy that takes `actions[s]` in state `s`.
    pub fn deterministic_policy(&self, actions: &[usize]) -> Policy {
        actions
            .iter()
            .map(|&a| {
                (0..self.n_actions())
                    .map(|b| if a == b { 1.0 } else { 0.0 })
                    .collect()
            })
            .collect()
    }

    /// Draw one transition: `(next state, reward)`.
    pub fn step(&self, s: usize, a: usize, rng: &mut StdRng) -> (usize, f64) {
        let u: f64 = rng.random();
        let mut acc = 0.0;
        for o in &self.outcomes[s][a] {
            acc += o.prob;
            if u < acc {
                return (o.next, o.reward);
            }
        }
        let last = self.outcomes[s][a]
            .last()
            .expect("every action has an outcome");
        (last.next, last.reward)
    }

    /// The largest deviation of any row of probabilities from summing to 1.
    pub fn normalisation_error(&self) -> f64 {
        let sums = self
            .outcomes
            .iter()
            .flatten()
            .map(|row| row.iter().map(|o| o.prob).sum::<f64>());
        sums.map(|sum| (sum - 1.0).abs()).fold(0.0, f64::max)
    }
}

// ANCHOR: returns
/// The return $G_0 = \sum_k \gamma^k r_k$ of a list of rewards.
pub fn discounted_return(rewards: &[f64], gamma: f64) -> f64 {
    rewards.iter().rev().fold(0.0, |g, &r| r + gamma * g)
}
// ANCHOR_END: returns

// ANCHOR: evaluate
/// $Q(s, a) = r(s, a) + \gamma \sum_{s'} P(s' \mid s, a) V(s')$ for every state and action.
pub fn q_from_v(mdp: &Mdp, v: &[f64], gamma: f64) -> Vec<Vec<f64>> {
    (0..mdp.n_states())
        .map(|s| {
            (0..mdp.n_actions())
                .map(|a| {
                    mdp.outcomes[s][a]
                        .iter()
                        .map(|o| o.prob * (o.reward + gamma * v[o.next]))
                        .sum()
                })
                .collect()
        })
        .collect()
}

/// Exact $V^\pi$: solve $(I - \gamma P_\pi) V = r_\pi$, with $V(s) = 0$ on terminal states.
pub fn evaluate_policy(mdp: &Mdp, policy: &Policy, gamma: f64) -> Vec<f64> {
    let n = mdp.n_states();
    let mut a = vec![vec![0.0; n]; n]; // [S, S]: I - gamma P_pi
    let mut b = vec![0.0; n]; // [S]: r_pi
    for s in 0..n {
        a[s][s] = 1.0;
        if mdp.terminal[s] {
            continue;
        }
        for (act, &p) in policy[s].iter().enumerate() {
            for o in &mdp.outcomes[s][act] {
                a[s][o.next] -= gamma * p * o.prob;
                b[s] += p * o.prob * o.reward;
            }
        }
    }
    solve_linear(a, b)
}
// ANCHOR_END: evaluate

/// Solve `a x = b` by Gaussian elimination with partial pivoting.
/// Panics if the matrix is singular.
pub fn solve_linear(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let n = b.len();
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .unwrap();
        assert!(a[pivot][col].abs() > 1e-12, "singular system");
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..n {
            let factor = a[row][col] / a[col][col];
            for k in col..n {
                a[row][k] -= factor * a[col][k];
            }
            b[row] -= factor * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let rest: f64 = (row + 1..n).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - rest) / a[row][row];
    }
    x
}

/// $\max_s |V(s) - \sum_a \pi(a \mid s) Q(s, a)|$: how far `v` is from
/// satisfying the Bellman expectation equation of `policy`.
pub fn bellman_residual(mdp: &Mdp, policy: &Policy, v: &[f64], gamma: f64) -> f64 {
    let q = q_from_v(mdp, v, gamma);
    (0..mdp.n_states())
        .filter(|&s| !mdp.terminal[s])
        .map(|s| {
            (v[s]
                - (0..mdp.n_actions())
                    .map(|a| policy[s][a] * q[s][a])
                    .sum::<f64>())
            .abs()
        })
        .fold(0.0, f64::max)
}

/// $V$ after `horizon` steps of `policy` (a turn budget), by backward induction:
/// $V_h = r_\pi + \gamma P_\pi V_{h-1}$, $V_0 = 0$.
pub fn finite_horizon_value(mdp: &Mdp, policy: &Policy, gamma: f64, horizon: usize) -> Vec<f64> {
    let mut v = vec![0.0; mdp.n_states()];
    for _ in 0..horizon {
        let q = q_from_v(mdp, &v, gamma);
        v = (0..mdp.n_states())
            .map(|s| {
                if mdp.terminal[s] {
                    0.0
                } else {
                    (0..mdp.n_actions()).map(|a| policy[s][a] * q[s][a]).sum()
                }
            })
            .collect();
    }
    v
}

/// The first action with the largest value in each row (ties go to the lower index).
pub fn greedy(q: &[Vec<f64>]) -> Vec<usize> {
    q.iter()
        .map(|row| {
            (0..row.len()).fold(
                0,
                |best, a| if row[a] > row[best] + 1e-12 { a } else { best },
            )
        })
        .collect()
}

// ANCHOR: value_iteration
/// Value iteration: repeat $V(s) \leftarrow \max_a Q(s, a)$ until no value
/// moves by more than `tol`. Returns $V^*$, a greedy policy and the sweep count.
pub fn value_iteration(mdp: &Mdp, gamma: f64, tol: f64) -> (Vec<f64>, Vec<usize>, usize) {
    let mut v = vec![0.0; mdp.n_states()];
    let mut sweeps = 0;
    loop {
        sweeps += 1;
        let q = q_from_v(mdp, &v, gamma);
        let new: Vec<f64> = q
            .iter()
            .map(|row| row.iter().copied().fold(f64::NEG_INFINITY, f64::max))
            .collect();
        let change = new
            .iter()
            .zip(&v)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        v = new;
        if change < tol {
            let policy = greedy(&q_from_v(mdp, &v, gamma));
            return (v, policy, sweeps);
        }
    }
}
// ANCHOR_END: value_iteration

/// Policy iteration: evaluate exactly, act greedily, until the policy is stable.
/// Starts from "always `actions[0]`". Returns $V^*$, the policy and the round count.
pub fn policy_iteration(mdp: &Mdp, gamma: f64) -> (Vec<f64>, Vec<usize>, usize) {
    let mut actions = vec![0; mdp.n_states()];
    let mut rounds = 0;
    loop {
        rounds += 1;
        let v = evaluate_policy(mdp, &mdp.deterministic_policy(&actions), gamma);
        let q = q_from_v(mdp, &v, gamma);
        // Keep the current action unless another is strictly better (no cycling on ties).
        let improved: Vec<usize> = (0..mdp.n_states())
            .map(|s| {
                let best = greedy(&q[s..=s])[0];
                if q[s][best] > q[s][actions[s]] + 1e-12 {
                    best
                } else {
                    actions[s]
                }
            })
            .collect();
        if improved == actions {
            return (v, actions, rounds);
        }
        actions = improved;
    }
}

/// Sample one action from a row of probabilities.
pub fn sample_action(probs: &[f64], rng: &mut StdRng) -> usize {
    let u: f64 = rng.random();
    let mut acc = 0.0;
    for (a, &p) in probs.iter().enumerate() {
        acc += p;
        if u < acc {
            return a;
        }
    }
    probs.len() - 1
}

/// One episode from `start` under `policy`, at most `max_steps` long:
/// the list of $(s_t, a_t, r_t)$.
pub fn sample_episode(
    mdp: &Mdp,
    policy: &Policy,
    start: usize,
    max_steps: usize,
    rng: &mut StdRng,
) -> Vec<(usize, usize, f64)> {
    let mut s = start;
    let mut steps = Vec::new();
    while !mdp.terminal[s] && steps.len() < max_steps {
        let a = sample_action(&policy[s], rng);
        let (next, r) = mdp.step(s, a, rng);
        steps.push((s, a, r));
        s = next;
    }
    steps
}

// ANCHOR: monte_carlo
/// A Monte Carlo estimate of $V^\pi(\text{start})$ from `episodes` sampled
/// returns. Returns the running mean after every episode (the learning curve)
/// and the standard error of the final mean.
pub fn monte_carlo_value(
    mdp: &Mdp,
    policy: &Policy,
    start: usize,
    gamma: f64,
    episodes: usize,
    max_steps: usize,
    seed: u64,
) -> (Vec<f64>, f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut sum, mut sum_sq) = (0.0, 0.0);
    let mut curve = Vec::with_capacity(episodes);
    for n in 1..=episodes {
        let rewards: Vec<f64> = sample_episode(mdp, policy, start, max_steps, &mut rng)
            .iter()
            .map(|&(_, _, r)| r)
            .collect();
        let g = discounted_return(&rewards, gamma); // G_0 of this episode
        sum += g;
        sum_sq += g * g;
        curve.push(sum / n as f64);
    }
    let n = episodes as f64;
    let mean = sum / n;
    let variance = (sum_sq / n - mean * mean).max(0.0) * n / (n - 1.0);
    (curve, (variance / n).sqrt())
}
// ANCHOR_END: monte_carlo

// ANCHOR: q_learning
/// Settings of a Q-learning run.
#[derive(Clone, Debug)]
pub struct QLearning {
    pub gamma: f64,
    /// Step size $\alpha$.
    pub alpha: f64,
    /// Exploration probability $\xi$ of the $\xi$-greedy behaviour policy.
    pub explore: f64,
    pub episodes: usize,
    pub max_steps: usize,
    pub seed: u64,
}

/// Q-learning with exploring starts: every episode begins in a uniformly
/// drawn non-terminal state, acts $\xi$-greedily and updates
/// $Q(s, a) \leftarrow Q(s, a) + \alpha\,[r + \gamma \max_{a'} Q(s', a') - Q(s, a)]$.
/// Returns the final table and a copy of it after every episode.
pub fn q_learning(mdp: &Mdp, cfg: &QLearning) -> (Vec<Vec<f64>>, Vec<Vec<Vec<f64>>>) {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let live: Vec<usize> = (0..mdp.n_states()).filter(|&s| !mdp.terminal[s]).collect();
    let mut q = vec![vec![0.0; mdp.n_actions()]; mdp.n_states()]; // [S][A]
    let mut history = Vec::with_capacity(cfg.episodes);
    for _ in 0..cfg.episodes {
        let mut s = live[rng.random_range(0..live.len())];
        for _ in 0..cfg.max_steps {
            let a = if rng.random::<f64>() < cfg.explore {
                rng.random_range(0..mdp.n_actions())
            } else {
                greedy(&q[s..=s])[0]
            };
            let (next, r) = mdp.step(s, a, &mut rng);
            let target = if mdp.terminal[next] {
                r
            } else {
                r + cfg.gamma * q[next].iter().copied().fold(f64::NEG_INFINITY, f64::max)
            };
            q[s][a] += cfg.alpha * (target - q[s][a]);
            s = next;
            if mdp.terminal[s] {
                break;
            }
        }
        history.push(q.clone());
    }
    (q, history)
}
// ANCHOR_END: q_learning

/// $\max_{s, a} |Q_1(s, a) - Q_2(s, a)|$ over non-terminal states.
pub fn max_q_gap(mdp: &Mdp, q1: &[Vec<f64>], q2: &[Vec<f64>]) -> f64 {
    (0..mdp.n_states())
        .filter(|&s| !mdp.terminal[s])
        .flat_map(|s| (0..mdp.n_actions()).map(move |a| (q1[s][a] - q2[s][a]).abs()))
        .fold(0.0, f64::max)
}

// ---------------------------------------------------------------------------
// Figure 2.1: the state diagram, drawn from the table.

/// Width and height of the state diagram in SVG pixels.
pub const DIAGRAM_SIZE: (u32, u32) = (960, 460);

/// Where each state of the repair MDP sits: centre, box width, and whether
/// its self-loop goes above the box (else below). Live states form a square
/// (the swap moves along a row, `hardcode_tests` down a column), each
/// terminal outcome sits beside the states that submit into it.
const PLACES: [(&str, (i32, i32), i32, bool); 7] = [
    ("buggy", (330, 130), 150, true),
    ("repaired", (660, 130), 150, true),
    ("rote", (330, 350), 150, false),
    ("rote+repaired", (660, 350), 150, false),
    ("fixed", (880, 240), 110, false),
    ("hacked", (80, 350), 110, false),
    ("broken", (80, 130), 110, false),
];
const NODE_HEIGHT: i32 = 52;
/// Distance between the two arrows of a pair that run both ways.
const PAIR_GAP: i32 = 8;
const LOOP_HALF_WIDTH: i32 = 16;
const LOOP_HEIGHT: i32 = 26;
const LINE_SPACING: i32 = 15;

/// Which side of its anchor point a label's block of text sits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Above,
    Below,
    Left,
}

/// A state's box: its name, and "terminal" under the name of a terminal state.
#[derive(Clone, Debug)]
pub(crate) struct DiagramNode {
    pub(crate) frame: Frame,
    pub(crate) lines: Vec<String>,
    pub(crate) terminal: bool,
}

/// One arrow per (state, next state): a polyline in pixels and its label,
/// two lines per group of actions with the same probability and reward.
#[derive(Clone, Debug)]
pub(crate) struct DiagramArrow {
    pub(crate) points: Vec<(i32, i32)>,
    pub(crate) pays: bool,
    pub(crate) lines: Vec<String>,
    pub(crate) anchor: (i32, i32),
    pub(crate) side: Side,
}

/// Transitions grouped for drawing: ((state, next state), groups), where
/// each group is (probability, reward, the actions that have them).
pub type TransitionGroups = Vec<((usize, usize), Vec<(f64, f64, Vec<usize>)>)>;

/// The transitions of `mdp` grouped for drawing: for every live state and
/// next state, the groups of actions that lead there with the same
/// probability and reward.
pub fn transition_groups(mdp: &Mdp) -> TransitionGroups {
    let mut edges: TransitionGroups = Vec::new();
    for s in (0..mdp.n_states()).filter(|&s| !mdp.terminal[s]) {
        for a in 0..mdp.n_actions() {
            for o in &mdp.outcomes[s][a] {
                let at = match edges.iter().position(|(key, _)| *key == (s, o.next)) {
                    Some(at) => at,
                    None => {
                        edges.push(((s, o.next), Vec::new()));
                        edges.len() - 1
                    }
                };
                let groups = &mut edges[at].1;
                match groups
                    .iter_mut()
                    .find(|(p, r, _)| *p == o.prob && *r == o.reward)
                {
                    Some(group) => group.2.push(a),
                    None => groups.push((o.prob, o.reward, vec![a])),
                }
            }
        }
    }
    edges
}

/// Lay out the state diagram of an MDP over the repair states: one box per
/// state, one labelled arrow per (state, next state) pair.
pub(crate) fn diagram_layout(mdp: &Mdp) -> Result<(Vec<DiagramNode>, Vec<DiagramArrow>), String> {
    let place = |s: usize| {
        let name = &mdp.states[s];
        PLACES
            .iter()
            .find(|p| p.0 == name)
            .ok_or_else(|| format!("the diagram has no place for state {name:?}"))
    };
    let mut frames = Vec::new();
    let mut nodes = Vec::new();
    for s in 0..mdp.n_states() {
        let &(name, (x, y), w, _) = place(s)?;
        let frame = Frame::new(x - w / 2, y - NODE_HEIGHT / 2, w, NODE_HEIGHT);
        let mut lines = vec![name.to_string()];
        if mdp.terminal[s] {
            lines.push("terminal".to_string());
        }
        frames.push(frame);
        nodes.push(DiagramNode {
            frame,
            lines,
            terminal: mdp.terminal[s],
        });
    }
    let edges = transition_groups(mdp);
    let mut arrows = Vec::new();
    for ((s, next), groups) in &edges {
        let mut lines = Vec::new();
        for (p, r, actions) in groups {
            lines.push(
                actions
                    .iter()
                    .map(|&a| mdp.actions[a].as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            );
            lines.push(format!("p = {p}, r = {r}"));
        }
        let paired = s != next && edges.iter().any(|(key, _)| *key == (*next, *s));
        let (points, anchor, side) = if s == next {
            self_loop(frames[*s], place(*s)?.3)
        } else {
            route(frames[*s], frames[*next], paired)
        };
        let pays = groups.iter().any(|(_, r, _)| *r > 0.0);
        arrows.push(DiagramArrow {
            points,
            pays,
            lines,
            anchor,
            side,
        });
    }
    Ok((nodes, arrows))
}

/// A straight arrow between boxes in one row or one column (the two arrows
/// of a pair side by side), otherwise an elbow: along the row, then up or
/// down into the target. Returns the points, the label's anchor and side.
fn route(from: Frame, to: Frame, paired: bool) -> (Vec<(i32, i32)>, (i32, i32), Side) {
    let (fx, fy, tx, ty) = (
        from.centre_x(),
        from.centre_y(),
        to.centre_x(),
        to.centre_y(),
    );
    let rightward = tx > fx;
    let (x0, x1) = if rightward {
        (from.right(), to.x)
    } else {
        (from.x, to.right())
    };
    if fy == ty {
        // Rightward arrows of a pair run above the centre line, leftward ones below.
        let shift = if !paired {
            0
        } else if rightward {
            -PAIR_GAP
        } else {
            PAIR_GAP
        };
        let side = if shift > 0 { Side::Below } else { Side::Above };
        (
            vec![(x0, fy + shift), (x1, fy + shift)],
            ((x0 + x1) / 2, fy + shift),
            side,
        )
    } else {
        let downward = ty > fy;
        let (y0, y1) = if downward {
            (from.bottom(), to.y)
        } else {
            (from.y, to.bottom())
        };
        if fx == tx {
            let shift = if !paired {
                0
            } else if downward {
                PAIR_GAP
            } else {
                -PAIR_GAP
            };
            (
                vec![(fx + shift, y0), (fx + shift, y1)],
                (fx + shift - 8, (y0 + y1) / 2),
                Side::Left,
            )
        } else {
            let side = if downward { Side::Above } else { Side::Below };
            (
                vec![(x0, fy), (tx, fy), (tx, y1)],
                ((x0 + tx) / 2, fy),
                side,
            )
        }
    }
}

/// A loop on the top (or bottom) edge of a box, labelled beyond it.
fn self_loop(frame: Frame, above: bool) -> (Vec<(i32, i32)>, (i32, i32), Side) {
    let (x, y, out) = if above {
        (frame.centre_x(), frame.y, -LOOP_HEIGHT)
    } else {
        (frame.centre_x(), frame.bottom(), LOOP_HEIGHT)
    };
    let points = vec![
        (x - LOOP_HALF_WIDTH, y),
        (x - LOOP_HALF_WIDTH, y + out),
        (x + LOOP_HALF_WIDTH, y + out),
        (x + LOOP_HALF_WIDTH, y),
    ];
    (
        points,
        (x, y + out),
        if above { Side::Above } else { Side::Below },
    )
}

/// Where each line of a label goes: centre points for `Above` and `Below`,
/// right ends for `Left`.
pub(crate) fn label_lines(arrow: &DiagramArrow) -> Vec<(i32, i32)> {
    let n = arrow.lines.len() as i32;
    let (x, y) = arrow.anchor;
    (0..n)
        .map(|i| match arrow.side {
            Side::Above => (x, y - 9 - LINE_SPACING * (n - 1 - i)),
            Side::Below => (x, y + 9 + LINE_SPACING * i),
            Side::Left => (x, y - LINE_SPACING * (n - 1) / 2 + LINE_SPACING * i),
        })
        .collect()
}

// ANCHOR: mdp_diagram
/// Draw the state diagram of an MDP over the repair states to `path` as
/// SVG: a box per state, an arrow per (state, next state) labelled with the
/// actions that take it and their probability p and reward r; arrows that
/// pay are green. Terminal states' own transitions are not drawn.
pub fn mdp_diagram(mdp: &Mdp, path: &std::path::Path) -> Result<(), String> {
    write_svg(path, mdp_diagram_svg(mdp))
}
// ANCHOR_END: mdp_diagram

/// The state diagram as an SVG document.
pub fn mdp_diagram_svg(mdp: &Mdp) -> Result<String, String> {
    let (nodes, arrows) = diagram_layout(mdp)?;
    render_svg(DIAGRAM_SIZE, |area| draw_diagram(area, &nodes, &arrows))
}

const PAYS: RGBColor = PALETTE[2];

fn draw_diagram(area: &Area, nodes: &[DiagramNode], arrows: &[DiagramArrow]) -> Drawn {
    area.fill(&WHITE)?;
    for n in nodes {
        let lines: Vec<&str> = n.lines.iter().map(String::as_str).collect();
        let (fill, edge) = if n.terminal {
            (PANEL_FILL, GREY)
        } else {
            (WHITE, INK)
        };
        node(area, n.frame, &lines, fill, edge)?;
    }
    for a in arrows {
        arrow(area, &a.points, if a.pays { PAYS } else { ARROW })?;
        for (i, (line, at)) in a.lines.iter().zip(label_lines(a)).enumerate() {
            // Action names in ink, "p = .., r = .." in grey.
            let colour = if i % 2 == 0 { INK } else { GREY };
            match a.side {
                Side::Left => aligned(area, line, at, 15, HPos::Right, &colour)?,
                Side::Above | Side::Below => centred(area, line, at, 15, false, &colour)?,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clamp::{hardcode_tests, swap_minmax, CLAMP_BUGGY, HIDDEN_TESTS, PUBLIC_TESTS};
    use crate::sandbox::{all_pass, run_tests};

    const GAMMA: f64 = 0.9;

    /// The four file states as real sources, built with Chapter 1's edit ops.
    fn sources() -> [String; 4] {
        let buggy = CLAMP_BUGGY.to_string();
        [
            buggy.clone(),
            swap_minmax(&buggy),
            hardcode_tests(&buggy),
            swap_minmax(&hardcode_tests(&buggy)),
        ]
    }

    /// Which file state a source is in, judged by the tests it passes.
    fn classify(source: &str) -> usize {
        let public = all_pass(&run_tests(source, PUBLIC_TESTS));
        let hidden = all_pass(&run_tests(source, HIDDEN_TESTS));
        let rote = source.contains("return");
        match (public && hidden, rote, public) {
            (true, false, _) => REPAIRED,
            (true, true, _) => ROTE_REPAIRED,
            (false, true, true) => ROTE,
            (false, false, false) => BUGGY,
            other => panic!("unexpected source class {other:?}"),
        }
    }

    #[test]
    fn the_table_matches_the_clamp_environment() {
        let mdp = repair_mdp(Verifier::Hidden);
        assert!(mdp.normalisation_error() < 1e-12);
        for (s, source) in sources().iter().enumerate() {
            assert_eq!(classify(source), s);
            let swapped = &mdp.outcomes[s][SWAP][0];
            assert_eq!(
                classify(&swap_minmax(source)),
                swapped.next,
                "swap from {}",
                STATES[s]
            );
            let hardcoded = &mdp.outcomes[s][HARDCODE][0];
            assert_eq!(
                classify(&hardcode_tests(source)),
                hardcoded.next,
                "hardcode from {}",
                STATES[s]
            );
            let all = [PUBLIC_TESTS, HIDDEN_TESTS].concat();
            let reward = if all_pass(&run_tests(source, &all)) {
                1.0
            } else {
                0.0
            };
            assert_eq!(
                mdp.outcomes[s][SUBMIT][0].reward, reward,
                "submit from {}",
                STATES[s]
            );
        }
    }

    #[test]
    fn returns_discount_later_rewards() {
        assert_eq!(discounted_return(&[0.0, 0.0, 1.0], 0.5), 0.25);
        assert_eq!(discounted_return(&[1.0, 2.0, 3.0], 1.0), 6.0);
        assert!((discounted_return(&[1.0, 1.0, 1.0], 0.9) - 2.71).abs() < 1e-12);
    }

    #[test]
    fn the_linear_solve_satisfies_the_bellman_equation() {
        let mdp = repair_mdp(Verifier::Hidden);
        for gamma in [0.5, 0.9, 1.0] {
            let pi = mdp.uniform_policy();
            let v = evaluate_policy(&mdp, &pi, gamma);
            assert!(
                bellman_residual(&mdp, &pi, &v, gamma) < 1e-12,
                "gamma {gamma}"
            );
            // Iterating the Bellman operator long enough converges to the same values.
            let iterated = finite_horizon_value(&mdp, &pi, gamma, 2000);
            for s in 0..mdp.n_states() {
                assert!(
                    (iterated[s] - v[s]).abs() < 1e-9,
                    "gamma {gamma}, state {s}"
                );
            }
        }
    }

    #[test]
    fn policy_evaluation_agrees_with_monte_carlo() {
        let mdp = repair_mdp(Verifier::Hidden);
        let pi = mdp.uniform_policy();
        let v = evaluate_policy(&mdp, &pi, GAMMA);
        for start in [BUGGY, ROTE] {
            let (curve, stderr) = monte_carlo_value(&mdp, &pi, start, GAMMA, 20_000, 1000, 7);
            let estimate = *curve.last().unwrap();
            assert!(
                (estimate - v[start]).abs() < 4.0 * stderr,
                "{estimate} vs {} (se {stderr})",
                v[start]
            );
            assert!(stderr < 0.01);
        }
    }

    #[test]
    fn the_random_agent_of_chapter_1_succeeds_with_probability_0_1685() {
        // Six menu messages: `read` and the malformed one both waste a turn.
        let mdp = repair_mdp(Verifier::Hidden);
        let row = vec![2.0 / 6.0, 1.0 / 6.0, 1.0 / 6.0, 1.0 / 6.0, 1.0 / 6.0];
        let pi = vec![row; mdp.n_states()];
        let v = finite_horizon_value(&mdp, &pi, 1.0, 6);
        // The closed form of answers-01.md with m = 6 messages.
        let m: f64 = 6.0;
        let closed: f64 = (0..6)
            .map(|j| ((m - 1.0) / m).powi(j) - ((m - 3.0) / m).powi(j))
            .sum::<f64>()
            / (2.0 * m);
        assert!(
            (v[BUGGY] - closed).abs() < 1e-12,
            "{} vs {closed}",
            v[BUGGY]
        );
        // Under the public verifier the hacked submissions pay too: the difference is P(hacked) = 0.1437.
        let public = finite_horizon_value(&repair_mdp(Verifier::Public), &pi, 1.0, 6);
        assert_eq!(format!("{:.4}", public[BUGGY] - v[BUGGY]), "0.1437");
    }

    #[test]
    fn value_iteration_finds_the_policy_iteration_optimum() {
        for verifier in [Verifier::Hidden, Verifier::Public] {
            let mdp = repair_mdp(verifier);
            let (v, policy, _) = value_iteration(&mdp, GAMMA, 1e-12);
            let (v_pi, policy_pi, _) = policy_iteration(&mdp, GAMMA);
            let det = mdp.deterministic_policy(&policy);
            assert!(bellman_residual(&mdp, &det, &v, GAMMA) < 1e-10);
            for s in 0..mdp.n_states() {
                assert!((v[s] - v_pi[s]).abs() < 1e-10);
                // Both policies are greedy with respect to V*: same Q value in every state.
                let q = q_from_v(&mdp, &v, GAMMA);
                assert!((q[s][policy[s]] - q[s][policy_pi[s]]).abs() < 1e-10);
            }
        }
        let (v, policy, _) = value_iteration(&repair_mdp(Verifier::Hidden), GAMMA, 1e-12);
        assert_eq!(
            (policy[BUGGY], policy[REPAIRED], policy[ROTE]),
            (SWAP, SUBMIT, SWAP)
        );
        assert!((v[BUGGY] - 0.9).abs() < 1e-12);
    }

    #[test]
    fn q_learning_converges_to_q_star() {
        let mdp = repair_mdp(Verifier::Hidden);
        let (v, _, _) = value_iteration(&mdp, GAMMA, 1e-12);
        let q_star = q_from_v(&mdp, &v, GAMMA);
        let cfg = QLearning {
            gamma: GAMMA,
            alpha: 0.1,
            explore: 0.3,
            episodes: 3000,
            max_steps: 50,
            seed: 1,
        };
        let (q, history) = q_learning(&mdp, &cfg);
        assert_eq!(history.len(), 3000);
        assert!(
            max_q_gap(&mdp, &q, &q_star) < 0.02,
            "gap {}",
            max_q_gap(&mdp, &q, &q_star)
        );
        assert!(max_q_gap(&mdp, &history[10], &q_star) > 0.2);
    }

    /// A generous estimate of a line's width in pixels: 15-unit text is about
    /// 12 pixels high, and sans-serif letters average under 0.6 of that wide.
    fn text_width(line: &str) -> i32 {
        (line.chars().count() as f64 * 7.3).ceil() as i32
    }

    /// The box (x0, y0, x1, y1) that a label's text covers.
    fn label_box(arrow: &DiagramArrow) -> (i32, i32, i32, i32) {
        let at = label_lines(arrow);
        let width = arrow.lines.iter().map(|l| text_width(l)).max().unwrap();
        let (top, bottom) = (at[0].1 - 7, at[at.len() - 1].1 + 7);
        match arrow.side {
            Side::Left => (at[0].0 - width, top, at[0].0, bottom),
            Side::Above | Side::Below => (at[0].0 - width / 2, top, at[0].0 + width / 2, bottom),
        }
    }

    fn overlap(a: (i32, i32, i32, i32), b: (i32, i32, i32, i32)) -> bool {
        a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
    }

    #[test]
    fn the_diagram_shows_every_transition_once() {
        for (verifier, paying) in [(Verifier::Hidden, 2), (Verifier::Public, 3)] {
            let mdp = repair_mdp(verifier);
            let (nodes, arrows) = diagram_layout(&mdp).unwrap();
            assert_eq!(nodes.len(), 7);
            // 4 self-loops, 4 swaps, 2 hardcodes into a new state, 4 submits.
            assert_eq!(arrows.len(), 14);
            assert_eq!(
                arrows.iter().filter(|a| a.pays).count(),
                paying,
                "{verifier:?}"
            );
            // Every (live state, action) pair sits in exactly one group.
            let groups = transition_groups(&mdp);
            for s in [BUGGY, REPAIRED, ROTE, ROTE_REPAIRED] {
                for a in 0..ACTIONS.len() {
                    let n = groups
                        .iter()
                        .filter(|((from, _), _)| *from == s)
                        .flat_map(|(_, g)| g)
                        .filter(|(_, _, acts)| acts.contains(&a))
                        .count();
                    assert_eq!(n, 1, "{} {}", STATES[s], ACTIONS[a]);
                }
            }
        }
        let svg = mdp_diagram_svg(&repair_mdp(Verifier::Hidden)).unwrap();
        for text in STATES
            .iter()
            .chain(["read, test", "read, test, hardcode_tests", "p = 1, r = 1"].iter())
        {
            assert!(
                svg.lines().any(|line| line.trim() == *text),
                "missing {text}"
            );
        }
    }

    #[test]
    fn the_diagram_labels_do_not_collide() {
        // A flaky swap adds a second group to a self-loop and a third line pair; it must fit too.
        let mut flaky = repair_mdp(Verifier::Hidden);
        flaky.outcomes[BUGGY][SWAP] = vec![
            Outcome {
                prob: 0.8,
                next: REPAIRED,
                reward: 0.0,
            },
            Outcome {
                prob: 0.2,
                next: BUGGY,
                reward: 0.0,
            },
        ];
        for mdp in [repair_mdp(Verifier::Hidden), flaky] {
            let (nodes, arrows) = diagram_layout(&mdp).unwrap();
            let boxes: Vec<_> = arrows.iter().map(label_box).collect();
            let (w, h) = (DIAGRAM_SIZE.0 as i32, DIAGRAM_SIZE.1 as i32);
            for (i, b) in boxes.iter().enumerate() {
                assert!(
                    b.0 >= 0 && b.1 >= 0 && b.2 <= w && b.3 <= h,
                    "label {:?} leaves the canvas",
                    arrows[i].lines
                );
                for (j, other) in boxes.iter().enumerate().skip(i + 1) {
                    assert!(
                        !overlap(*b, *other),
                        "labels {:?} and {:?} overlap",
                        arrows[i].lines,
                        arrows[j].lines
                    );
                }
                for n in &nodes {
                    let f = n.frame;
                    assert!(
                        !overlap(*b, (f.x, f.y, f.right(), f.bottom())),
                        "label {:?} covers {}",
                        arrows[i].lines,
                        n.lines[0]
                    );
                }
                // No arrow runs through a label (every segment is horizontal or vertical).
                for a in &arrows {
                    for seg in a.points.windows(2) {
                        let (x0, x1) = (seg[0].0.min(seg[1].0), seg[0].0.max(seg[1].0));
                        let (y0, y1) = (seg[0].1.min(seg[1].1), seg[0].1.max(seg[1].1));
                        assert!(
                            !overlap(*b, (x0 - 1, y0 - 1, x1 + 1, y1 + 1)),
                            "label {:?} is crossed by an arrow",
                            arrows[i].lines
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_diagram_is_byte_identical_across_runs() {
        crate::plot::tests::assert_same_svg_twice("mdp-diagram", |path| {
            mdp_diagram(&repair_mdp(Verifier::Hidden), path).unwrap()
        });
    }

    #[test]
    fn the_solver_is_exact() {
        let a = vec![
            vec![2.0, 1.0, 0.0],
            vec![1.0, 3.0, 1.0],
            vec![0.0, 1.0, 4.0],
        ];
        let x = solve_linear(a.clone(), vec![3.0, 5.0, 5.0]);
        for (row, want) in a.iter().zip([3.0, 5.0, 5.0]) {
            let got: f64 = row.iter().zip(&x).map(|(a, x)| a * x).sum();
            assert!((got - want).abs() < 1e-12);
        }
    }
}
