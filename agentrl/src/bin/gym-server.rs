//! `gym-server`: the BugFix gym as an OpenEnv server (Chapter 13).
//!
//! `cargo run -p agentrl --bin gym-server -- --port 8000`, then point an
//! OpenEnv client at `http://127.0.0.1:8000`.

use agentrl::service::{serve, Config, OPENENV_VERSION};
use std::time::Duration;

const HELP: &str = "gym-server: the BugFix gym of Agentic RL in Rust as an OpenEnv server

Usage: gym-server [--host HOST] [--port PORT] [--max-sessions N] [--idle-timeout SECONDS] [--held-out] [--quiet]

  --host HOST             address to listen on (default 127.0.0.1)
  --port PORT             port to listen on; 0 picks a free one (default 8000)
  --max-sessions N        concurrent WebSocket sessions (default 64)
  --idle-timeout SECONDS  close a WebSocket that sends nothing for this long (default 300)
  --held-out              also serve the held-out split (for evaluation; not for a trainer)
  --quiet                 do not log sessions and errors to stderr
  -h, --help              print this help

Protocol: OpenEnv (the client of openenv-core) over WebSocket /ws, plus HTTP
GET /health /metadata /schema /state /stats /openapi.json and POST /reset /step,
and MCP (tools/list, tools/call) over POST /mcp and /ws.
Reset data: {\"task\": N, \"split\": \"train\" | \"held_out\"}; step data: {\"message\": \"<call> read </call>\"}.
The first line on stdout is the address the server listens on.";

fn parse() -> Result<(String, u16, Config), String> {
    let mut host = "127.0.0.1".to_string();
    let mut port = 8000u16;
    let mut config = Config {
        log: true,
        ..Config::default()
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            "--host" => host = value("--host")?,
            "--port" => {
                port = value("--port")?
                    .parse()
                    .map_err(|e| format!("--port: {e}"))?
            }
            "--max-sessions" => {
                config.max_sessions = value("--max-sessions")?
                    .parse()
                    .map_err(|e| format!("--max-sessions: {e}"))?;
                if config.max_sessions == 0 {
                    return Err("--max-sessions must be at least 1".into());
                }
                config.max_connections = config.max_connections.max(config.max_sessions + 16);
            }
            "--idle-timeout" => {
                let secs: f64 = value("--idle-timeout")?
                    .parse()
                    .map_err(|e| format!("--idle-timeout: {e}"))?;
                if !(secs > 0.0 && secs.is_finite()) {
                    return Err("--idle-timeout must be a positive number of seconds".into());
                }
                config.idle_timeout = Duration::from_secs_f64(secs);
            }
            "--held-out" => config.limits.serve_held_out = true,
            "--quiet" => config.log = false,
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok((host, port, config))
}

fn main() {
    let (host, port, config) = match parse() {
        Ok(parsed) => parsed,
        Err(err) => {
            eprintln!("gym-server: {err}");
            std::process::exit(2);
        }
    };
    let server = match serve((host.as_str(), port), config) {
        Ok(server) => server,
        Err(err) => {
            eprintln!("gym-server: cannot listen on {host}:{port}: {err}");
            std::process::exit(1);
        }
    };
    println!(
        "gym-server listening on {} (WebSocket ws://{}/ws; OpenEnv {OPENENV_VERSION} protocol)",
        server.url(),
        server.addr()
    );
    server.wait();
}
