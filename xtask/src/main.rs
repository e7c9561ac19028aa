//! `cargo xtask`: the book's tooling. See README.md for the readers' commands and the test.
//!
//! This crate never links libtorch: it sets the environment up, then drives
//! cargo, the chapter runner, mdBook, Jupyter and Chromium as child processes.

mod cdp;
mod chapter;
mod checks;
mod exercises;
mod notebook;
mod perf;
mod readers;
mod runner;
mod setup;
mod site;
mod util;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Build, check and refresh the book Agentic RL in Rust")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install everything the book and its test need (idempotent; `book`, `lab` and `exercises`
    /// install only their own part, the other commands all of it).
    Setup {
        /// Also install Chromium for the HTML checks.
        #[arg(long)]
        browser: bool,
    },
    /// Build the HTML book from the chapters as committed (installing only mdBook, mdbook-katex and
    /// KaTeX's CSS and fonts); with --run, first run every chapter, check its outputs, rewrite its
    /// figures and regenerate the notebooks.
    Book {
        /// Serve the built book on http://127.0.0.1:PORT afterwards (until Ctrl-C).
        #[arg(long)]
        serve: bool,
        /// The port to serve on.
        #[arg(long, default_value_t = 3000, requires = "serve")]
        port: u16,
        /// Re-derive every output first: run every written chapter, check its outputs, rewrite its
        /// figures, regenerate the notebooks (the full setup, then about half an hour on two cores).
        #[arg(long)]
        run: bool,
    },
    /// Open the notebooks in JupyterLab with the book's kernel "Rust (agentrl)", installing
    /// JupyterLab, libtorch and evcxr first if they are missing; prints the URL.
    Lab {
        /// Do not open a browser (the default where there is no display).
        #[arg(long)]
        no_browser: bool,
        /// The port JupyterLab listens on (127.0.0.1 only).
        #[arg(long, default_value_t = 8888)]
        port: u16,
    },
    /// Grade one chapter's exercises (your stubs in exercises/src/chNN/stubs.rs) and print one line
    /// per exercise: solved or not with the first failing check's message, the stub and the answer.
    Exercises {
        /// The chapter: its number (7), module (ch07) or file name (07-advantages-and-credit-assignment).
        chapter: String,
        /// Grade the reference solutions instead of the stubs (as CI does).
        #[arg(long)]
        solutions: bool,
    },
    /// Every test: library, chapters, figures, exercises, notebooks (in Jupyter), HTML (in Chromium).
    Test {
        /// Skip executing notebooks in Jupyter (the slowest check).
        #[arg(long)]
        no_jupyter: bool,
        /// Only execute the notebooks in Jupyter and compare them with the chapters.
        #[arg(long, conflicts_with = "no_jupyter")]
        only_jupyter: bool,
        /// With --only-jupyter: only these chapters' notebooks (number or name).
        #[arg(short, long = "chapter", requires = "only_jupyter")]
        chapters: Vec<String>,
    },
    /// Run one chapter and print each cell's output and the run time.
    Run { chapter: String },
    /// Rewrite the output blocks and figures of one chapter (or all) from a fresh run.
    Refresh { chapter: Option<String> },
    /// Regenerate notebooks/ from chapters/.
    Notebooks,
    /// Build the HTML book from the chapters as they are and check it in headless Chromium.
    Html,
    /// Run the benchmarks under the book's settings and rewrite the performance appendix's table of ratios.
    Perf {
        /// Only rewrite the table from the results of the last run.
        #[arg(long)]
        stored: bool,
    },
    /// Draw the dashboard of a training run (Chapter 18): RUN_DIR holds its metrics.jsonl and
    /// schedule.json; the figure goes to OUT (default RUN_DIR/dashboard.svg).
    Dashboard {
        run_dir: std::path::PathBuf,
        out: Option<std::path::PathBuf>,
    },
    /// Fuzz the call parser, the environment step and both sandboxed runners (Chapter 19):
    /// INPUTS in all (default ten million), seeded; prints counts by outcome, the slowest input,
    /// memory, and every property that broke, and fails if any did.
    Fuzz {
        #[arg(long, default_value_t = 10_000_000)]
        inputs: u64,
        #[arg(long, default_value_t = 19)]
        seed: u64,
        /// Only these targets: "call parser", "environment step", "in-process runner", "child-process runner".
        #[arg(long = "target")]
        targets: Vec<String>,
        /// Also keep the inputs with this outcome (for example "unknown op") as findings, shrunk.
        #[arg(long)]
        record: Option<String>,
        /// Make one finding's input again from the seed a finding printed, and shrink it.
        #[arg(long)]
        replay: Option<u64>,
        /// With --replay: the finding's steps (an episode's, for the environment).
        #[arg(long, default_value_t = 1)]
        steps: usize,
    },
    /// Coverage-guided fuzzing with libFuzzer (cargo-fuzz, installed into target/ on first use):
    /// each target of fuzz/ for SECONDS, its corpus kept in target/fuzz-corpus/; prints the inputs
    /// run and the edges covered, and fails on a crash (Chapter 19).
    FuzzCoverage {
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Only these targets: call_parser, env_step, runner.
        #[arg(long = "target")]
        targets: Vec<String>,
    },
    /// The capstone (Chapter 19): warm start, RL, evaluation of three seeds and the goals, about
    /// ten minutes on two cores; started again after a stop, it resumes. `--short` runs the
    /// chapter's short configuration; `--record` also writes data/capstone-report.json.
    Capstone {
        #[arg(long)]
        short: bool,
        #[arg(long)]
        record: bool,
    },
    /// Print, for each training run a chapter wrote, its training success and tokens per iteration
    /// (the lines a failed output check prints, to compare two machines).
    Runs { chapter: String },
    /// Run chapters under other CPU settings and check that outputs and figures do not change,
    /// e.g. `cargo xtask setting ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=2 -c 3 -c 9`.
    Setting {
        /// Variables of the book environment to replace, as NAME=VALUE.
        #[arg(required = true)]
        vars: Vec<String>,
        /// Only these chapters (number or name); all by default.
        #[arg(short, long = "chapter")]
        chapters: Vec<String>,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Setup { browser } => setup::all(browser),
        Cmd::Book {
            serve,
            port,
            run: false,
        } => readers::read(serve, port),
        Cmd::Book {
            serve,
            port,
            run: true,
        } => checks::book(serve, port),
        Cmd::Lab { no_browser, port } => readers::lab(!no_browser && readers::has_display(), port),
        Cmd::Exercises { chapter, solutions } => exercises::exercises(&chapter, solutions),
        Cmd::Test {
            only_jupyter: true,
            chapters,
            ..
        } => checks::test_notebooks(&chapters),
        Cmd::Test { no_jupyter, .. } => checks::test(!no_jupyter),
        Cmd::Run { chapter } => checks::run_one(&chapter),
        Cmd::Refresh { chapter } => checks::refresh(chapter.as_deref()),
        Cmd::Notebooks => checks::notebooks(),
        Cmd::Html => checks::html(),
        Cmd::Perf { stored } => perf::perf(stored),
        Cmd::Setting { vars, chapters } => checks::setting(&vars, &chapters),
        Cmd::Dashboard { run_dir, out } => checks::dashboard(&run_dir, out.as_deref()),
        Cmd::Fuzz {
            inputs,
            seed,
            targets,
            record,
            replay,
            steps,
        } => {
            let mut extra = Vec::new();
            if let Some(kind) = record {
                extra.extend(["--record".to_string(), kind]);
            }
            if let Some(input_seed) = replay {
                extra.extend(["--replay".to_string(), input_seed.to_string()]);
                extra.extend(["--steps".to_string(), steps.to_string()]);
            }
            checks::fuzz(inputs, seed, &targets, &extra)
        }
        Cmd::FuzzCoverage { seconds, targets } => checks::fuzz_coverage(seconds, &targets),
        Cmd::Capstone { short, record } => checks::capstone(short, record),
        Cmd::Runs { chapter } => crate::chapter::find(&chapter).map(|c| {
            for line in checks::run_fingerprints(&c.name) {
                println!("{line}");
            }
        }),
    };
    if let Err(err) = result {
        eprintln!("\x1b[31merror:\x1b[0m {err}");
        std::process::exit(1);
    }
}
