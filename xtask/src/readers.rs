//! Two of the readers' commands: `cargo xtask book [--serve]`, the HTML book
//! from the chapters as committed, and `cargo xtask lab`, JupyterLab on the
//! notebooks with the book's kernel. (The third, `cargo xtask exercises N`,
//! is in `exercises.rs`.) Each installs only what it needs.

use crate::setup::{self, KERNEL};
use crate::site;
use crate::util::{root, secs, step, Result};
use std::process::Command;
use std::time::{Duration, Instant};

/// `cargo xtask book [--serve]`: install mdBook, mdbook-katex and KaTeX's CSS
/// and fonts if they are missing, build the HTML book from the chapters,
/// outputs and figures as committed (no chapter runs), check the pages need
/// nothing from the network, and with `serve` serve them on `port`.
pub fn read(serve: bool, port: u16) -> Result<()> {
    let start = Instant::now();
    setup::reading()?;
    let t = Instant::now();
    step("building the HTML book from the chapters as committed (no chapter is run: `cargo xtask book --run` runs them)");
    site::build()?;
    eprintln!("  built in {}", secs(t));
    let problems = site::static_problems()?;
    if problems.is_empty() {
        eprintln!("  offline: the math is rendered in the pages, KaTeX's CSS and fonts are local, nothing comes from a CDN, every link resolves");
    } else {
        eprintln!("\x1b[33mwarning:\x1b[0m the built pages have problems (`cargo xtask html` checks them in full):\n{}", problems.join("\n"));
    }
    eprintln!(
        "book built in {}: {}",
        secs(start),
        root().join("book/index.html").display()
    );
    if serve {
        site::serve(port)?;
    }
    Ok(())
}

/// Whether JupyterLab should open a browser: only where there is a display
/// to show one (on Linux, `DISPLAY` or `WAYLAND_DISPLAY`; always on macOS).
pub fn has_display() -> bool {
    cfg!(target_os = "macos")
        || ["DISPLAY", "WAYLAND_DISPLAY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}

/// Whether this process runs as root (Jupyter refuses to start as root
/// without `--allow-root`). Reads `/proc/self/status`; false where there is none.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|l| {
                l.strip_prefix("Uid:")
                    .map(|ids| ids.split_whitespace().next() == Some("0"))
            })
        })
        .unwrap_or(false)
}

/// A fresh secret for the server's URL: 24 random bytes as hex.
fn token() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|err| format!("cannot read /dev/urandom for the JupyterLab token: {err}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `cargo xtask lab`: install JupyterLab, libtorch, evcxr and the book's
/// kernels if they are missing, then run JupyterLab on `notebooks/` at
/// 127.0.0.1:`port` with "Rust (agentrl)" as the default kernel, print its
/// URL and the kernel's name once it answers, and wait until it stops.
/// `open_browser` lets JupyterLab open the URL in a browser.
pub fn lab(open_browser: bool, port: u16) -> Result<()> {
    let start = Instant::now();
    setup::running()?;
    // Fail clearly on a busy port rather than let Jupyter pick another one
    // than the URL printed.
    drop(
        std::net::TcpListener::bind(("127.0.0.1", port)).map_err(|err| {
            format!("cannot use port {port} for JupyterLab ({err}): pass another with --port")
        })?,
    );
    let token = token()?;
    let notebooks = root().join("notebooks");
    let mut cmd = Command::new(setup::venv().join("bin/jupyter"));
    cmd.arg("lab")
        .arg(format!("--ServerApp.root_dir={}", notebooks.display()))
        .args([
            "--ServerApp.ip=127.0.0.1",
            &format!("--ServerApp.port={port}"),
            "--ServerApp.port_retries=0",
        ])
        .arg(format!("--IdentityProvider.token={token}"))
        .arg(format!(
            "--MappingKernelManager.default_kernel_name={KERNEL}"
        ))
        // One Ctrl-C stops it, without the question Jupyter otherwise asks.
        .arg("--ServerApp.answer_yes=True")
        .current_dir(&notebooks);
    if !open_browser {
        cmd.arg("--no-browser");
    }
    if is_root() {
        cmd.arg("--allow-root");
    }
    step(&format!(
        "starting JupyterLab {} on notebooks/ (Ctrl-C to stop)",
        setup::JUPYTERLAB
    ));
    let mut child = cmd
        .spawn()
        .map_err(|err| format!("could not start {cmd:?}: {err}"))?;
    let url = format!("http://127.0.0.1:{port}/lab?token={token}");
    // JupyterLab logs its start-up at length; the URL is printed once it answers.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().map_err(|err| err.to_string())? {
            return Err(format!(
                "JupyterLab stopped before it answered ({status}); its messages are above"
            ));
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("JupyterLab did not answer on port {port} within two minutes; its messages are above"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "\n\x1b[1mJupyterLab is running ({} after the command started): {url}\x1b[0m\n  notebooks: {} (one per chapter, generated from chapters/)\n  kernel: \"Rust (agentrl)\" ({KERNEL}), the default for new notebooks and the one each notebook names\n  Ctrl-C stops it\n",
        secs(start),
        notebooks.display()
    );
    let status = child.wait().map_err(|err| err.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("JupyterLab exited with {status}"))
    }
}
