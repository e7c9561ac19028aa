//! `cargo xtask perf`: run the benchmarks under the book's settings (one
//! libtorch thread, the pinned kernels) and write the table of measured
//! ratios that the performance appendix includes. Times change from run to
//! run and machine to machine; ratios measured in one run change much less,
//! and the table says on which processor they were measured.

use crate::setup;
use crate::util::{self, root, run, step, Result};
use serde_json::Value;
use std::process::Command;

/// Where the table goes; the appendix includes it.
const TABLE: &str = "chapters/appendix-performance-measured.md";

/// The median time of a criterion benchmark, in seconds.
fn median(group: &str, name: &str) -> Result<f64> {
    let path = root()
        .join("target/criterion")
        .join(group)
        .join(name)
        .join("new/estimates.json");
    let estimates: Value = serde_json::from_str(&util::read(&path)?)
        .map_err(|err| format!("{}: {err}", path.display()))?;
    estimates["median"]["point_estimate"]
        .as_f64()
        .map(|ns| ns * 1e-9)
        .ok_or_else(|| format!("{}: no median", path.display()))
}

/// The value after `label` on the line of `text` that starts with it.
fn field(text: &str, label: &str, index: usize) -> Result<f64> {
    let line = text
        .lines()
        .find(|l| l.starts_with(label))
        .ok_or_else(|| format!("a benchmark printed no `{label}` line:\n{text}"))?;
    line[label.len()..]
        .split_whitespace()
        .nth(index)
        .and_then(|v| v.trim_end_matches('%').parse().ok())
        .ok_or_else(|| format!("cannot read `{line}`"))
}

fn processor() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let isa = if info.contains(" avx512f") {
        "AVX-512"
    } else if info.contains(" avx2") {
        "AVX2"
    } else {
        "no AVX2"
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    format!("{model} ({isa}, {cores} cores)")
}

/// The commit whose training step the table compares with: the last one
/// before the loop's forward pass skipped the padding (length buckets).
const BASELINE: &str = "9451f14";

/// The train_step benchmark built from the source at `commit` (a work tree
/// under `target/`) and from the current source, copied side by side into
/// `target/criterion/` (both builds share the workspace's compiled
/// dependencies, and cargo gives the two programs the same name).
fn build_step_benchmarks(
    env: &[(String, String)],
) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let tree = root().join("target/perf-baseline");
    if !tree.join("Cargo.toml").exists() {
        let _ = std::fs::remove_dir_all(&tree);
        run(Command::new("git")
            .args(["worktree", "add", "--force", "--detach"])
            .arg(&tree)
            .arg(BASELINE)
            .current_dir(root()))?;
    }
    // The baseline links the same libtorch.
    std::fs::create_dir_all(tree.join(".venv")).map_err(|err| err.to_string())?;
    let link = tree.join(".venv/libtorch");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink(setup::libtorch(), &link)
            .map_err(|err| format!("cannot link libtorch into {}: {err}", tree.display()))?;
    }
    let mut built = Vec::new();
    for (name, dir) in [
        ("train_step_baseline", tree.clone()),
        ("train_step_current", root()),
    ] {
        let out = util::capture(
            Command::new("cargo")
                .args([
                    "bench",
                    "-p",
                    "agentrl",
                    "--bench",
                    "train_step",
                    "--no-run",
                    "--message-format=json",
                ])
                .env("CARGO_TARGET_DIR", root().join("target"))
                .envs(env.iter().cloned())
                .current_dir(&dir),
        )?;
        if !out.status.success() {
            return Err(format!(
                "building the train_step benchmark in {} failed:\n{}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let executable = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|m| m["target"]["name"] == "train_step")
            .find_map(|m| m["executable"].as_str().map(str::to_string))
            .ok_or_else(|| format!("cargo named no train_step executable in {}", dir.display()))?;
        let copy = root().join("target/criterion").join(name);
        std::fs::create_dir_all(copy.parent().unwrap()).map_err(|err| err.to_string())?;
        std::fs::copy(&executable, &copy)
            .map_err(|err| format!("cannot copy {executable}: {err}"))?;
        built.push(copy);
    }
    Ok((built.remove(0), built.remove(0)))
}

/// Run the baseline's and the current training step alternately, `rounds`
/// times each, and keep each run's printed table (the last run of each in
/// `baseline_out` and `current_out`); returns the medians over rounds of
/// (baseline step, current step, baseline learning, current learning), in seconds.
fn step_ratios(
    env: &[(String, String)],
    rounds: usize,
    baseline_out: &std::path::Path,
    current_out: &std::path::Path,
) -> Result<(f64, f64, f64, f64)> {
    let (baseline, current) = build_step_benchmarks(env)?;
    let mut times: [Vec<f64>; 4] = Default::default();
    for round in 0..rounds {
        for (k, (program, keep)) in [(&baseline, baseline_out), (&current, current_out)]
            .into_iter()
            .enumerate()
        {
            eprintln!(
                "  training step, round {} of {rounds}: {}",
                round + 1,
                program.display()
            );
            let out = util::capture(
                Command::new(program)
                    .arg("--bench")
                    .envs(env.iter().cloned())
                    .current_dir(root()),
            )?;
            if !out.status.success() {
                return Err(format!(
                    "{} failed:\n{}",
                    program.display(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            times[k].push(field(&text, "step", 0)?);
            times[2 + k].push(field(&text, "learning", 0)?);
            std::fs::write(keep, &text)
                .map_err(|err| format!("cannot write {}: {err}", keep.display()))?;
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [mut a, mut b, mut c, mut d] = times;
    Ok((
        median(&mut a),
        median(&mut b),
        median(&mut c),
        median(&mut d),
    ))
}

/// Run `cargo bench --bench NAME` in the book environment `env` and keep what it prints in `output`.
fn bench_to_file(name: &str, env: &[(String, String)], output: &std::path::Path) -> Result<()> {
    let out = util::capture(
        Command::new("cargo")
            .args(["bench", "-p", "agentrl", "--bench", name])
            .envs(env.iter().cloned())
            .current_dir(root()),
    )?;
    if !out.status.success() {
        return Err(format!(
            "the {name} benchmark failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(output, &out.stdout)
        .map_err(|err| format!("cannot write {}: {err}", output.display()))
}

/// Run the benchmarks (unless `stored`: then rewrite the table from the
/// results of the last run, kept in `target/`) and write the table.
pub fn perf(stored: bool) -> Result<()> {
    let step_output = root().join("target/criterion/train_step.txt");
    let baseline_output = root().join("target/criterion/train_step_baseline.txt");
    let ratios_output = root().join("target/criterion/train_step_ratios.json");
    let target_output = root().join("target/criterion/time_to_target.txt");
    let load_output = root().join("target/criterion/load.txt");
    let (rust_speed, torch_speed) = (
        root().join("target/criterion/policy_speed_rust.txt"),
        root().join("target/criterion/policy_speed_pytorch.txt"),
    );
    if !stored {
        setup::all(false)?;
        let env = setup::book_env();
        step("benchmarks: generation with and without the KV cache, the gym and its runners, padded and packed updates (criterion)");
        run(Command::new("cargo")
            .args([
                "bench", "-p", "agentrl", "--bench", "generate", "--bench", "gym", "--bench",
                "packing",
            ])
            .envs(env.clone())
            .current_dir(root()))?;
        step(&format!("benchmark: one GRPO++ training step, this commit against {BASELINE} (built side by side), three rounds alternating"));
        let (before, after, learning_before, learning_after) =
            step_ratios(&env, 3, &baseline_output, &step_output)?;
        let ratios = serde_json::json!({"baseline": BASELINE, "step_before": before, "step_after": after, "learning_before": learning_before, "learning_after": learning_after});
        std::fs::write(&ratios_output, ratios.to_string())
            .map_err(|err| format!("cannot write {}: {err}", ratios_output.display()))?;
        step("benchmark: GRPO++ to a mean held-out success of 0.8 over five seeds, two at a time");
        bench_to_file("time_to_target", &env, &target_output)?;
        step("benchmark: the gym server under 1, 8, 32 and 64 concurrent sessions (Chapter 13's load test)");
        bench_to_file("load", &env, &load_output)?;
        step("the policy's speed: TinyAgent in tch (benchmark policy_speed), then the same model in PyTorch eager (benches/policy_speed.py)");
        let mut tch_bench = Command::new("cargo");
        tch_bench.args(["bench", "-p", "agentrl", "--bench", "policy_speed"]);
        let mut eager = Command::new(setup::python());
        eager.arg(root().join("agentrl/benches/policy_speed.py"));
        for (what, command, output) in [
            ("the policy_speed benchmark", &mut tch_bench, &rust_speed),
            ("benches/policy_speed.py", &mut eager, &torch_speed),
        ] {
            let out = util::capture(command.envs(setup::book_env()).current_dir(root()))?;
            if !out.status.success() {
                return Err(format!(
                    "{what} failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            std::fs::write(output, &out.stdout)
                .map_err(|err| format!("cannot write {}: {err}", output.display()))?;
        }
    }
    let (rust, torch) = (util::read(&rust_speed)?, util::read(&torch_speed)?);
    let speed = |text: &str, label: &str| field(text, label, 0);
    if speed(&rust, "parameters ")? != speed(&torch, "parameters ")? {
        return Err(format!(
            "the PyTorch model is not TinyAgent's shape: {} and {} count different parameters",
            rust_speed.display(),
            torch_speed.display()
        ));
    }
    let text = util::read(&step_output)?;
    let (cached, recomputed) = (
        median("generate_256", "kv_cache")?,
        median("generate_256", "recompute")?,
    );
    let single = median("generate_256", "kv_cache_32_bit")?;
    let (cold, warm, process) = (
        median("runner", "in_process_cold_compile")?,
        median("runner", "in_process_cached_compile")?,
        median("runner", "process")?,
    );
    let (generation, environment, learning) = (
        field(&text, "generation", 1)?,
        field(&text, "environment", 1)?,
        field(&text, "learning", 1)?,
    );
    let per_action = field(&text, "sequence tokens per trained action token:", 0)?;
    let ratios: Value = serde_json::from_str(&util::read(&ratios_output)?)
        .map_err(|err| format!("{}: {err}", ratios_output.display()))?;
    let number = |key: &str| {
        ratios[key]
            .as_f64()
            .ok_or_else(|| format!("{}: no {key}", ratios_output.display()))
    };
    let (step_ratio, learning_ratio) = (
        number("step_before")? / number("step_after")?,
        number("learning_before")? / number("learning_after")?,
    );
    let episode = median("gym", "random_episode")?;
    let (padded, sorted) = (
        median("update_64", "padded")?,
        median("update_64", "sorted")?,
    );
    let (packed_384, packed_768) = (
        median("update_64", "packed_384")?,
        median("update_64", "packed_768")?,
    );
    // The time-to-target run: its target line and the seeds' spread, or that it missed.
    let target = util::read(&target_output)?;
    let after = |label: &str| {
        target
            .lines()
            .find_map(|l| l.strip_prefix(label).map(str::to_string))
    };
    let (to_target, iteration, spread) = match (
        after("time to target: "),
        after("target: mean held-out >= 0.8 over 5 seeds first at iteration "),
        after("training seconds per seed to iteration "),
    ) {
        (Some(time), Some(iteration), Some(per_seed)) => {
            let seconds = time.split_whitespace().next().unwrap_or("?").to_string();
            let range = per_seed
                .split_once(": ")
                .map(|(_, r)| r.to_string())
                .unwrap_or(per_seed.clone());
            (format!("{seconds} s"), iteration, format!("{range} s"))
        }
        _ => {
            let missed = after("target: mean held-out >= 0.8 ")
                .ok_or_else(|| format!("{}: no target line", target_output.display()))?;
            (missed, "–".to_string(), "–".to_string())
        }
    };
    // The load test's lines: "load N: p50 A ms, p90 B ms, p99 C ms, D steps/s, E steps, F failures".
    let load = util::read(&load_output)?;
    let mut load_rows = Vec::new();
    for (i, line) in load.lines().filter(|l| l.starts_with("load ")).enumerate() {
        let (clients, rest) = line["load ".len()..]
            .split_once(": ")
            .ok_or_else(|| format!("{}: cannot read {line:?}", load_output.display()))?;
        let what = if i == 0 { "gym server under load" } else { "" };
        load_rows.push((
            what,
            format!("{clients} concurrent WebSocket {} on loopback, 10 episodes each, every step checked: the clients' step latency, steps per second, failures (not a ratio)", if clients == "1" { "session" } else { "sessions" }),
            rest.to_string(),
        ));
    }
    if load_rows.is_empty() {
        return Err(format!("{}: no load lines", load_output.display()));
    }
    let rows = [
        ("KV cache", "generating 256 tokens for 8 prompts: time without the cache / time with it", format!("{:.1}×", recomputed / cached)),
        ("64-bit weights", "the same generation with the cache: 64-bit weights / 32-bit weights", format!("{:.2}×", cached / single)),
        ("compile cache", "public tests of task 0, in process: cold compile / cached compile", format!("{:.1}×", cold / warm)),
        ("process isolation", "the same tests in a child process / in process with a cached compile", format!("{:.0}×", process / warm)),
        ("result cache", "one random-policy episode, test results cached / one test run in process", format!("{:.2}×", episode / warm)),
        ("training step", "share of generation (sampling with the KV cache)", format!("{generation:.0} %")),
        ("", "share of the environment (tools, test runs, observations)", format!("{environment:.0} %")),
        ("", "share of learning (advantages, forward and backward, optimiser)", format!("{learning:.0} %")),
        ("", "sequence tokens through the update per trained action token", format!("{per_action:.1}")),
        ("", &format!("one step at commit {BASELINE} (padded update) / one step now (micro-batches of similar length); medians of 3 alternating runs"), format!("{step_ratio:.2}×")),
        ("", "the same for the learning part alone", format!("{learning_ratio:.2}×")),
        ("time to target", "wall seconds for GRPO++ (Chapter 9's configuration), five seeds two at a time on this machine's two cores, to a mean held-out success ≥ 0.8 over the seeds (training only; evaluations every 2 iterations not counted)", to_target),
        ("", "the iteration at which the five seeds' mean first reached 0.8", iteration),
        ("", "each seed's training seconds to that iteration, least to most", spread),
        ("the policy vs PyTorch", "tokens sampled per second with the KV cache, B = 1: TinyAgent in tch / the same model in PyTorch eager", format!("{:.2}×", speed(&rust, "decode 1 ")? / speed(&torch, "decode 1 ")?)),
        ("", "the same, B = 8", format!("{:.2}×", speed(&rust, "decode 8 ")? / speed(&torch, "decode 8 ")?)),
        ("", "the same, B = 32", format!("{:.2}×", speed(&rust, "decode 32 ")? / speed(&torch, "decode 32 ")?)),
        ("", "one training step (forward, backward, AdamW) on 16 × 256 tokens: PyTorch's time / tch's time", format!("{:.2}×", speed(&torch, "train_step ")? / speed(&rust, "train_step ")?)),
        ("packing", "forward and backward over Chapter 14's 64 episodes, padded to the longest (64 rows) / packed into rows of 384", format!("{:.2}×", padded / packed_384)),
        ("", "padded to the longest / packed into rows of 768", format!("{:.2}×", padded / packed_768)),
        ("", "padded to the longest / padded in 8 minibatches of similar length", format!("{:.2}×", padded / sorted)),
    ];
    let mut table = format!(
        "<!-- written by `cargo xtask perf`; do not edit -->\n\nMeasured in one run of `cargo xtask perf` on {}, PyTorch {} (libtorch), one libtorch thread, AVX2 kernels.\n\n| what | ratio of | measured |\n| --- | --- | ---: |\n",
        processor(),
        setup::TORCH
    );
    for (what, of, value) in rows {
        table.push_str(&format!("| {what} | {of} | {value} |\n"));
    }
    for (what, of, value) in &load_rows {
        table.push_str(&format!("| {what} | {of} | {value} |\n"));
    }
    std::fs::write(root().join(TABLE), &table)
        .map_err(|err| format!("cannot write {TABLE}: {err}"))?;
    eprintln!("{table}\nwrote {TABLE}");
    Ok(())
}
