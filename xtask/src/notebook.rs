//! Notebooks: each chapter as a Jupyter notebook for the evcxr Rust kernel,
//! generated (never edited by hand) and executed headless to check that its
//! outputs equal the chapter's.

use crate::chapter::{expand_includes, Chapter};
use crate::setup::{self, KERNEL};
use crate::util::{self, root, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub fn path(chapter: &Chapter) -> PathBuf {
    root()
        .join("notebooks")
        .join(format!("{}.ipynb", chapter.name))
}

/// The first code cell: load the library (and tch) into the kernel.
fn preamble() -> String {
    [
        "// Setup: load the book's library (with tch and rand) into the kernel; the first run compiles libtorch's bindings (minutes).",
        ":dep agentrl = { path = \"../agentrl\" }",
        ":dep tch = \"0.26\"",
        ":dep rand = \"0.9\"",
    ]
    .join("\n")
}

/// The crates the preamble loads with `:dep`: (name, what follows `=`).
fn preamble_deps() -> Vec<(String, String)> {
    preamble()
        .lines()
        .filter_map(|line| line.strip_prefix(":dep ")?.split_once('='))
        .map(|(name, spec)| (name.trim().to_string(), spec.trim().to_string()))
        .collect()
}

fn lines_source(text: &str) -> Value {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    json!(lines)
}

fn markdown_cell(text: &str) -> Value {
    json!({"cell_type": "markdown", "metadata": {}, "source": lines_source(text.trim_matches('\n'))})
}

fn code_cell(code: &str, output: &str) -> Value {
    let outputs = if output.is_empty() {
        json!([])
    } else {
        json!([{"name": "stdout", "output_type": "stream", "text": lines_source(&format!("{output}\n"))}])
    };
    json!({"cell_type": "code", "execution_count": null, "metadata": {}, "outputs": outputs, "source": lines_source(code)})
}

/// Markdown adjusted for the notebooks/ folder: figure and chapter links, fences.
fn for_notebook(markdown: &str) -> String {
    let mut text = markdown.replace("](figures/", "](../figures/");
    // links to other chapters point at their notebooks
    let mut out = String::new();
    while let Some(at) = text.find(".md)") {
        let head = &text[..at];
        let link_start = head.rfind("](").map(|p| p + 2).unwrap_or(at);
        let target = &text[link_start..at];
        if target.len() > 3 && target.as_bytes()[..2].iter().all(u8::is_ascii_digit)
            || target.starts_with("answers")
        {
            out.push_str(head);
            out.push_str(".ipynb)");
        } else {
            out.push_str(&text[..at + 4]);
        }
        text = text[at + 4..].to_string();
    }
    out.push_str(&text);
    out.replace("```rust,ignore", "```rust")
}

/// Build the notebook JSON for a chapter.
pub fn generate(chapter: &Chapter) -> Result<String> {
    let mut cells = vec![
        markdown_cell(&format!(
            "*Generated from `chapters/{}.md` by `cargo xtask notebooks`; run it with the \"Rust (agentrl)\" kernel.*",
            chapter.name
        )),
        code_cell(&preamble(), ""),
    ];
    let mut prose = String::new();
    let mut at = 0;
    for cell in &chapter.cells {
        // prose between the previous cell and this one (without the fence line)
        let fence_line = cell.line - 2;
        prose.push_str(&chapter.lines[at..fence_line].join("\n"));
        let text = expand_includes(&prose)?;
        if !text.trim().is_empty() {
            cells.push(markdown_cell(&for_notebook(&text)));
        }
        prose.clear();
        let output = cell
            .output
            .as_ref()
            .map(|(text, _, _)| text.as_str())
            .unwrap_or("");
        cells.push(code_cell(&cell.code, output));
        at = cell
            .output
            .as_ref()
            .map(|(_, _, end)| *end)
            .unwrap_or(cell.end);
    }
    prose.push_str(&chapter.lines[at..].join("\n"));
    let text = expand_includes(&prose)?;
    if !text.trim().is_empty() {
        cells.push(markdown_cell(&for_notebook(&text)));
    }
    let notebook = json!({
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Rust (agentrl)", "language": "rust", "name": KERNEL},
            "language_info": {"codemirror_mode": "rust", "file_extension": ".rs", "mimetype": "text/rust", "name": "Rust", "pygment_lexer": "rust", "version": ""}
        },
        "nbformat": 4,
        "nbformat_minor": 4
    });
    let mut text = serde_json::to_string_pretty(&notebook).unwrap();
    text.push('\n');
    Ok(text)
}

/// The library as the test command's notebooks load it. With the preamble's
/// `:dep` lines evcxr compiles agentrl, tch, torch-sys (with libtorch's C++
/// wrapper) and all their dependencies again in its own build folder: evcxr
/// 0.22 generates a crate `ctx` whose `[profile.dev]` it writes itself
/// (`codegen-units = 16`, `rpath`, `strip`, no debug information), with no
/// lock file (the newest matching versions), and runs `cargo build --target
/// <host triple>` there with `CARGO_TARGET_DIR=target` and
/// `RUSTFLAGS=-Cprefer-dynamic`. The explicit `--target` alone gives every
/// unit another metadata hash and another folder than the workspace's builds
/// (which name no target), so no artifact of the chapter stage can count as
/// up to date there; on a fresh 2-core machine that compile took about 500 s
/// of the first notebook.
///
/// So the test runs the preamble as it is (evcxr's cargo resolves the crates,
/// and its rust-analyzer reads their sources to learn the types of the
/// variables cells keep), after one `:build_env` line that makes evcxr's cargo
/// build through `xtask/python/rustc_wrapper.py`: each cell is compiled
/// against the rlibs that `cargo build` of the chapter runner
/// (`target/chapter-runner`, the crate the chapters' cells are compiled in:
/// agentrl, tch and rand, the workspace's profiles and target folder) has just
/// made from the current source, and the other crates of evcxr's build get
/// empty placeholders instead of a compile. The cells themselves are compiled
/// by evcxr as before, with evcxr's own profile. (rust-analyzer reads the
/// newest versions matching the preamble, the cells link the workspace's
/// locked ones, which [`built_library`] checks are within the preamble's
/// requirements: a type that differs between the two is a compile error in
/// the cell, never a different number.)
pub struct BuiltLibrary {
    /// [`snapshot_folder`]: hard links to the rlibs, the wrapper as
    /// `rustc-wrapper`, and `link-args`, the arguments that link a cell
    /// against the rlibs (one a line): the snapshot as the dependency search
    /// path, the native search paths of the dependencies' build scripts
    /// (libtorch's `lib/`), and one `--extern` per crate of the preamble.
    folder: PathBuf,
}

impl BuiltLibrary {
    /// The cell that stands for the preamble in the test's runs: the
    /// notebook's own, after the `:build_env` line (`:dep` compiles at once).
    /// The variable is set for evcxr's cargo only, not for the cells' process.
    fn preamble(&self) -> String {
        format!(
            "// Setup (test command): evcxr's cargo builds through target/notebook-deps/rustc-wrapper (xtask/python/rustc_wrapper.py), which links the cells against the library as the chapters were built from the current source instead of compiling it again.\n:build_env RUSTC_WRAPPER={}\n{}",
            self.folder.join("rustc-wrapper").display(),
            preamble()
        )
    }
}

/// The folder of hard links to the rlibs the notebooks link: a later build in
/// `target/` replaces its files (rustc writes a new file and renames it), so
/// the notebooks keep linking what was built when they started.
fn snapshot_folder() -> PathBuf {
    root().join("target/notebook-deps")
}

/// Does the package `pkg_id` (as cargo names it: `registry+...#tch@0.26.0`,
/// `path+file:///.../agentrl#0.1.0`) satisfy the preamble's `spec` (`"0.26"`,
/// a caret requirement, or `{ path = "../agentrl" }`, relative to `notebooks/`)?
fn satisfies(pkg_id: &str, spec: &str) -> bool {
    let (source, version) = pkg_id.rsplit_once('#').unwrap_or((pkg_id, ""));
    let version = version.rsplit('@').next().unwrap_or(version);
    if let Some(path) = spec
        .split_once("path")
        .and_then(|(_, rest)| rest.split('"').nth(1))
    {
        let wanted = root().join("notebooks").join(path).canonicalize().ok();
        let got = source
            .strip_prefix("path+file://")
            .and_then(|p| Path::new(p).canonicalize().ok());
        return wanted.is_some() && wanted == got;
    }
    let req = spec.trim_matches('"');
    // a caret requirement on a 0.x or x version: the same leading numbers
    !req.is_empty() && (version == req || version.starts_with(&format!("{req}.")))
}

/// Build the chapter runner's library (writing the runner crate for
/// `chapters` first if no chapter run has), so that agentrl is compiled from
/// the current source unless the chapter stage just did; snapshot the rlibs
/// cargo reports into [`snapshot_folder`], with the arguments that link a
/// cell against them and the wrapper that applies them. Fails if the
/// runner's dependencies are not those of the preamble (same names, versions
/// within the preamble's requirements).
pub fn built_library(chapters: &[Chapter]) -> Result<BuiltLibrary> {
    let manifest = root().join("target/chapter-runner/Cargo.toml");
    if !manifest.exists() {
        crate::runner::build(chapters)?;
    }
    let cargo = |args: &[&str]| {
        let mut command = Command::new("cargo");
        command
            .args(args)
            .arg("--manifest-path")
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", root().join("target"))
            .current_dir(root());
        command.stderr(Stdio::inherit());
        command
    };
    // The runner's own dependencies, as cargo resolved them.
    let out = util::capture(&mut cargo(&["metadata", "--format-version", "1"]))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata of {} failed ({})",
            manifest.display(),
            out.status
        ));
    }
    let metadata: Value =
        serde_json::from_slice(&out.stdout).map_err(|err| format!("cargo metadata: {err}"))?;
    let runner_id = metadata["resolve"]["root"]
        .as_str()
        .ok_or("cargo metadata names no root package")?
        .to_string();
    let node = metadata["resolve"]["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["id"] == runner_id.as_str()))
        .ok_or("cargo metadata: no node for the chapter runner")?;
    let runner_deps: BTreeMap<&str, &str> = node["deps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|dep| {
            dep["dep_kinds"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()))
        })
        .filter_map(|dep| Some((dep["name"].as_str()?, dep["pkg"].as_str()?)))
        .collect();
    let mut externs = Vec::new();
    for (name, spec) in preamble_deps() {
        let pkg = runner_deps.get(name.as_str()).ok_or_else(|| format!("the notebooks' preamble loads `{name}`, which the chapter runner ({}) does not depend on", manifest.display()))?;
        if !satisfies(pkg, &spec) {
            return Err(format!("the notebooks' preamble asks for `{name} = {spec}`, but the chapter runner builds {pkg}"));
        }
        externs.push((name, pkg.to_string()));
    }

    let out = util::capture(&mut cargo(&[
        "build",
        "--lib",
        "--message-format=json-render-diagnostics",
    ]))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build of {} failed ({})",
            manifest.display(),
            out.status
        ));
    }
    let snapshot = snapshot_folder();
    let _ = std::fs::remove_dir_all(&snapshot);
    std::fs::create_dir_all(&snapshot)
        .map_err(|err| format!("cannot create {}: {err}", snapshot.display()))?;
    // package id -> its rlibs in the snapshot (two if it is also built for build scripts)
    let mut rlibs: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let mut native: Vec<String> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match message["reason"].as_str() {
            Some("compiler-artifact") if message["package_id"] != runner_id.as_str() => {
                if message["target"]["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| k == "custom-build"))
                {
                    continue;
                }
                for file in message["filenames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    let from = Path::new(file);
                    let to = snapshot.join(from.file_name().ok_or_else(|| {
                        format!("cargo reported an artifact without a file name: {file}")
                    })?);
                    if !to.exists() {
                        std::fs::hard_link(from, &to)
                            .or_else(|_| std::fs::copy(from, &to).map(|_| ()))
                            .map_err(|err| {
                                format!(
                                    "cannot link {} into {}: {err}",
                                    from.display(),
                                    snapshot.display()
                                )
                            })?;
                    }
                    if to.extension().is_some_and(|ext| ext == "rlib") {
                        rlibs
                            .entry(message["package_id"].as_str().unwrap_or("").to_string())
                            .or_default()
                            .push(to);
                    }
                }
            }
            Some("build-script-executed") => {
                for path in message["linked_paths"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    if !native.iter().any(|p| p == path) {
                        native.push(path.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    let mut flags = vec![
        "-L".to_string(),
        format!("dependency={}", snapshot.display()),
    ];
    for path in native {
        flags.push("-L".into());
        flags.push(path);
    }
    for (name, pkg) in externs {
        match rlibs.get(&pkg).map(Vec::as_slice) {
            Some([rlib]) => {
                flags.push("--extern".into());
                flags.push(format!("{name}={}", rlib.display()));
            }
            Some(several) if several.len() > 1 => return Err(format!("cargo built {pkg} more than once ({several:?}): which one the runner links is unknown")),
            _ => return Err(format!("cargo build of {} reported no rlib of {pkg}", manifest.display())),
        }
    }
    let mut args = flags.join("\n");
    args.push('\n');
    util::write(&snapshot.join("link-args"), &args)?;
    // cargo runs the wrapper for each of the about 240 units of evcxr's
    // build: the virtualenv's interpreter without `site` starts in about
    // 25 ms (`python3` through a version manager's shim can take 250 ms)
    let quoted = |path: &Path| format!("'{}'", path.display().to_string().replace('\'', "'\\''"));
    let wrapper = snapshot.join("rustc-wrapper");
    let launcher = format!(
        "#!/bin/sh\nexec {} -S {} {} \"$@\"\n",
        quoted(&setup::python()),
        quoted(&root().join("xtask/python/rustc_wrapper.py")),
        quoted(&snapshot.join("link-args"))
    );
    util::write(&wrapper, &launcher)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
        .map_err(|err| format!("cannot make {} executable: {err}", wrapper.display()))?;
    Ok(BuiltLibrary { folder: snapshot })
}

/// The evcxr build folder of `slot`: outside the repository, because inside it
/// cargo would take evcxr's crate for a stray member of our workspace.
pub fn build_folder(slot: usize) -> PathBuf {
    std::env::temp_dir().join(format!("agentrl-evcxr-{slot}"))
}

/// Replace slot `to`'s evcxr build folder by a copy of slot `from`'s, times
/// kept, so that cargo finds the dependencies' placeholders (see
/// [`BuiltLibrary`]) up to date there too.
pub fn copy_build_folder(from: usize, to: usize) -> Result<()> {
    let (from, to) = (build_folder(from), build_folder(to));
    if to.exists() {
        std::fs::remove_dir_all(&to)
            .map_err(|err| format!("cannot remove {}: {err}", to.display()))?;
    }
    let status = Command::new("cp")
        .arg("-a")
        .arg(&from)
        .arg(&to)
        .status()
        .map_err(|err| format!("cannot run cp: {err}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "cp -a {} {} failed ({status})",
            from.display(),
            to.display()
        ))
    }
}

/// Execute a notebook headless with the evcxr kernel `kernel`, its preamble
/// replaced by one that links `library` (see [`BuiltLibrary`]); return each
/// code cell's stdout (the preamble cell excluded) and any error outputs.
/// Runs that happen at the same time need different `slot`s: each slot has
/// its own evcxr build folder, reused by the slot's later runs.
pub fn execute(
    notebook: &Path,
    figures_dir: &Path,
    kernel: &str,
    slot: usize,
    library: &BuiltLibrary,
) -> Result<Vec<String>> {
    let out_path = root()
        .join("target/notebooks-run")
        .join(notebook.file_name().unwrap());
    std::fs::create_dir_all(out_path.parent().unwrap()).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(figures_dir);
    std::fs::create_dir_all(figures_dir).map_err(|e| e.to_string())?;
    let evcxr_dir = build_folder(slot);
    std::fs::create_dir_all(&evcxr_dir).map_err(|e| e.to_string())?;
    // nbclient with a listener that keeps the last lines a cell prints
    // (see the script's header)
    let script = root().join("xtask/python/execute_notebook.py");
    let status = Command::new(setup::venv().join("bin/python"))
        .arg(&script)
        .arg(kernel)
        .arg("1800")
        .arg(notebook)
        .arg(&out_path)
        .arg(library.preamble())
        .env("AGENTRL_FIGURES", figures_dir)
        .env("JUPYTER_PATH", setup::venv().join("share/jupyter"))
        // one build folder per slot (two kernels must not share one)
        .env("EVCXR_TMPDIR", &evcxr_dir)
        .current_dir(notebook.parent().unwrap())
        .status()
        .map_err(|err| {
            format!(
                "could not start the notebook executor {}: {err}",
                script.display()
            )
        })?;
    if !status.success() {
        return Err(format!(
            "executing {} in Jupyter failed ({status})",
            notebook.display()
        ));
    }
    let executed: Value =
        serde_json::from_str(&util::read(&out_path)?).map_err(|e| e.to_string())?;
    let mut outputs = Vec::new();
    for cell in executed["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["cell_type"] == "code")
        .skip(1)
    {
        let mut text = String::new();
        for output in cell["outputs"].as_array().unwrap() {
            match output["output_type"].as_str() {
                Some("stream") if output["name"] == "stdout" => {
                    text.push_str(&joined(&output["text"]))
                }
                Some("error") => {
                    return Err(format!(
                        "a cell raised an error in Jupyter:\n{}\n{}",
                        joined(&cell["source"]),
                        output["evalue"]
                    ))
                }
                _ => {}
            }
        }
        outputs.push(text.trim_end_matches('\n').to_string());
    }
    Ok(outputs)
}

fn joined(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preamble_loads_agentrl_tch_and_rand() {
        let deps = preamble_deps();
        let names: Vec<&str> = deps.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["agentrl", "tch", "rand"]);
        assert_eq!(deps[0].1, "{ path = \"../agentrl\" }");
    }

    #[test]
    fn a_package_satisfies_the_preamble_by_version_prefix_or_path() {
        let registry = "registry+https://github.com/rust-lang/crates.io-index#";
        assert!(satisfies(&format!("{registry}tch@0.26.0"), "\"0.26\""));
        assert!(satisfies(&format!("{registry}rand@0.9.5"), "\"0.9\""));
        assert!(!satisfies(&format!("{registry}tch@0.27.0"), "\"0.26\""));
        assert!(!satisfies(&format!("{registry}rand@0.26.1"), "\"0.2\""));
        let agentrl = format!("path+file://{}#0.1.0", root().join("agentrl").display());
        assert!(satisfies(&agentrl, "{ path = \"../agentrl\" }"));
        assert!(!satisfies(&agentrl, "{ path = \"../exercises\" }"));
        assert!(!satisfies(
            &format!("{registry}agentrl@0.1.0"),
            "{ path = \"../agentrl\" }"
        ));
    }

    /// The wrapper with `echo` for rustc: a cell's arguments are rewritten,
    /// any other crate gets empty outputs and never reaches rustc.
    #[test]
    fn the_rustc_wrapper_links_cells_and_stubs_the_rest() {
        let dir = std::env::temp_dir().join(format!("agentrl-wrapper-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let link_args = dir.join("link-args");
        std::fs::write(
            &link_args,
            "-L\ndependency=/built\n--extern\nagentrl=/built/libagentrl-1.rlib\n",
        )
        .unwrap();
        let script = root().join("xtask/python/rustc_wrapper.py");
        // the interpreter the launcher uses, if setup has made it
        let python = if setup::python().exists() {
            setup::python()
        } else {
            PathBuf::from("python3")
        };
        let wrapper = |args: &[&str]| {
            Command::new(&python)
                .arg("-S")
                .arg(&script)
                .arg(&link_args)
                .arg("echo")
                .args(args)
                .output()
                .unwrap()
        };

        let cell = wrapper(&[
            "--crate-name",
            "ctx",
            "--crate-type",
            "cdylib",
            "-L",
            "dependency=/evcxr/deps",
            "--extern",
            "agentrl=/evcxr/deps/libagentrl-2.rlib",
            "-Cprefer-dynamic",
        ]);
        assert!(cell.status.success(), "{cell:?}");
        let line = String::from_utf8_lossy(&cell.stdout).trim().to_string();
        assert_eq!(line, "--crate-name ctx --crate-type cdylib -Cprefer-dynamic -L dependency=/built --extern agentrl=/built/libagentrl-1.rlib");

        let unknown = wrapper(&[
            "--crate-name",
            "ctx",
            "--crate-type",
            "cdylib",
            "--extern",
            "serde=/evcxr/deps/libserde-3.rlib",
        ]);
        assert!(
            !unknown.status.success()
                && String::from_utf8_lossy(&unknown.stderr).contains("`serde`"),
            "{unknown:?}"
        );

        let out = dir.join("out");
        let script_build = wrapper(&[
            "--crate-name",
            "build_script_build",
            "--crate-type",
            "bin",
            "--emit=dep-info,link",
            "-C",
            "extra-filename=-abc",
            "--out-dir",
            out.to_str().unwrap(),
        ]);
        let lib = wrapper(&[
            "--crate-name",
            "tch",
            "--crate-type",
            "lib",
            "--emit=dep-info,metadata,link",
            "-C",
            "extra-filename=-def",
            "--out-dir",
            out.to_str().unwrap(),
        ]);
        assert!(
            script_build.status.success()
                && script_build.stdout.is_empty()
                && lib.stdout.is_empty(),
            "{script_build:?} {lib:?}"
        );
        let mut files: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                "build_script_build-abc",
                "build_script_build-abc.d",
                "libtch-def.rlib",
                "libtch-def.rmeta",
                "tch-def.d"
            ]
        );
        assert!(Command::new(out.join("build_script_build-abc"))
            .status()
            .unwrap()
            .success());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
