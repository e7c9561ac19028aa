//! Chapter 3: scripted policies for the BugFix gym (oracle, hacker, random)
//! and the loop that runs a policy for an episode.
//!
//! None of them learns. The oracle knows the fix, the hacker knows an
//! exploit, the random policy knows only the action grammar; together they
//! bracket what a trained agent can do, and their success and hacked rates per
//! family are the gym's first sanity check.

use crate::episode::Owner;
use crate::gym::{BugFixEnv, Family, Info};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ANCHOR: policy
/// A policy writes the next message from the task, the last observation and the turn.
pub trait Policy {
    fn act(&mut self, env: &BugFixEnv, observation: &str, turn: usize) -> String;
}

/// Knows the fix: read, test, edit with the fix, test again, submit.
pub struct Oracle;

impl Policy for Oracle {
    fn act(&mut self, env: &BugFixEnv, _observation: &str, turn: usize) -> String {
        match turn {
            0 => "<call> read </call>".into(),
            1 | 3 => "<call> test </call>".into(),
            2 => format!("<call> edit {} </call>", env.task().fix_op()),
            _ => "<call> submit </call>".into(),
        }
    }
}

/// Knows one exploit: apply it, check that the public tests pass, submit.
pub struct Hacker {
    pub exploit: &'static str,
}

impl Policy for Hacker {
    fn act(&mut self, _env: &BugFixEnv, _observation: &str, turn: usize) -> String {
        match turn {
            0 => format!("<call> edit {} </call>", self.exploit),
            1 => "<call> test </call>".into(),
            _ => "<call> submit </call>".into(),
        }
    }
}

/// Uniform over the task's messages: `read`, `test`, `submit`, one `edit`
/// per op of the menu, and one malformed message, from a seeded generator.
pub struct RandomPolicy {
    rng: StdRng,
}

impl RandomPolicy {
    pub fn new(seed: u64) -> Self {
        RandomPolicy {
            rng: StdRng::seed_from_u64(seed),
        }
    }
}

/// The messages the random policy draws from on the current task.
pub fn random_menu(env: &BugFixEnv) -> Vec<String> {
    let mut menu: Vec<String> = [
        "<call> read </call>",
        "<call> test </call>",
        "<call> submit </call>",
    ]
    .map(String::from)
    .to_vec();
    menu.extend(
        env.task()
            .menu
            .iter()
            .map(|edit| format!("<call> edit {} </call>", edit.name)),
    );
    menu.push("read the file".into());
    menu
}

impl Policy for RandomPolicy {
    fn act(&mut self, env: &BugFixEnv, _observation: &str, _turn: usize) -> String {
        let ops = &env.task().menu;
        match self.rng.random_range(0..ops.len() + 4) {
            0 => "<call> read </call>".into(),
            1 => "<call> test </call>".into(),
            2 => "<call> submit </call>".into(),
            k if k == ops.len() + 3 => "read the file".into(),
            k => format!("<call> edit {} </call>", ops[k - 3].name),
        }
    }
}
// ANCHOR_END: policy

// ANCHOR: run_episode
/// How an episode ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    pub reward: f64,
    pub turns: usize,
    pub info: Info,
}

/// Run `policy` on task `task` until the episode is done; with `transcript`,
/// also record who wrote what.
pub fn run_episode(
    env: &mut BugFixEnv,
    task: usize,
    policy: &mut dyn Policy,
    mut transcript: Option<&mut Vec<(Owner, String)>>,
) -> Outcome {
    let mut observation = env.reset(task);
    if let Some(log) = transcript.as_deref_mut() {
        log.push((Owner::Prompt, observation.to_string()));
    }
    loop {
        let turn = env.turn();
        let action = policy.act(env, &observation, turn);
        let step = env.step(&action);
        if let Some(log) = transcript.as_deref_mut() {
            log.push((Owner::Policy, action));
            log.push((Owner::Env, step.observation.to_string()));
        }
        observation = step.observation;
        if step.done {
            return Outcome {
                reward: step.reward,
                turns: turn + 1,
                info: step.info,
            };
        }
    }
}
// ANCHOR_END: run_episode

// ANCHOR: rates
/// Success and hacked rates of a policy over some episodes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    pub episodes: usize,
    pub successes: usize,
    pub hacked: usize,
    pub truncated: usize,
}

impl Rates {
    pub fn add(&mut self, outcome: &Outcome) {
        self.episodes += 1;
        self.successes += usize::from(outcome.reward == 1.0);
        self.hacked += usize::from(outcome.info.hacked);
        self.truncated += usize::from(outcome.info.truncated);
    }

    pub fn success(&self) -> f64 {
        self.successes as f64 / self.episodes.max(1) as f64
    }

    pub fn hacked_rate(&self) -> f64 {
        self.hacked as f64 / self.episodes.max(1) as f64
    }
}

/// `episodes` episodes of `policy` on every task of `family` (all families if `None`).
pub fn rates(
    env: &mut BugFixEnv,
    family: Option<Family>,
    policy: &mut dyn Policy,
    episodes: usize,
) -> Rates {
    let mut total = Rates::default();
    for task in 0..env.tasks().len() {
        if family.is_some_and(|f| env.tasks()[task].family != f) {
            continue;
        }
        for _ in 0..episodes {
            total.add(&run_episode(env, task, policy, None));
        }
    }
    total
}
// ANCHOR_END: rates

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gym::{task_zero, Gym, MAX_TURNS};
    use std::sync::LazyLock;

    static GYM: LazyLock<Gym> = LazyLock::new(Gym::standard);

    #[test]
    fn the_oracle_always_succeeds_and_never_hacks() {
        let mut env = BugFixEnv::new(GYM.held_out.clone(), MAX_TURNS);
        let rates = rates(&mut env, None, &mut Oracle, 1);
        assert_eq!(
            (rates.successes, rates.hacked, rates.episodes),
            (GYM.held_out.len(), 0, GYM.held_out.len())
        );
    }

    #[test]
    fn the_hackers_always_hack() {
        let mut env = BugFixEnv::new(GYM.train.clone(), MAX_TURNS);
        for exploit in ["hardcode_tests", "guard_public"] {
            let rates = rates(&mut env, None, &mut Hacker { exploit }, 1);
            assert_eq!(
                (rates.successes, rates.hacked),
                (0, GYM.train.len()),
                "{exploit}"
            );
        }
    }

    #[test]
    fn the_random_policy_is_seeded_and_uses_every_message() {
        let mut env = BugFixEnv::new(vec![task_zero()], MAX_TURNS);
        let a = rates(&mut env, None, &mut RandomPolicy::new(3), 500);
        let b = rates(&mut env, None, &mut RandomPolicy::new(3), 500);
        assert_eq!(a, b);
        assert!(a.successes > 0 && a.hacked > 0 && a.truncated > 0, "{a:?}");
        env.reset(0);
        let menu = random_menu(&env);
        let mut policy = RandomPolicy::new(0);
        let drawn: std::collections::HashSet<String> =
            (0..500).map(|_| policy.act(&env, "", 0)).collect();
        assert_eq!(drawn.len(), menu.len());
        assert!(menu.iter().all(|m| drawn.contains(m)));
    }

    #[test]
    fn a_transcript_alternates_policy_and_environment() {
        let mut env = BugFixEnv::new(vec![task_zero()], MAX_TURNS);
        let mut log = Vec::new();
        let outcome = run_episode(&mut env, 0, &mut Oracle, Some(&mut log));
        assert_eq!((outcome.reward, outcome.turns), (1.0, 5));
        assert_eq!(log.len(), 1 + 2 * 5);
        assert_eq!(log[0].0, Owner::Prompt);
        assert_eq!(log[6], (Owner::Env, "edited with swap_minmax".to_string()));
    }
}
