//! Chapter 13: rollout systems on a virtual clock. Episodes are reduced to
//! their shape (tokens generated and whether the call runs tests, turn by
//! turn, taken from episodes the policy really played); generation, tool
//! calls and learning get costs; and two schedules are replayed event by
//! event: a synchronous rollout that advances all episodes in lockstep, and
//! an asynchronous one in which rollout workers feed a learner under a
//! staleness bound. A virtual clock makes every timeline and throughput
//! figure the same on every machine; the real latencies it draws from are
//! recorded once, on a named machine, and stored as data.
//!
//! Times are in milliseconds of the virtual clock.

use crate::episode::parse_call;
use crate::plot::{FONT, GREY, INK, PALETTE};
use crate::rollout::Played;
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::path::Path;

// ANCHOR: shape
/// One turn of an episode as the clock sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// Tokens the policy generated.
    pub tokens: usize,
    /// The call ran test suites (`test`, `submit`, or the last turn, after
    /// which the environment grades the file).
    pub runs_tests: bool,
}

/// The turns of each played episode.
pub fn shapes(played: &[Played]) -> Vec<Vec<Turn>> {
    played
        .iter()
        .map(|episode| {
            let policy = episode
                .segments
                .iter()
                .filter(|s| s.owner == crate::episode::Owner::Policy);
            let last = episode.actions.len().saturating_sub(1);
            policy
                .zip(&episode.actions)
                .enumerate()
                .map(|(turn, (segment, action))| {
                    let tool = parse_call(action).map(|call| call.tool);
                    let runs_tests =
                        turn == last || matches!(tool.as_deref(), Some("test" | "submit"));
                    Turn {
                        tokens: segment.ids.len(),
                        runs_tests,
                    }
                })
                .collect()
        })
        .collect()
}
// ANCHOR_END: shape

// ANCHOR: latency
/// Latencies of test runs recorded on one machine, in milliseconds, by
/// `cargo run --release -p agentrl --example record_latency`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    pub machine: String,
    /// What was timed: one suite of public tests per call, each source a different file.
    pub what: String,
    pub in_process: Vec<f64>,
    pub process: Vec<f64>,
}

impl Recorded {
    pub fn load(path: &Path) -> Result<Recorded, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        serde_json::from_str(&text).map_err(|err| format!("{}: {err}", path.display()))
    }
}

/// Where the environment's time comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Latency {
    /// Draw one of the recorded latencies (with replacement).
    Recorded(Vec<f64>),
    /// A recorded latency plus, with probability `share`, a Pareto delay of
    /// scale `scale` ms and tail index `alpha` (a slow container, a test that
    /// runs until its timeout): P(delay > x) = (scale / x)^alpha for x ≥ scale.
    HeavyTail {
        base: Vec<f64>,
        share: f64,
        scale: f64,
        alpha: f64,
    },
}

impl Latency {
    pub fn draw(&self, rng: &mut StdRng) -> f64 {
        match self {
            Latency::Recorded(samples) => samples[rng.random_range(0..samples.len())],
            Latency::HeavyTail {
                base,
                share,
                scale,
                alpha,
            } => {
                let base = base[rng.random_range(0..base.len())];
                let u: f64 = rng.random();
                let tail = if rng.random::<f64>() < *share {
                    scale / (1.0 - u).powf(1.0 / alpha)
                } else {
                    0.0
                };
                base + tail
            }
        }
    }
}

/// What generation, a call that runs no tests, and one update cost, in ms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// One generated token of one episode.
    pub per_token: f64,
    /// `read`, `edit`, `undo` or a malformed call: no test runs.
    pub light_call: f64,
    /// One learner update on a batch of episodes.
    pub update: f64,
}
// ANCHOR_END: latency

// ANCHOR: events
/// What a lane (an episode, a worker, the learner) is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    Generate,
    Environment,
    /// Done with its own work, waiting for the rest of the batch.
    Wait,
}

/// One bar of a timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Event {
    pub lane: usize,
    pub activity: Activity,
    pub start: f64,
    pub end: f64,
}

/// A synchronous rollout: each turn, every open episode generates (the
/// batch decodes until its longest action is done), then every episode's
/// call runs at once, and the next turn starts when the slowest call returns.
pub fn lockstep(
    shapes: &[Vec<Turn>],
    costs: Costs,
    latency: &Latency,
    rng: &mut StdRng,
) -> Vec<Event> {
    let mut events = Vec::new();
    let mut now = 0.0;
    let turns = shapes.iter().map(Vec::len).max().unwrap_or(0);
    for turn in 0..turns {
        let open: Vec<usize> = (0..shapes.len())
            .filter(|&e| turn < shapes[e].len())
            .collect();
        let own: Vec<f64> = open
            .iter()
            .map(|&e| shapes[e][turn].tokens as f64 * costs.per_token)
            .collect();
        let decode = own.iter().cloned().fold(0.0, f64::max);
        let calls: Vec<f64> = open
            .iter()
            .map(|&e| {
                if shapes[e][turn].runs_tests {
                    latency.draw(rng)
                } else {
                    costs.light_call
                }
            })
            .collect();
        let slowest = calls.iter().cloned().fold(0.0, f64::max);
        for (i, &lane) in open.iter().enumerate() {
            events.push(Event {
                lane,
                activity: Activity::Generate,
                start: now,
                end: now + own[i],
            });
            events.push(Event {
                lane,
                activity: Activity::Wait,
                start: now + own[i],
                end: now + decode,
            });
            let called = now + decode;
            events.push(Event {
                lane,
                activity: Activity::Environment,
                start: called,
                end: called + calls[i],
            });
            events.push(Event {
                lane,
                activity: Activity::Wait,
                start: called + calls[i],
                end: called + slowest,
            });
        }
        now += decode + slowest;
    }
    events.retain(|e| e.end > e.start);
    events
}

/// The same episodes, each advancing on its own as soon as its last step is
/// done (one worker per episode): no waits.
pub fn independent(
    shapes: &[Vec<Turn>],
    costs: Costs,
    latency: &Latency,
    rng: &mut StdRng,
) -> Vec<Event> {
    let mut events = Vec::new();
    let mut clocks = vec![0.0; shapes.len()];
    let turns = shapes.iter().map(Vec::len).max().unwrap_or(0);
    for turn in 0..turns {
        // Turn by turn across episodes, so the draws come in the same order as in `lockstep`.
        for (lane, shape) in shapes.iter().enumerate().filter(|(_, s)| turn < s.len()) {
            let generate = shape[turn].tokens as f64 * costs.per_token;
            let call = if shape[turn].runs_tests {
                latency.draw(rng)
            } else {
                costs.light_call
            };
            let now = clocks[lane];
            events.push(Event {
                lane,
                activity: Activity::Generate,
                start: now,
                end: now + generate,
            });
            events.push(Event {
                lane,
                activity: Activity::Environment,
                start: now + generate,
                end: now + generate + call,
            });
            clocks[lane] = now + generate + call;
        }
    }
    events.retain(|e| e.end > e.start);
    events
}

/// The time the last event ends.
pub fn makespan(events: &[Event]) -> f64 {
    events.iter().map(|e| e.end).fold(0.0, f64::max)
}

/// The share of lane time spent waiting, between time 0 and each lane's last event.
pub fn wait_share(events: &[Event]) -> f64 {
    let waiting: f64 = events
        .iter()
        .filter(|e| e.activity == Activity::Wait)
        .map(|e| e.end - e.start)
        .sum();
    let total: f64 = events.iter().map(|e| e.end - e.start).sum();
    waiting / total.max(f64::MIN_POSITIVE)
}
// ANCHOR_END: events

// ANCHOR: asynchronous
/// An asynchronous rollout: `workers` play episodes one at a time each (a
/// worker is an inference replica with its own environments) and a learner
/// updates on every `batch` finished episodes. A worker may start an episode
/// only while the episodes started stay below (staleness + version + 1) ×
/// batch, with `version` the learner's updates so far, so no episode is
/// sampled more than `staleness` versions before the update that uses it
/// starts, unless it is slow; the learner drops those. With `partial`
/// (partial rollouts), a worker takes up new weights at the next turn of the
/// episode in flight instead of finishing it with the weights it began with;
/// the bound still counts from the episode's first turn (its head), and
/// recomputing the cache with the new weights is not charged.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AsyncConfig {
    pub workers: usize,
    pub staleness: usize,
    pub batch: usize,
    pub updates: usize,
    pub partial: bool,
}

/// What an asynchronous run did, on the virtual clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AsyncReport {
    /// When the last update finished.
    pub time: f64,
    /// Episodes played (finished), trained on, and dropped as too stale.
    pub played: usize,
    pub trained: usize,
    pub dropped: usize,
    /// Tokens the policy generated in the trained episodes.
    pub trained_tokens: usize,
    /// Policy versions between an episode's first turn and the update that
    /// learns from it, over trained episodes.
    pub mean_staleness: f64,
    pub max_staleness: usize,
    /// Policy versions between each generated token and the update that
    /// learns from it, over the tokens of trained episodes.
    pub mean_token_lag: f64,
    /// Share of the time the learner was updating, and the workers generating or in the environment.
    pub learner_busy: f64,
    pub worker_busy: f64,
}

impl AsyncReport {
    /// Trained episodes per second of the virtual clock.
    pub fn throughput(&self) -> f64 {
        self.trained as f64 / (self.time / 1000.0)
    }

    /// Generated tokens of trained episodes per second of the virtual clock.
    pub fn token_throughput(&self) -> f64 {
        self.trained_tokens as f64 / (self.time / 1000.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Happening {
    /// A worker finished the episode it started at time `start`, at this learner version.
    Finished {
        worker: usize,
        version: usize,
        start: f64,
    },
    Updated,
}

/// Events on the clock, earliest first; ties in order of scheduling.
#[derive(Debug, PartialEq)]
struct Timed(f64, u64, Happening);
impl Eq for Timed {}
impl Ord for Timed {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.total_cmp(&self.0).then(other.1.cmp(&self.1))
    }
}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Replay an asynchronous run: episodes take the shapes in `shapes` in
/// turn (cycling), each turn's call draws from `latency`.
pub fn asynchronous(
    shapes: &[Vec<Turn>],
    costs: Costs,
    latency: &Latency,
    config: AsyncConfig,
    rng: &mut StdRng,
) -> AsyncReport {
    let AsyncConfig {
        workers,
        staleness,
        batch,
        updates,
        partial,
    } = config;
    let mut queue = BinaryHeap::new();
    let mut order = 0u64;
    let mut push = |queue: &mut BinaryHeap<Timed>, time: f64, what: Happening| {
        order += 1;
        queue.push(Timed(time, order, what));
    };
    let (mut version, mut started, mut learning) = (0usize, 0usize, false);
    // Finished episodes in order of finishing: the version of the first turn, and (version, tokens) of every turn.
    let mut finished: VecDeque<(usize, Vec<(usize, usize)>)> = VecDeque::new();
    let mut idle: Vec<usize> = (0..workers).rev().collect();
    let mut playing: Vec<Vec<(f64, usize)>> = vec![Vec::new(); workers]; // each turn's start (from the episode's) and its tokens
    let mut update_times: Vec<f64> = Vec::new(); // when each version was published
    let mut report = AsyncReport::default();
    let (mut staleness_sum, mut worker_time, mut lag_sum, mut tokens_trained) =
        (0usize, 0.0, 0usize, 0usize);
    let mut now = 0.0;
    loop {
        // Idle workers start episodes while the bound allows.
        // (Dropped episodes free their places, so the learner can always fill a batch.)
        while started - report.dropped < (staleness + version + 1) * batch {
            let Some(worker) = idle.pop() else { break };
            let shape = &shapes[started % shapes.len()];
            let mut duration = 0.0;
            playing[worker] = shape
                .iter()
                .map(|t| {
                    let turn = (duration, t.tokens);
                    duration += t.tokens as f64 * costs.per_token
                        + if t.runs_tests {
                            latency.draw(rng)
                        } else {
                            costs.light_call
                        };
                    turn
                })
                .collect();
            worker_time += duration;
            started += 1;
            push(
                &mut queue,
                now + duration,
                Happening::Finished {
                    worker,
                    version,
                    start: now,
                },
            );
        }
        // The learner takes the oldest finished episodes, dropping any that grew too stale.
        if !learning {
            let before = finished.len();
            finished.retain(|(v, _)| version - v <= staleness);
            report.dropped += before - finished.len();
            if finished.len() >= batch {
                for (v, turns) in finished.drain(..batch) {
                    let lag = version - v;
                    staleness_sum += lag;
                    report.max_staleness = report.max_staleness.max(lag);
                    report.trained += 1;
                    for (written_by, tokens) in turns {
                        (lag_sum, tokens_trained) = (
                            lag_sum + (version - written_by) * tokens,
                            tokens_trained + tokens,
                        );
                    }
                }
                learning = true;
                report.learner_busy += costs.update;
                push(&mut queue, now + costs.update, Happening::Updated);
            }
        }
        let Some(Timed(time, _, what)) = queue.pop() else {
            break;
        };
        now = time;
        match what {
            Happening::Finished {
                worker,
                version: v,
                start,
            } => {
                report.played += 1;
                // A turn is written by the newest version published before it began, if the worker takes up new weights.
                let written_by = |offset: f64| {
                    if partial {
                        update_times
                            .iter()
                            .filter(|&&u| u <= start + offset)
                            .count()
                    } else {
                        v
                    }
                };
                finished.push_back((
                    v,
                    playing[worker]
                        .iter()
                        .map(|&(offset, tokens)| (written_by(offset), tokens))
                        .collect(),
                ));
                idle.push(worker);
            }
            Happening::Updated => {
                (version, learning) = (version + 1, false);
                update_times.push(now);
                if version == updates {
                    break;
                }
            }
        }
    }
    report.time = now;
    report.mean_staleness = staleness_sum as f64 / report.trained.max(1) as f64;
    report.mean_token_lag = lag_sum as f64 / tokens_trained.max(1) as f64;
    report.trained_tokens = tokens_trained;
    report.learner_busy /= now.max(f64::MIN_POSITIVE);
    report.worker_busy =
        worker_time.min(now * workers as f64) / (now * workers as f64).max(f64::MIN_POSITIVE);
    report
}
// ANCHOR_END: asynchronous

// ANCHOR: gantt
/// Timelines drawn one above the other, one row per lane, bars coloured by
/// activity; `panels` holds a title and the events of each.
pub fn gantt(path: &Path, panels: &[(&str, &[Event])]) -> Result<(), String> {
    let mut svg = String::new();
    {
        let lanes = panels
            .iter()
            .flat_map(|(_, events)| events.iter().map(|e| e.lane + 1))
            .max()
            .unwrap_or(1);
        let end = panels
            .iter()
            .map(|(_, events)| makespan(events))
            .fold(0.0, f64::max)
            * 1.02;
        let height = 70 + panels.len() as u32 * (60 + 14 * lanes as u32);
        let root = SVGBackend::with_string(&mut svg, (720, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|err| err.to_string())?;
        let (body, legend) = root.split_vertically(height - 40);
        let areas = body.split_evenly((panels.len(), 1));
        for (area, (title, events)) in areas.iter().zip(panels) {
            let mut chart = ChartBuilder::on(area)
                .caption(*title, (FONT, 17).into_font().color(&INK))
                .margin(8)
                .x_label_area_size(36)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0..end, 0.0..lanes as f64)
                .map_err(|err| err.to_string())?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .x_desc("virtual time (ms)")
                .y_desc("episode")
                .axis_desc_style((FONT, 14).into_font().color(&INK))
                .label_style((FONT, 12).into_font().color(&INK))
                .axis_style(GREY)
                .y_labels(0)
                .draw()
                .map_err(|err| err.to_string())?;
            let bars = events.iter().map(|e| {
                let row = (lanes - 1 - e.lane) as f64;
                Rectangle::new(
                    [(e.start, row + 0.15), (e.end, row + 0.85)],
                    colour(e.activity).filled(),
                )
            });
            chart.draw_series(bars).map_err(|err| err.to_string())?;
        }
        for (i, (name, activity)) in [
            ("generate", Activity::Generate),
            ("environment", Activity::Environment),
            ("wait for the batch", Activity::Wait),
        ]
        .iter()
        .enumerate()
        {
            let x = 80 + i as i32 * 200;
            legend
                .draw(&Rectangle::new(
                    [(x, 12), (x + 24, 26)],
                    colour(*activity).filled(),
                ))
                .map_err(|err| err.to_string())?;
            legend
                .draw(&Text::new(
                    *name,
                    (x + 32, 12),
                    (FONT, 14).into_font().color(&INK),
                ))
                .map_err(|err| err.to_string())?;
        }
        root.present().map_err(|err| err.to_string())?;
    }
    std::fs::write(path, svg).map_err(|err| format!("cannot write {}: {err}", path.display()))
}

fn colour(activity: Activity) -> RGBColor {
    match activity {
        Activity::Generate => PALETTE[0],
        Activity::Environment => PALETTE[1],
        Activity::Wait => RGBColor(215, 215, 215),
    }
}
// ANCHOR_END: gantt

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn turn(tokens: usize, runs_tests: bool) -> Turn {
        Turn { tokens, runs_tests }
    }

    #[test]
    fn lockstep_waits_for_the_slowest_and_independent_does_not() {
        let shapes = vec![vec![turn(4, true), turn(2, true)], vec![turn(2, false)]];
        let costs = Costs {
            per_token: 1.0,
            light_call: 0.5,
            update: 0.0,
        };
        let fixed = Latency::Recorded(vec![10.0]);
        let mut rng = StdRng::seed_from_u64(0);
        let sync = lockstep(&shapes, costs, &fixed, &mut rng);
        // Turn 1: decode 4 ms, then calls of 10 and 0.5 ms; turn 2: episode 0 alone, 2 + 10.
        assert_eq!(makespan(&sync), 4.0 + 10.0 + 2.0 + 10.0);
        let waits: f64 = sync
            .iter()
            .filter(|e| e.lane == 1 && e.activity == Activity::Wait)
            .map(|e| e.end - e.start)
            .sum();
        assert_eq!(waits, 2.0 + 9.5);
        let free = independent(&shapes, costs, &fixed, &mut rng);
        assert_eq!(makespan(&free), 26.0);
        assert!(free.iter().all(|e| e.activity != Activity::Wait));
        assert_eq!(
            free.iter()
                .filter(|e| e.lane == 1)
                .map(|e| e.end)
                .fold(0.0, f64::max),
            2.5
        );
    }

    #[test]
    fn the_staleness_bound_holds_and_every_episode_is_accounted_for() {
        let shapes: Vec<Vec<Turn>> = (0..7).map(|i| vec![turn(8 + i, true); 1 + i % 3]).collect();
        let costs = Costs {
            per_token: 1.0,
            light_call: 0.1,
            update: 40.0,
        };
        let tail = Latency::HeavyTail {
            base: vec![1.0, 2.0],
            share: 0.1,
            scale: 50.0,
            alpha: 1.2,
        };
        for staleness in [0, 1, 3] {
            for workers in [1, 4, 16] {
                let config = AsyncConfig {
                    workers,
                    staleness,
                    batch: 8,
                    updates: 12,
                    partial: false,
                };
                let report = asynchronous(
                    &shapes,
                    costs,
                    &tail,
                    config,
                    &mut StdRng::seed_from_u64(staleness as u64),
                );
                assert_eq!(report.trained, 8 * 12, "{report:?}");
                assert!(report.max_staleness <= staleness, "{report:?}");
                // Every finished episode was trained on, dropped, or is still waiting.
                assert!(
                    report.played >= report.trained + report.dropped,
                    "{report:?}"
                );
                if staleness == 0 {
                    assert_eq!(report.max_staleness, 0);
                }
                // Without partial rollouts every token is as old as its episode's first turn.
                assert!(
                    report.mean_token_lag <= report.max_staleness as f64,
                    "{report:?}"
                );
            }
        }
    }

    #[test]
    fn partial_rollouts_keep_the_schedule_and_write_later_turns_with_newer_weights() {
        let shapes: Vec<Vec<Turn>> = (0..5).map(|i| vec![turn(6 + i, true); 2 + i % 3]).collect();
        let costs = Costs {
            per_token: 1.0,
            light_call: 0.1,
            update: 30.0,
        };
        let tail = Latency::HeavyTail {
            base: vec![1.0, 2.0],
            share: 0.2,
            scale: 40.0,
            alpha: 1.2,
        };
        for staleness in [0, 1, 3] {
            for workers in [2, 8] {
                let config = AsyncConfig {
                    workers,
                    staleness,
                    batch: 8,
                    updates: 12,
                    partial: false,
                };
                let whole =
                    asynchronous(&shapes, costs, &tail, config, &mut StdRng::seed_from_u64(7));
                let partial = asynchronous(
                    &shapes,
                    costs,
                    &tail,
                    AsyncConfig {
                        partial: true,
                        ..config
                    },
                    &mut StdRng::seed_from_u64(7),
                );
                // The same episodes at the same times, trained and dropped alike: only who wrote which turn differs.
                assert_eq!(
                    (
                        partial.time,
                        partial.trained,
                        partial.dropped,
                        partial.mean_staleness
                    ),
                    (
                        whole.time,
                        whole.trained,
                        whole.dropped,
                        whole.mean_staleness
                    )
                );
                assert_eq!(partial.trained_tokens, whole.trained_tokens);
                assert!(
                    partial.mean_token_lag <= whole.mean_token_lag,
                    "{partial:?} vs {whole:?}"
                );
                if staleness == 0 {
                    // Synchronous: no update lands while an episode of the batch is in flight.
                    assert_eq!((whole.mean_token_lag, partial.mean_token_lag), (0.0, 0.0));
                } else if workers == 8 {
                    assert!(
                        partial.mean_token_lag < whole.mean_token_lag,
                        "{partial:?} vs {whole:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn trained_tokens_are_the_tokens_of_the_trained_episodes() {
        let shapes = vec![vec![turn(5, true), turn(3, false)]; 4]; // 8 tokens an episode
        let costs = Costs {
            per_token: 1.0,
            light_call: 0.1,
            update: 20.0,
        };
        let config = AsyncConfig {
            workers: 3,
            staleness: 1,
            batch: 4,
            updates: 5,
            partial: false,
        };
        let report = asynchronous(
            &shapes,
            costs,
            &Latency::Recorded(vec![2.0]),
            config,
            &mut StdRng::seed_from_u64(0),
        );
        assert_eq!(report.trained_tokens, 8 * report.trained);
        assert!((report.token_throughput() - 8.0 * report.throughput()).abs() < 1e-9);
    }

    #[test]
    fn heavy_tails_follow_their_pareto_law() {
        let tail = Latency::HeavyTail {
            base: vec![0.0],
            share: 1.0,
            scale: 10.0,
            alpha: 2.0,
        };
        let mut rng = StdRng::seed_from_u64(1);
        let n = 40_000;
        let over = (0..n).filter(|_| tail.draw(&mut rng) > 20.0).count() as f64 / n as f64;
        // P(X > 2·scale) = 2^-alpha = 0.25.
        assert!((over - 0.25).abs() < 0.01, "{over}");
    }
}
