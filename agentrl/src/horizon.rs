//! Chapter 12: multi-turn behaviour and long horizons. Edit menus shown as
//! diffs under neutral labels, with the gym's `undo` tool switched on
//! ([`neutral`]); files with several bugs ([`compose`]); the split of the
//! families into trained and held-out ones ([`family_split`]); a scripted
//! test-driven search ([`Searcher`]) and a policy that slips ([`Slipping`]);
//! potential-based shaping of the repair MDP ([`shape`]); per-turn credit from
//! test progress ([`TurnCredit`]); the length of the context turn by turn
//! ([`context_lengths`]) and a history that elides old observations
//! ([`elide_observations`]); and the degenerate episodes a trainer may drop
//! ([`degenerate`]).

use crate::episode::parse_call;
use crate::episode::Owner;
use crate::gym::{BugFixEnv, Edit, EditKind, Family, Gym, Task, MAX_TURNS};
use crate::mdp::{evaluate_policy, q_from_v, solve_linear, Mdp, Outcome};
use crate::pg::{wrapper_config, Algorithm, Forward, Report, TabularSoftmax};
use crate::policies::Policy;
use crate::pretrain::{
    base_model, corpus_of, pretrain, save_model, PretrainConfig, Sequence, BASE,
};
use crate::rollout::{Played, Segment};
use crate::runner::{Guarded, TestRunner};
use crate::sandbox::all_pass;
use crate::tinyagent::TinyAgent;
use crate::tokenizer::Bpe;
use crate::trajectory::{Batch, Trajectory};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::path::Path;
use tch::Tensor;

// ANCHOR: neutral
/// The lines of `text`, each behind `mark`.
fn marked(text: &str, mark: &str) -> String {
    text.lines().map(|line| format!("{mark}{line}\n")).collect()
}

/// The menu as the agent reads it under neutral labels: each op's number,
/// then the lines it removes (`-`) and the lines it puts in (`+`).
pub fn diff_menu(menu: &[Edit]) -> String {
    menu.iter()
        .map(|edit| {
            format!(
                "op {}:\n{}{}",
                edit.name,
                marked(&edit.find, "- "),
                marked(&edit.replace, "+ ")
            )
        })
        .collect()
}

/// `task` with its fix and distractors renamed `1`, `2`, ... in menu order,
/// shown as diffs below the issue, the exploits left out, and `undo` on.
/// The name of an op no longer says what it does: only the diff, the source
/// and the test output do.
pub fn neutral(task: &Task) -> Task {
    let menu: Vec<Edit> = task
        .menu
        .iter()
        .filter(|edit| edit.kind != EditKind::Exploit)
        .enumerate()
        .map(|(i, edit)| Edit {
            name: (i + 1).to_string(),
            ..edit.clone()
        })
        .collect();
    let issue = format!("{}\n{}", task.issue, diff_menu(&menu).trim_end());
    Task {
        id: format!("{}-neutral", task.id),
        issue,
        menu,
        undo: true,
        ..task.clone()
    }
}
// ANCHOR_END: neutral

// ANCHOR: compose
/// The names of the functions a source defines.
fn functions(source: &str) -> Vec<&str> {
    source
        .lines()
        .filter_map(|line| line.strip_prefix("fn ")?.split('(').next())
        .collect()
}

/// One file with the bugs of all `parts` (tasks of different families): the
/// sources one after the other, every test of every part, and the fixes and
/// distractors of all parts under neutral labels in a shuffled menu. `None`
/// when the parts define a function twice or an op's lines occur more than
/// once in the file (an edit must touch the bug it was made for).
pub fn compose(parts: &[&Task], id: &str, seed: u64) -> Option<Task> {
    let names: Vec<&str> = parts.iter().flat_map(|p| functions(&p.source)).collect();
    if names.iter().collect::<HashSet<_>>().len() != names.len() {
        return None;
    }
    let source: String = parts
        .iter()
        .map(|p| p.source.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let fixed: String = parts
        .iter()
        .map(|p| p.fixed.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let mut menu: Vec<Edit> = parts
        .iter()
        .flat_map(|p| {
            p.menu
                .iter()
                .filter(|e| e.kind != EditKind::Exploit)
                .cloned()
        })
        .collect();
    if menu
        .iter()
        .any(|edit| source.matches(edit.find.as_str()).count() != 1)
    {
        return None;
    }
    menu.shuffle(&mut StdRng::seed_from_u64(seed));
    for (i, edit) in menu.iter_mut().enumerate() {
        edit.name = (i + 1).to_string();
    }
    let public_tests: Vec<_> = parts.iter().flat_map(|p| p.public_tests.clone()).collect();
    let hidden_tests: Vec<_> = parts.iter().flat_map(|p| p.hidden_tests.clone()).collect();
    let all: Vec<_> = public_tests.iter().chain(&hidden_tests).cloned().collect();
    if !all_pass(&Guarded::shared().run(&fixed, &all)) {
        return None;
    }
    let issue = parts
        .iter()
        .map(|p| p.issue.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let issue = format!("{issue}\n{}", diff_menu(&menu).trim_end());
    Some(Task {
        id: id.into(),
        family: parts[0].family,
        issue,
        source,
        fixed,
        public_tests,
        hidden_tests,
        menu,
        undo: true,
        terse: false,
    })
}

/// `count` tasks with `bugs` bugs each, every one built from `bugs` tasks of
/// distinct families drawn from `pool` with `seed`.
pub fn multi_bug_tasks(pool: &[Task], bugs: usize, count: usize, seed: u64) -> Vec<Task> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tasks = Vec::new();
    while tasks.len() < count {
        let mut parts: Vec<&Task> = Vec::new();
        while parts.len() < bugs {
            let candidate = &pool[rng.random_range(0..pool.len())];
            if parts.iter().all(|p| p.family != candidate.family) {
                parts.push(candidate);
            }
        }
        if let Some(task) = compose(&parts, &format!("bugs{bugs}-{}", tasks.len()), rng.random()) {
            tasks.push(task);
        }
    }
    tasks
}
// ANCHOR_END: compose

// ANCHOR: split
/// The families held out of training in this chapter: the last two of [`Family::ALL`].
pub const HELD_OUT_FAMILIES: [Family; 2] = [Family::WrongInit, Family::SwappedArgs];

/// Neutral tasks for training on six families and for testing on all eight.
pub struct FamilySplit {
    /// The gym's train tasks of the six trained families.
    pub train: Vec<Task>,
    /// The gym's held-out instances of the trained families.
    pub held_out_instances: Vec<Task>,
    /// The gym's held-out instances of the two held-out families.
    pub held_out_families: Vec<Task>,
}

pub fn family_split(gym: &Gym) -> FamilySplit {
    let held = |task: &&Task| HELD_OUT_FAMILIES.contains(&task.family);
    FamilySplit {
        train: gym.train.iter().filter(|t| !held(t)).map(neutral).collect(),
        held_out_instances: gym
            .held_out
            .iter()
            .filter(|t| !held(t))
            .map(neutral)
            .collect(),
        held_out_families: gym.held_out.iter().filter(held).map(neutral).collect(),
    }
}
// ANCHOR_END: split

// ANCHOR: searcher
/// Failing tests in the output of `test`: its `FAIL` lines, and the count
/// a terse output gives for the ones it does not show (`2 more failing`).
pub fn failures(observation: &str) -> usize {
    observation
        .lines()
        .map(|line| match line.strip_suffix(" more failing") {
            Some(count) => count.parse().unwrap_or(0),
            None => usize::from(line.starts_with("FAIL")),
        })
        .sum()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    Start,
    Baseline,
    Edited,
    Tested,
    Undone,
}

/// Test-driven search, scripted: test once, then try the menu's ops in order;
/// after each edit test again, keep the edit if fewer tests fail, undo it
/// otherwise, and submit as soon as nothing fails (or the menu is used up).
/// An op that found nothing to change is passed over without a test. It
/// never reads the source or the diffs; the order it tries them in can be
/// given ([`Searcher::in_order`]).
pub struct Searcher {
    phase: Phase,
    next: usize,
    failing: usize,
    /// Menu positions in the order they are tried; empty: the menu's order.
    order: Vec<usize>,
}

impl Searcher {
    pub fn new() -> Searcher {
        Searcher::in_order(Vec::new())
    }

    /// The search trying the menu's candidates at the positions `order`,
    /// in that order (a ranking made by reading the menu).
    pub fn in_order(order: Vec<usize>) -> Searcher {
        Searcher {
            phase: Phase::Start,
            next: 0,
            failing: 0,
            order,
        }
    }

    fn edit_next(&mut self, env: &BugFixEnv) -> String {
        let at = match self.order.is_empty() {
            true => Some(self.next),
            false => self.order.get(self.next).copied(),
        };
        match at.and_then(|at| env.task().menu.get(at)) {
            Some(edit) => {
                self.next += 1;
                self.phase = Phase::Edited;
                format!("<call> edit {} </call>", edit.name)
            }
            None => "<call> submit </call>".into(),
        }
    }
}

impl Default for Searcher {
    fn default() -> Self {
        Searcher::new()
    }
}

impl Policy for Searcher {
    fn act(&mut self, env: &BugFixEnv, observation: &str, turn: usize) -> String {
        if turn == 0 {
            *self = Searcher::in_order(std::mem::take(&mut self.order));
        }
        match self.phase {
            Phase::Start => {
                self.phase = Phase::Baseline;
                "<call> test </call>".into()
            }
            Phase::Baseline => {
                self.failing = failures(observation);
                if self.failing == 0 {
                    "<call> submit </call>".into()
                } else {
                    self.edit_next(env)
                }
            }
            // An op whose lines are gone changed nothing: no test, and nothing to undo.
            Phase::Edited if observation.ends_with("nothing to change") => self.edit_next(env),
            Phase::Edited => {
                self.phase = Phase::Tested;
                "<call> test </call>".into()
            }
            Phase::Tested => {
                let now = failures(observation);
                if now == 0 {
                    "<call> submit </call>".into()
                } else if now < self.failing {
                    self.failing = now;
                    self.edit_next(env)
                } else {
                    self.phase = Phase::Undone;
                    "<call> undo </call>".into()
                }
            }
            Phase::Undone => self.edit_next(env),
        }
    }
}

/// A policy that follows `inner` but, on each turn with probability
/// `1 - p`, sends a well-formed call drawn uniformly from the tools and ops
/// instead (and `inner` never learns of it).
pub struct Slipping<P: Policy> {
    pub inner: P,
    pub p: f64,
    pub rng: StdRng,
}

impl<P: Policy> Policy for Slipping<P> {
    fn act(&mut self, env: &BugFixEnv, observation: &str, turn: usize) -> String {
        let planned = self.inner.act(env, observation, turn);
        if self.rng.random::<f64>() < self.p {
            return planned;
        }
        let mut calls: Vec<String> = ["read", "test", "undo", "submit"]
            .iter()
            .map(|t| format!("<call> {t} </call>"))
            .collect();
        calls.extend(
            env.task()
                .menu
                .iter()
                .map(|e| format!("<call> edit {} </call>", e.name)),
        );
        calls[self.rng.random_range(0..calls.len())].clone()
    }
}
// ANCHOR_END: searcher

// ANCHOR: wanderer
/// Knows the workflow with `undo`, not the bug (Chapter 4's uninformed
/// policy, extended). It opens with `read`, `test` or an edit; with no edit
/// in place it looks or edits with an op drawn uniformly from those it has
/// not undone; right after an edit it tests (three times in four) or
/// submits; after testing an edit it submits or undoes it, with even odds,
/// whatever the test said.
pub struct Wanderer {
    rng: StdRng,
    in_place: Option<String>,
    tested: bool,
    undone: Vec<String>,
}

impl Wanderer {
    pub fn new(seed: u64) -> Wanderer {
        Wanderer {
            rng: StdRng::seed_from_u64(seed),
            in_place: None,
            tested: false,
            undone: Vec::new(),
        }
    }

    fn edit(&mut self, env: &BugFixEnv) -> String {
        let fresh: Vec<&Edit> = env
            .task()
            .menu
            .iter()
            .filter(|e| !self.undone.contains(&e.name))
            .collect();
        let ops: Vec<&Edit> = if fresh.is_empty() {
            env.task().menu.iter().collect()
        } else {
            fresh
        };
        let name = ops[self.rng.random_range(0..ops.len())].name.clone();
        (self.in_place, self.tested) = (Some(name.clone()), false);
        format!("<call> edit {name} </call>")
    }
}

impl Policy for Wanderer {
    fn act(&mut self, env: &BugFixEnv, _observation: &str, turn: usize) -> String {
        if turn == 0 {
            (self.in_place, self.tested) = (None, false);
            self.undone.clear();
        }
        let roll = self.rng.random_range(0..4);
        match (&self.in_place, self.tested) {
            (None, _) => match roll {
                0 => "<call> read </call>".into(),
                1 => "<call> test </call>".into(),
                _ => self.edit(env),
            },
            (Some(_), false) if roll < 3 => {
                self.tested = true;
                "<call> test </call>".into()
            }
            (Some(_), false) => "<call> submit </call>".into(),
            (Some(name), true) if roll < 2 => {
                self.undone.push(name.clone());
                self.in_place = None;
                "<call> undo </call>".into()
            }
            (Some(_), true) => "<call> submit </call>".into(),
        }
    }
}

/// The settings of [`warm_start`]: transcripts and steps of further pretraining.
pub const WARM_START: PretrainConfig = PretrainConfig {
    episodes: 1500,
    steps: 150,
    batch: 8,
    lr: 5e-3,
    context_weight: 0.0,
    seed: 12,
    ..BASE
};

/// The base model, pretrained further on transcripts of the [`Wanderer`] on
/// `tasks` (neutral ones), so that it writes numbered ops and `undo` as it
/// wrote named ops before. Same tokenizer, same architecture.
pub fn warm_start(
    base: (Bpe, TinyAgent),
    tasks: &[Task],
    config: &PretrainConfig,
) -> (Bpe, TinyAgent, Vec<f64>) {
    let (bpe, mut model) = base;
    let transcripts = corpus_of(tasks, config.episodes, &mut Wanderer::new(config.seed));
    let sequences: Vec<Sequence> = transcripts
        .iter()
        .map(|t| Sequence::new(&bpe, t, config.context_weight))
        .collect();
    let losses = pretrain(&mut model, &sequences, config);
    (bpe, model, losses)
}

/// [`warm_start`] from the base model on the trained families of `gym`,
/// with [`WARM_START`], stored in `dir` (for [`crate::pg::train_from`]) with
/// its losses.
pub fn warm_start_model(gym: &Gym, dir: &Path) -> (Bpe, TinyAgent, Vec<f64>) {
    let (bpe, model, losses) = warm_start(
        base_model(&gym.train),
        &family_split(gym).train,
        &WARM_START,
    );
    save_model(dir, &bpe, &model).unwrap_or_else(|err| panic!("{err}"));
    std::fs::write(
        dir.join("losses.json"),
        serde_json::to_string(&losses).expect("losses serialise"),
    )
    .unwrap_or_else(|err| panic!("cannot write the losses: {err}"));
    (bpe, model, losses)
}
// ANCHOR_END: wanderer

// ANCHOR: shape
/// The MDP with `extra(s, outcome)` added to the reward of every outcome of
/// every non-terminal state `s`.
fn add_rewards(mdp: &Mdp, extra: impl Fn(usize, &Outcome) -> f64) -> Mdp {
    let mut changed = mdp.clone();
    for (s, row) in changed
        .outcomes
        .iter_mut()
        .enumerate()
        .filter(|(s, _)| !mdp.terminal[*s])
    {
        for outcome in row.iter_mut().flatten() {
            outcome.reward += extra(s, outcome);
        }
    }
    changed
}

/// The MDP with every reward $r$ of a move from $s$ to $s'$ replaced by
/// $r + \gamma \Phi(s') - \Phi(s)$, with $\Phi = 0$ on terminal states
/// (potential-based shaping, Ng, Harada and Russell 1999).
pub fn shape(mdp: &Mdp, phi: &[f64], gamma: f64) -> Mdp {
    let potential = |s: usize| if mdp.terminal[s] { 0.0 } else { phi[s] };
    add_rewards(mdp, |s, o| gamma * potential(o.next) - potential(s))
}

/// The MDP with a bonus for every move that raises $\Phi$ and nothing for a
/// move that lowers it: a per-turn reward for "tests improved" that is not a
/// difference of potentials.
pub fn reward_improvements(mdp: &Mdp, phi: &[f64], bonus: f64) -> Mdp {
    add_rewards(mdp, |s, o| {
        if !mdp.terminal[o.next] && phi[o.next] > phi[s] {
            bonus
        } else {
            0.0
        }
    })
}
// ANCHOR_END: shape

// ANCHOR: shaping_credit
/// How a turn's share of a potential Φ enters its advantage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapingCredit {
    /// The turn's own progress Φ(s′) − Φ(s), and 0 for the move that ends the
    /// episode (it leaves the file as it is): `TurnCredit`'s rule, the
    /// shaping of one turn with nothing of what follows.
    Myopic,
    /// The discounted sum of F from the turn to the end: with Φ = 0 at the
    /// end it telescopes to −Φ(s_t), a baseline that depends on the state only.
    RewardToGo,
}

/// The exact expected update direction of the tabular softmax policy
/// `softmax` (Chapter 6) on `mdp` from `start`, discounted by `gamma`, when each
/// turn's advantage is its return plus `weight` times its share of the
/// potential `phi` (`shaping` None: the return alone, which gives ∇_θ J). Expected visits and
/// action values come from linear solves, not samples:
/// ∂J/∂θ[s][a] = d_γ(s) π(a|s) (Q̃(s, a) − Σ_b π(b|s) Q̃(s, b)),
/// with Q̃ the action value plus the turn's expected share of the shaping.
pub fn shaped_gradient(
    mdp: &Mdp,
    softmax: &TabularSoftmax,
    start: usize,
    gamma: f64,
    shaping: Option<(ShapingCredit, &[f64], f64)>,
) -> Vec<Vec<f64>> {
    let (n, m) = (mdp.n_states(), mdp.n_actions());
    let policy = softmax.policy(); // [S][A]
    let potential = |s: usize| match shaping {
        Some((_, phi, weight)) if !mdp.terminal[s] => weight * phi[s],
        _ => 0.0,
    };
    let q_tilde: Vec<Vec<f64>> = match shaping {
        // Reward-to-go of the shaping: the return on the shaped MDP.
        Some((ShapingCredit::RewardToGo, _, _)) => {
            let weighted: Vec<f64> = (0..n).map(potential).collect();
            let shaped = shape(mdp, &weighted, gamma);
            q_from_v(&shaped, &evaluate_policy(&shaped, &policy, gamma), gamma)
        }
        // The return, plus the expected progress of this turn alone.
        _ => {
            let q = q_from_v(mdp, &evaluate_policy(mdp, &policy, gamma), gamma);
            (0..n)
                .map(|s| {
                    (0..m)
                        .map(|a| {
                            let own: f64 = mdp.outcomes[s][a]
                                .iter()
                                .filter(|o| !mdp.terminal[o.next])
                                .map(|o| o.prob * (potential(o.next) - potential(s)))
                                .sum();
                            q[s][a] + own
                        })
                        .collect()
                })
                .collect()
        }
    };
    // Discounted visits: d = e_start + γ P_πᵀ d on the states before the end.
    let mut a = vec![vec![0.0; n]; n]; // [S, S]: I − γ P_πᵀ
    let mut b = vec![0.0; n];
    b[start] = 1.0;
    for s in 0..n {
        a[s][s] = 1.0;
        if mdp.terminal[s] {
            continue;
        }
        for (act, &p) in policy[s].iter().enumerate() {
            for o in &mdp.outcomes[s][act] {
                if !mdp.terminal[o.next] {
                    a[o.next][s] -= gamma * p * o.prob;
                }
            }
        }
    }
    let visits = solve_linear(a, b); // [S]
    (0..n)
        .map(|s| {
            let mean: f64 = (0..m).map(|b| policy[s][b] * q_tilde[s][b]).sum();
            (0..m)
                .map(|a| {
                    if mdp.terminal[s] {
                        0.0
                    } else {
                        visits[s] * policy[s][a] * (q_tilde[s][a] - mean)
                    }
                })
                .collect()
        })
        .collect()
}

/// `steps` steps of exact gradient ascent with step size `lr` from uniform
/// logits, each on [`shaped_gradient`]: where a credit rule leads a policy
/// when sampling noise is taken away.
pub fn ascend_shaped(
    mdp: &Mdp,
    start: usize,
    gamma: f64,
    shaping: Option<(ShapingCredit, &[f64], f64)>,
    lr: f64,
    steps: usize,
) -> TabularSoftmax {
    let mut softmax = TabularSoftmax::new(mdp.n_states(), mdp.n_actions());
    for _ in 0..steps {
        let g = shaped_gradient(mdp, &softmax, start, gamma, shaping);
        for (row, grad) in softmax.theta.iter_mut().zip(&g) {
            for (x, dx) in row.iter_mut().zip(grad) {
                *x += lr * dx;
            }
        }
    }
    softmax
}
// ANCHOR_END: shaping_credit

// ANCHOR: overlong
/// DAPO's soft overlong penalty, counted in turns: nothing for an episode
/// of at most `budget - cache` turns, a linear ramp down to -1 over the last
/// `cache` turns of the budget, and -1 for an episode the budget truncated.
pub fn overlong_penalty(turns: usize, truncated: bool, budget: usize, cache: usize) -> f64 {
    let free = budget - cache;
    if truncated {
        -1.0
    } else if turns <= free {
        0.0
    } else {
        (free as f64 - turns as f64) / cache as f64
    }
}

/// Train with `inner`, its reward plus [`overlong_penalty`]; also reports
/// the fraction of episodes that used `undo`, the mean number of turns, the
/// fraction truncated and the fraction with a repeated call ([`degenerate`]).
pub struct Overlong {
    /// `None`: no penalty, only the reports.
    pub cache: Option<usize>,
    pub inner: Box<dyn Algorithm + Send>,
}

impl Algorithm for Overlong {
    fn rewards(
        &mut self,
        played: &[Played],
        trajectories: &[Trajectory],
        report: &mut Report,
    ) -> Vec<f64> {
        let n = played.len() as f64;
        report.insert(
            "undo".into(),
            played
                .iter()
                .filter(|p| {
                    p.actions
                        .iter()
                        .any(|a| parse_call(a).is_some_and(|c| c.tool == "undo"))
                })
                .count() as f64
                / n,
        );
        report.insert(
            "turns".into(),
            played.iter().map(|p| p.actions.len() as f64).sum::<f64>() / n,
        );
        report.insert(
            "truncated".into(),
            played.iter().filter(|p| p.info.truncated).count() as f64 / n,
        );
        report.insert(
            "repeated".into(),
            played.iter().filter(|p| degenerate(p).repeated).count() as f64 / n,
        );
        let rewards = self.inner.rewards(played, trajectories, report);
        match self.cache {
            Some(cache) => rewards
                .iter()
                .zip(played)
                .map(|(r, p)| {
                    r + overlong_penalty(p.actions.len(), p.info.truncated, MAX_TURNS, cache)
                })
                .collect(),
            None => rewards,
        }
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

    fn config_json(&self) -> Option<String> {
        let inner: serde_json::Value = self
            .inner
            .config_json()
            .and_then(|c| serde_json::from_str(&c).ok())
            .unwrap_or_default();
        Some(serde_json::json!({ "overlong_cache_turns": self.cache, "inner": inner }).to_string())
    }

    fn keep(&mut self, played: &[Played], group: usize, report: &mut Report) -> Vec<usize> {
        self.inner.keep(played, group, report)
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
}
// ANCHOR_END: overlong

// ANCHOR: turn_credit
/// Per-turn credit from test progress: on top of the inner algorithm's
/// advantage, every action token of turn t gets `weight` × (Φ(s_{t+1}) − Φ(s_t)),
/// where Φ is the fraction of public tests the file passes ([`public_fraction`]):
/// the progress its own turn made, positive or negative, and nothing for the
/// turns after it (`ShapingCredit::Myopic`). With `ShapingCredit::RewardToGo`
/// the turn gets instead the sum of those terms from t to the end with Φ = 0
/// at the end, `weight` × (−Φ(s_t)): a baseline of the state the turn starts
/// from. Also reports the share of turns that changed Φ and the share that
/// raised it with a distractor edit (progress that is not part of the fix).
pub struct TurnCredit {
    pub weight: f64,
    pub rule: ShapingCredit,
    /// The tasks the training loop plays (the episodes' `task` indexes these).
    pub tasks: Vec<Task>,
    pub inner: Box<dyn Algorithm + Send>,
    /// The current iteration's credit, one value per token of each episode.
    credit: Vec<Vec<f64>>,
}

impl TurnCredit {
    pub fn new(weight: f64, tasks: Vec<Task>, inner: Box<dyn Algorithm + Send>) -> TurnCredit {
        TurnCredit {
            weight,
            rule: ShapingCredit::Myopic,
            tasks,
            inner,
            credit: Vec::new(),
        }
    }

    /// The same credit with the shaping's reward-to-go instead of each turn's own progress.
    pub fn reward_to_go(self) -> TurnCredit {
        TurnCredit {
            rule: ShapingCredit::RewardToGo,
            ..self
        }
    }
}

/// Φ(s_{t+1}) − Φ(s_t) for every turn of an episode on `task`.
pub fn turn_progress(task: &Task, actions: &[String]) -> Vec<f64> {
    let mut before = public_fraction(task, &task.source);
    sources_by_turn(task, actions)
        .iter()
        .map(|source| {
            let after = public_fraction(task, source);
            let progress = after - before;
            before = after;
            progress
        })
        .collect()
}

impl Algorithm for TurnCredit {
    fn rewards(
        &mut self,
        played: &[Played],
        trajectories: &[Trajectory],
        report: &mut Report,
    ) -> Vec<f64> {
        let (mut turns, mut moved, mut greedy) = (0, 0, 0);
        self.credit = played
            .iter()
            .map(|p| {
                let task = &self.tasks[p.task];
                let progress = turn_progress(task, &p.actions);
                turns += progress.len();
                moved += progress.iter().filter(|d| **d != 0.0).count();
                let kind = |action: &String| {
                    let call = parse_call(action).filter(|call| call.tool == "edit")?;
                    task.op(call.arg.as_deref()?).map(|op| op.kind)
                };
                greedy += (progress.iter().zip(&p.actions))
                    .filter(|(d, a)| **d > 0.0 && kind(a) == Some(EditKind::Distractor))
                    .count();
                // Φ(s_t) before each turn, for the reward-to-go rule.
                let mut phi = public_fraction(task, &task.source);
                let (mut turn, mut credit) = (0, Vec::new());
                for segment in &p.segments {
                    let value = if segment.owner == Owner::Policy {
                        turn += 1;
                        let before = phi;
                        phi += progress[turn - 1];
                        match self.rule {
                            ShapingCredit::Myopic => self.weight * progress[turn - 1],
                            ShapingCredit::RewardToGo => -self.weight * before,
                        }
                    } else {
                        0.0
                    };
                    credit.extend(std::iter::repeat_n(value, segment.ids.len()));
                }
                credit
            })
            .collect();
        report.insert("progress_turns".into(), moved as f64 / turns.max(1) as f64);
        report.insert(
            "distractor_progress".into(),
            greedy as f64 / turns.max(1) as f64,
        );
        self.inner.rewards(played, trajectories, report)
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
        let episode = self
            .inner
            .advantages(model, trajectories, rollout, rewards, group, report); // [N, T]
        let (n, t) = (rollout.mask.size()[0], rollout.mask.size()[1]);
        let mut credit = vec![0.0; (n * t) as usize];
        for (row, values) in self.credit.iter().enumerate() {
            credit[row * t as usize..][..values.len()].copy_from_slice(values);
        }
        let credit = Tensor::from_slice(&credit)
            .view([n, t])
            .to_device(rollout.mask.device())
            * &rollout.mask; // [N, T]
        episode + credit
    }

    fn config_json(&self) -> Option<String> {
        let inner: serde_json::Value = self
            .inner
            .config_json()
            .and_then(|c| serde_json::from_str(&c).ok())
            .unwrap_or_default();
        let mut config = serde_json::json!({ "turn_credit_weight": self.weight, "inner": inner });
        if self.rule == ShapingCredit::RewardToGo {
            config["turn_credit_rule"] = "reward-to-go".into();
        }
        Some(config.to_string())
    }

    fn keep(&mut self, played: &[Played], group: usize, report: &mut Report) -> Vec<usize> {
        self.inner.keep(played, group, report)
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
}
// ANCHOR_END: turn_credit

// ANCHOR: replay
/// The source after each turn of an episode on `task`, replayed through the
/// environment itself (so `undo` and ops that change nothing count as they did).
pub fn sources_by_turn(task: &Task, actions: &[String]) -> Vec<String> {
    let mut env = BugFixEnv::new(vec![task.clone()], actions.len().max(1));
    env.reset(0);
    actions
        .iter()
        .map(|action| {
            env.step(action);
            env.source().to_string()
        })
        .collect()
}

/// The fraction of `task`'s public tests that `source` passes: a potential.
pub fn public_fraction(task: &Task, source: &str) -> f64 {
    let lines = Guarded::shared().run(source, &task.public_tests);
    lines.iter().filter(|line| line.passed).count() as f64 / task.public_tests.len() as f64
}
// ANCHOR_END: replay

// ANCHOR: context
/// Per episode, the context length in tokens when the policy writes its
/// action of each turn (the prompt and every earlier turn and observation).
pub fn context_lengths(played: &Played) -> Vec<usize> {
    let mut lengths = Vec::new();
    let mut so_far = 0;
    for segment in &played.segments {
        if segment.owner == Owner::Policy {
            lengths.push(so_far);
        }
        so_far += segment.ids.len();
    }
    lengths
}
// ANCHOR_END: context

// ANCHOR: elide
/// A view of an episode ([`crate::rollout::View`]) that keeps the prompt,
/// every action and the last `keep` observations, and shows each older
/// observation as `marker` (encoded, with its role tokens): the rewrite of a
/// harness that elides old tool output.
pub fn elide_observations(keep: usize, marker: Vec<u32>) -> impl Fn(&[Segment]) -> Vec<u32> + Sync {
    move |segments| {
        let observations = segments.iter().filter(|s| s.owner == Owner::Env).count();
        let mut seen = 0;
        let mut ids = Vec::new();
        for segment in segments {
            if segment.owner == Owner::Env {
                seen += 1;
                if seen + keep <= observations {
                    ids.extend(&marker);
                    continue;
                }
            }
            ids.extend(&segment.ids);
        }
        ids
    }
}
// ANCHOR_END: elide

// ANCHOR: degenerate
/// Why an episode may be degenerate: signs that agent harnesses watch for
/// and that a trainer could use to drop the episode before the update.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Degenerate {
    /// Some action did not parse.
    pub format_error: bool,
    /// The same call twice in a row, where the second cannot change anything
    /// (`read`, `test`, or an edit that found nothing to change).
    pub repeated: bool,
    /// The turn budget ran out.
    pub truncated: bool,
}

/// The signs of [`Degenerate`] in one played episode.
pub fn degenerate(played: &Played) -> Degenerate {
    let calls: Vec<Option<(String, Option<String>)>> = played
        .actions
        .iter()
        .map(|a| parse_call(a).map(|c| (c.tool, c.arg)))
        .collect();
    let repeated = calls.windows(2).any(|w| match (&w[0], &w[1]) {
        (Some(a), Some(b)) if a == b => a.0 == "read" || a.0 == "test" || a.0 == "edit",
        _ => false,
    });
    Degenerate {
        format_error: played.parse_errors > 0,
        repeated,
        truncated: played.info.truncated,
    }
}

/// Train with `inner`, dropping from the update every episode with a format
/// error or a repeated call (its reward still counts in its group's
/// baseline); reports the fraction of episodes left out of the update.
pub struct DropDegenerate {
    pub inner: Box<dyn Algorithm + Send>,
}

impl Algorithm for DropDegenerate {
    fn draw(
        &mut self,
        n: usize,
        tasks: usize,
        group: usize,
        iteration: usize,
        rng: &mut rand::rngs::StdRng,
    ) -> Vec<usize> {
        self.inner.draw(n, tasks, group, iteration, rng)
    }

    fn rewards(
        &mut self,
        played: &[Played],
        trajectories: &[Trajectory],
        report: &mut Report,
    ) -> Vec<f64> {
        self.inner.rewards(played, trajectories, report)
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

    fn config_json(&self) -> Option<String> {
        wrapper_config(
            self.inner.as_ref(),
            serde_json::json!({ "drop_degenerate": true }),
        )
    }

    fn keep(&mut self, played: &[Played], group: usize, report: &mut Report) -> Vec<usize> {
        let clean = |i: &usize| {
            let d = degenerate(&played[*i]);
            !d.format_error && !d.repeated
        };
        let kept: Vec<usize> = self
            .inner
            .keep(played, group, report)
            .into_iter()
            .filter(clean)
            .collect();
        report.insert(
            "dropped_degenerate".into(),
            1.0 - kept.len() as f64 / played.len() as f64,
        );
        kept
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
}
// ANCHOR_END: degenerate

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mdp::{q_from_v, repair_mdp, value_iteration, Verifier};
    use crate::policies::{rates, run_episode};
    use std::sync::LazyLock;

    static GYM: LazyLock<Gym> = LazyLock::new(Gym::standard);

    #[test]
    fn turn_credit_pays_each_turn_its_own_progress_or_the_shaping_reward_to_go() {
        use crate::pg::Reinforce;
        use crate::trajectory::collate;
        let task = GYM.train[0].clone();
        let distractor = task
            .ops_of_kind(EditKind::Distractor)
            .next()
            .unwrap()
            .name
            .clone();
        let actions: Vec<String> = [
            format!("edit {distractor}"),
            "test".into(),
            format!("edit {}", task.fix_op()),
            "submit".into(),
        ]
        .iter()
        .map(|c| format!("<call> {c} </call>"))
        .collect();
        let progress = turn_progress(&task, &actions);
        let start = public_fraction(&task, &task.source);
        let last = public_fraction(&task, sources_by_turn(&task, &actions).last().unwrap());
        assert_eq!(progress.len(), 4);
        assert!(
            (progress.iter().sum::<f64>() - (last - start)).abs() < 1e-12
                && progress[1] == 0.0
                && progress[3] == 0.0,
            "{progress:?}"
        );
        let fix_first = [
            format!("<call> edit {} </call>", task.fix_op()),
            "<call> submit </call>".to_string(),
        ];
        assert_eq!(turn_progress(&task, &fix_first), vec![1.0 - start, 0.0]);
        // Segments: prompt 3 ids, then (action 2 ids, observation 1 id) per turn.
        let mut segments = vec![Segment {
            owner: Owner::Prompt,
            ids: vec![1, 2, 3],
            logprobs: vec![],
        }];
        for _ in &actions {
            segments.push(Segment {
                owner: Owner::Policy,
                ids: vec![4, 5],
                logprobs: vec![-0.5, -0.5],
            });
            segments.push(Segment {
                owner: Owner::Env,
                ids: vec![6],
                logprobs: vec![],
            });
        }
        let played = vec![Played {
            task: 0,
            segments,
            actions: actions.clone(),
            reward: 1.0,
            info: Default::default(),
            parse_errors: 0,
        }];
        let trajectories: Vec<Trajectory> = played.iter().map(Trajectory::from_played).collect();
        let rollout = collate(&trajectories, tch::Device::Cpu);
        let model = {
            let _turn = crate::book::seeded(0);
            TinyAgent::new(
                crate::tinyagent::Config {
                    vocab: 8,
                    n_ctx: 32,
                    d_model: 8,
                    n_layer: 1,
                    n_head: 2,
                },
                tch::Device::Cpu,
            )
        };
        let mut report = Report::new();
        let mut advantages_under = |mut credit: TurnCredit| {
            let rewards = credit.rewards(&played, &trajectories, &mut report);
            let advantages =
                credit.advantages(&model, &trajectories, &rollout, &rewards, 1, &mut report);
            Vec::<f64>::try_from(advantages.view([-1])).unwrap()
        };
        let credit = || TurnCredit::new(0.5, vec![task.clone()], Box::new(Reinforce::plain()));
        let (myopic, reward_to_go) = (
            advantages_under(credit()),
            advantages_under(credit().reward_to_go()),
        );
        let mut expected = vec![0.0; 3];
        for d in &progress {
            expected.extend([1.0 + 0.5 * d, 1.0 + 0.5 * d, 0.0]);
        }
        assert_eq!(myopic, expected);
        assert_eq!(
            report["progress_turns"],
            progress.iter().filter(|d| **d != 0.0).count() as f64 / 4.0
        );
        // The reward-to-go rule: −0.5 Φ(s_t), Φ before each turn, on the same episode.
        let mut expected = vec![0.0; 3];
        let mut phi = start;
        for d in &progress {
            expected.extend([1.0 - 0.5 * phi, 1.0 - 0.5 * phi, 0.0]);
            phi += d;
        }
        assert_eq!(reward_to_go, expected);
        assert!(
            start > 0.0 && start < 1.0,
            "a file that passes some public tests: {start}"
        );
    }

    #[test]
    fn degenerate_episodes_are_left_out_of_the_update() {
        use crate::pg::Reinforce;
        let episode = |calls: &[&str], parse_errors: usize| Played {
            task: 0,
            segments: vec![],
            actions: calls.iter().map(|c| c.to_string()).collect(),
            reward: 1.0,
            info: Default::default(),
            parse_errors,
        };
        let played = vec![
            episode(&["<call> test </call>", "<call> submit </call>"], 0),
            episode(
                &[
                    "<call> test </call>",
                    "<call> test </call>",
                    "<call> submit </call>",
                ],
                0,
            ),
            episode(&["oops", "<call> submit </call>"], 1),
            episode(
                &[
                    "<call> edit 1 </call>",
                    "<call> test </call>",
                    "<call> edit 1 </call>",
                    "<call> submit </call>",
                ],
                0,
            ),
        ];
        let mut report = Report::new();
        assert_eq!(
            DropDegenerate {
                inner: Box::new(Reinforce::plain())
            }
            .keep(&played, 4, &mut report),
            vec![0, 3]
        );
        assert_eq!(report["dropped_degenerate"], 0.5);
    }

    #[test]
    fn an_elided_view_keeps_the_prompt_the_actions_and_the_last_observations() {
        let segment = |owner: Owner, id: u32| Segment {
            owner,
            ids: vec![id, id],
            logprobs: vec![],
        };
        let segments = vec![
            segment(Owner::Prompt, 1),
            segment(Owner::Policy, 2),
            segment(Owner::Env, 3),
            segment(Owner::Policy, 4),
            segment(Owner::Env, 5),
            segment(Owner::Policy, 6),
            segment(Owner::Env, 7),
        ];
        assert_eq!(
            elide_observations(1, vec![9])(&segments),
            vec![1, 1, 2, 2, 9, 4, 4, 9, 6, 6, 7, 7]
        );
        assert_eq!(
            elide_observations(2, vec![9])(&segments),
            vec![1, 1, 2, 2, 9, 4, 4, 5, 5, 6, 6, 7, 7]
        );
        assert_eq!(
            elide_observations(3, vec![9])(&segments),
            segments
                .iter()
                .flat_map(|s| s.ids.clone())
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_neutral_task_hides_the_names_but_keeps_the_fix() {
        for task in GYM.held_out.iter().take(12) {
            let n = neutral(task);
            assert!(n
                .menu
                .iter()
                .all(|e| e.name.parse::<usize>().is_ok() && e.kind != EditKind::Exploit));
            assert_eq!(n.op(n.fix_op()).unwrap().apply(&n.source).unwrap(), n.fixed);
            assert!(n.prompt().contains("undo") && n.prompt().contains("op 1:\n- "));
            assert!(!n.prompt().contains(task.fix_op()) || task.issue.contains(task.fix_op()));
        }
    }

    #[test]
    fn composed_tasks_need_every_fix() {
        let tasks = multi_bug_tasks(&GYM.train, 2, 6, 0);
        for task in &tasks {
            let fixes: Vec<&Edit> = task.ops_of_kind(EditKind::Fix).collect();
            assert_eq!(fixes.len(), 2);
            let one = fixes[0].apply(&task.source).unwrap();
            let both = fixes[1].apply(&one).unwrap();
            assert_eq!(both, task.fixed);
            let runner = Guarded::shared();
            assert!(!all_pass(&runner.run(&one, &task.hidden_tests)));
            assert!(
                all_pass(&runner.run(&both, &task.hidden_tests))
                    && all_pass(&runner.run(&both, &task.public_tests))
            );
        }
    }

    #[test]
    fn the_searcher_solves_every_neutral_task_given_enough_turns() {
        let split = family_split(&GYM);
        let mut env = BugFixEnv::new(split.held_out_families.clone(), 20);
        let r = rates(&mut env, None, &mut Searcher::new(), 1);
        assert_eq!(r.successes, r.episodes);
        // With a perfect policy in front of it, the searcher tries the ops in menu order.
        let mut env = BugFixEnv::new(vec![split.held_out_families[0].clone()], 20);
        let mut transcript = Vec::new();
        run_episode(&mut env, 0, &mut Searcher::new(), Some(&mut transcript));
        let calls: Vec<&str> = transcript
            .iter()
            .filter(|(o, _)| *o == crate::episode::Owner::Policy)
            .map(|(_, m)| m.as_str())
            .collect();
        let fix: usize = env.task().fix_op().parse().unwrap();
        assert_eq!(calls.len(), 3 * fix + 1, "{calls:?}");
        assert_eq!(
            calls[..4],
            [
                "<call> test </call>",
                "<call> edit 1 </call>",
                "<call> test </call>",
                if fix == 1 {
                    "<call> submit </call>"
                } else {
                    "<call> undo </call>"
                }
            ]
        );
    }

    #[test]
    fn undo_restores_the_source_and_costs_a_turn() {
        let task = neutral(&GYM.held_out[0]);
        let mut env = BugFixEnv::new(vec![task.clone()], 8);
        env.reset(0);
        assert_eq!(
            &*env.step("<call> undo </call>").observation,
            "ERROR: no edit to undo"
        );
        env.step("<call> edit 1 </call>");
        assert_ne!(env.source(), task.source);
        assert_eq!(
            &*env.step("<call> undo </call>").observation,
            "undid the last edit"
        );
        assert_eq!(env.source(), task.source);
        assert_eq!(env.turn(), 3);
        // Without the switch, `undo` is an unknown tool, as before Chapter 12.
        let mut env = BugFixEnv::new(vec![GYM.held_out[0].clone()], 8);
        env.reset(0);
        assert!(env
            .step("<call> undo </call>")
            .observation
            .starts_with("ERROR: unknown tool"));
    }

    #[test]
    fn garbage_never_ends_an_episode_early_or_crashes() {
        let split = family_split(&GYM);
        let mut env = BugFixEnv::new(split.held_out_families.clone(), 8);
        let mut rng = StdRng::seed_from_u64(7);
        let junk = [
            "",
            "<call>",
            "</call>",
            "<call> </call>",
            "<call> edit </call>",
            "<call> edit 99 </call>",
            "<call> undo now </call>",
            "<call> submit submit </call>",
            "\u{0}\u{ffff}",
            "<call> read </call> <call> test </call>",
        ];
        for task in 0..env.tasks().len() {
            env.reset(task);
            for turn in 1..=8 {
                let mut action: String = junk[rng.random_range(0..junk.len())].to_string();
                if rng.random::<f64>() < 0.3 {
                    action = (0..rng.random_range(0..3000))
                        .map(|_| rng.random_range(0u8..=255) as char)
                        .collect();
                }
                let step = env.step(&action);
                assert_eq!(
                    step.done,
                    turn == 8,
                    "a malformed call ended the episode at turn {turn}: {action:?}"
                );
                assert!(step.observation.len() < 400);
                assert!(
                    step.info.parse_error || step.observation.starts_with("ERROR"),
                    "{action:?} -> {}",
                    step.observation
                );
            }
        }
    }

    #[test]
    fn shaping_as_reward_to_go_leaves_the_policy_gradient_alone_and_myopic_credit_does_not() {
        use crate::mdp::{repair_mdp, Verifier, BUGGY, HARDCODE, SWAP};
        let mdp = repair_mdp(Verifier::Hidden);
        let gamma = 0.9;
        let phi = [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0];
        let theta = TabularSoftmax {
            theta: (0..mdp.n_states())
                .map(|s| {
                    (0..mdp.n_actions())
                        .map(|a| 0.3 * ((s * 5 + a) % 4) as f64 - 0.4)
                        .collect()
                })
                .collect(),
        };
        // Without shaping: the gradient of J(θ) = V^π(buggy), checked by central differences.
        let exact = shaped_gradient(&mdp, &theta, BUGGY, gamma, None);
        let value =
            |softmax: &TabularSoftmax| evaluate_policy(&mdp, &softmax.policy(), gamma)[BUGGY];
        for s in 0..4 {
            for a in 0..mdp.n_actions() {
                let (mut up, mut down) = (theta.clone(), theta.clone());
                up.theta[s][a] += 1e-6;
                down.theta[s][a] -= 1e-6;
                let numeric = (value(&up) - value(&down)) / 2e-6;
                assert!(
                    (numeric - exact[s][a]).abs() < 1e-7,
                    "{s} {a}: {numeric} vs {}",
                    exact[s][a]
                );
            }
        }
        // Reward-to-go shaping is a state baseline: the same gradient, to rounding.
        let rtg = shaped_gradient(
            &mdp,
            &theta,
            BUGGY,
            gamma,
            Some((ShapingCredit::RewardToGo, &phi, 1.0)),
        );
        let myopic = shaped_gradient(
            &mdp,
            &theta,
            BUGGY,
            gamma,
            Some((ShapingCredit::Myopic, &phi, 1.0)),
        );
        let gap = |g: &[Vec<f64>]| {
            g.iter()
                .flatten()
                .zip(exact.iter().flatten())
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f64::max)
        };
        assert!(gap(&rtg) < 1e-12, "{}", gap(&rtg));
        assert!(gap(&myopic) > 0.05, "{}", gap(&myopic));
        // In the buggy file, myopic credit pays the rote answers as much as the fix: both make the public tests pass.
        let extra = |a: usize| myopic[BUGGY][a] - exact[BUGGY][a];
        let pi = theta.policy();
        let per_probability = |a: usize| extra(a) / pi[BUGGY][a];
        assert!(per_probability(HARDCODE) > 0.0);
        assert!((per_probability(HARDCODE) - per_probability(SWAP)).abs() < 1e-12);
    }

    #[test]
    fn potential_shaping_keeps_the_optimal_policy_and_improvement_bonuses_do_not() {
        let mdp = repair_mdp(Verifier::Hidden);
        let gamma = 0.9;
        let phi = [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0];
        let (v, policy, _) = value_iteration(&mdp, gamma, 1e-12);
        let (v_shaped, policy_shaped, _) = value_iteration(&shape(&mdp, &phi, gamma), gamma, 1e-12);
        assert_eq!(policy, policy_shaped);
        for s in 0..4 {
            assert!((v_shaped[s] - (v[s] - phi[s])).abs() < 1e-9);
        }
        let q = q_from_v(&mdp, &v, gamma);
        let q_shaped = q_from_v(&shape(&mdp, &phi, gamma), &v_shaped, gamma);
        assert!((q_shaped[0][2] - (q[0][2] - phi[0])).abs() < 1e-9);
        let (_, farmed, _) = value_iteration(&reward_improvements(&mdp, &phi, 0.5), gamma, 1e-12);
        assert_ne!(
            farmed[1],
            crate::mdp::SUBMIT,
            "the bonus should make toggling worth more than submitting"
        );
    }

    #[test]
    fn degenerate_episodes_are_named() {
        let mut env = BugFixEnv::new(vec![GYM.held_out[0].clone()], 8);
        struct Twice;
        impl Policy for Twice {
            fn act(&mut self, _env: &BugFixEnv, _o: &str, turn: usize) -> String {
                if turn < 2 {
                    "<call> test </call>".into()
                } else {
                    "<call> submit </call>".into()
                }
            }
        }
        let mut transcript = Vec::new();
        run_episode(&mut env, 0, &mut Twice, Some(&mut transcript));
        let actions: Vec<String> = transcript
            .iter()
            .filter(|(o, _)| *o == crate::episode::Owner::Policy)
            .map(|(_, m)| m.clone())
            .collect();
        let played = Played {
            task: 0,
            segments: vec![],
            actions,
            reward: 0.0,
            info: Default::default(),
            parse_errors: 0,
        };
        assert_eq!(
            degenerate(&played),
            Degenerate {
                format_error: false,
                repeated: true,
                truncated: false
            }
        );
    }
}
