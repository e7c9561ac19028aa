//! Chapter 13: the gym server over real sockets: the OpenEnv Python client
//! against the `gym-server` binary, 32 concurrent WebSocket clients against
//! the in-process gym, and every misbehaving connection the server must survive.

use agentrl::gym::task_zero;
use agentrl::service::{
    demo_exchange, demo_load, run_load, serve, Client, Config, ServerHandle, MAX_BODY_BYTES,
    OPENENV_CURRENT, OPENENV_VERSION,
};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::Message;

const SETUP_HINT: &str = "run `cargo xtask setup` to create .venv with the OpenEnv client";

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("agentrl sits in the workspace")
        .to_path_buf()
}

/// Kill a child process we started when the test ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait for `child` at most `limit`; `None` if it had to be killed.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let polls = (limit.as_millis() / 50) as usize;
    for _ in 0..polls {
        if let Ok(Some(status)) = child.0.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// A `gym-server` on a free port, and its URL.
fn start_server() -> (Child, String) {
    let server = Command::new(env!("CARGO_BIN_EXE_gym-server"))
        .args(["--port", "0", "--held-out", "--quiet"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("gym-server starts");
    let mut server = Child(server);
    let mut first = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut first)
        .expect("gym-server prints its address");
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_string();
    (server, url)
}

/// Run tests/SCRIPT with `python` and `args` (at most two minutes); its
/// standard output, or a panic with both outputs if it failed.
fn run_python(python: &PathBuf, script: &str, args: &[&str]) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let client = Command::new(python)
        .arg(&script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut client = Child(client);
    let status = wait_bounded(&mut client, Duration::from_secs(120))
        .expect("the Python client finished within two minutes");
    let (mut out, mut err) = (String::new(), String::new());
    client
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    client
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    eprintln!("{}", out.trim());
    assert!(
        status.success(),
        "{} failed:\n{out}\n{err}",
        script.display()
    );
    out
}

/// `python` exists and imports `module`, or a panic that says how to get it.
fn python_with(python: PathBuf, module: &str, hint: &str) -> PathBuf {
    assert!(python.exists(), "{} is missing: {hint}", python.display());
    let probe = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .expect("python runs");
    assert!(
        probe.status.success(),
        "{module} does not import ({}): {hint}",
        String::from_utf8_lossy(&probe.stderr).trim()
    );
    python
}

#[test]
fn the_openenv_python_client_plays_an_oracle_episode() {
    let python = python_with(
        workspace_root().join(".venv/bin/python"),
        "openenv.core.generic_client",
        SETUP_HINT,
    );
    let (_server, url) = start_server();
    let out = run_python(
        &python,
        "openenv_client.py",
        &[url.as_str(), task_zero().fix_op(), OPENENV_VERSION],
    );
    assert!(
        out.contains("oracle episode reward 1.0, done True"),
        "{out}"
    );
}

/// The current OpenEnv release: its validator passes the server, its MCP
/// client plays an episode through the tools, and the TRL environment class
/// (agentrl/clients/bugfix_trl.py) is what TRL's GRPOTrainer can use.
#[test]
fn the_current_openenv_validates_the_server_and_plays_it_over_mcp_and_as_a_trl_environment() {
    let python = python_with(
        workspace_root().join(".venv-openenv/bin/python"),
        "openenv.core.mcp_client, transformers",
        "run `cargo xtask setup` to create .venv-openenv with the current OpenEnv",
    );
    let (_server, url) = start_server();
    let held_out = agentrl::gym::Gym::standard().held_out[1]
        .fix_op()
        .to_string();
    let out = run_python(
        &python,
        "openenv_current.py",
        &[
            url.as_str(),
            task_zero().fix_op(),
            OPENENV_CURRENT,
            &held_out,
        ],
    );
    for line in [
        "openenv validate --url: passed 6 criteria",
        "oracle episode reward 1.0, done True",
        "held-out episode reward 1.0",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
}

/// The load test: 32 clients at once, 20 episodes each (oracle and seeded
/// random policies), every step checked against an in-process `BugFixEnv`.
#[test]
fn thirty_two_concurrent_clients_get_what_the_in_process_gym_gives() {
    let (clients, episodes) = (32, 20);
    let server = serve(
        "127.0.0.1:0",
        Config {
            max_sessions: clients,
            ..Config::default()
        },
    )
    .unwrap();
    let report = run_load(server.addr(), clients, episodes, 7);
    let t = &report.timing;
    eprintln!(
        "load: {clients} clients x {episodes} episodes, {} steps in {:.2} s: {:.0} steps/s; step latency p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms",
        report.steps, t.seconds, t.steps_per_second, t.step_p50_ms, t.step_p90_ms, t.step_p99_ms
    );
    assert_eq!(report.episodes_started, clients * episodes, "{report:?}");
    assert_eq!(
        report.episodes_completed, report.episodes_started,
        "{report:?}"
    );
    assert_eq!((report.errors, report.mismatches), (0, 0), "{report:?}");
    // The oracle plays every even episode and always succeeds.
    assert!(
        report.total_reward >= (clients * episodes / 2) as f64,
        "{report:?}"
    );
    let stats = wait_for(&server, |s| s.active_sessions == 0);
    assert_eq!(stats.episodes_completed, (clients * episodes) as u64);
    assert_eq!(stats.steps, report.steps as u64);
    assert!(stats.errors.is_empty(), "{stats:?}");
    assert_eq!(stats.disconnects_mid_episode, 0);
    // Same seeds, same counts.
    let again = run_load(server.addr(), 4, 3, 7);
    let once_more = run_load(server.addr(), 4, 3, 7);
    assert_eq!(
        (again.steps, again.total_reward),
        (once_more.steps, once_more.total_reward)
    );
}

/// What the chapter prints: the same counts on every run, and the exact replies.
#[test]
fn the_chapters_demonstrations_are_deterministic() {
    let (a, b) = (demo_load(8, 5), demo_load(8, 5));
    assert_eq!(a.to_string(), b.to_string());
    assert_eq!(
        (
            a.episodes_started,
            a.episodes_completed,
            a.errors,
            a.mismatches
        ),
        (40, 40, 0, 0),
        "{a}"
    );
    eprintln!("{a}");
    for exchange in demo_exchange() {
        eprintln!("> {}\n< {}", exchange.request, exchange.reply);
    }
}

// ---------------------------------------------------------------------------
// Misbehaving connections
// ---------------------------------------------------------------------------

fn quick_server(max_sessions: usize) -> ServerHandle {
    let config = Config {
        max_sessions,
        idle_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
        ..Config::default()
    };
    serve("127.0.0.1:0", config).unwrap()
}

/// Poll the server's counters until `done` holds (at most 10 s; no timing is asserted).
fn wait_for(
    server: &ServerHandle,
    done: impl Fn(&agentrl::service::Stats) -> bool,
) -> agentrl::service::Stats {
    for _ in 0..500 {
        let stats = server.stats();
        if done(&stats) {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "the server never reached the expected counters: {:?}",
        server.stats()
    );
}

/// Send raw bytes, read the whole answer: (status, body).
fn raw_http(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn code(reply: &Value) -> &str {
    assert_eq!(reply["type"], "error", "{reply}");
    reply["data"]["code"].as_str().unwrap()
}

/// The close code the server ends a WebSocket with.
fn close_code(client: &mut Client) -> Option<CloseCode> {
    for _ in 0..8 {
        match client.socket().read() {
            Ok(Message::Close(frame)) => return frame.map(|f| f.code),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

#[test]
fn bad_messages_over_the_wire_keep_the_connection() {
    let server = quick_server(4);
    let mut client = Client::connect(server.addr()).unwrap();
    assert_eq!(code(&client.call("nope").unwrap()), "INVALID_JSON");
    assert_eq!(code(&client.call("[]").unwrap()), "VALIDATION_ERROR");
    assert_eq!(
        code(&client.call(r#"{"type":"dance"}"#).unwrap()),
        "UNKNOWN_TYPE"
    );
    assert_eq!(
        code(
            &client
                .call(r#"{"type":"step","data":{"message":"<call> read </call>"}}"#)
                .unwrap()
        ),
        "EXECUTION_ERROR"
    );
    client
        .socket()
        .send(Message::binary(b"{\"type\":\"state\"}".to_vec()))
        .unwrap();
    assert_eq!(code(&client.receive().unwrap()), "VALIDATION_ERROR");
    let first = client
        .call(r#"{"type":"reset","data":{"task":0}}"#)
        .unwrap();
    assert_eq!(first["data"]["observation"]["text"], task_zero().prompt());
    let long = json!({"type": "step", "data": {"message": "y".repeat(5000)}}).to_string();
    assert_eq!(code(&client.call(&long).unwrap()), "VALIDATION_ERROR");
    assert_eq!(
        client.call(r#"{"type":"state"}"#).unwrap()["data"]["step_count"],
        0
    );
    client.close();
    let stats = wait_for(&server, |s| s.active_sessions == 0);
    assert_eq!(stats.errors.values().sum::<u64>(), 6, "{stats:?}");
}

#[test]
fn an_oversized_frame_gets_an_error_and_close_code_1009() {
    let server = quick_server(4);
    let mut client = Client::connect(server.addr()).unwrap();
    client.call(r#"{"type":"reset","data":{}}"#).unwrap();
    let huge =
        json!({"type": "step", "data": {"message": "z".repeat(MAX_BODY_BYTES + 10)}}).to_string();
    let reply = client.call(&huge).unwrap();
    assert_eq!(code(&reply), "VALIDATION_ERROR");
    assert_eq!(close_code(&mut client), Some(CloseCode::Size));
    let stats = wait_for(&server, |s| s.active_sessions == 0);
    assert_eq!((stats.oversized, stats.disconnects_mid_episode), (1, 1));
}

#[test]
fn sessions_over_the_bound_are_refused_until_one_closes() {
    let server = quick_server(2);
    let mut a = Client::connect(server.addr()).unwrap();
    let mut b = Client::connect(server.addr()).unwrap();
    for client in [&mut a, &mut b] {
        assert_eq!(
            client.call(r#"{"type":"reset","data":{}}"#).unwrap()["type"],
            "observation"
        );
    }
    let mut c = Client::connect(server.addr()).unwrap();
    let refused = c.receive().unwrap();
    assert_eq!(code(&refused), "CAPACITY_REACHED");
    assert_eq!(refused["data"]["max_sessions"], 2);
    a.close();
    wait_for(&server, |s| s.active_sessions == 1);
    let mut d = Client::connect(server.addr()).unwrap();
    assert_eq!(d.call(r#"{"type":"state"}"#).unwrap()["type"], "state");
    assert_eq!(server.stats().sessions_refused, 1);
}

#[test]
fn silent_and_vanishing_clients_are_let_go() {
    let server = quick_server(4);
    // A TCP connection that never sends its request.
    let (status, body) = raw_http(server.addr(), b"");
    assert_eq!(status, 408, "{body}");
    // A WebSocket that goes quiet.
    let mut quiet = Client::connect(server.addr()).unwrap();
    assert_eq!(code(&quiet.receive().unwrap()), "SESSION_ERROR");
    assert_eq!(close_code(&mut quiet), Some(CloseCode::Away));
    // A client that disappears in the middle of an episode.
    let mut gone = Client::connect(server.addr()).unwrap();
    gone.call(r#"{"type":"reset","data":{"task":3}}"#).unwrap();
    gone.call(r#"{"type":"step","data":{"message":"<call> read </call>"}}"#)
        .unwrap();
    gone.socket()
        .get_mut()
        .shutdown(std::net::Shutdown::Both)
        .unwrap();
    drop(gone);
    let stats = wait_for(&server, |s| {
        s.active_sessions == 0 && s.disconnects_mid_episode >= 1
    });
    assert_eq!(stats.timeouts, 2, "{stats:?}");
    assert_eq!(stats.disconnects_mid_episode, 1, "{stats:?}");
    // The server still serves.
    assert_eq!(
        raw_http(server.addr(), b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").0,
        200
    );
}

#[test]
fn malformed_http_gets_4xx_with_a_json_body() {
    let server = quick_server(4);
    let addr = server.addr();
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GET /health HTTP/1.1\r\n\r\n".to_vec(), 200),
        (b"GET /metadata?x=1 HTTP/1.1\r\n\r\n".to_vec(), 200),
        (b"NOT A REQUEST\r\n\r\n".to_vec(), 400),
        (
            b"POST /reset HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
            411,
        ),
        (
            format!(
                "POST /reset HTTP/1.1\r\ncontent-length: {}\r\n\r\n",
                MAX_BODY_BYTES + 1
            )
            .into_bytes(),
            413,
        ),
        (
            format!(
                "GET /health HTTP/1.1\r\nx-big: {}\r\n\r\n",
                "h".repeat(20_000)
            )
            .into_bytes(),
            431,
        ),
        (
            b"POST /reset HTTP/1.1\r\ncontent-length: 5\r\n\r\n{nope".to_vec(),
            422,
        ),
        (
            b"POST /reset HTTP/1.1\r\ncontent-length: 14\r\n\r\n{\"task\": 9999}".to_vec(),
            422,
        ),
        (
            b"POST /step HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
            422,
        ),
        (b"GET /ws HTTP/1.1\r\n\r\n".to_vec(), 426),
        (b"GET /mcp HTTP/1.1\r\n\r\n".to_vec(), 405),
        (b"GET /nowhere HTTP/1.1\r\n\r\n".to_vec(), 404),
        // What `openenv validate` sends: answered 200 with a JSON-RPC error.
        (
            b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
            200,
        ),
        (b"PUT /state HTTP/1.1\r\n\r\n".to_vec(), 405),
        (
            b"POST /reset HTTP/1.1\r\ncontent-length: 40\r\n\r\n{\"ta".to_vec(),
            408,
        ),
    ];
    for (request, status) in cases {
        let (got, body) = raw_http(addr, &request);
        assert_eq!(
            got,
            status,
            "{:.80}: {body}",
            String::from_utf8_lossy(&request)
        );
        let value: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{body:?} is not JSON: {e}"));
        if status == 422 {
            // FastAPI's validation-error shape: a list of {type, loc, msg}.
            let entries = value["detail"]
                .as_array()
                .unwrap_or_else(|| panic!("{value}"));
            assert!(
                !entries.is_empty()
                    && entries
                        .iter()
                        .all(|e| e["loc"].is_array() && e["msg"].is_string())
                    && value["code"].is_string(),
                "{value}"
            );
        } else if status >= 400 {
            assert!(
                value["detail"].is_string() && value["code"].is_string(),
                "{value}"
            );
        }
    }
}

#[test]
fn connections_over_the_bound_get_503_at_once() {
    let config = Config {
        max_connections: 2,
        request_timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let server = serve("127.0.0.1:0", config).unwrap();
    // Two connections that say nothing hold both places until their timeout.
    let _a = TcpStream::connect(server.addr()).unwrap();
    let _b = TcpStream::connect(server.addr()).unwrap();
    wait_for(&server, |s| s.connections == 2);
    // The refusal comes before any request (sending one first could race the close).
    let (status, body) = raw_http(server.addr(), b"");
    assert_eq!(status, 503, "{body}");
    assert_eq!(server.stats().refused_connections, 1);
}
