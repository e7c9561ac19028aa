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
    let path = root().join("target/criterion").join(group).join(name).join("new/estimates.json");
    let estimates: Value = serde_json::from_str(&util::read(&path)?).map_err(|err| format!("{}: {err}", path.display()))?;
    estimates["median"]["point_estimate"].as_f64().map(|ns| ns * 1e-9).ok_or_else(|| format!("{}: no median", path.display()))
}

/// The value after `label` on the line of `text` that starts with it.
fn field(text: &str, label: &str, index: usize) -> Result<f64> {
    let line = text.lines().find(|l| l.starts_with(label)).ok_or_else(|| format!("a benchmark printed no `{label}` line:\n{text}"))?;
    line[label.len()..]
        .split_whitespace()
        .nth(index)
        .and_then(|v| v.trim_end_matches('%').parse().ok())
        .ok_or_else(|| format!("cannot read `{line}`"))
}

fn processor() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info.lines().find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())).unwrap_or_else(|| "unknown".into());
    let isa = if info.contains(" avx512f") { "AVX-512" } else if info.contains(" avx2") { "AVX2" } else { "no AVX2" };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    format!("{model} ({isa}, {cores} cores)")
}

/// Run the benchmarks (unless `stored`: then rewrite the table from the
/// results of the last run, kept in `target/`) and write the table.
pub fn perf(stored: bool) -> Result<()> {
    let step_output = root().join("target/criterion/train_step.txt");
    let (rust_speed, torch_speed) = (root().join("target/criterion/policy_speed_rust.txt"), root().join("target/criterion/policy_speed_pytorch.txt"));
    if !stored {
        setup::all(false)?;
        let env = setup::book_env();
        step("benchmarks: generation with and without the KV cache, the gym and its runners, padded and packed updates (criterion)");
        run(Command::new("cargo").args(["bench", "-p", "agentrl", "--bench", "generate", "--bench", "gym", "--bench", "packing"]).envs(env.clone()).current_dir(root()))?;
        step("benchmark: one GRPO++ training step");
        let out = util::capture(Command::new("cargo").args(["bench", "-p", "agentrl", "--bench", "train_step"]).envs(env).current_dir(root()))?;
        if !out.status.success() {
            return Err(format!("the train_step benchmark failed:\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        std::fs::write(&step_output, &out.stdout).map_err(|err| format!("cannot write {}: {err}", step_output.display()))?;
        step("the policy's speed: TinyAgent in tch (benchmark policy_speed), then the same model in PyTorch eager (benches/policy_speed.py)");
        let mut tch_bench = Command::new("cargo");
        tch_bench.args(["bench", "-p", "agentrl", "--bench", "policy_speed"]);
        let mut eager = Command::new(setup::python());
        eager.arg(root().join("agentrl/benches/policy_speed.py"));
        for (what, command, output) in [("the policy_speed benchmark", &mut tch_bench, &rust_speed), ("benches/policy_speed.py", &mut eager, &torch_speed)] {
            let out = util::capture(command.envs(setup::book_env()).current_dir(root()))?;
            if !out.status.success() {
                return Err(format!("{what} failed:\n{}", String::from_utf8_lossy(&out.stderr)));
            }
            std::fs::write(output, &out.stdout).map_err(|err| format!("cannot write {}: {err}", output.display()))?;
        }
    }
    let (rust, torch) = (util::read(&rust_speed)?, util::read(&torch_speed)?);
    let speed = |text: &str, label: &str| field(text, label, 0);
    if speed(&rust, "parameters ")? != speed(&torch, "parameters ")? {
        return Err(format!("the PyTorch model is not TinyAgent's shape: {} and {} count different parameters", rust_speed.display(), torch_speed.display()));
    }
    let text = util::read(&step_output)?;
    let (cached, recomputed) = (median("generate_256", "kv_cache")?, median("generate_256", "recompute")?);
    let single = median("generate_256", "kv_cache_32_bit")?;
    let (cold, warm, process) = (median("runner", "in_process_cold_compile")?, median("runner", "in_process_cached_compile")?, median("runner", "process")?);
    let (generation, environment, learning) = (field(&text, "generation", 1)?, field(&text, "environment", 1)?, field(&text, "learning", 1)?);
    let per_action = field(&text, "sequence tokens per trained action token:", 0)?;
    let episode = median("gym", "random_episode")?;
    let (padded, sorted) = (median("update_64", "padded")?, median("update_64", "sorted")?);
    let (packed_384, packed_768) = (median("update_64", "packed_384")?, median("update_64", "packed_768")?);
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
    std::fs::write(root().join(TABLE), &table).map_err(|err| format!("cannot write {TABLE}: {err}"))?;
    eprintln!("{table}\nwrote {TABLE}");
    Ok(())
}
