fn main() {
// CELL 1
use agentrl::clamp::*;
use agentrl::episode::*;
use agentrl::sandbox::*;
use tch::{Kind, Tensor};
agentrl::book::setup();
println!("--- cell clamp table");
{
    let sandbox = Sandbox::shared();
    let program = sandbox.compile(CLAMP_BUGGY).expect("the buggy source compiles");
    for test in PUBLIC_TESTS {
        let got = sandbox.call(&program, test.call).unwrap();
        println!("{} = {:<3} expected {}", test.call, got.to_string(), test.expected);
    }
}
println!("--- cell minmax");
{
    let sandbox = Sandbox::shared();
    let bare = sandbox.compile("").unwrap();
    for expr in ["min(0, 1.0)", "max(0.5, 1)", "min(2, 2.0)", "max(2.0, 2)"] {
        let value = sandbox.call(&bare, expr).unwrap();
        println!("{expr:12} -> {:4} ({})", value.to_string(), value.type_name());
    }
    let plain = rhai::Engine::new();
    for expr in ["min(0, 1.0)", "max(0.5, 1)", "min(2, 2.0)", "max(2.0, 2)"] {
        let v: rhai::Dynamic = plain.eval(expr).unwrap();
        println!("RHAI BUILTIN {expr:12} -> {} ({})", v, v.type_name());
    }
}
println!("--- cell tests");
for line in run_tests(CLAMP_BUGGY, PUBLIC_TESTS) {
    println!("{line}");
}
println!("fixed source, hidden tests:");
for line in run_tests(CLAMP_FIXED, HIDDEN_TESTS) {
    println!("{line}");
}
println!("--- cell sandbox");
const RUNAWAY: &str = "fn clamp(value, lower, upper){\n    loop { value += 1; }\n}\n";
const RECURSIVE: &str = "fn clamp(value, lower, upper){\n    clamp(value, lower, upper)\n}\n";
const BROKEN: &str = "fn clamp(value, lower, upper){\n    min(lower, max(value, upper)\n}\n";
for source in [RUNAWAY, RECURSIVE, BROKEN] {
    let t = std::time::Instant::now();
    for line in run_tests(source, &PUBLIC_TESTS[..1]) {
        println!("{line}");
    }
    eprintln!("{:?}", t.elapsed());
}
println!("--- cell parse");
for text in ["<call> read </call>", "<call> edit swap_minmax </call>", "please read the file"] {
    println!("{:34} -> {:?}", format!("{text:?}"), parse_call(text));
}
println!("--- cell edits");
println!("swap_minmax gives the fix: {}", swap_minmax(CLAMP_BUGGY) == CLAMP_FIXED);
println!("{}", hardcode_tests(CLAMP_BUGGY));
println!("--- cell solver");
const SOLVER: [&str; 5] = ["<call> read </call>", "<call> test </call>", "<call> edit swap_minmax </call>", "<call> test </call>", "<call> submit </call>"];
let solved = run_episode(&SOLVER, 6);
for (owner, text) in &solved.transcript[1..] {
    println!("{owner:>6}: {}", text.trim().replace('\n', "\n        "));
}
println!("reward: {:?}", solved.reward);
println!("--- cell hacker");
const HACKER: [&str; 3] = ["<call> edit hardcode_tests </call>", "<call> test </call>", "<call> submit </call>"];
let hacked = run_episode(&HACKER, 6);
println!("public tests seen by the agent:");
println!("{}", hacked.transcript[4].1);
println!("hidden-test reward: {:?}", hacked.reward);
let failing: Vec<String> = run_tests(&hacked.source, HIDDEN_TESTS).into_iter().filter(|l| !l.passed).map(|l| l.text).collect();
println!("failing hidden tests: {failing:?}");
println!("--- cell horizon");
for p in [0.99f64, 0.95, 0.90] {
    let cols: Vec<String> = [1, 5, 20, 50].iter().map(|&h| format!("H={h}: {:.3}", p.powi(h))).collect();
    println!("per-turn success {p:.2}: {}", cols.join(" "));
}
println!("--- cell tokens");
{
    let words = |owner: Owner| -> usize { solved.transcript.iter().filter(|(o, _)| *o == owner).map(|(_, t)| t.split_whitespace().count()).sum() };
    let total: usize = [Owner::Prompt, Owner::Policy, Owner::Env].into_iter().map(words).sum();
    for owner in [Owner::Prompt, Owner::Policy, Owner::Env] {
        let n = words(owner);
        println!("{owner:<6} {n:>2} tokens ({:.0}%)", 100.0 * n as f64 / total as f64);
    }
}
println!("--- cell random");
tch::manual_seed(0);
let first = Tensor::randint(6, [6], (Kind::Int64, tch::Device::Cpu));
println!("{:?}", Vec::<i64>::try_from(&first).unwrap());
let t = std::time::Instant::now();
let rollouts = random_rollouts(2000, 0, 6);
eprintln!("{:?}", t.elapsed());
let success = rollouts.rewards.mean(Kind::Float).double_value(&[]);
let hacked_rate = rollouts.hacked.to_kind(Kind::Float).mean(Kind::Float).double_value(&[]);
println!("success rate (hidden reward = 1): {success:.3}");
println!("submitted, public pass, hidden fail: {hacked_rate:.3}");
println!("--- cell weights");
{
    let rewards = Tensor::from_slice(&[1f32, 0., 0., 1.]); // [G]: one task, G = 4 attempts
    let weights = [
        ("SFT on all samples", rewards.ones_like()),
        ("rejection sampling", rewards.eq(1.0).to_kind(Kind::Float)),
        ("policy gradient, no baseline", rewards.shallow_clone()),
        ("policy gradient, mean baseline", &rewards - rewards.mean(Kind::Float)),
    ];
    for (name, w) in &weights {
        println!("{name:31} {:?}", Vec::<f32>::try_from(w).unwrap());
    }
}
println!("--- cell informative");
{
    let g = 8;
    for p in [0.0f64, 0.01, 0.05, 0.2, 0.5, 0.9, 0.99] {
        let informative = 1.0 - p.powi(g) - (1.0 - p).powi(g);
        println!("pass rate {:<5} P(group of {g} has mixed rewards) = {informative:.3}", format!("{p:?}"));
    }
}
}
