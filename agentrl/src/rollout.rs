//! Chapter 4: rollout. A language-model policy plays gym episodes, many at
//! once in lockstep, keeping every sampled token with its log-probability
//! and who wrote each stretch of the token stream.

use crate::agent::LmPolicy;
use crate::episode::Owner;
use crate::gym::{BugFixEnv, Info, Task};
use crate::tinyagent::KvCache;
use crate::tokenizer::role_token;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// A progress bar on standard error (hidden when that is not a terminal).
pub fn progress(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} [{elapsed}<{eta}]")
            .expect("a valid template"),
    );
    bar.set_message(what.to_string());
    bar
}

// ANCHOR: play
/// Who wrote a stretch of the token stream, the ids as they were fed to the
/// model, and (for the policy's stretches) the sampling log-prob of each id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub owner: Owner,
    pub ids: Vec<u32>,
    pub logprobs: Vec<f64>,
}

/// One episode played by a language model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Played {
    pub task: usize,
    pub segments: Vec<Segment>,
    /// The action texts, one per turn.
    pub actions: Vec<String>,
    pub reward: f64,
    pub info: Info,
    /// Turns whose action did not parse.
    pub parse_errors: usize,
}

impl Played {
    /// The whole token stream.
    pub fn ids(&self) -> Vec<u32> {
        self.segments
            .iter()
            .flat_map(|s| s.ids.iter().copied())
            .collect()
    }
}

/// Play one episode per entry of `tasks` (indices into the env's tasks), all
/// in lockstep: each turn, the contexts of the unfinished episodes go through
/// the policy as one batch. Observations are appended as `<|tool|>` text
/// followed by `<|assistant|>`; the policy's tokens are kept as sampled.
pub fn play(
    policy: &LmPolicy,
    tasks_of: &[Task],
    tasks: &[usize],
    max_turns: usize,
    rng: &mut StdRng,
) -> Vec<Played> {
    play_timed(policy, tasks_of, tasks, max_turns, rng).0
}

/// Where the wall-clock time of [`play_timed`] went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlayTime {
    /// Seconds in the policy: generating the actions.
    pub generation: f64,
    /// Seconds in the environment: tool calls, test runs, encoding observations.
    pub environment: f64,
}

/// [`play`], also reporting how its time split between the policy and the environment.
pub fn play_timed(
    policy: &LmPolicy,
    tasks_of: &[Task],
    tasks: &[usize],
    max_turns: usize,
    rng: &mut StdRng,
) -> (Vec<Played>, PlayTime) {
    play_viewed(policy, tasks_of, tasks, max_turns, None, rng)
}

/// What the policy reads of an episode before its next action, made from the
/// episode's segments so far (Chapter 12: a harness that rewrites old history).
pub type View<'a> = &'a (dyn Fn(&[Segment]) -> Vec<u32> + Sync);

/// [`play_timed`], with the policy reading `view` of each episode instead of
/// the whole token stream when a view is given. The episodes keep the whole
/// stream; their log-probs belong to the contexts the view made, so they are
/// for evaluation, not for the training loop.
pub fn play_viewed(
    policy: &LmPolicy,
    tasks_of: &[Task],
    tasks: &[usize],
    max_turns: usize,
    view: Option<View>,
    rng: &mut StdRng,
) -> (Vec<Played>, PlayTime) {
    let ends = Ends {
        max_turns,
        at_window: false,
    };
    play_until(policy, tasks_of, tasks, ends, view, rng)
}

/// What ends an episode besides `submit`: the turn budget and, when
/// `at_window` is set, a context with no room left in the model's window for
/// another action. Such an episode is scored as truncated (reward 0), and
/// (without a view) its last observation is cut so that the whole episode
/// fits the window: a learner can then train on it exactly as the policy read
/// it. Without `at_window` the policy reads the last tokens of a longer context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ends {
    pub max_turns: usize,
    pub at_window: bool,
}

/// [`play_viewed`], the episodes ending as `ends` says.
pub fn play_until(
    policy: &LmPolicy,
    tasks_of: &[Task],
    tasks: &[usize],
    ends: Ends,
    view: Option<View>,
    rng: &mut StdRng,
) -> (Vec<Played>, PlayTime) {
    let Ends {
        max_turns,
        at_window,
    } = ends;
    let n_ctx = policy.model.config.n_ctx as usize;
    let room = n_ctx - policy.max_action_tokens; // the longest context an action still fits after
    let bpe = policy.bpe;
    let mut time = PlayTime::default();
    let started = Instant::now();
    let mut envs: Vec<BugFixEnv> = tasks
        .iter()
        .map(|_| BugFixEnv::new(tasks_of.to_vec(), max_turns))
        .collect();
    let opener = |owner: Owner, text: &str, then: Option<Owner>| -> Vec<u32> {
        let mut s = format!("{}{text}", role_token(owner));
        if let Some(next) = then {
            s.push_str(role_token(next));
        }
        bpe.encode(&s)
    };
    let mut played: Vec<Played> = tasks
        .iter()
        .zip(envs.iter_mut())
        .map(|(&task, env)| {
            let prompt = env.reset(task);
            let ids = opener(Owner::Prompt, &prompt, Some(Owner::Policy));
            let segment = Segment {
                owner: Owner::Prompt,
                ids,
                logprobs: vec![],
            };
            Played {
                task,
                segments: vec![segment],
                actions: vec![],
                reward: 0.0,
                info: Info::default(),
                parse_errors: 0,
            }
        })
        .collect();
    let mut open: Vec<usize> = (0..tasks.len()).collect();
    // One row per open episode: each turn feeds only what was added since the last one.
    let mut cache = KvCache::default();
    while !open.is_empty() {
        // A context that does not extend the cached one is encoded again (`act_cached`).
        let mut contexts: Vec<Vec<u32>> = open
            .iter()
            .map(|&i| view.map_or_else(|| played[i].ids(), |view| view(&played[i].segments)))
            .collect();
        if at_window && contexts.iter().any(|c| c.len() > room) {
            // The window is full: the episode ends here, truncated and unrewarded.
            let fits: Vec<usize> = (0..open.len())
                .filter(|&r| contexts[r].len() <= room)
                .collect();
            for (&i, context) in open.iter().zip(&contexts) {
                if context.len() > room {
                    played[i].info.truncated = true;
                    if view.is_none() {
                        cut_to(&mut played[i], n_ctx);
                    }
                }
            }
            if !cache.tokens.is_empty() {
                cache.keep_rows(&fits);
            }
            open = fits.iter().map(|&r| open[r]).collect();
            contexts = fits
                .iter()
                .map(|&r| std::mem::take(&mut contexts[r]))
                .collect();
            if open.is_empty() {
                break;
            }
        }
        let generating = Instant::now();
        let actions = policy.act_cached(&contexts, &mut cache, rng);
        time.generation += generating.elapsed().as_secs_f64();
        let mut still_open = Vec::new();
        let mut kept_rows = Vec::new();
        for (row, (&i, action)) in open.iter().zip(actions).enumerate() {
            let step = envs[i].step(&action.text);
            let episode = &mut played[i];
            episode.parse_errors += usize::from(step.info.parse_error);
            episode.segments.push(Segment {
                owner: Owner::Policy,
                ids: action.tokens,
                logprobs: action.logprobs,
            });
            episode.actions.push(action.text);
            if step.done {
                (episode.reward, episode.info) = (step.reward, step.info);
                let end = opener(Owner::Env, &step.observation, None);
                episode.segments.push(Segment {
                    owner: Owner::Env,
                    ids: [end, vec![bpe.special.end]].concat(),
                    logprobs: vec![],
                });
                if at_window && view.is_none() {
                    cut_to(episode, n_ctx);
                }
            } else {
                let ids = opener(Owner::Env, &step.observation, Some(Owner::Policy));
                episode.segments.push(Segment {
                    owner: Owner::Env,
                    ids,
                    logprobs: vec![],
                });
                still_open.push(i);
                kept_rows.push(row);
            }
        }
        let generating = Instant::now();
        cache.keep_rows(&kept_rows);
        time.generation += generating.elapsed().as_secs_f64();
        open = still_open;
    }
    time.environment = started.elapsed().as_secs_f64() - time.generation;
    (played, time)
}

/// Cuts the end of `episode`'s last segment, an observation, so that the episode holds at most
/// `n` tokens.
fn cut_to(episode: &mut Played, n: usize) {
    let extra = episode.ids().len().saturating_sub(n);
    let last = episode
        .segments
        .last_mut()
        .expect("an episode starts with its prompt");
    assert!(
        last.owner != Owner::Policy && last.ids.len() >= extra,
        "only an observation is cut to fit the window"
    );
    last.ids.truncate(last.ids.len() - extra);
}
// ANCHOR_END: play

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::parse_call;
    use crate::gym::Gym;
    use crate::pretrain::corpus;
    use crate::tinyagent::{Config, TinyAgent};
    use crate::tokenizer::{render, Bpe};
    use rand::SeedableRng;
    use tch::Device;

    #[test]
    fn played_episodes_keep_the_sampled_ids_and_their_logprobs() {
        let gym = Gym::standard();
        let tasks = &gym.held_out[..4];
        let transcripts = corpus(tasks, 20, 0);
        let bpe = Bpe::train(transcripts.iter().map(|t| render(t)), 400).unwrap();
        let model = {
            let _turn = crate::book::seeded(0);
            TinyAgent::new(
                Config {
                    vocab: bpe.vocab_size() as i64,
                    n_ctx: 512,
                    d_model: 16,
                    n_layer: 1,
                    n_head: 2,
                },
                Device::Cpu,
            )
        };
        let policy = LmPolicy {
            model: &model,
            bpe: &bpe,
            sampling: crate::tinyagent::Sampling::PURE,
            max_action_tokens: 6,
        };
        let played = play(
            &policy,
            tasks,
            &[0, 1, 2, 3],
            3,
            &mut StdRng::seed_from_u64(0),
        );
        for episode in &played {
            assert!(episode.actions.len() <= 3);
            let policy_segments: Vec<&Segment> = episode
                .segments
                .iter()
                .filter(|s| s.owner == Owner::Policy)
                .collect();
            assert_eq!(policy_segments.len(), episode.actions.len());
            for (segment, text) in policy_segments.iter().zip(&episode.actions) {
                assert_eq!(segment.ids.len(), segment.logprobs.len());
                assert!(segment.logprobs.iter().all(|&l| l <= 0.0));
                assert_eq!(&bpe.decode(&segment.ids), text);
            }
            assert_eq!(*episode.ids().last().unwrap(), bpe.special.end);
            assert_eq!(
                episode.parse_errors,
                episode
                    .actions
                    .iter()
                    .filter(|a| parse_call(a).is_none())
                    .count()
            );
        }
    }
}
