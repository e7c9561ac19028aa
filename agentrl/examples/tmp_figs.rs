// Temporary: renders test figures to /tmp/figs (delete when done).
use agentrl::plot::{LineChart, Series};
use std::path::Path;
fn main() {
    let mut c = LineChart::new("Episode success p^H", "horizon H", "P(episode succeeds)")
        .with_ranges((1.0, 50.0), (0.0, 1.0)).with_log_x();
    for p in [0.99, 0.95, 0.9, 0.8] {
        c = c.with_series(Series::new(format!("p = {p}"), (1..=50).map(|h| (h as f64, f64::powi(p, h))).collect()));
    }
    c.save_svg(Path::new("/tmp/figs/success.svg")).unwrap();
    let mut c = LineChart::new("Informative groups", "per-rollout success p", "1 - p^G - (1-p)^G")
        .with_ranges((0.0, 1.0), (0.0, 1.0));
    for g in [2, 8, 32] {
        c = c.with_series(Series::new(format!("G = {g}"), (0..=100).map(|i| { let p = i as f64 / 100.0; (p, 1.0 - p.powi(g) - (1.0 - p).powi(g)) }).collect()));
    }
    c.save_svg(Path::new("/tmp/figs/informative.svg")).unwrap();
    let c = LineChart::new("Single", "x", "y").with_ranges((0.0, 5.0), (0.0, 30.0))
        .with_series(Series::new("s", (0..=5).map(|i| (i as f64, (i * i) as f64)).collect()).with_markers());
    c.save_svg(Path::new("/tmp/figs/single.svg")).unwrap();
    if Path::new("agentrl/src/diagrams.rs").exists() {
        let ep = agentrl::episode::run_episode(&["<call> read </call>", "<call> test </call>", "<call> edit swap_minmax </call>", "<call> test </call>", "<call> submit </call>"], 6);
        agentrl_diag(&ep.transcript);
    }
}
#[allow(unused)]
fn agentrl_diag(t: &[(agentrl::episode::Owner, String)]) {
    // DIAG
}
