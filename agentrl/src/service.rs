//! Chapter 13: the gym as a service: the BugFix gym behind a network
//! protocol, so that a trainer written in any language (TRL, verl, SkyRL, or
//! a Python script) can play its episodes.
//!
//! The protocol is OpenEnv's, as the Python package `openenv-core`
//! ([`OPENENV_VERSION`]) speaks it; its client connects, unchanged, to
//! [`serve`]. Three layers, each testable alone:
//!
//! - [`Session`]: one [`BugFixEnv`] and its current episode, and the pure
//!   handler [`Session::handle`]: one JSON message in, one JSON reply out.
//! - [`Service`]: the task sets, the limits, the [`SessionTable`] that bounds
//!   concurrent sessions, the counters, and the HTTP routes
//!   ([`Service::http`]: method, path and body in; status and JSON out).
//! - [`serve`]: a listener on std threads, one thread per connection; the
//!   WebSocket frames come from `tungstenite`, the HTTP head from `httparse`.
//!
//! # The WebSocket `/ws`: one session per connection
//!
//! | client sends | server replies |
//! | --- | --- |
//! | `{"type":"reset","data":{"task":0,"split":"train"}}` | `{"type":"observation","data":{"observation":O,"reward":null,"done":false}}` |
//! | `{"type":"step","data":{"message":"<call> test </call>"}}` | `{"type":"observation","data":{"observation":O,"reward":0.0,"done":false}}` |
//! | `{"type":"state"}` | `{"type":"state","data":S}` |
//! | `{"type":"close"}` | nothing: the server closes the connection |
//!
//! Reset data (every field optional; other fields are ignored, as OpenEnv
//! ignores what its environment's `reset` does not take): `task` (index in the
//! split, default 0, or `seed` modulo the split's size when only `seed` is
//! given), `split` (`"train"` or `"held_out"`, default `"train"`; the
//! held-out split only if [`Limits::serve_held_out`]), `seed` (an
//! integer >= 0), `episode_id` (a string of at most 255 characters; the server
//! numbers episodes itself otherwise).
//!
//! Step data is the action: `message` (a string of at most
//! [`MAX_ACTION_BYTES`] bytes, the agent's text) and an optional `metadata`
//! object; any other field is an error, as OpenEnv's `Action` forbids extras.
//!
//! The observation `O` is `{"text", "turn", "parse_error", "truncated",
//! "submitted", "public_pass", "hidden_pass", "hacked"}`: the gym's
//! observation text, the turns taken, then [`Info`]'s flags. The state `S`
//! is `{"episode_id", "step_count", "task", "split", "task_id", "done",
//! "max_turns"}`. Nothing the server sends contains a hidden test.
//!
//! Errors are `{"type":"error","data":{"message","code"}}` with OpenEnv's
//! codes ([`ErrorCode`]); validation errors add `errors`, a list of
//! `{"loc","msg"}`. After an error the connection stays open, except for
//! `CAPACITY_REACHED` (too many sessions), an oversized frame (then the close
//! code 1009) and an idle connection (`SESSION_ERROR`, close code 1001).
//!
//! # HTTP
//!
//! `GET /health`, `/metadata`, `/schema` and `/state`, `POST /reset` and
//! `/step`, as OpenEnv defines them. OpenEnv's HTTP routes are stateless:
//! each request gets a fresh environment that is dropped after the reply. So
//! `/reset` returns a task's first observation, `/state` the state of a fresh
//! environment, and `/step` (after validating the action) answers 409, since
//! a fresh environment has no episode: episodes are played over `/ws`.
//! Errors are 4xx with `{"detail","code"}`; a 422's `detail` is FastAPI's list of
//! `{"type","loc","msg"}`, with the message in `message`. `GET /stats` (not OpenEnv's)
//! returns the server's counters. `GET /openapi.json` describes the HTTP routes
//! (what `openenv validate --url` reads first). Not served: `/docs` and `/web`
//! (FastAPI's page and OpenEnv's UI).
//!
//! # MCP
//!
//! The four tools as MCP tools, over JSON-RPC 2.0 as OpenEnv's `/mcp` speaks
//! it: `tools/list` ([`mcp_tools`]) and `tools/call` (`{"name", "arguments"}`,
//! one step of the episode; the result's `content` holds the observation's
//! text and `data` the whole step). Over `/ws`, `{"type":"mcp","data":REQUEST}`
//! acts on the connection's episode (after a `reset`) and is answered
//! `{"type":"mcp","data":RESPONSE}`. Over `POST /mcp`, which HTTP answers 200
//! with a JSON-RPC response or error ([`rpc`]), `openenv/session/create`
//! (with reset's fields) opens a session in the table and returns its
//! `session_id` and first observation, `tools/call` names it, and
//! `openenv/session/close` (or the idle timeout) frees it.

use crate::gym::{BugFixEnv, Gym, Info, Task, MAX_TURNS};
use crate::policies::{Oracle, Policy, RandomPolicy};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

/// The `openenv-core` release whose client the tests run against.
pub const OPENENV_VERSION: &str = "0.3.0";
/// The current OpenEnv release (published as `openenv` since 0.3.1), whose
/// validator, MCP client and the TRL environment class the tests also run.
pub const OPENENV_CURRENT: &str = "0.10.0";
/// The longest action text (`message`) a step accepts, in bytes.
pub const MAX_ACTION_BYTES: usize = 4 * 1024;
/// The largest WebSocket message or HTTP body the server reads, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// The largest HTTP request head (request line and headers), in bytes.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The longest `episode_id` a reset accepts (OpenEnv's limit).
pub const MAX_EPISODE_ID_CHARS: usize = 255;

// ---------------------------------------------------------------------------
// Error codes and replies
// ---------------------------------------------------------------------------

/// OpenEnv's WebSocket error codes (`WSErrorCode` in `openenv-core`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCode {
    /// The message is not JSON.
    InvalidJson,
    /// The message's `type` is none of reset, step, state, close.
    UnknownType,
    /// A field is missing, of the wrong type, out of range or not allowed.
    ValidationError,
    /// The request was well formed but cannot run now (no episode, episode
    /// over), or the handler panicked.
    ExecutionError,
    /// Too many sessions; the connection is closed.
    CapacityReached,
    /// The environment could not be made (never raised here: making a
    /// `BugFixEnv` cannot fail).
    FactoryError,
    /// The connection failed as a whole (here: idle for too long).
    SessionError,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 7] = [
        ErrorCode::InvalidJson,
        ErrorCode::UnknownType,
        ErrorCode::ValidationError,
        ErrorCode::ExecutionError,
        ErrorCode::CapacityReached,
        ErrorCode::FactoryError,
        ErrorCode::SessionError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "INVALID_JSON",
            ErrorCode::UnknownType => "UNKNOWN_TYPE",
            ErrorCode::ValidationError => "VALIDATION_ERROR",
            ErrorCode::ExecutionError => "EXECUTION_ERROR",
            ErrorCode::CapacityReached => "CAPACITY_REACHED",
            ErrorCode::FactoryError => "FACTORY_ERROR",
            ErrorCode::SessionError => "SESSION_ERROR",
        }
    }

    /// The HTTP status the same failure gets on the HTTP routes.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidJson | ErrorCode::ValidationError | ErrorCode::UnknownType => 422,
            ErrorCode::ExecutionError => 409,
            ErrorCode::CapacityReached => 503,
            ErrorCode::FactoryError | ErrorCode::SessionError => 500,
        }
    }
}

/// Where a validation error is, and what is wrong there.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FieldError {
    pub loc: Vec<String>,
    pub msg: String,
}

/// The body of an error reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
    pub errors: Vec<FieldError>,
}

impl Failure {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            errors: Vec::new(),
        }
    }

    /// A validation error at `loc` (a path of field names).
    pub fn invalid(loc: &[&str], msg: impl Into<String>) -> Self {
        let msg = msg.into();
        let at = loc.join(".");
        Failure {
            code: ErrorCode::ValidationError,
            message: format!("Invalid message: {at}: {msg}"),
            errors: vec![FieldError {
                loc: loc.iter().map(|s| s.to_string()).collect(),
                msg,
            }],
        }
    }
}

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'a str,
    data: T,
}

#[derive(Serialize)]
struct ErrorData<'a> {
    message: &'a str,
    code: &'static str,
    #[serde(skip_serializing_if = "no_errors")]
    errors: &'a [FieldError],
    #[serde(skip_serializing_if = "Option::is_none")]
    active_sessions: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_sessions: Option<usize>,
}

fn no_errors(errors: &&[FieldError]) -> bool {
    errors.is_empty()
}

/// The JSON text of a WebSocket error reply.
pub fn error_text(failure: &Failure) -> String {
    let data = ErrorData {
        message: &failure.message,
        code: failure.code.as_str(),
        errors: &failure.errors,
        active_sessions: None,
        max_sessions: None,
    };
    serde_json::to_string(&Envelope {
        kind: "error",
        data,
    })
    .expect("an error serialises")
}

fn capacity_text(active: usize, max: usize) -> String {
    let message = format!(
        "Server at capacity: {active}/{max} sessions active. Cannot accept new connections."
    );
    let data = ErrorData {
        message: &message,
        code: ErrorCode::CapacityReached.as_str(),
        errors: &[],
        active_sessions: Some(active),
        max_sessions: Some(max),
    };
    serde_json::to_string(&Envelope {
        kind: "error",
        data,
    })
    .expect("an error serialises")
}

/// What the gym reports for a turn, as the client sees it: the text, the
/// turn, and the gym's flags at the same level (`parse_error`, `truncated`,
/// `submitted`, `public_pass`, `hidden_pass`, `hacked`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Observation {
    pub text: String,
    pub turn: usize,
    #[serde(flatten)]
    pub info: Info,
}

impl Observation {
    fn new(text: &str, turn: usize, info: Info) -> Self {
        Observation {
            text: text.to_string(),
            turn,
            info,
        }
    }
}

/// OpenEnv's step result: the observation, the reward (`null` after a reset) and `done`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepData {
    pub observation: Observation,
    pub reward: Option<f64>,
    pub done: bool,
}

/// A session's state: OpenEnv's `episode_id` and `step_count`, then the gym's fields.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StateData {
    pub episode_id: Option<String>,
    pub step_count: usize,
    pub task: Option<usize>,
    pub split: Option<&'static str>,
    pub task_id: Option<String>,
    pub done: bool,
    pub max_turns: usize,
}

/// What [`Session::handle`] returns.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The JSON text to send back (`None` for `close`).
    pub text: Option<String>,
    /// Close the connection after sending `text`.
    pub close: bool,
    /// The error this reply reports, if any.
    pub error: Option<ErrorCode>,
}

impl Reply {
    fn data<T: Serialize>(kind: &str, data: T) -> Self {
        Reply {
            text: Some(
                serde_json::to_string(&Envelope { kind, data }).expect("a reply serialises"),
            ),
            close: false,
            error: None,
        }
    }

    fn failure(failure: &Failure) -> Self {
        Reply {
            text: Some(error_text(failure)),
            close: false,
            error: Some(failure.code),
        }
    }
}

// ---------------------------------------------------------------------------
// The task sets
// ---------------------------------------------------------------------------

/// The two splits a reset can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    HeldOut,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::HeldOut => "held_out",
        }
    }

    pub fn parse(name: &str) -> Option<Split> {
        match name {
            "train" => Some(Split::Train),
            "held_out" => Some(Split::HeldOut),
            _ => None,
        }
    }
}

/// The tasks a server offers: train tasks then held-out tasks in one list,
/// shared by every session's environment.
pub struct Catalog {
    tasks: Arc<Vec<Task>>,
    train: usize,
}

impl Catalog {
    pub fn new(gym: &Gym) -> Self {
        let tasks: Vec<Task> = gym.train.iter().chain(&gym.held_out).cloned().collect();
        Catalog {
            tasks: Arc::new(tasks),
            train: gym.train.len(),
        }
    }

    /// [`Gym::standard`]'s splits.
    pub fn standard() -> Self {
        Catalog::new(&Gym::standard())
    }

    pub fn len(&self, split: Split) -> usize {
        match split {
            Split::Train => self.train,
            Split::HeldOut => self.tasks.len() - self.train,
        }
    }

    /// The index in the combined list of task `index` of `split`.
    fn global(&self, split: Split, index: usize) -> Option<usize> {
        (index < self.len(split)).then_some(match split {
            Split::Train => index,
            Split::HeldOut => self.train + index,
        })
    }

    pub fn task(&self, split: Split, index: usize) -> Option<&Task> {
        self.global(split, index).map(|at| &self.tasks[at])
    }

    fn env(&self, max_turns: usize) -> BugFixEnv {
        BugFixEnv::new(self.tasks.clone(), max_turns)
    }
}

// ---------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------

/// The server's counters, updated by every session and connection.
#[derive(Default)]
pub struct Counters {
    connections: AtomicU64,
    refused_connections: AtomicU64,
    sessions_opened: AtomicU64,
    sessions_refused: AtomicU64,
    messages: AtomicU64,
    http_requests: AtomicU64,
    http_errors: AtomicU64,
    episodes_started: AtomicU64,
    http_resets: AtomicU64,
    episodes_completed: AtomicU64,
    steps: AtomicU64,
    panics: AtomicU64,
    timeouts: AtomicU64,
    oversized: AtomicU64,
    disconnects_mid_episode: AtomicU64,
    errors: [AtomicU64; 7],
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub connections: u64,
    /// Connections turned away at once (over [`Config::max_connections`]).
    pub refused_connections: u64,
    pub sessions_opened: u64,
    /// WebSocket sessions refused with `CAPACITY_REACHED`.
    pub sessions_refused: u64,
    pub active_sessions: usize,
    pub messages: u64,
    pub http_requests: u64,
    /// HTTP replies with a 4xx or 5xx status.
    pub http_errors: u64,
    /// Episodes begun by a WebSocket `reset` (an HTTP `/reset` begins none:
    /// its fresh environment is dropped with the reply).
    pub episodes_started: u64,
    /// Stateless `POST /reset` requests answered.
    pub http_resets: u64,
    pub episodes_completed: u64,
    pub steps: u64,
    /// Handler panics caught and answered with `EXECUTION_ERROR`.
    pub panics: u64,
    /// Connections closed for sending nothing within the timeout.
    pub timeouts: u64,
    /// Frames, messages, bodies or heads over their limit.
    pub oversized: u64,
    /// Connections that went away during an episode.
    pub disconnects_mid_episode: u64,
    /// Error replies by code.
    pub errors: BTreeMap<&'static str, u64>,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    fn error(&self, code: ErrorCode) {
        let at = ErrorCode::ALL
            .iter()
            .position(|c| *c == code)
            .expect("a known code");
        bump(&self.errors[at]);
    }

    pub fn snapshot(&self, active_sessions: usize) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            connections: get(&self.connections),
            refused_connections: get(&self.refused_connections),
            sessions_opened: get(&self.sessions_opened),
            sessions_refused: get(&self.sessions_refused),
            active_sessions,
            messages: get(&self.messages),
            http_requests: get(&self.http_requests),
            http_errors: get(&self.http_errors),
            episodes_started: get(&self.episodes_started),
            http_resets: get(&self.http_resets),
            episodes_completed: get(&self.episodes_completed),
            steps: get(&self.steps),
            panics: get(&self.panics),
            timeouts: get(&self.timeouts),
            oversized: get(&self.oversized),
            disconnects_mid_episode: get(&self.disconnects_mid_episode),
            errors: ErrorCode::ALL
                .iter()
                .zip(&self.errors)
                .map(|(c, n)| (c.as_str(), get(n)))
                .filter(|(_, n)| *n > 0)
                .collect(),
        }
    }
}

// ---------------------------------------------------------------------------
// A session: one environment, the pure message handler
// ---------------------------------------------------------------------------

/// The limits a session checks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub max_turns: usize,
    pub max_action_bytes: usize,
    /// Whether a reset may name the held-out split. Off by default: a server
    /// a trainer points at should not hand it the evaluation tasks.
    pub serve_held_out: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_turns: MAX_TURNS,
            max_action_bytes: MAX_ACTION_BYTES,
            serve_held_out: false,
        }
    }
}

struct Episode {
    id: String,
    split: Split,
    index: usize,
    steps: usize,
    done: bool,
}

/// One client's environment and its current episode.
pub struct Session {
    catalog: Arc<Catalog>,
    counters: Arc<Counters>,
    limits: Limits,
    env: BugFixEnv,
    /// The session's name, the first part of the episode ids the server makes up.
    label: String,
    resets: u64,
    episode: Option<Episode>,
    /// Tests only: the next step panics inside the handler.
    #[cfg(test)]
    fault: bool,
}

/// The parsed data of a reset.
struct ResetArgs {
    split: Split,
    task: usize,
    episode_id: Option<String>,
}

fn only_keys(message: &Map<String, Value>, allowed: &[&str], at: &[&str]) -> Result<(), Failure> {
    match message.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(extra) => {
            let mut loc = at.to_vec();
            loc.push(extra);
            Err(Failure::invalid(&loc, "extra field not permitted"))
        }
        None => Ok(()),
    }
}

fn object<'a>(
    value: Option<&'a Value>,
    loc: &[&str],
    required: bool,
) -> Result<Option<&'a Map<String, Value>>, Failure> {
    match value {
        None if required => Err(Failure::invalid(loc, "field required")),
        None | Some(Value::Null) if !required => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(Failure::invalid(loc, "must be an object")),
        None => unreachable!(),
    }
}

fn whole(value: &Value, loc: &[&str]) -> Result<u64, Failure> {
    value
        .as_u64()
        .ok_or_else(|| Failure::invalid(loc, "must be an integer >= 0"))
}

impl Session {
    pub fn new(
        catalog: Arc<Catalog>,
        counters: Arc<Counters>,
        limits: Limits,
        number: u64,
    ) -> Self {
        let env = catalog.env(limits.max_turns);
        Session {
            catalog,
            counters,
            limits,
            env,
            label: format!("s{number}"),
            resets: 0,
            episode: None,
            #[cfg(test)]
            fault: false,
        }
    }

    /// Is an episode under way (reset, not yet done)?
    pub fn in_episode(&self) -> bool {
        self.episode.as_ref().is_some_and(|e| !e.done)
    }

    // ANCHOR: handle
    /// Answer one message. Never panics: a panic inside is caught, answered
    /// with `EXECUTION_ERROR`, and the session's environment is replaced.
    pub fn handle(&mut self, text: &str) -> Reply {
        bump(&self.counters.messages);
        let reply = match catch_unwind(AssertUnwindSafe(|| self.dispatch(text))) {
            Ok(Ok(reply)) => reply,
            Ok(Err(failure)) => Reply::failure(&failure),
            Err(_) => {
                bump(&self.counters.panics);
                self.env = self.catalog.env(self.limits.max_turns);
                self.episode = None;
                Reply::failure(&Failure::new(ErrorCode::ExecutionError, "internal error while handling the message; the episode was dropped: send reset"))
            }
        };
        if let Some(code) = reply.error {
            self.counters.error(code);
        }
        reply
    }

    fn dispatch(&mut self, text: &str) -> Result<Reply, Failure> {
        let value: Value = serde_json::from_str(text)
            .map_err(|err| Failure::new(ErrorCode::InvalidJson, format!("Invalid JSON: {err}")))?;
        let Value::Object(message) = value else {
            return Err(Failure::invalid(
                &[],
                "a message must be a JSON object with a \"type\"",
            ));
        };
        let kind = match message.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            None => "",
            Some(other) => {
                return Err(Failure::new(
                    ErrorCode::UnknownType,
                    format!("Unknown message type: {other}"),
                ))
            }
        };
        match kind {
            "reset" => {
                only_keys(&message, &["type", "data"], &[])?;
                let data = object(message.get("data"), &["data"], false)?;
                let args = self.reset_args(data)?;
                bump(&self.counters.episodes_started);
                Ok(Reply::data("observation", self.reset(args)))
            }
            "step" => {
                only_keys(&message, &["type", "data"], &[])?;
                let data = object(message.get("data"), &["data"], true)?.expect("required");
                let action = self.action(data, &["data"])?;
                Ok(Reply::data("observation", self.step(&action)?))
            }
            "mcp" => {
                only_keys(&message, &["type", "data"], &[])?;
                let data = message.get("data").cloned().unwrap_or(Value::Null);
                let response = match rpc_request(data) {
                    Err(e) => rpc_response(Value::Null, Err(e)),
                    Ok(request) => {
                        let answer = self.mcp(&request);
                        rpc_response(request.id, answer)
                    }
                };
                Ok(Reply::data("mcp", response))
            }
            "state" => {
                only_keys(&message, &["type"], &[])?;
                Ok(Reply::data("state", self.state()))
            }
            "close" => {
                only_keys(&message, &["type"], &[])?;
                Ok(Reply {
                    text: None,
                    close: true,
                    error: None,
                })
            }
            other => Err(Failure::new(
                ErrorCode::UnknownType,
                format!("Unknown message type: {other}"),
            )),
        }
    }
    // ANCHOR_END: handle

    fn reset_args(&self, data: Option<&Map<String, Value>>) -> Result<ResetArgs, Failure> {
        let empty = Map::new();
        let data = data.unwrap_or(&empty);
        let split = match data.get("split") {
            None | Some(Value::Null) => Split::Train,
            Some(Value::String(name)) => Split::parse(name).ok_or_else(|| {
                Failure::invalid(
                    &["data", "split"],
                    format!("unknown split {name:?}: use \"train\" or \"held_out\""),
                )
            })?,
            Some(_) => return Err(Failure::invalid(&["data", "split"], "must be a string")),
        };
        if split == Split::HeldOut && !self.limits.serve_held_out {
            return Err(Failure::invalid(
                &["data", "split"],
                "the held-out split is not served: it is for evaluation (start gym-server with --held-out)",
            ));
        }
        let seed = match data.get("seed") {
            None | Some(Value::Null) => None,
            Some(value) => Some(whole(value, &["data", "seed"])?),
        };
        let size = self.catalog.len(split);
        let task = match data.get("task") {
            None | Some(Value::Null) => seed.map_or(0, |s| (s % size as u64) as usize),
            Some(value) => {
                let task = whole(value, &["data", "task"])?;
                if task >= size as u64 {
                    return Err(Failure::invalid(
                        &["data", "task"],
                        format!(
                            "no task {task} in split {}: it has tasks 0 to {}",
                            split.name(),
                            size - 1
                        ),
                    ));
                }
                task as usize
            }
        };
        let episode_id = match data.get("episode_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if id.chars().count() <= MAX_EPISODE_ID_CHARS => {
                Some(id.clone())
            }
            Some(Value::String(_)) => {
                return Err(Failure::invalid(
                    &["data", "episode_id"],
                    format!("longer than {MAX_EPISODE_ID_CHARS} characters"),
                ))
            }
            Some(_) => {
                return Err(Failure::invalid(
                    &["data", "episode_id"],
                    "must be a string",
                ))
            }
        };
        Ok(ResetArgs {
            split,
            task,
            episode_id,
        })
    }

    /// The action text of a step's data (`message`, optional `metadata`).
    fn action(&self, data: &Map<String, Value>, at: &[&str]) -> Result<String, Failure> {
        only_keys(data, &["message", "metadata"], at)?;
        let loc = |field: &'static str| [at, &[field]].concat();
        object(data.get("metadata"), &loc("metadata"), false)?;
        match data.get("message") {
            None => Err(Failure::invalid(&loc("message"), "field required")),
            Some(Value::String(text)) if text.len() > self.limits.max_action_bytes => {
                Err(Failure::invalid(
                    &loc("message"),
                    format!(
                        "{} bytes, over the limit of {} bytes",
                        text.len(),
                        self.limits.max_action_bytes
                    ),
                ))
            }
            Some(Value::String(text)) => Ok(text.clone()),
            Some(_) => Err(Failure::invalid(&loc("message"), "must be a string")),
        }
    }

    fn reset(&mut self, args: ResetArgs) -> StepData {
        let global = self.catalog.global(args.split, args.task).expect("checked");
        self.resets += 1;
        let id = args
            .episode_id
            .unwrap_or_else(|| format!("{}-e{}", self.label, self.resets));
        let prompt = self.env.reset(global);
        self.episode = Some(Episode {
            id,
            split: args.split,
            index: args.task,
            steps: 0,
            done: false,
        });
        StepData {
            observation: Observation::new(&prompt, 0, Info::default()),
            reward: None,
            done: false,
        }
    }

    fn step(&mut self, action: &str) -> Result<StepData, Failure> {
        let Some(episode) = self.episode.as_mut() else {
            return Err(Failure::new(
                ErrorCode::ExecutionError,
                "no episode: send reset before step",
            ));
        };
        if episode.done {
            return Err(Failure::new(
                ErrorCode::ExecutionError,
                "the episode is over: send reset to start another",
            ));
        }
        #[cfg(test)]
        if self.fault {
            panic!("injected fault");
        }
        let step = self.env.step(action);
        episode.steps += 1;
        episode.done = step.done;
        bump(&self.counters.steps);
        if step.done {
            bump(&self.counters.episodes_completed);
        }
        Ok(StepData {
            observation: Observation::new(&step.observation, self.env.turn(), step.info),
            reward: Some(step.reward),
            done: step.done,
        })
    }

    pub fn state(&self) -> StateData {
        match &self.episode {
            None => StateData {
                episode_id: None,
                step_count: 0,
                task: None,
                split: None,
                task_id: None,
                done: false,
                max_turns: self.limits.max_turns,
            },
            Some(e) => StateData {
                episode_id: Some(e.id.clone()),
                step_count: e.steps,
                task: Some(e.index),
                split: Some(e.split.name()),
                task_id: self.catalog.task(e.split, e.index).map(|t| t.id.clone()),
                done: e.done,
                max_turns: self.limits.max_turns,
            },
        }
    }
}

// ---------------------------------------------------------------------------
// The session table
// ---------------------------------------------------------------------------

/// The open sessions, bounded: a WebSocket connection holds a [`Ticket`]
/// for as long as it lives.
pub struct SessionTable {
    max: usize,
    inner: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
    next: u64,
    open: BTreeMap<u64, Instant>,
}

/// A place in the table; dropping it frees the place.
pub struct Ticket {
    table: Arc<SessionTable>,
    pub number: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.table.lock().open.remove(&self.number);
    }
}

impl SessionTable {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(SessionTable {
            max,
            inner: Mutex::new(TableInner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TableInner> {
        self.inner
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn active(&self) -> usize {
        self.lock().open.len()
    }

    /// A place, or `Err((active, max))` when the table is full.
    pub fn open(self: &Arc<Self>) -> Result<Ticket, (usize, usize)> {
        let mut inner = self.lock();
        if inner.open.len() >= self.max {
            return Err((inner.open.len(), self.max));
        }
        inner.next += 1;
        let number = inner.next;
        inner.open.insert(number, Instant::now());
        Ok(Ticket {
            table: self.clone(),
            number,
        })
    }
}

// ---------------------------------------------------------------------------
// The service: sessions, HTTP routes, metadata and schemas
// ---------------------------------------------------------------------------

/// The server's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Concurrent WebSocket sessions (OpenEnv's `max_concurrent_envs`).
    pub max_sessions: usize,
    /// Concurrent connections of any kind; one over it is answered 503 at once.
    pub max_connections: usize,
    pub limits: Limits,
    /// A WebSocket connection that sends nothing (not even a ping) for this long is closed.
    pub idle_timeout: Duration,
    /// A connection must send its HTTP request head and body within this time.
    pub request_timeout: Duration,
    /// Print one line per closed session and per error to stderr.
    pub log: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_sessions: 64,
            max_connections: 128,
            limits: Limits::default(),
            idle_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(10),
            log: false,
        }
    }
}

/// Everything the connections share.
pub struct Service {
    pub config: Config,
    pub catalog: Arc<Catalog>,
    pub table: Arc<SessionTable>,
    pub counters: Arc<Counters>,
    /// Numbers the stateless HTTP sessions (never in the table).
    http_sessions: AtomicU64,
    /// The sessions `POST /mcp` opened, by id (each holds a place in the table).
    mcp_sessions: Mutex<BTreeMap<String, Arc<Mutex<McpSession>>>>,
}

/// An HTTP answer: status and JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpReply {
    pub status: u16,
    pub body: String,
}

impl HttpReply {
    fn json(status: u16, body: &Value) -> Self {
        HttpReply {
            status,
            body: body.to_string(),
        }
    }

    fn error(status: u16, code: &str, detail: impl Into<String>) -> Self {
        HttpReply::json(status, &json!({"detail": detail.into(), "code": code}))
    }
}

impl Service {
    pub fn new(config: Config, catalog: Arc<Catalog>) -> Self {
        let table = SessionTable::new(config.max_sessions);
        Service {
            config,
            catalog,
            table,
            counters: Arc::new(Counters::default()),
            http_sessions: AtomicU64::new(0),
            mcp_sessions: Mutex::new(BTreeMap::new()),
        }
    }

    /// A session for a WebSocket connection, or the `CAPACITY_REACHED` reply.
    pub fn open(&self) -> Result<(Ticket, Session), String> {
        self.close_idle_mcp_sessions();
        match self.table.open() {
            Ok(ticket) => {
                bump(&self.counters.sessions_opened);
                let session = Session::new(
                    self.catalog.clone(),
                    self.counters.clone(),
                    self.config.limits,
                    ticket.number,
                );
                Ok((ticket, session))
            }
            Err((active, max)) => {
                bump(&self.counters.sessions_refused);
                self.counters.error(ErrorCode::CapacityReached);
                Err(capacity_text(active, max))
            }
        }
    }

    pub fn stats(&self) -> Stats {
        self.counters.snapshot(self.table.active())
    }

    fn fresh(&self) -> Session {
        let number = self.http_sessions.fetch_add(1, Ordering::Relaxed) + 1;
        let mut session = Session::new(
            self.catalog.clone(),
            self.counters.clone(),
            self.config.limits,
            number,
        );
        // HTTP sessions are named apart from the WebSocket ones: "h1", "h2", ...
        session.label = format!("h{number}");
        session
    }

    /// OpenEnv's `/metadata` (its `EnvironmentMetadata` fields).
    pub fn metadata(&self) -> Value {
        json!({
            "name": "BugFixEnv",
            "description": format!(
                "The BugFix gym of Agentic RL in Rust: repair a Rhai function with the tools read, test, edit <op>, submit, one call per turn as <call> tool [arg] </call>, at most {} turns; reward 1 for a submitted fix that passes the hidden tests. {} train tasks, {} held-out tasks.",
                self.config.limits.max_turns, self.catalog.len(Split::Train), self.catalog.len(Split::HeldOut)
            ) + if self.config.limits.serve_held_out { " The held-out split is served (for evaluation)." } else { " The held-out split is not served (gym-server --held-out serves it, for evaluation)." },
            "readme_content": null,
            "version": env!("CARGO_PKG_VERSION"),
            "author": null,
            "documentation_url": null,
        })
    }

    /// OpenEnv's `/schema`: JSON schemas of the action, the observation and the state.
    pub fn schema(&self) -> Value {
        let flag = |what: &str| json!({"type": "boolean", "description": what});
        json!({
            "action": {
                "title": "BugFixAction",
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "message": {"type": "string", "maxLength": self.config.limits.max_action_bytes, "description": "One tool call: <call> read </call>, <call> test </call>, <call> edit OP </call> or <call> submit </call> (limit in bytes)"},
                    "metadata": {"type": "object", "description": "Ignored"}
                },
                "required": ["message"]
            },
            "observation": {
                "title": "BugFixObservation",
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "The prompt after reset, the tool's output after a step"},
                    "turn": {"type": "integer", "minimum": 0},
                    "parse_error": flag("the message was not exactly one call"),
                    "truncated": flag("the turn budget ran out before submit"),
                    "submitted": flag("the message was submit"),
                    "public_pass": flag("at the end: the final source passes the public tests"),
                    "hidden_pass": flag("at the end: the final source passes the hidden tests"),
                    "hacked": flag("submitted, passes the public tests, fails a hidden one")
                },
                "required": ["text", "turn", "parse_error", "truncated", "submitted", "public_pass", "hidden_pass", "hacked"]
            },
            "state": {
                "title": "BugFixState",
                "type": "object",
                "properties": {
                    "episode_id": {"type": ["string", "null"]},
                    "step_count": {"type": "integer", "minimum": 0},
                    "task": {"type": ["integer", "null"]},
                    "split": {"type": ["string", "null"], "enum": ["train", "held_out", null]},
                    "task_id": {"type": ["string", "null"]},
                    "done": {"type": "boolean"},
                    "max_turns": {"type": "integer"}
                }
            }
        })
    }

    /// Answer one HTTP request (the path without its query string).
    pub fn http(&self, method: &str, path: &str, body: &[u8]) -> HttpReply {
        bump(&self.counters.http_requests);
        let reply = match catch_unwind(AssertUnwindSafe(|| self.route(method, path, body))) {
            Ok(reply) => reply,
            Err(_) => {
                bump(&self.counters.panics);
                HttpReply::error(500, ErrorCode::ExecutionError.as_str(), "internal error")
            }
        };
        if reply.status >= 400 {
            bump(&self.counters.http_errors);
        }
        reply
    }

    fn route(&self, method: &str, path: &str, body: &[u8]) -> HttpReply {
        const ROUTES: [(&str, &str); 10] = [
            ("GET", "/openapi.json"),
            ("POST", "/mcp"),
            ("GET", "/health"),
            ("GET", "/metadata"),
            ("GET", "/schema"),
            ("GET", "/state"),
            ("GET", "/stats"),
            ("POST", "/reset"),
            ("POST", "/step"),
            ("GET", "/ws"),
        ];
        match (method, path) {
            ("GET", "/health") => HttpReply::json(200, &json!({"status": "healthy"})),
            ("GET", "/openapi.json") => HttpReply::json(200, &self.openapi()),
            ("POST", "/mcp") => self.http_mcp(body),
            ("GET", "/metadata") => HttpReply::json(200, &self.metadata()),
            ("GET", "/schema") => HttpReply::json(200, &self.schema()),
            ("GET", "/stats") => HttpReply::json(
                200,
                &serde_json::to_value(self.stats()).expect("stats serialise"),
            ),
            ("GET", "/state") => HttpReply::json(
                200,
                &serde_json::to_value(self.fresh().state()).expect("state serialises"),
            ),
            ("POST", "/reset") => self.http_reset(body),
            ("POST", "/step") => self.http_step(body),
            ("GET", "/ws") => HttpReply::error(
                426,
                ErrorCode::SessionError.as_str(),
                "/ws is a WebSocket endpoint: send an Upgrade: websocket request",
            ),
            (_, path) if ROUTES.iter().any(|(_, p)| *p == path) => HttpReply::error(
                405,
                ErrorCode::ValidationError.as_str(),
                format!("method {method} not allowed on {path}"),
            ),
            (_, path) => HttpReply::error(
                404,
                ErrorCode::UnknownType.as_str(),
                format!("no route {path}"),
            ),
        }
    }

    fn body_object(&self, body: &[u8]) -> Result<Option<Map<String, Value>>, Failure> {
        if body.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(None);
        }
        let text = std::str::from_utf8(body).map_err(|_| {
            Failure::new(
                ErrorCode::InvalidJson,
                "Invalid JSON: the body is not UTF-8",
            )
        })?;
        match serde_json::from_str(text) {
            Ok(Value::Object(map)) => Ok(Some(map)),
            Ok(_) => Err(Failure::invalid(&["body"], "must be a JSON object")),
            Err(err) => Err(Failure::new(
                ErrorCode::InvalidJson,
                format!("Invalid JSON: {err}"),
            )),
        }
    }

    /// An error reply. A 422 carries FastAPI's validation-error shape, as
    /// OpenEnv's own server sends it: `detail` is a list of
    /// `{"type", "loc", "msg"}` (one entry naming the body when the failure has
    /// no field errors), with the whole message in `message`; other statuses
    /// carry `detail` as a string, as FastAPI's `HTTPException` does. Both add
    /// the book's `code`.
    fn http_failure(&self, failure: &Failure) -> HttpReply {
        self.counters.error(failure.code);
        let status = failure.code.http_status();
        let code = failure.code.as_str();
        let body = if status == 422 {
            let entries: Vec<Value> = if failure.errors.is_empty() {
                vec![json!({"type": code, "loc": ["body"], "msg": failure.message})]
            } else {
                failure
                    .errors
                    .iter()
                    .map(|e| json!({"type": code, "loc": e.loc, "msg": e.msg}))
                    .collect()
            };
            json!({"detail": entries, "message": failure.message, "code": code})
        } else {
            json!({"detail": failure.message, "code": code})
        };
        HttpReply::json(status, &body)
    }

    /// `POST /reset`: a fresh environment's first observation (OpenEnv's `ResetResponse`).
    fn http_reset(&self, body: &[u8]) -> HttpReply {
        let mut session = self.fresh();
        let data = match self.body_object(body) {
            Ok(data) => data,
            Err(failure) => return self.http_failure(&failure),
        };
        let found = data.as_ref().map_or(Ok(None), |d| {
            // The body is the reset data itself; report fields under "body".
            session.reset_args(Some(d)).map(Some).map_err(|mut f| {
                for e in &mut f.errors {
                    e.loc[0] = "body".into();
                }
                f.message = f.message.replacen("data.", "body.", 1);
                f
            })
        });
        let args = match found {
            Ok(Some(args)) => args,
            Ok(None) => session.reset_args(None).expect("the defaults are valid"),
            Err(failure) => return self.http_failure(&failure),
        };
        bump(&self.counters.http_resets);
        HttpReply::json(
            200,
            &serde_json::to_value(session.reset(args)).expect("a step serialises"),
        )
    }

    /// `POST /step`: validates OpenEnv's `StepRequest` (`action`, optional
    /// `timeout_s`, `request_id`), then answers 409: a fresh environment has no episode.
    fn http_step(&self, body: &[u8]) -> HttpReply {
        let session = self.fresh();
        let checked = self.body_object(body).and_then(|data| {
            let data = data.ok_or_else(|| Failure::invalid(&["body"], "field required"))?;
            let action = object(data.get("action"), &["body", "action"], true)?.expect("required");
            session.action(action, &["body", "action"])?;
            match data.get("timeout_s") {
                None | Some(Value::Null) => {}
                Some(v) if v.as_f64().is_some_and(|t| t > 0.0) => {}
                Some(_) => return Err(Failure::invalid(&["body", "timeout_s"], "must be a number > 0")),
            }
            match data.get("request_id") {
                None | Some(Value::Null) => {}
                Some(Value::String(id)) if id.chars().count() <= MAX_EPISODE_ID_CHARS => {}
                Some(_) => return Err(Failure::invalid(&["body", "request_id"], format!("must be a string of at most {MAX_EPISODE_ID_CHARS} characters"))),
            }
            Err(Failure::new(
                ErrorCode::ExecutionError,
                "no episode: each HTTP request gets a fresh environment (OpenEnv's HTTP routes are stateless), so play episodes over the WebSocket /ws",
            ))
        });
        match checked {
            Ok(()) => unreachable!("a stateless step always fails"),
            Err(failure) => self.http_failure(&failure),
        }
    }
}

// ---------------------------------------------------------------------------
// MCP: the four tools over JSON-RPC 2.0
// ---------------------------------------------------------------------------

/// JSON-RPC 2.0's error codes, as OpenEnv's `/mcp` answers with them.
pub mod rpc {
    /// The body is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a JSON-RPC 2.0 request object (OpenEnv's answer to `{}`).
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Unknown tool, unknown session, missing or malformed argument.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The tool could not run: no episode, or the episode is over.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The server cannot open another session.
    pub const SERVER_ERROR: i64 = -32000;
}

/// A JSON-RPC error: code and message.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }
}

/// A request as JSON-RPC 2.0 defines it.
struct RpcRequest {
    id: Value,
    method: String,
    params: Map<String, Value>,
}

/// The request in `value`, or the error to answer (always with `id` null, as
/// OpenEnv answers a request it cannot read).
fn rpc_request(value: Value) -> Result<RpcRequest, RpcError> {
    let invalid =
        |why: &str| RpcError::new(rpc::INVALID_REQUEST, format!("Invalid request: {why}"));
    let Value::Object(mut request) = value else {
        return Err(invalid("a request is a JSON object"));
    };
    if let Some(extra) = request
        .keys()
        .find(|k| !["jsonrpc", "method", "params", "id"].contains(&k.as_str()))
    {
        return Err(invalid(&format!("extra field {extra:?} not permitted")));
    }
    if request.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(invalid("\"jsonrpc\" must be \"2.0\""));
    }
    let method = match request.remove("method") {
        Some(Value::String(method)) => method,
        _ => return Err(invalid("\"method\" must be a string")),
    };
    let params = match request.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(params)) => params,
        Some(_) => return Err(invalid("\"params\" must be an object")),
    };
    let id = match request.remove("id") {
        None => Value::Null,
        Some(id @ (Value::Null | Value::String(_) | Value::Number(_))) => id,
        Some(_) => return Err(invalid("\"id\" must be a string, a number or null")),
    };
    Ok(RpcRequest { id, method, params })
}

/// The response to request `id`: its `result` or its `error`.
fn rpc_response(id: Value, answer: Result<Value, RpcError>) -> Value {
    match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message, "data": null}})
        }
    }
}

// ANCHOR: mcp_tools
/// The gym's four tools as MCP describes tools (`tools/list`): a name, what
/// it does, and a JSON Schema of its arguments. Only `edit` takes one.
pub fn mcp_tools() -> Value {
    let none = json!({"type": "object", "properties": {}, "additionalProperties": false});
    json!([
        {"name": "read", "description": "Show the function's source and the issue.", "inputSchema": none},
        {"name": "test", "description": "Run the public tests on the current source and show which pass.", "inputSchema": none},
        {"name": "edit", "description": "Apply one candidate edit from the task's menu, named by its op.",
         "inputSchema": {"type": "object", "properties": {"op": {"type": "string", "pattern": "^[A-Za-z0-9_]{1,64}$", "description": "The op of a menu entry"}}, "required": ["op"], "additionalProperties": false}},
        {"name": "submit", "description": "End the episode; reward 1 if the source passes the hidden tests.", "inputSchema": none},
    ])
}

/// The action text of a `tools/call`: the call as the agent would write it.
fn tool_action(params: &Map<String, Value>) -> Result<String, RpcError> {
    let bad = |why: String| RpcError::new(rpc::INVALID_PARAMS, why);
    let name = match params.get("name") {
        Some(Value::String(name)) => name.as_str(),
        _ => return Err(bad("tools/call needs \"name\", a string".into())),
    };
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments.clone(),
        Some(_) => return Err(bad("\"arguments\" must be an object".into())),
    };
    let takes: &[&str] = match name {
        "read" | "test" | "submit" => &[],
        "edit" => &["op"],
        other => {
            return Err(bad(format!(
                "unknown tool {other:?}: the tools are read, test, edit and submit"
            )))
        }
    };
    if let Some(extra) = arguments.keys().find(|k| !takes.contains(&k.as_str())) {
        return Err(bad(format!("tool {name} takes no argument {extra:?}")));
    }
    if name != "edit" {
        return Ok(format!("<call> {name} </call>"));
    }
    match arguments.get("op") {
        Some(Value::String(op))
            if (1..=64).contains(&op.len())
                && op.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            Ok(format!("<call> edit {op} </call>"))
        }
        Some(_) => Err(bad(
            "\"op\" must be 1 to 64 letters, digits or underscores".into()
        )),
        None => Err(bad("tool edit needs \"op\"".into())),
    }
}

/// A step's answer as MCP's tool result: the observation's text as content,
/// the whole step (observation, reward, done) as `data`, which OpenEnv's
/// client returns.
fn tool_result(step: &StepData) -> Value {
    let data = serde_json::to_value(step).expect("a step serialises");
    json!({
        "content": [{"type": "text", "text": step.observation.text}],
        "structured_content": data,
        "data": data,
        "is_error": false,
    })
}
// ANCHOR_END: mcp_tools

impl Session {
    /// One MCP request on this session's episode: `tools/list`, or
    /// `tools/call`, which takes one step.
    fn mcp(&mut self, request: &RpcRequest) -> Result<Value, RpcError> {
        match request.method.as_str() {
            "tools/list" => Ok(json!({"tools": mcp_tools()})),
            "tools/call" => {
                if let Some(extra) = request
                    .params
                    .keys()
                    .find(|k| !["name", "arguments", "session_id"].contains(&k.as_str()))
                {
                    return Err(RpcError::new(
                        rpc::INVALID_PARAMS,
                        format!("tools/call takes no parameter {extra:?}"),
                    ));
                }
                let action = tool_action(&request.params)?;
                let step = self
                    .step(&action)
                    .map_err(|f| RpcError::new(rpc::INTERNAL_ERROR, f.message))?;
                Ok(tool_result(&step))
            }
            other => Err(RpcError::new(
                rpc::METHOD_NOT_FOUND,
                format!("Method not found: {other}"),
            )),
        }
    }
}

/// A session opened by `openenv/session/create`: its place in the table,
/// its environment, when it was last used, and how many WebSockets have
/// joined it and are still open (a joined session is in use however long
/// its client pauses; OpenEnv's client keeps its WebSocket alive with pings).
struct McpSession {
    _ticket: Ticket,
    session: Session,
    used: Instant,
    joined: usize,
}

impl Service {
    /// `POST /mcp`: one JSON-RPC request, always answered 200 (errors are
    /// JSON-RPC errors). Besides `tools/list` and `tools/call`, OpenEnv's
    /// `openenv/session/create` (which also takes reset's `task`, `split`,
    /// `seed` and `episode_id` and returns the first observation) and
    /// `openenv/session/close`. HTTP requests share nothing else, so a
    /// `tools/call` names its session by `session_id`; a session unused for
    /// the idle timeout is closed.
    fn http_mcp(&self, body: &[u8]) -> HttpReply {
        let parsed = std::str::from_utf8(body)
            .map_err(|_| RpcError::new(rpc::PARSE_ERROR, "Parse error: the body is not UTF-8"))
            .and_then(|text| {
                serde_json::from_str::<Value>(text)
                    .map_err(|err| RpcError::new(rpc::PARSE_ERROR, format!("Parse error: {err}")))
            })
            .and_then(rpc_request);
        let response = match parsed {
            Err(e) => rpc_response(Value::Null, Err(e)),
            Ok(request) => {
                let answer = self.mcp_answer(&request);
                rpc_response(request.id, answer)
            }
        };
        HttpReply::json(200, &response)
    }

    fn mcp_answer(&self, request: &RpcRequest) -> Result<Value, RpcError> {
        let bad = |why: String| RpcError::new(rpc::INVALID_PARAMS, why);
        let session_id = match request.params.get("session_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id.clone()),
            Some(_) => return Err(bad("\"session_id\" must be a string".into())),
        };
        self.close_idle_mcp_sessions();
        match request.method.as_str() {
            "openenv/session/create" => {
                let mut data = request.params.clone();
                data.remove("session_id");
                let (ticket, mut session) = self
                    .open()
                    .map_err(|why| RpcError::new(rpc::SERVER_ERROR, why))?;
                let args = session.reset_args(Some(&data)).map_err(|f| bad(f.message))?;
                let first = session.reset(args);
                bump(&self.counters.episodes_started);
                let id = format!("m{}", ticket.number);
                let entry = McpSession {
                    _ticket: ticket,
                    session,
                    used: Instant::now(),
                    joined: 0,
                };
                self.lock_mcp().insert(id.clone(), Arc::new(Mutex::new(entry)));
                Ok(json!({"session_id": id, "observation": first.observation}))
            }
            "openenv/session/close" => {
                let id = session_id.ok_or_else(|| bad("openenv/session/close needs \"session_id\"".into()))?;
                match self.lock_mcp().remove(&id) {
                    Some(_) => Ok(json!({"session_id": id, "closed": true})),
                    None => Err(bad(format!("no session {id:?}"))),
                }
            }
            "tools/call" if session_id.is_none() => Err(bad(
                "tools/call over HTTP needs the \"session_id\" of openenv/session/create: a fresh environment has no episode (over /ws, send {\"type\":\"mcp\",\"data\":REQUEST} after reset)".into(),
            )),
            "tools/call" => {
                let id = session_id.expect("checked");
                let entry = self.lock_mcp().get(&id).cloned().ok_or_else(|| bad(format!("no session {id:?} (closed, or idle for too long)")))?;
                let mut entry = entry.lock().unwrap_or_else(|poison| poison.into_inner());
                entry.used = Instant::now();
                entry.session.mcp(request)
            }
            _ => self.fresh().mcp(request),
        }
    }

    /// Close the MCP sessions that no open WebSocket has joined and nobody
    /// used within the idle timeout.
    fn close_idle_mcp_sessions(&self) {
        let timeout = self.config.idle_timeout;
        self.lock_mcp().retain(|_, s| {
            s.lock()
                .map_or(true, |s| s.joined > 0 || s.used.elapsed() < timeout)
        });
    }

    fn lock_mcp(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Mutex<McpSession>>>> {
        self.mcp_sessions
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// OpenAPI's description of the HTTP routes, which `openenv validate`
    /// reads first (the WebSocket `/ws` is not an HTTP route and is not listed).
    pub fn openapi(&self) -> Value {
        let schema = self.schema();
        let reply = |what: &str| json!({"200": {"description": what, "content": {"application/json": {"schema": {"type": "object"}}}}});
        let body = |schema: Value| json!({"required": true, "content": {"application/json": {"schema": schema}}});
        json!({
            "openapi": "3.1.0",
            "info": {
                "title": "BugFixEnv",
                "version": "1.0.0",
                "description": "The BugFix gym of Agentic RL in Rust, served with OpenEnv's protocol; episodes are played over the WebSocket /ws or as MCP tools over POST /mcp."
            },
            "paths": {
                "/health": {"get": {"summary": "Health", "responses": reply("{\"status\": \"healthy\"}")}},
                "/metadata": {"get": {"summary": "The environment's name and description", "responses": reply("metadata")}},
                "/schema": {"get": {"summary": "JSON schemas of the action, observation and state", "responses": reply("schemas")}},
                "/state": {"get": {"summary": "The state of a fresh environment", "responses": reply("state")}},
                "/stats": {"get": {"summary": "The server's counters", "responses": reply("counters")}},
                "/reset": {"post": {"summary": "A task's first observation (stateless)", "requestBody": body(json!({"type": "object", "properties": {"task": {"type": "integer", "minimum": 0}, "split": {"type": "string", "enum": ["train", "held_out"]}, "seed": {"type": "integer", "minimum": 0}, "episode_id": {"type": "string", "maxLength": MAX_EPISODE_ID_CHARS}}})), "responses": reply("observation, reward, done")}},
                "/step": {"post": {"summary": "Validates an action; episodes are played over /ws or /mcp", "requestBody": body(json!({"type": "object", "properties": {"action": schema["action"], "timeout_s": {"type": "number"}, "request_id": {"type": "string"}}, "required": ["action"]})), "responses": reply("observation, reward, done")}},
                "/mcp": {"post": {"summary": "JSON-RPC 2.0: tools/list, tools/call, openenv/session/create, openenv/session/close", "requestBody": body(json!({"type": "object"})), "responses": reply("a JSON-RPC response")}},
            }
        })
    }
}

// ---------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------

/// A running server; [`ServerHandle::stop`] (or dropping it) stops accepting.
pub struct ServerHandle {
    addr: SocketAddr,
    service: Arc<Service>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl ServerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://host:port`, the base URL an OpenEnv client takes.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn stats(&self) -> Stats {
        self.service.stats()
    }

    pub fn service(&self) -> &Arc<Service> {
        &self.service
    }

    /// Block until the server stops (it stops only when told to).
    pub fn wait(mut self) {
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }

    /// Stop accepting connections; connections already open finish on their own.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(accept) = self.accept.take() {
            self.stop.store(true, Ordering::SeqCst);
            // Wake the accept loop with one connection of our own.
            let mut wake = self.addr;
            if wake.ip().is_unspecified() {
                wake.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
            let _ = accept.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Serve the standard gym on `addr` (port 0 picks a free port).
pub fn serve(addr: impl ToSocketAddrs, config: Config) -> io::Result<ServerHandle> {
    serve_catalog(addr, config, Arc::new(Catalog::standard()))
}

/// Serve `catalog`'s tasks on `addr`.
pub fn serve_catalog(
    addr: impl ToSocketAddrs,
    config: Config,
    catalog: Arc<Catalog>,
) -> io::Result<ServerHandle> {
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
    let service = Arc::new(Service::new(config, catalog));
    let stop = Arc::new(AtomicBool::new(false));
    let (service2, stop2) = (service.clone(), stop.clone());
    let accept = std::thread::Builder::new()
        .name("gym-accept".into())
        .spawn(move || accept_loop(listener, service2, stop2))?;
    Ok(ServerHandle {
        addr,
        service,
        stop,
        accept: Some(accept),
    })
}

/// One open connection; dropping it (even while a panic unwinds) gives the place back.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(listener: TcpListener, service: Arc<Service>, stop: Arc<AtomicBool>) {
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(mut stream) = stream else { continue };
        bump(&service.counters.connections);
        if open.load(Ordering::SeqCst) >= service.config.max_connections {
            bump(&service.counters.refused_connections);
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = write_http(
                &mut stream,
                &HttpReply::error(
                    503,
                    ErrorCode::CapacityReached.as_str(),
                    "too many connections",
                ),
            );
            // Take what already arrived, without waiting, so that closing is less
            // likely to reset the connection before the client reads the 503.
            let _ = stream.shutdown(Shutdown::Write);
            if stream.set_nonblocking(true).is_ok() {
                let _ = stream.read(&mut [0u8; 4096]);
            }
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let (service, slot) = (service.clone(), Slot(open.clone()));
        // If the thread cannot start, the closure (and the slot) is dropped unanswered.
        let _ = std::thread::Builder::new()
            .name("gym-conn".into())
            .spawn(move || {
                let _slot = slot;
                connection(stream, &service);
            });
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

fn write_http(stream: &mut TcpStream, reply: &HttpReply) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reply.status,
        reason(reply.status),
        reply.body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(reply.body.as_bytes())?;
    stream.flush()
}

fn is_timeout(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Read and discard what the peer still sends (bounded), so that closing the
/// socket does not reset the connection before the peer has read our reply.
fn drain(stream: &mut TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut sink = [0u8; 8192];
    let mut total = 0usize;
    while total < 4 * MAX_BODY_BYTES {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
}

enum Head {
    Complete { head: Vec<u8>, rest: Vec<u8> },
    TooLarge,
    TimedOut,
    Closed,
}

fn read_head(stream: &mut TcpStream) -> Head {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            if end + 4 > MAX_HEAD_BYTES {
                return Head::TooLarge;
            }
            let rest = buffer.split_off(end + 4);
            return Head::Complete { head: buffer, rest };
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Head::TooLarge;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Head::Closed,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) if is_timeout(&err) => return Head::TimedOut,
            Err(_) => return Head::Closed,
        }
    }
}

fn log(service: &Service, line: impl FnOnce() -> String) {
    if service.config.log {
        eprintln!("gym-server: {}", line());
    }
}

/// One connection: read the request head, then either upgrade to a
/// WebSocket session or answer one HTTP request and close.
fn connection(mut stream: TcpStream, service: &Service) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(service.config.request_timeout));
    let _ = stream.set_write_timeout(Some(service.config.request_timeout));
    let answer = |stream: &mut TcpStream, reply: HttpReply| {
        if reply.status >= 400 {
            log(service, || format!("HTTP {}: {}", reply.status, reply.body));
        }
        let _ = write_http(stream, &reply);
        drain(stream);
    };
    let (head, mut rest) = match read_head(&mut stream) {
        Head::Complete { head, rest } => (head, rest),
        Head::TooLarge => {
            bump(&service.counters.oversized);
            bump(&service.counters.http_errors);
            return answer(
                &mut stream,
                HttpReply::error(
                    431,
                    ErrorCode::ValidationError.as_str(),
                    format!("request head over {MAX_HEAD_BYTES} bytes"),
                ),
            );
        }
        Head::TimedOut => {
            bump(&service.counters.timeouts);
            bump(&service.counters.http_errors);
            let secs = service.config.request_timeout.as_secs_f64();
            return answer(
                &mut stream,
                HttpReply::error(
                    408,
                    ErrorCode::SessionError.as_str(),
                    format!("no complete request within {secs} s"),
                ),
            );
        }
        Head::Closed => return,
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    if !matches!(request.parse(&head), Ok(httparse::Status::Complete(_))) {
        bump(&service.counters.http_errors);
        return answer(
            &mut stream,
            HttpReply::error(
                400,
                ErrorCode::ValidationError.as_str(),
                "malformed HTTP request",
            ),
        );
    }
    let method = request.method.unwrap_or("").to_string();
    let target = request.path.unwrap_or("/");
    let path = target.split('?').next().unwrap_or("/").to_string();
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    let upgrade = header("upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if path == "/ws" && method == "GET" && upgrade {
        let Some(key) = header("sec-websocket-key") else {
            bump(&service.counters.http_errors);
            return answer(
                &mut stream,
                HttpReply::error(
                    400,
                    ErrorCode::ValidationError.as_str(),
                    "missing Sec-WebSocket-Key",
                ),
            );
        };
        let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
        let response = format!("HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {accept}\r\n\r\n");
        if stream.write_all(response.as_bytes()).is_err() {
            return;
        }
        // OpenEnv's MCP client opens a session over POST /mcp, then joins it
        // from the WebSocket with `?session_id=`, so that reset and the tools
        // act on one environment.
        let joined = target.split_once('?').and_then(|(_, query)| {
            query
                .split('&')
                .find_map(|pair| pair.strip_prefix("session_id="))
                .map(str::to_string)
        });
        return websocket(stream, rest, service, joined);
    }
    if header("transfer-encoding").is_some() {
        bump(&service.counters.http_errors);
        return answer(
            &mut stream,
            HttpReply::error(
                411,
                ErrorCode::ValidationError.as_str(),
                "send the body with a Content-Length, not chunked",
            ),
        );
    }
    let length = match header("content-length").map(|v| v.parse::<usize>()) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            bump(&service.counters.http_errors);
            return answer(
                &mut stream,
                HttpReply::error(
                    400,
                    ErrorCode::ValidationError.as_str(),
                    "bad Content-Length",
                ),
            );
        }
    };
    if length > MAX_BODY_BYTES {
        bump(&service.counters.oversized);
        bump(&service.counters.http_errors);
        return answer(
            &mut stream,
            HttpReply::error(
                413,
                ErrorCode::ValidationError.as_str(),
                format!("body of {length} bytes, over the limit of {MAX_BODY_BYTES} bytes"),
            ),
        );
    }
    let mut chunk = [0u8; 8192];
    while rest.len() < length {
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => rest.extend_from_slice(&chunk[..n]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) if is_timeout(&err) => {
                bump(&service.counters.timeouts);
                bump(&service.counters.http_errors);
                return answer(
                    &mut stream,
                    HttpReply::error(
                        408,
                        ErrorCode::SessionError.as_str(),
                        "the body did not arrive in time",
                    ),
                );
            }
            Err(_) => return,
        }
    }
    rest.truncate(length);
    let reply = service.http(&method, &path, &rest);
    answer(&mut stream, reply);
}

/// Close a WebSocket with `code` and a reason, then wait (bounded) for the peer.
fn close_with(socket: &mut WebSocket<TcpStream>, code: CloseCode, why: &str) {
    let _ = socket.close(Some(CloseFrame {
        code,
        reason: why.to_string().into(),
    }));
    let _ = socket.flush();
    let _ = socket
        .get_mut()
        .set_read_timeout(Some(Duration::from_millis(500)));
    for _ in 0..16 {
        if socket.read().is_err() {
            break;
        }
    }
}

/// The session a WebSocket plays: its own, or one `POST /mcp` opened.
enum Held {
    Own(Ticket, Box<Session>),
    Joined(String, Arc<Mutex<McpSession>>),
}

impl Held {
    fn handle(&mut self, text: &str) -> Reply {
        match self {
            Held::Own(_, session) => session.handle(text),
            Held::Joined(_, shared) => {
                let mut entry = shared.lock().unwrap_or_else(|poison| poison.into_inner());
                entry.used = Instant::now();
                entry.session.handle(text)
            }
        }
    }

    fn in_episode(&self) -> bool {
        match self {
            Held::Own(_, session) => session.in_episode(),
            Held::Joined(_, shared) => shared.lock().is_ok_and(|e| e.session.in_episode()),
        }
    }

    fn label(&self) -> String {
        match self {
            Held::Own(ticket, _) => ticket.number.to_string(),
            Held::Joined(id, _) => id.clone(),
        }
    }
}

fn websocket(stream: TcpStream, already_read: Vec<u8>, service: &Service, joined: Option<String>) {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_BODY_BYTES))
        .max_frame_size(Some(MAX_BODY_BYTES));
    let mut socket =
        WebSocket::from_partially_read(stream, already_read, Role::Server, Some(config));
    let opened = match joined {
        Some(id) => match service.lock_mcp().get(&id).cloned() {
            Some(shared) => {
                shared.lock().unwrap_or_else(|p| p.into_inner()).joined += 1;
                Ok(Held::Joined(id, shared))
            }
            None => Err(error_text(&Failure::new(
                ErrorCode::SessionError,
                format!("no MCP session {id:?} to join (closed, or idle for too long)"),
            ))),
        },
        None => service
            .open()
            .map(|(ticket, session)| Held::Own(ticket, Box::new(session))),
    };
    let mut session = match opened {
        Ok(held) => held,
        Err(refusal) => {
            log(service, || format!("refused a session: {refusal}"));
            let _ = socket.send(Message::text(refusal));
            close_with(&mut socket, CloseCode::Again, "refused");
            drain(socket.get_mut());
            return;
        }
    };
    let _ = socket
        .get_mut()
        .set_read_timeout(Some(service.config.idle_timeout));
    let how = loop {
        match socket.read() {
            Ok(Message::Text(text)) => {
                let reply = session.handle(text.as_str());
                if let (Some(code), Some(text)) = (reply.error, &reply.text) {
                    log(service, || {
                        format!("session {}: {} {text}", session.label(), code.as_str())
                    });
                }
                if let Some(text) = reply.text {
                    if socket.send(Message::text(text)).is_err() {
                        break "write failed";
                    }
                }
                if reply.close {
                    close_with(&mut socket, CloseCode::Normal, "closed");
                    break "closed by the client";
                }
            }
            Ok(Message::Binary(_)) => {
                let failure =
                    Failure::invalid(&[], "binary frames are not accepted: send JSON text");
                service.counters.error(failure.code);
                if socket.send(Message::text(error_text(&failure))).is_err() {
                    break "write failed";
                }
            }
            Ok(Message::Close(_)) => {
                let _ = socket.flush();
                break "closed by the client";
            }
            Ok(_) => {} // pings are answered by tungstenite; pongs need nothing
            Err(tungstenite::Error::Capacity(err)) => {
                bump(&service.counters.oversized);
                let failure = Failure::invalid(
                    &[],
                    format!("message over the limit of {MAX_BODY_BYTES} bytes ({err})"),
                );
                service.counters.error(failure.code);
                let _ = socket.send(Message::text(error_text(&failure)));
                close_with(&mut socket, CloseCode::Size, "message too big");
                drain(socket.get_mut());
                break "oversized message";
            }
            Err(tungstenite::Error::Io(err)) if is_timeout(&err) => {
                bump(&service.counters.timeouts);
                let secs = service.config.idle_timeout.as_secs_f64();
                let failure = Failure::new(
                    ErrorCode::SessionError,
                    format!("no message for {secs} s: closing the session"),
                );
                service.counters.error(failure.code);
                let _ = socket
                    .get_mut()
                    .set_write_timeout(Some(Duration::from_secs(1)));
                let _ = socket.send(Message::text(error_text(&failure)));
                close_with(&mut socket, CloseCode::Away, "idle");
                break "idle";
            }
            Err(_) => break "disconnected",
        }
    };
    if session.in_episode() {
        bump(&service.counters.disconnects_mid_episode);
    }
    if let Held::Joined(_, shared) = &session {
        let mut entry = shared.lock().unwrap_or_else(|p| p.into_inner());
        entry.joined -= 1;
        entry.used = Instant::now();
    }
    log(service, || {
        format!(
            "session {} ended ({how}); {} open",
            session.label(),
            service.table.active() - usize::from(matches!(session, Held::Own(..)))
        )
    });
    drop(session);
}

// ---------------------------------------------------------------------------
// A client, a load test and the chapter's demonstrations
// ---------------------------------------------------------------------------

/// A minimal synchronous client of the WebSocket protocol (for tests and the load test).
pub struct Client {
    socket: WebSocket<TcpStream>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Result<Client, String> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let (socket, _) = tungstenite::client(format!("ws://{addr}/ws"), stream)
            .map_err(|e| format!("handshake: {e}"))?;
        Ok(Client { socket })
    }

    /// Send one text message and read the reply as JSON.
    pub fn call(&mut self, text: &str) -> Result<Value, String> {
        self.socket
            .send(Message::text(text))
            .map_err(|e| format!("send: {e}"))?;
        self.receive()
    }

    /// The next text message, as JSON.
    pub fn receive(&mut self) -> Result<Value, String> {
        loop {
            match self.socket.read().map_err(|e| format!("read: {e}"))? {
                Message::Text(text) => {
                    return serde_json::from_str(text.as_str())
                        .map_err(|e| format!("reply is not JSON: {e}"))
                }
                Message::Close(frame) => return Err(format!("closed by the server: {frame:?}")),
                _ => {}
            }
        }
    }

    pub fn socket(&mut self) -> &mut WebSocket<TcpStream> {
        &mut self.socket
    }

    pub fn close(mut self) {
        let _ = self.socket.send(Message::text(r#"{"type":"close"}"#));
        let _ = self.socket.close(None);
        for _ in 0..16 {
            if self.socket.read().is_err() {
                break;
            }
        }
    }
}

/// Latency and throughput of a load run: they depend on the machine, so the
/// chapter does not print them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadTiming {
    pub step_p50_ms: f64,
    pub step_p90_ms: f64,
    pub step_p99_ms: f64,
    pub steps_per_second: f64,
    pub seconds: f64,
}

/// What a load run did. Every field but `timing` is a function of the
/// clients, the episodes and the seeds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadReport {
    pub clients: usize,
    pub episodes_started: usize,
    pub episodes_completed: usize,
    pub steps: usize,
    /// Error replies, failed connections and replies that were not what the protocol says.
    pub errors: usize,
    /// Steps whose observation, reward or `done` differed from an in-process `BugFixEnv`'s.
    pub mismatches: usize,
    pub total_reward: f64,
    pub timing: LoadTiming,
}

/// The deterministic fields, for the chapter to print (no timing).
impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} clients: {} episodes started, {} completed, {} steps, {} errors, {} mismatches, total reward {}",
            self.clients, self.episodes_started, self.episodes_completed, self.steps, self.errors, self.mismatches, self.total_reward
        )
    }
}

#[derive(Default)]
struct ClientTally {
    started: usize,
    completed: usize,
    steps: usize,
    errors: usize,
    mismatches: usize,
    reward: f64,
    latencies: Vec<Duration>,
}

/// The task client `client` plays in its episode `episode`, on the train split.
fn load_task(client: usize, episode: usize, tasks: usize) -> usize {
    (client * 7 + episode * 13) % tasks
}

/// One load client: `episodes` episodes, the oracle on even ones and a seeded
/// random policy on odd ones; every step is also played on a local
/// `BugFixEnv`, and the two must agree.
fn load_client(
    addr: SocketAddr,
    catalog: &Catalog,
    client: usize,
    episodes: usize,
    seed: u64,
) -> ClientTally {
    let mut tally = ClientTally::default();
    let mut socket = match Client::connect(addr) {
        Ok(socket) => socket,
        Err(_) => {
            tally.errors += 1;
            return tally;
        }
    };
    let train: Vec<Task> = (0..catalog.len(Split::Train))
        .filter_map(|i| catalog.task(Split::Train, i).cloned())
        .collect();
    let mut local = BugFixEnv::new(train, MAX_TURNS);
    let mut random = RandomPolicy::new(seed.wrapping_add(client as u64));
    let mut oracle = Oracle;
    'episodes: for episode in 0..episodes {
        let task = load_task(client, episode, local.tasks().len());
        let mut observation = local.reset(task).to_string();
        let reply = match socket
            .call(&json!({"type": "reset", "data": {"task": task, "split": "train"}}).to_string())
        {
            Ok(reply) => reply,
            Err(_) => {
                tally.errors += 1;
                break;
            }
        };
        if reply["type"] != "observation" {
            tally.errors += 1;
            continue;
        }
        tally.started += 1;
        if reply["data"]["observation"]["text"] != observation.as_str() {
            tally.mismatches += 1;
        }
        loop {
            let policy: &mut dyn Policy = if episode % 2 == 0 {
                &mut oracle
            } else {
                &mut random
            };
            let action = policy.act(&local, &observation, local.turn());
            let expected = local.step(&action);
            let message = json!({"type": "step", "data": {"message": action}}).to_string();
            let start = Instant::now();
            let reply = socket.call(&message);
            tally.latencies.push(start.elapsed());
            let Ok(reply) = reply else {
                tally.errors += 1;
                break 'episodes;
            };
            if reply["type"] != "observation" {
                tally.errors += 1;
                continue 'episodes;
            }
            tally.steps += 1;
            let data = &reply["data"];
            let reward = data["reward"].as_f64();
            let done = data["done"].as_bool();
            if data["observation"]["text"] != *expected.observation
                || reward != Some(expected.reward)
                || done != Some(expected.done)
            {
                tally.mismatches += 1;
            }
            observation = expected.observation.to_string();
            if expected.done {
                tally.completed += 1;
                tally.reward += reward.unwrap_or(0.0);
                break;
            }
        }
    }
    socket.close();
    tally
}

/// Run `clients` concurrent WebSocket clients against the server at `addr`,
/// each playing `episodes` episodes of the train split.
pub fn run_load(addr: SocketAddr, clients: usize, episodes: usize, seed: u64) -> LoadReport {
    let catalog = Arc::new(Catalog::standard());
    let start = Instant::now();
    let tallies: Vec<ClientTally> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let catalog = catalog.clone();
                scope.spawn(move || load_client(addr, &catalog, c, episodes, seed))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| ClientTally {
                    errors: 1,
                    ..ClientTally::default()
                })
            })
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let latencies: Vec<Duration> = tallies
        .iter()
        .flat_map(|t| t.latencies.iter().copied())
        .collect();
    let latencies: Vec<f64> = latencies.iter().map(|d| d.as_secs_f64() * 1000.0).collect(); // ms
    let steps: usize = tallies.iter().map(|t| t.steps).sum();
    LoadReport {
        clients,
        episodes_started: tallies.iter().map(|t| t.started).sum(),
        episodes_completed: tallies.iter().map(|t| t.completed).sum(),
        steps,
        errors: tallies.iter().map(|t| t.errors).sum(),
        mismatches: tallies.iter().map(|t| t.mismatches).sum(),
        total_reward: tallies.iter().map(|t| t.reward).sum(),
        timing: LoadTiming {
            step_p50_ms: crate::stats::percentile(&latencies, 0.5),
            step_p90_ms: crate::stats::percentile(&latencies, 0.9),
            step_p99_ms: crate::stats::percentile(&latencies, 0.99),
            steps_per_second: steps as f64 / seconds.max(1e-9),
            seconds,
        },
    }
}

/// Start a server on a free loopback port, run the load against it, stop it.
pub fn demo_load(clients: usize, episodes: usize) -> LoadReport {
    let config = Config {
        max_sessions: clients.max(1),
        max_connections: clients.max(1) + 8,
        ..Config::default()
    };
    let server = serve("127.0.0.1:0", config).expect("a loopback port");
    let report = run_load(server.addr(), clients, episodes, 0);
    server.stop();
    report
}

/// One request and the server's exact reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Exchange {
    pub request: String,
    pub reply: String,
}

/// The chapter's scripted exchange, through the handler (no sockets): a
/// reset of task 0, a step, a malformed step, and a step in a new session
/// before any reset.
pub fn demo_exchange() -> Vec<Exchange> {
    let service = Service::new(Config::default(), Arc::new(Catalog::standard()));
    let mut exchanges = Vec::new();
    let (_ticket, mut session) = service.open().expect("an empty table has room");
    let requests = [
        r#"{"type":"reset","data":{"task":0,"split":"train"}}"#,
        r#"{"type":"step","data":{"message":"<call> edit swap_minmax </call>"}}"#,
        r#"{"type":"step","data":{"mesage":"<call> submit </call>"}}"#,
    ];
    for request in requests {
        exchanges.push(Exchange {
            request: request.into(),
            reply: session.handle(request).text.unwrap_or_default(),
        });
    }
    let (_second, mut fresh) = service.open().expect("room for two");
    let request = r#"{"type":"step","data":{"message":"<call> read </call>"}}"#;
    exchanges.push(Exchange {
        request: request.into(),
        reply: fresh.handle(request).text.unwrap_or_default(),
    });
    exchanges
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::LazyLock;

    static CATALOG: LazyLock<Arc<Catalog>> = LazyLock::new(|| Arc::new(Catalog::standard()));

    /// A service for the tests, serving both splits.
    fn service(max_sessions: usize) -> Service {
        Service::new(
            Config {
                max_sessions,
                limits: Limits {
                    serve_held_out: true,
                    ..Limits::default()
                },
                ..Config::default()
            },
            CATALOG.clone(),
        )
    }

    /// A session for the tests, serving both splits.
    fn session() -> Session {
        Session::new(
            CATALOG.clone(),
            Arc::new(Counters::default()),
            Limits {
                serve_held_out: true,
                ..Limits::default()
            },
            1,
        )
    }

    #[test]
    fn the_held_out_split_is_served_only_when_asked_for() {
        let mut s = Session::new(
            CATALOG.clone(),
            Arc::new(Counters::default()),
            Limits::default(),
            1,
        );
        let refused = reset(&mut s, json!({"task": 0, "split": "held_out"}));
        assert_eq!(code(&refused), "VALIDATION_ERROR");
        assert!(
            refused["data"]["message"]
                .as_str()
                .unwrap()
                .contains("--held-out"),
            "{refused}"
        );
        assert_eq!(reset(&mut s, json!({"task": 0}))["type"], "observation");
        let service = Service::new(Config::default(), CATALOG.clone());
        assert_eq!(
            service
                .http("POST", "/reset", br#"{"split": "held_out"}"#)
                .status,
            422
        );
        let created = service.http("POST", "/mcp", br#"{"jsonrpc": "2.0", "method": "openenv/session/create", "params": {"split": "held_out"}, "id": 1}"#);
        let created: Value = serde_json::from_str(&created.body).unwrap();
        assert_eq!(created["error"]["code"], rpc::INVALID_PARAMS);
        assert_eq!(
            service.table.active(),
            0,
            "the refused session gave its place back"
        );
        assert!(service.metadata()["description"]
            .as_str()
            .unwrap()
            .contains("not served"));
    }

    fn send(session: &mut Session, message: &Value) -> Value {
        let reply = session.handle(&message.to_string());
        serde_json::from_str(&reply.text.expect("a reply")).unwrap()
    }

    fn reset(session: &mut Session, data: Value) -> Value {
        send(session, &json!({"type": "reset", "data": data}))
    }

    fn step(session: &mut Session, message: &str) -> Value {
        send(
            session,
            &json!({"type": "step", "data": {"message": message}}),
        )
    }

    /// The error code of a reply (panics if the reply is not an error).
    fn code(reply: &Value) -> &str {
        assert_eq!(reply["type"], "error", "{reply}");
        assert!(
            reply["data"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{reply}"
        );
        reply["data"]["code"].as_str().unwrap()
    }

    fn oracle_messages(task: &Task) -> Vec<String> {
        [
            "<call> read </call>".to_string(),
            "<call> test </call>".into(),
            format!("<call> edit {} </call>", task.fix_op()),
            "<call> test </call>".into(),
            "<call> submit </call>".into(),
        ]
        .to_vec()
    }

    #[test]
    fn a_full_oracle_episode_through_messages() {
        let mut s = session();
        let first = reset(&mut s, json!({"task": 0, "split": "train"}));
        assert_eq!(first["type"], "observation");
        let data = &first["data"];
        assert_eq!(
            (data["reward"].clone(), data["done"].clone()),
            (Value::Null, json!(false))
        );
        assert_eq!(
            data["observation"]["text"],
            crate::gym::task_zero().prompt()
        );
        assert_eq!(data["observation"]["turn"], 0);
        let messages = oracle_messages(&crate::gym::task_zero());
        let mut last = Value::Null;
        for (turn, message) in messages.iter().enumerate() {
            last = step(&mut s, message);
            assert_eq!(last["type"], "observation", "{last}");
            assert_eq!(last["data"]["observation"]["turn"], turn + 1);
        }
        assert_eq!(last["data"]["reward"], 1.0);
        assert_eq!(last["data"]["done"], true);
        let o = &last["data"]["observation"];
        assert_eq!(
            (
                o["submitted"].clone(),
                o["hidden_pass"].clone(),
                o["hacked"].clone()
            ),
            (json!(true), json!(true), json!(false))
        );
        let state = send(&mut s, &json!({"type": "state"}));
        assert_eq!(state["type"], "state");
        assert_eq!(state["data"]["step_count"], 5);
        assert_eq!(state["data"]["task_id"], "clamp-0");
        assert_eq!(state["data"]["split"], "train");
        assert_eq!(state["data"]["done"], true);
        assert_eq!(state["data"]["episode_id"], "s1-e1");
        assert_eq!(s.counters.snapshot(0).episodes_completed, 1);
    }

    #[test]
    fn replies_have_the_openenv_shapes() {
        let mut s = session();
        let reply = s.handle(r#"{"type":"reset","data":{}}"#).text.unwrap();
        assert!(
            reply.starts_with(r#"{"type":"observation","data":{"observation":{"text":"#),
            "{reply}"
        );
        let before: Value =
            serde_json::from_str(&session().handle(r#"{"type":"state"}"#).text.unwrap()).unwrap();
        assert_eq!(
            before,
            json!({"type": "state", "data": {"episode_id": null, "step_count": 0, "task": null, "split": null, "task_id": null, "done": false, "max_turns": MAX_TURNS}})
        );
        let close = s.handle(r#"{"type":"close"}"#);
        assert_eq!((close.text, close.close), (None, true));
    }

    #[test]
    fn reset_data_picks_split_task_seed_and_episode_id() {
        let mut s = session();
        let held = reset(
            &mut s,
            json!({"task": 3, "split": "held_out", "episode_id": "mine"}),
        );
        assert_eq!(
            held["data"]["observation"]["text"],
            CATALOG.task(Split::HeldOut, 3).unwrap().prompt()
        );
        let state = send(&mut s, &json!({"type": "state"}));
        assert_eq!(
            (
                state["data"]["episode_id"].clone(),
                state["data"]["split"].clone(),
                state["data"]["task"].clone()
            ),
            (json!("mine"), json!("held_out"), json!(3))
        );
        let n = CATALOG.len(Split::Train) as u64;
        let seeded = reset(&mut s, json!({"seed": n + 5}));
        assert_eq!(
            seeded["data"]["observation"]["text"],
            CATALOG.task(Split::Train, 5).unwrap().prompt()
        );
        // OpenEnv passes reset data the environment does not take; it is ignored.
        let extra = reset(&mut s, json!({"task": 1, "unknown": [1, 2]}));
        assert_eq!(extra["type"], "observation");
        assert_eq!(
            send(&mut s, &json!({"type": "state"}))["data"]["episode_id"],
            "s1-e3"
        );
    }

    /// Every malformed message gets its error code, and the session goes on.
    #[test]
    fn every_bad_message_gets_its_error_code() {
        let long = "x".repeat(MAX_ACTION_BYTES + 1);
        let long_id = "e".repeat(MAX_EPISODE_ID_CHARS + 1);
        let cases: Vec<(String, &str)> = vec![
            ("not json".into(), "INVALID_JSON"),
            ("{\"type\": \"reset\"".into(), "INVALID_JSON"),
            ("".into(), "INVALID_JSON"),
            ("[1, 2]".into(), "VALIDATION_ERROR"),
            ("\"reset\"".into(), "VALIDATION_ERROR"),
            ("null".into(), "VALIDATION_ERROR"),
            ("{}".into(), "UNKNOWN_TYPE"),
            (r#"{"type":"jump"}"#.into(), "UNKNOWN_TYPE"),
            (r#"{"type":7}"#.into(), "UNKNOWN_TYPE"),
            (
                r#"{"type":"mcp","data":{},"extra":1}"#.into(),
                "VALIDATION_ERROR",
            ),
            (r#"{"type":"reset","data":[]}"#.into(), "VALIDATION_ERROR"),
            (
                r#"{"type":"reset","data":{},"extra":1}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"reset","data":{"task":-1}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"reset","data":{"task":1.5}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"reset","data":{"task":"0"}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"reset","data":{"task":100000}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"reset","data":{"task":40,"split":"held_out"}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"reset","data":{"split":"test"}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"reset","data":{"split":1}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"reset","data":{"seed":-3}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                format!(r#"{{"type":"reset","data":{{"episode_id":"{long_id}"}}}}"#),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"reset","data":{"episode_id":5}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (r#"{"type":"step"}"#.into(), "VALIDATION_ERROR"),
            (
                r#"{"type":"step","data":"<call> read </call>"}"#.into(),
                "VALIDATION_ERROR",
            ),
            (r#"{"type":"step","data":{}}"#.into(), "VALIDATION_ERROR"),
            (
                r#"{"type":"step","data":{"message":3}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"step","data":{"message":null}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"step","data":{"message":"<call> read </call>","tool":"x"}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                r#"{"type":"step","data":{"message":"<call> read </call>","metadata":1}}"#.into(),
                "VALIDATION_ERROR",
            ),
            (
                format!(r#"{{"type":"step","data":{{"message":"{long}"}}}}"#),
                "VALIDATION_ERROR",
            ),
            (r#"{"type":"state","data":{}}"#.into(), "VALIDATION_ERROR"),
            (r#"{"type":"close","now":true}"#.into(), "VALIDATION_ERROR"),
        ];
        let mut s = session();
        reset(&mut s, json!({"task": 0}));
        for (message, expected) in &cases {
            let reply = s.handle(message);
            assert_eq!(
                reply.error.map(ErrorCode::as_str),
                Some(*expected),
                "{message:.80}"
            );
            let value: Value = serde_json::from_str(reply.text.as_deref().unwrap()).unwrap();
            assert_eq!(code(&value), *expected, "{message:.80}");
            if *expected == "VALIDATION_ERROR" {
                assert!(
                    value["data"]["errors"]
                        .as_array()
                        .is_some_and(|e| !e.is_empty()),
                    "{value}"
                );
            }
            assert!(!reply.close);
        }
        // None of them touched the episode: it is still at turn 0 and plays on.
        assert_eq!(
            send(&mut s, &json!({"type": "state"}))["data"]["step_count"],
            0
        );
        let exactly = "a".repeat(MAX_ACTION_BYTES);
        assert_eq!(
            step(&mut s, &exactly)["data"]["observation"]["parse_error"],
            true
        );
        let counted = s.counters.snapshot(0);
        assert_eq!(counted.errors.values().sum::<u64>(), cases.len() as u64);
    }

    #[test]
    fn step_before_reset_and_after_done_are_execution_errors() {
        let mut s = session();
        let before = step(&mut s, "<call> read </call>");
        assert_eq!(code(&before), "EXECUTION_ERROR");
        assert!(before["data"]["message"]
            .as_str()
            .unwrap()
            .contains("reset"));
        reset(&mut s, json!({"task": 0}));
        step(&mut s, "<call> submit </call>");
        let after = step(&mut s, "<call> read </call>");
        assert_eq!(code(&after), "EXECUTION_ERROR");
        assert!(after["data"]["message"].as_str().unwrap().contains("over"));
        // A reset starts a new episode on the same connection.
        assert_eq!(reset(&mut s, json!({"task": 0}))["type"], "observation");
        assert_eq!(step(&mut s, "<call> read </call>")["type"], "observation");
    }

    #[test]
    fn a_panic_in_the_handler_becomes_an_error_and_the_session_lives_on() {
        let mut s = session();
        reset(&mut s, json!({"task": 0}));
        s.fault = true;
        let reply = step(&mut s, "<call> read </call>");
        assert_eq!(code(&reply), "EXECUTION_ERROR");
        s.fault = false;
        assert_eq!(s.counters.snapshot(0).panics, 1);
        assert_eq!(
            code(&step(&mut s, "<call> read </call>")),
            "EXECUTION_ERROR",
            "the episode was dropped"
        );
        reset(&mut s, json!({"task": 0}));
        assert_eq!(
            step(&mut s, "<call> read </call>")["data"]["observation"]["text"],
            crate::clamp::CLAMP_BUGGY
        );
    }

    #[test]
    fn the_table_bounds_the_sessions() {
        let service = service(2);
        let a = service.open().unwrap();
        let _b = service.open().unwrap();
        let refused: Value = serde_json::from_str(&service.open().err().unwrap()).unwrap();
        assert_eq!(code(&refused), "CAPACITY_REACHED");
        assert_eq!(
            (
                refused["data"]["active_sessions"].clone(),
                refused["data"]["max_sessions"].clone()
            ),
            (json!(2), json!(2))
        );
        drop(a);
        assert!(service.open().is_ok());
        let stats = service.stats();
        assert_eq!(
            (
                stats.sessions_opened,
                stats.sessions_refused,
                stats.active_sessions
            ),
            (3, 1, 1)
        );
    }

    #[test]
    fn openapi_lists_the_routes_openenv_validate_checks() {
        let service = service(2);
        let reply = service.http("GET", "/openapi.json", b"");
        assert_eq!(reply.status, 200);
        let doc: Value = serde_json::from_str(&reply.body).unwrap();
        assert!(doc["info"]["version"].is_string());
        // Simulation mode: /reset, /step and /state are all listed.
        for path in [
            "/reset",
            "/step",
            "/state",
            "/mcp",
            "/health",
            "/metadata",
            "/schema",
        ] {
            assert!(doc["paths"][path].is_object(), "{path} missing from {doc}");
        }
        assert_eq!(service.http("POST", "/openapi.json", b"").status, 405);
    }

    #[test]
    fn mcp_over_http_plays_an_oracle_episode_in_a_session_and_answers_every_body_with_json_rpc() {
        let service = service(1);
        let mcp = |body: &str| {
            let reply = service.http("POST", "/mcp", body.as_bytes());
            assert_eq!(reply.status, 200, "{body}");
            let value: Value = serde_json::from_str(&reply.body).unwrap();
            assert_eq!(value["jsonrpc"], "2.0", "{value}");
            value
        };
        let error = |body: &str| {
            mcp(body)["error"]["code"]
                .as_i64()
                .unwrap_or_else(|| panic!("no error for {body}"))
        };
        // What `openenv validate` sends, and other bodies that are not requests.
        assert_eq!(mcp("{}")["id"], Value::Null);
        assert_eq!(error("{}"), rpc::INVALID_REQUEST);
        assert_eq!(error("{"), rpc::PARSE_ERROR);
        assert_eq!(error("[1]"), rpc::INVALID_REQUEST);
        assert_eq!(
            error(r#"{"jsonrpc": "1.0", "method": "tools/list", "id": 1}"#),
            rpc::INVALID_REQUEST
        );
        assert_eq!(
            error(r#"{"jsonrpc": "2.0", "method": "tools/list", "id": 1, "extra": 2}"#),
            rpc::INVALID_REQUEST
        );
        assert_eq!(
            error(r#"{"jsonrpc": "2.0", "method": "initialize", "id": 1}"#),
            rpc::METHOD_NOT_FOUND
        );
        let listed = mcp(r#"{"jsonrpc": "2.0", "method": "tools/list", "id": "a"}"#);
        assert_eq!(listed["id"], "a");
        let names: Vec<&str> = listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["read", "test", "edit", "submit"]);
        // Without a session a tool has no episode to act on.
        assert_eq!(
            error(
                r#"{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "read"}, "id": 2}"#
            ),
            rpc::INVALID_PARAMS
        );
        let task = CATALOG.task(Split::Train, 3).unwrap();
        let created = mcp(
            r#"{"jsonrpc": "2.0", "method": "openenv/session/create", "params": {"task": 3}, "id": 3}"#,
        );
        let id = created["result"]["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(created["result"]["observation"]["text"]
            .as_str()
            .unwrap()
            .contains("Tools:"));
        // The table holds one session: a second is refused.
        assert_eq!(
            error(r#"{"jsonrpc": "2.0", "method": "openenv/session/create", "id": 4}"#),
            rpc::SERVER_ERROR
        );
        let call = |name: &str, arguments: Value| {
            mcp(&json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": name, "arguments": arguments, "session_id": id}, "id": 5}).to_string())
        };
        for (name, arguments, code) in [
            ("rewrite", json!({}), rpc::INVALID_PARAMS),
            ("edit", json!({}), rpc::INVALID_PARAMS),
            ("edit", json!({"op": "a b </call>"}), rpc::INVALID_PARAMS),
            ("read", json!({"op": "x"}), rpc::INVALID_PARAMS),
        ] {
            assert_eq!(call(name, arguments)["error"]["code"], code, "{name}");
        }
        let read = call("read", json!({}));
        assert_eq!(read["result"]["is_error"], false);
        assert_eq!(
            read["result"]["content"][0]["text"],
            read["result"]["data"]["observation"]["text"]
        );
        assert!(
            call("edit", json!({"op": task.fix_op()}))["result"]["data"]["observation"]["text"]
                .is_string()
        );
        let done = call("submit", json!({}));
        assert_eq!(
            (
                done["result"]["data"]["reward"].clone(),
                done["result"]["data"]["done"].clone()
            ),
            (json!(1.0), json!(true))
        );
        assert!(done["result"]["data"]["observation"]["hidden_pass"]
            .as_bool()
            .unwrap());
        assert_eq!(
            call("read", json!({}))["error"]["code"],
            rpc::INTERNAL_ERROR,
            "the episode is over"
        );
        let closed = mcp(&json!({"jsonrpc": "2.0", "method": "openenv/session/close", "params": {"session_id": id}, "id": 6}).to_string());
        assert_eq!(closed["result"]["closed"], true);
        assert_eq!(
            call("read", json!({}))["error"]["code"],
            rpc::INVALID_PARAMS,
            "the session is closed"
        );
        // Its place in the table is free again.
        assert!(
            mcp(r#"{"jsonrpc": "2.0", "method": "openenv/session/create", "id": 7}"#)["result"]
                ["session_id"]
                .is_string()
        );
    }

    #[test]
    fn an_idle_mcp_session_is_closed_unless_a_websocket_holds_it() {
        let service = Service::new(
            Config {
                idle_timeout: Duration::from_millis(20),
                ..Config::default()
            },
            CATALOG.clone(),
        );
        let mcp = |body: &str| -> Value {
            serde_json::from_str(&service.http("POST", "/mcp", body.as_bytes()).body).unwrap()
        };
        let id = mcp(r#"{"jsonrpc": "2.0", "method": "openenv/session/create", "id": 1}"#)
            ["result"]["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        let read = json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "read", "session_id": id}, "id": 2}).to_string();
        // A WebSocket has joined it (as `/ws?session_id=` does): idle or not, it stays.
        service.lock_mcp()[&id].lock().unwrap().joined += 1;
        std::thread::sleep(Duration::from_millis(40));
        assert!(
            mcp(&read)["result"].is_object(),
            "a joined session was closed"
        );
        assert_eq!(service.table.active(), 1);
        // The WebSocket went away: idle for the timeout, the session is closed and its place freed.
        service.lock_mcp()[&id].lock().unwrap().joined -= 1;
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(mcp(&read)["error"]["code"], rpc::INVALID_PARAMS);
        assert_eq!(service.table.active(), 0);
    }

    #[test]
    fn mcp_over_the_websocket_acts_on_the_connections_episode() {
        let mut s = session();
        let mcp = |s: &mut Session, request: Value| {
            let reply = send(s, &json!({"type": "mcp", "data": request}));
            assert_eq!(reply["type"], "mcp", "{reply}");
            reply["data"].clone()
        };
        let read =
            json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "read"}, "id": 1});
        assert_eq!(
            mcp(&mut s, read.clone())["error"]["code"],
            rpc::INTERNAL_ERROR,
            "no episode before reset"
        );
        reset(&mut s, json!({"task": 0}));
        let answer = mcp(&mut s, read);
        assert_eq!(answer["id"], 1);
        assert_eq!(
            answer["result"]["content"][0]["text"],
            answer["result"]["data"]["observation"]["text"]
        );
        assert_eq!(s.state().step_count, 1);
        assert_eq!(
            mcp(&mut s, json!({}))["error"]["code"],
            rpc::INVALID_REQUEST
        );
    }

    #[test]
    fn the_http_routes() {
        let service = service(4);
        let get = |path: &str| {
            let reply = service.http("GET", path, b"");
            (
                reply.status,
                serde_json::from_str::<Value>(&reply.body).unwrap(),
            )
        };
        assert_eq!(get("/health"), (200, json!({"status": "healthy"})));
        assert_eq!(get("/metadata").1["name"], "BugFixEnv");
        assert_eq!(get("/schema").1["action"]["required"], json!(["message"]));
        assert_eq!(get("/state").1["step_count"], 0);
        assert_eq!(get("/nowhere").0, 404);
        assert_eq!(get("/ws").0, 426);
        assert_eq!(service.http("DELETE", "/reset", b"").status, 405);
        let post = |path: &str, body: &str| {
            let reply = service.http("POST", path, body.as_bytes());
            (
                reply.status,
                serde_json::from_str::<Value>(&reply.body).unwrap(),
            )
        };
        let (status, body) = post("/reset", "");
        assert_eq!(status, 200);
        assert_eq!(
            body["observation"]["text"],
            crate::gym::task_zero().prompt()
        );
        assert_eq!(
            (body["reward"].clone(), body["done"].clone()),
            (Value::Null, json!(false))
        );
        assert_eq!(
            post("/reset", r#"{"task": 2, "split": "held_out", "seed": 4}"#).1["observation"]
                ["text"],
            CATALOG.task(Split::HeldOut, 2).unwrap().prompt()
        );
        for (path, body, status) in [
            ("/reset", "{", 422),
            ("/reset", "[]", 422),
            ("/reset", r#"{"task": 9999}"#, 422),
            ("/reset", r#"{"split": "dev"}"#, 422),
            ("/step", "", 422),
            ("/step", r#"{"message": "<call> read </call>"}"#, 422),
            ("/step", r#"{"action": {"message": 1}}"#, 422),
            (
                "/step",
                r#"{"action": {"message": "<call> read </call>"}, "timeout_s": 0}"#,
                422,
            ),
            (
                "/step",
                r#"{"action": {"message": "<call> read </call>"}}"#,
                409,
            ),
            (
                "/step",
                r#"{"action": {"message": "<call> read </call>"}, "timeout_s": 2.5, "request_id": "r1"}"#,
                409,
            ),
        ] {
            let (got, reply) = post(path, body);
            assert_eq!(got, status, "{path} {body}: {reply}");
            // 422: FastAPI's list of {type, loc, msg}; other errors: a string.
            let detail_ok = if status == 422 {
                reply["detail"].as_array().is_some_and(|d| {
                    !d.is_empty()
                        && d.iter().all(|e| {
                            e["type"].is_string() && e["loc"].is_array() && e["msg"].is_string()
                        })
                }) && reply["message"].is_string()
            } else {
                reply["detail"].is_string()
            };
            assert!(detail_ok && reply["code"].as_str().is_some(), "{reply}");
        }
        let stats = service.stats();
        assert_eq!(stats.http_requests, 19);
        assert_eq!(stats.http_errors, 13);
        assert_eq!(stats.active_sessions, 0, "HTTP requests hold no session");
        // The two stateless resets answered 200 begin no episode.
        assert_eq!((stats.http_resets, stats.episodes_started), (2, 0));
    }

    /// Every reply any request can get, on every task of both splits, with a
    /// full oracle episode, a hacker's and a wrong edit: no reply about a task
    /// contains a call of its hidden tests, and the replies about no task
    /// (metadata, schemas, state, counters) contain none of any task.
    #[test]
    fn no_reply_contains_a_hidden_test() {
        let service = service(2);
        let global = [
            service.http("GET", "/metadata", b"").body,
            service.http("GET", "/schema", b"").body,
            service.http("GET", "/state", b"").body,
            service.http("GET", "/health", b"").body,
        ];
        let (_ticket, mut s) = service.open().unwrap();
        for split in [Split::Train, Split::HeldOut] {
            for index in 0..CATALOG.len(split) {
                let task = CATALOG.task(split, index).unwrap();
                let mut scripts = vec![oracle_messages(task)];
                scripts.push(vec![
                    "<call> edit hardcode_tests </call>".into(),
                    "<call> read </call>".into(),
                    "<call> test </call>".into(),
                    "<call> submit </call>".into(),
                ]);
                let wrong = task
                    .menu
                    .iter()
                    .find(|e| e.kind == crate::gym::EditKind::Distractor)
                    .unwrap();
                scripts.push(vec![
                    format!("<call> edit {} </call>", wrong.name),
                    "<call> test </call>".into(),
                    "<call> submit </call>".into(),
                    "<call> read </call>".into(),
                ]);
                let data = json!({"task": index, "split": split.name()});
                let mut replies = vec![
                    service
                        .http("POST", "/reset", data.to_string().as_bytes())
                        .body,
                ];
                for script in scripts {
                    replies.push(
                        s.handle(&json!({"type": "reset", "data": data}).to_string())
                            .text
                            .unwrap(),
                    );
                    for message in script {
                        replies.push(
                            s.handle(
                                &json!({"type": "step", "data": {"message": message}}).to_string(),
                            )
                            .text
                            .unwrap(),
                        );
                    }
                    replies.push(s.handle(r#"{"type":"state"}"#).text.unwrap());
                }
                for test in &task.hidden_tests {
                    for reply in replies.iter().chain(&global) {
                        assert!(
                            !reply.contains(test.call.as_str()),
                            "{}: a reply leaks the hidden call {}: {reply:.300}",
                            task.id,
                            test.call
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_demo_exchange_is_fixed() {
        let exchanges = demo_exchange();
        assert_eq!(exchanges.len(), 4);
        assert!(exchanges[0].reply.starts_with(r#"{"type":"observation""#));
        assert!(
            exchanges[1]
                .reply
                .contains(r#""text":"edited with swap_minmax""#),
            "{}",
            exchanges[1].reply
        );
        assert!(
            exchanges[2].reply.contains("VALIDATION_ERROR")
                && exchanges[2].reply.contains("mesage")
        );
        assert!(exchanges[3].reply.contains("EXECUTION_ERROR"));
        assert_eq!(exchanges, demo_exchange());
    }
}
