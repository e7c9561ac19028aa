//! `cargo xtask setup`: everything the book needs, installed once, checked every time.
//!
//! Each step first checks whether its result is already there, so a second run
//! takes a second. The first run on a fresh machine takes several minutes
//! (libtorch download, compiling mdBook and evcxr).

use crate::util::{self, capture, cargo_bin, root, run, step, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub const TORCH: &str = "2.13.0"; // what tch 0.26 expects
const MDBOOK: &str = "0.5.3"; // the mdBook that mdbook-katex 0.10.0 is built against (a newer one makes it warn)
const MDBOOK_KATEX: &str = "0.10.0";
const EVCXR: &str = "0.22.0";
const KATEX_CSS: &str = "0.16.4"; // the KaTeX that mdbook-katex 0.10.0 renders with
/// The JupyterLab that `cargo xtask lab` installs into `.venv` (the newest when it was added).
pub const JUPYTERLAB: &str = "4.6.6";
/// The OpenEnv client that Chapter 13's server is tested with (agentrl's
/// `service::OPENENV_VERSION`; the integration test checks they agree).
pub const OPENENV: &str = "0.3.0";
/// What `openenv-core`'s client needs to import, pinned at the versions
/// tested: importing `openenv.core` loads its server modules too (FastAPI,
/// pydantic, FastMCP's client), but not gradio, the OpenAI and Hugging Face
/// clients or the CLI, which a full install brings (448 MB instead of about
/// 100 MB).
const OPENENV_CLIENT_DEPS: &[&str] = &[
    "fastapi==0.165.0",
    "pydantic==2.14.4",
    "fastmcp-slim[client]==4.2.3",
    "requests==2.34.2",
    "websockets==17.4",
];
/// The current OpenEnv release (the project's new name, `openenv`), which
/// cannot share a virtualenv with `openenv-core` (both install the package
/// `openenv`, and it needs FastMCP 3): a full install in `.venv-openenv`,
/// with its command-line tool (`openenv validate`), and the transformers
/// release whose `get_json_schema` TRL reads environment tools with.
pub const OPENENV_CURRENT: &str = "0.10.0";
const OPENENV_CURRENT_DEPS: &[&str] = &["transformers==5.25.0"];

/// The virtualenv of the current OpenEnv release.
pub fn openenv_venv() -> PathBuf {
    root().join(".venv-openenv")
}

pub const KERNEL: &str = "agentrl-rust";
/// The kernel the test command executes the notebooks with: the second setting.
pub const CHECK_KERNEL: &str = "agentrl-rust-second-setting";

pub fn venv() -> PathBuf {
    root().join(".venv")
}

pub fn python() -> PathBuf {
    venv().join("bin/python")
}

/// The folder holding libtorch's `lib/` and `include/` (a link made by setup).
pub fn libtorch() -> PathBuf {
    venv().join("libtorch")
}

/// Run every setup step; `browser` also installs Chromium for the HTML checks.
pub fn all(browser: bool) -> Result<()> {
    let start = Instant::now();
    let mut tools = begin(browser)?;
    tools.wait()?;
    eprintln!("setup complete ({})", util::secs(start));
    Ok(())
}

/// The book tools (mdBook with its KaTeX preprocessor, and evcxr's Jupyter
/// kernel) while `cargo install` builds them on threads of their own.
pub struct Tools(Option<std::thread::JoinHandle<Result<()>>>);

impl Tools {
    /// Wait until the tools are installed (at once if they were already).
    pub fn wait(&mut self) -> Result<()> {
        match self.0.take() {
            Some(handle) => handle
                .join()
                .unwrap_or_else(|_| Err("installing the book tools panicked".into())),
            None => Ok(()),
        }
    }
}

/// Every setup step but the end of the book tools' builds: the test command
/// waits for those only before the checks that use them (the HTML book and
/// the notebooks), so that on a fresh machine their compilation shares the
/// processor with the library tests and the chapters instead of going first.
pub fn begin(browser: bool) -> Result<Tools> {
    let start = Instant::now();
    python_env()?;
    // Downloads (pip, apt) and compiling (cargo install) use different
    // resources, so the book tools compile while the packages download.
    let builds = missing_tools();
    let tools =
        Tools((!builds.is_empty()).then(|| std::thread::spawn(move || build_tools(builds))));
    libtorch_link()
        .and_then(|()| jupyter())
        .and_then(|()| openenv_client())
        .and_then(|()| openenv_current())
        .and_then(|()| if browser { chromium() } else { Ok(()) })?;
    kernelspec()?;
    katex_assets()?;
    if tools.0.as_ref().is_some_and(|h| !h.is_finished()) {
        eprintln!("setup complete but for the book tools, which are still building in the background ({})", util::secs(start));
    }
    Ok(tools)
}

/// What reading the book needs and nothing more (`cargo xtask book`): mdBook
/// with mdbook-katex, built by `cargo install` while KaTeX's CSS and fonts are
/// fetched. No virtualenv, no libtorch, no evcxr, no Chromium.
pub fn reading() -> Result<()> {
    let start = Instant::now();
    let builds: Vec<_> = missing_tools()
        .into_iter()
        .filter(|(name, _)| name.starts_with("mdbook"))
        .collect();
    let fresh = !builds.is_empty();
    let mut tools = Tools(fresh.then(|| std::thread::spawn(move || build_tools(builds))));
    katex_assets()?;
    tools.wait()?;
    if fresh {
        eprintln!(
            "the book's reading tools are installed ({})",
            util::secs(start)
        );
    }
    Ok(())
}

/// What the exercises crate needs (`cargo xtask exercises`): the project
/// virtualenv with libtorch (or a link to yours), which `tch` links against.
pub fn solving() -> Result<()> {
    python_env()?;
    libtorch_link()
}

/// What running the notebooks needs (`cargo xtask lab`): libtorch, Jupyter,
/// evcxr's kernel and the kernelspecs, and JupyterLab at [`JUPYTERLAB`]; not
/// mdBook, the OpenEnv client or Chromium.
pub fn running() -> Result<()> {
    let start = Instant::now();
    python_env()?;
    let builds: Vec<_> = missing_tools()
        .into_iter()
        .filter(|(name, _)| *name == "evcxr_jupyter")
        .collect();
    let fresh = !builds.is_empty();
    let mut tools = Tools(fresh.then(|| std::thread::spawn(move || build_tools(builds))));
    libtorch_link()
        .and_then(|()| jupyter())
        .and_then(|()| jupyterlab())?;
    kernelspec()?;
    tools.wait()?;
    if fresh {
        eprintln!("the notebooks' tools are installed ({})", util::secs(start));
    }
    Ok(())
}

fn python_env() -> Result<()> {
    if python().exists() {
        return Ok(());
    }
    step("creating the project virtualenv .venv (python3 -m venv)");
    run(Command::new("python3").args(["-m", "venv"]).arg(venv()))
}

fn pip(args: &[&str]) -> Result<()> {
    run(Command::new(python())
        .args(["-m", "pip", "install", "--disable-pip-version-check"])
        .args(args))
}

fn site_packages() -> Result<PathBuf> {
    let out = capture(Command::new(python()).args([
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ]))?;
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// `.venv/libtorch` -> an existing `$LIBTORCH`, or pip's torch package.
fn libtorch_link() -> Result<()> {
    let link = libtorch();
    if link.join("lib").is_dir() && link.join("include").is_dir() {
        return Ok(());
    }
    let target = match std::env::var_os("LIBTORCH").map(PathBuf::from) {
        Some(own) if !own.starts_with(venv()) && own != link => {
            step(&format!(
                "using your libtorch at {} (LIBTORCH is set; skipping pip)",
                own.display()
            ));
            own
        }
        _ => {
            step(&format!("installing torch=={TORCH} into .venv with pip (about 4.7 GB with its CUDA libraries; a few minutes)"));
            pip(&[&format!("torch=={TORCH}")])?;
            site_packages()?.join("torch")
        }
    };
    if !target.join("lib").is_dir() {
        return Err(format!(
            "{} has no lib/ folder: not a libtorch",
            target.display()
        ));
    }
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link)
        .map_err(|err| format!("cannot link {}: {err}", link.display()))
}

fn jupyter() -> Result<()> {
    if venv().join("bin/jupyter-nbconvert").exists() {
        return Ok(());
    }
    step("installing Jupyter's nbclient and nbconvert into .venv");
    pip(&["nbclient", "nbconvert", "jupyter_client"])
}

/// JupyterLab at [`JUPYTERLAB`] in `.venv`, for `cargo xtask lab` (the test
/// command needs only nbclient).
fn jupyterlab() -> Result<()> {
    let installed = std::fs::read_dir(venv().join("lib"))
        .map(|entries| {
            entries.flatten().any(|entry| {
                entry
                    .path()
                    .join(format!("site-packages/jupyterlab-{JUPYTERLAB}.dist-info"))
                    .is_dir()
            })
        })
        .unwrap_or(false);
    if installed && venv().join("bin/jupyter-lab").exists() {
        return Ok(());
    }
    let t = Instant::now();
    step(&format!(
        "installing JupyterLab {JUPYTERLAB} into .venv with pip"
    ));
    pip(&[&format!("jupyterlab=={JUPYTERLAB}")])?;
    if openenv_installed() {
        eprintln!("  (pip's dependency \"ERROR\" about openenv-core is expected: setup installs its client without the server extras)");
    }
    eprintln!("  JupyterLab installed in {}", util::secs(t));
    Ok(())
}

/// Is `openenv-core` at [`OPENENV`] installed with the packages its client imports?
/// (Looks at the folders only, so the check costs no Python start.)
fn openenv_installed() -> bool {
    let Ok(entries) = std::fs::read_dir(venv().join("lib")) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let site = entry.path().join("site-packages");
        site.join(format!("openenv_core-{OPENENV}.dist-info"))
            .is_dir()
            && [
                "openenv",
                "fastapi",
                "pydantic",
                "fastmcp",
                "requests",
                "websockets",
                "mcp",
            ]
            .iter()
            .all(|p| site.join(p).is_dir())
    })
}

/// Chapter 13's tests run the real OpenEnv client against the gym server.
fn openenv_client() -> Result<()> {
    if openenv_installed() {
        return Ok(());
    }
    let t = Instant::now();
    step(&format!("installing the OpenEnv client (openenv-core=={OPENENV} without its server extras) into .venv (about 100 MB, under a minute)"));
    pip(&["--no-deps", &format!("openenv-core=={OPENENV}")])?;
    pip(OPENENV_CLIENT_DEPS)?;
    eprintln!("  the OpenEnv client installed in {}", util::secs(t));
    Ok(())
}

/// Chapter 13's tests also run the current OpenEnv release: its validator
/// (`openenv validate --url`), its MCP client, and the TRL environment class.
fn openenv_current() -> Result<()> {
    let venv = openenv_venv();
    let marker = venv.join(format!("installed-openenv-{OPENENV_CURRENT}"));
    if marker.exists() && venv.join("bin/openenv").exists() {
        return Ok(());
    }
    let t = Instant::now();
    step(&format!("installing OpenEnv {OPENENV_CURRENT} (package openenv, with its CLI) and transformers into .venv-openenv (about 500 MB, a minute or two)"));
    if !venv.join("bin/python").exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    run(Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
        ])
        .arg(format!("openenv=={OPENENV_CURRENT}"))
        .args(OPENENV_CURRENT_DEPS))?;
    util::write(&marker, "")?;
    eprintln!("  OpenEnv {OPENENV_CURRENT} installed in {}", util::secs(t));
    Ok(())
}

fn version_of(program: &Path) -> Option<String> {
    let out = Command::new(program).arg("--version").output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
}

/// Release-profile settings for `cargo install` of the book's tools: no
/// link-time optimisation (mdbook-katex asks for it, and it takes minutes on
/// one core) and parallel code generation. The tools work the same; they are
/// built in about half the time.
const QUICK_INSTALL: &[(&str, &str)] = &[
    ("CARGO_PROFILE_RELEASE_LTO", "false"),
    ("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16"),
];

/// evcxr_jupyter is also built at optimisation level 1. Most of its compile
/// time is rust-analyzer's crates; at level 1 the build took 490 s instead of
/// 928 s on a 2-core machine, and executing notebooks got about a tenth slower
/// (notebook 00: 40 s instead of 35 s; 02 and 03, two at a time: 63 s instead
/// of 56 to 61 s), because the kernel's own work is small beside compiling
/// and running the cells.
const EVCXR_INSTALL: &[(&str, &str)] = &[("CARGO_PROFILE_RELEASE_OPT_LEVEL", "1")];

/// The book tools that are missing or at another version, each with what
/// `cargo install` is given for it: mdBook, mdbook-katex, and evcxr_jupyter.
/// mdBook is built without its `serve` and `watch` features (a web server and
/// a file watcher the book never uses: `cargo xtask book --serve` serves the
/// pages itself), about a third less to compile; mdBook and mdbook-katex
/// build side by side (see [`build_tools`]).
fn missing_tools() -> Vec<(&'static str, Vec<String>)> {
    let bin = cargo_bin();
    let missing = |name: &str, version: &str| {
        !version_of(&bin.join(name)).is_some_and(|v| v.contains(version))
    };
    let mut builds: Vec<(&str, Vec<String>)> = Vec::new();
    if missing("mdbook", MDBOOK) {
        builds.push((
            "mdbook",
            vec![
                format!("mdbook@{MDBOOK}"),
                "--no-default-features".into(),
                "--features".into(),
                "search".into(),
            ],
        ));
    }
    if missing("mdbook-katex", MDBOOK_KATEX) {
        builds.push(("mdbook-katex", vec![format!("mdbook-katex@{MDBOOK_KATEX}")]));
    }
    // evcxr_jupyter has no --version; ask cargo which version it installed.
    let installed = capture(Command::new("cargo").args(["install", "--list"]))
        .map(|out| {
            String::from_utf8_lossy(&out.stdout).contains(&format!("evcxr_jupyter v{EVCXR}:"))
        })
        .unwrap_or(false);
    if !installed || !bin.join("evcxr_jupyter").exists() {
        builds.push(("evcxr_jupyter", vec![format!("evcxr_jupyter@{EVCXR}")]));
    }
    builds
}

/// Install `builds` (from [`missing_tools`]) side by side (each build alone
/// leaves a core idle much of the time), each writing its compiler output to a
/// log under `target/tool-builds/`.
fn build_tools(builds: Vec<(&'static str, Vec<String>)>) -> Result<()> {
    let logs = root().join("target/tool-builds");
    std::fs::create_dir_all(&logs)
        .map_err(|err| format!("cannot create {}: {err}", logs.display()))?;
    let outcomes: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = builds
            .iter()
            .map(|(name, crates)| {
                let log = logs.join(format!("{name}.log"));
                scope.spawn(move || {
                    let t = Instant::now();
                    step(&format!("cargo install --locked {} in the background (several minutes on a fresh machine; log: {})", crates.join(" "), log.display()));
                    let file = std::fs::File::create(&log).map_err(|err| format!("cannot create {}: {err}", log.display()))?;
                    let err_file = file.try_clone().map_err(|err| err.to_string())?;
                    let outcome = run(Command::new("cargo").args(["install", "--locked"]).args(crates).envs(QUICK_INSTALL.iter().copied()).envs(if *name == "evcxr_jupyter" { EVCXR_INSTALL } else { &[] }.iter().copied()).stdout(file).stderr(err_file));
                    match outcome {
                        Ok(()) => {
                            let names: Vec<&str> = crates.iter().map(String::as_str).filter(|c| c.contains('@')).collect();
                            eprintln!("  {} installed in {}", names.join(" and "), util::secs(t));
                            Ok(())
                        }
                        Err(err) => {
                            let text = std::fs::read_to_string(&log).unwrap_or_default();
                            let tail: Vec<&str> = text.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect();
                            Err(format!("{err}\nthe last lines of {}:\n{}", log.display(), tail.join("\n")))
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a tool build panicked".into()))
            })
            .collect()
    });
    outcomes.into_iter().collect()
}

/// The environment every book run gets: libtorch on the library path and pinned CPU kernels.
pub fn book_env() -> Vec<(String, String)> {
    let lib = libtorch().join("lib");
    let ld = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", lib.display()),
        _ => lib.display().to_string(),
    };
    vec![
        ("LIBTORCH".into(), libtorch().display().to_string()),
        ("LD_LIBRARY_PATH".into(), ld),
        ("ATEN_CPU_CAPABILITY".into(), "avx2".into()),
        ("MKL_CBWR".into(), "AVX2".into()),
        ("OMP_NUM_THREADS".into(), "1".into()),
        ("MKL_NUM_THREADS".into(), "1".into()),
        ("AGENTRL_THREADS".into(), "1".into()),
        // An idle OpenMP thread sleeps instead of spinning: two processes of
        // two threads each on two cores (the test's notebooks) otherwise take
        // about 1.5 times as long. It changes no number.
        ("OMP_WAIT_POLICY".into(), "PASSIVE".into()),
    ]
}

/// What the runs that train new weights in a way that does not settle get on
/// top of `book_env`: Chapter 16 (its teacher grows two new blocks and trains
/// them, and its on-policy students printed other numbers on one CI processor
/// under MKL's own code path) and the reader's Jupyter kernel, which may be the
/// one that pretrains the stored models. MKL honours `MKL_CBWR=AVX2` on Intel
/// processors only; on any other it falls back to its own choice of code path
/// (its verbose log then reads `CNR:AUTO`), so the sums of a matrix product are
/// ordered differently on an AMD processor. `COMPATIBLE`, the SSE2 branch, is
/// the one branch it runs on every x86-64 processor, at a half to a third of
/// the speed of the AVX2 one. It is still not enough for
/// bit-identical pretraining on Intel and AMD processors (Chapter 4's weight-0
/// model came out different), which is why the stored models are kept in the
/// repository rather than trained by each machine. Chapter 4 pretrains the
/// base model again, but that recipe settles (about 1e-9 apart after 600 steps
/// under two code paths, against the 1e-6 the chapter checks and the three
/// decimals it prints), and it pretrains the weight-0 model, which does not
/// settle, only when no kept model of its recipe exists; so it keeps the
/// faster branch, as do the chapters that train from stored weights (Chapter 0
/// shows why those do not amplify the order of their sums that far).
/// Chapters 0 to 3 train no network.
pub const FRESH_WEIGHTS: &[(&str, &str)] = &[("MKL_CBWR", "COMPATIBLE")];

/// Whether `chapter` (a chapter file's name) runs under [`FRESH_WEIGHTS`].
pub fn needs_compatible_path(chapter: &str) -> bool {
    chapter.starts_with("16-")
}

/// The second setting: what decides how the sums of a matrix product are
/// ordered, left to the processor as on any other machine: ATen's best kernels
/// for this CPU (AVX-512 where present) instead of the pinned AVX2 ones, MKL's
/// own choice of code path instead of its AVX2 one, and two threads, which split
/// products and reductions differently. The printed outputs must not move. An
/// empty value removes the variable from the book environment.
pub const SECOND_SETTING: &[(&str, &str)] = &[
    ("ATEN_CPU_CAPABILITY", ""),
    ("MKL_CBWR", "AUTO"),
    ("OMP_NUM_THREADS", "2"),
    ("MKL_NUM_THREADS", "2"),
    ("AGENTRL_THREADS", "2"),
];

/// `env` with `overrides` applied: each replaces the variable of the same
/// name, and an empty value removes it.
pub fn with_overrides(
    mut env: Vec<(String, String)>,
    overrides: &[(&str, &str)],
) -> Vec<(String, String)> {
    for (key, value) in overrides {
        env.retain(|(k, _)| k != key);
        if !value.is_empty() {
            env.push((key.to_string(), value.to_string()));
        }
    }
    env
}

/// `book_env` with the second setting's variables.
pub fn second_env() -> Vec<(String, String)> {
    with_overrides(book_env(), SECOND_SETTING)
}

/// The Jupyter kernel "Rust (agentrl)": evcxr with the libtorch paths and the
/// book's pinned setting in its environment (with [`FRESH_WEIGHTS`]: a reader's
/// notebook may be the one that pretrains the stored models or trains Chapter 16's teachers); and the same kernel under the
/// second setting, which the test command executes the notebooks with.
fn kernelspec() -> Result<()> {
    for (name, display, vars) in [
        (
            KERNEL,
            "Rust (agentrl)",
            with_overrides(book_env(), FRESH_WEIGHTS),
        ),
        (CHECK_KERNEL, "Rust (agentrl, second setting)", second_env()),
    ] {
        let mut env: serde_json::Map<String, serde_json::Value> =
            vars.into_iter().map(|(k, v)| (k, v.into())).collect();
        // The kernel gets libtorch alone on its library path, not this shell's.
        env.insert(
            "LD_LIBRARY_PATH".into(),
            libtorch().join("lib").display().to_string().into(),
        );
        let spec = serde_json::json!({
            "argv": [cargo_bin().join("evcxr_jupyter").display().to_string(), "--control_file", "{connection_file}"],
            "display_name": display,
            "language": "rust",
            "interrupt_mode": "message",
            "env": env,
        });
        let text = serde_json::to_string_pretty(&spec).unwrap();
        let path = venv()
            .join("share/jupyter/kernels")
            .join(name)
            .join("kernel.json");
        if util::read(&path).ok().as_deref() != Some(text.as_str()) {
            step(&format!(
                "writing the Jupyter kernelspec {}",
                path.display()
            ));
            util::write(&path, &text)?;
        }
    }
    Ok(())
}

/// KaTeX's stylesheet and fonts, served with the book (no CDN).
fn katex_assets() -> Result<()> {
    let dest = root().join("chapters/katex");
    if dest.join("katex.min.css").exists() && dest.join("fonts").is_dir() {
        return Ok(());
    }
    step(&format!(
        "fetching KaTeX {KATEX_CSS}'s CSS and fonts from the npm registry (npm pack)"
    ));
    if util::which("npm").is_none() {
        apt(&["nodejs", "npm"])?;
    }
    let tmp = root().join("target/katex-pack");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    run(Command::new("npm")
        .args(["pack", "--silent", &format!("katex@{KATEX_CSS}")])
        .current_dir(&tmp))?;
    run(Command::new("tar")
        .args(["xzf", &format!("katex-{KATEX_CSS}.tgz")])
        .current_dir(&tmp))?;
    std::fs::create_dir_all(dest.join("fonts")).map_err(|e| e.to_string())?;
    let dist = tmp.join("package/dist");
    std::fs::copy(dist.join("katex.min.css"), dest.join("katex.min.css"))
        .map_err(|e| e.to_string())?;
    for entry in std::fs::read_dir(dist.join("fonts")).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|ext| ext == "woff2") {
            std::fs::copy(&path, dest.join("fonts").join(path.file_name().unwrap()))
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

pub fn chromium_path() -> Option<PathBuf> {
    ["chromium", "chromium-browser"]
        .iter()
        .find_map(|name| util::which(name))
}

fn chromium() -> Result<()> {
    if chromium_path().is_some() {
        return Ok(());
    }
    step("installing Debian's chromium for the headless browser check (apt-get)");
    apt(&["chromium"])
}

fn apt(packages: &[&str]) -> Result<()> {
    run(Command::new("apt-get").arg("update").arg("-qq"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn overrides_replace_add_and_remove_variables() {
        let env = vec![
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "2".to_string()),
        ];
        let got = super::with_overrides(env, &[("A", ""), ("B", "3"), ("C", "4")]);
        assert_eq!(
            got,
            vec![
                ("B".to_string(), "3".to_string()),
                ("C".to_string(), "4".to_string())
            ]
        );
    }

    #[test]
    fn only_chapter_16_runs_on_the_compatible_path() {
        let chapters = crate::chapter::all().unwrap();
        let compatible: Vec<&str> = chapters
            .iter()
            .filter(|c| super::needs_compatible_path(&c.name))
            .map(|c| &c.name[..2])
            .collect();
        assert_eq!(compatible, ["16"]);
    }
}
