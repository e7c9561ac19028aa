//! Chapter 13's load test as a benchmark: the gym server on loopback with N
//! concurrent WebSocket sessions, each client playing 10 episodes (oracle and
//! seeded random policies), every step checked against an in-process
//! `BugFixEnv`. Prints, per N, the step latency percentiles seen by the
//! clients, the steps per second, and the failures (error replies, failed
//! connections, mismatched steps); `cargo xtask perf` writes them into the
//! performance appendix. Machine-dependent: nothing here is asserted.

use agentrl::service::{run_load, serve, Config};

fn main() {
    for clients in [1usize, 8, 32, 64] {
        let config = Config {
            max_sessions: clients,
            max_connections: clients + 8,
            ..Config::default()
        };
        let server = serve("127.0.0.1:0", config).expect("a loopback port");
        let report = run_load(server.addr(), clients, 10, 13);
        server.stop();
        let t = &report.timing;
        println!(
            "load {clients}: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, {:.0} steps/s, {} steps, {} failures",
            t.step_p50_ms,
            t.step_p90_ms,
            t.step_p99_ms,
            t.steps_per_second,
            report.steps,
            report.errors + report.mismatches + (report.episodes_started - report.episodes_completed)
        );
    }
}
