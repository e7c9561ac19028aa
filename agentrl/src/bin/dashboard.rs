//! `dashboard`: any training run's metrics as one figure of panels (Chapter 18).
//!
//! `cargo xtask dashboard RUN_DIR [OUT.svg]`, or directly
//! `cargo run --release -p agentrl --bin dashboard -- RUN_DIR [OUT.svg]`.

const HELP: &str = "dashboard: draw a training run's dashboard (Agentic RL in Rust, Chapter 18)

Usage: dashboard RUN_DIR [OUT.svg]

  RUN_DIR   a folder the training loop wrote: metrics.jsonl and schedule.json
  OUT.svg   where to write the figure (default RUN_DIR/dashboard.svg)

Panels: reward, held-out success, entropy, KL to the reference, clip fraction,
approx KL, gradient norm, sampled tokens per episode, mask coverage,
informative groups. A panel the run did not record stays empty.";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.iter().any(|a| a == "-h" || a == "--help") || args.len() > 2 {
        println!("{HELP}");
        std::process::exit(if args.is_empty() || args.len() > 2 {
            2
        } else {
            0
        });
    }
    let run_dir = std::path::PathBuf::from(&args[0]);
    let out = args
        .get(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| run_dir.join("dashboard.svg"));
    match agentrl::debugging::render_run(&run_dir, &out) {
        Ok(()) => println!("wrote {}", out.display()),
        Err(err) => {
            eprintln!("dashboard: {err}");
            std::process::exit(1);
        }
    }
}
