//! Notebooks: each chapter as a Jupyter notebook for the evcxr Rust kernel,
//! generated (never edited by hand) and executed headless to check that its
//! outputs equal the chapter's.

use crate::chapter::{expand_includes, Chapter};
use crate::setup::{self, KERNEL};
use crate::util::{self, root, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn path(chapter: &Chapter) -> PathBuf {
    root().join("notebooks").join(format!("{}.ipynb", chapter.name))
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
        if target.len() > 3 && target.as_bytes()[..2].iter().all(u8::is_ascii_digit) || target.starts_with("answers") {
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
        let output = cell.output.as_ref().map(|(text, _, _)| text.as_str()).unwrap_or("");
        cells.push(code_cell(&cell.code, output));
        at = cell.output.as_ref().map(|(_, _, end)| *end).unwrap_or(cell.end);
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

/// The evcxr build folder of `slot`: outside the repository, because inside it
/// cargo would take evcxr's crate for a stray member of our workspace.
pub fn build_folder(slot: usize) -> PathBuf {
    std::env::temp_dir().join(format!("agentrl-evcxr-{slot}"))
}

/// Replace slot `to`'s evcxr build folder by a copy of slot `from`'s, times
/// kept, so that cargo finds the compiled dependencies up to date there too.
pub fn copy_build_folder(from: usize, to: usize) -> Result<()> {
    let (from, to) = (build_folder(from), build_folder(to));
    if to.exists() {
        std::fs::remove_dir_all(&to).map_err(|err| format!("cannot remove {}: {err}", to.display()))?;
    }
    let status = Command::new("cp").arg("-a").arg(&from).arg(&to).status().map_err(|err| format!("cannot run cp: {err}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cp -a {} {} failed ({status})", from.display(), to.display()))
    }
}

/// Execute a notebook headless with the evcxr kernel `kernel`; return each code
/// cell's stdout (the preamble cell excluded) and any error outputs. Runs that
/// happen at the same time need different `slot`s: each slot has its own
/// evcxr build folder, reused by the slot's later runs.
pub fn execute(notebook: &Path, figures_dir: &Path, kernel: &str, slot: usize) -> Result<Vec<String>> {
    let out_path = root().join("target/notebooks-run").join(notebook.file_name().unwrap());
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
        .env("AGENTRL_FIGURES", figures_dir)
        .env("JUPYTER_PATH", setup::venv().join("share/jupyter"))
        // one build folder per slot, so tch is compiled once per slot, not per kernel
        .env("EVCXR_TMPDIR", &evcxr_dir)
        .current_dir(notebook.parent().unwrap())
        .status()
        .map_err(|err| format!("could not start the notebook executor {}: {err}", script.display()))?;
    if !status.success() {
        return Err(format!("executing {} in Jupyter failed ({status})", notebook.display()));
    }
    let executed: Value = serde_json::from_str(&util::read(&out_path)?).map_err(|e| e.to_string())?;
    let mut outputs = Vec::new();
    for cell in executed["cells"].as_array().unwrap().iter().filter(|c| c["cell_type"] == "code").skip(1) {
        let mut text = String::new();
        for output in cell["outputs"].as_array().unwrap() {
            match output["output_type"].as_str() {
                Some("stream") if output["name"] == "stdout" => text.push_str(&joined(&output["text"])),
                Some("error") => {
                    return Err(format!("a cell raised an error in Jupyter:\n{}\n{}", joined(&cell["source"]), output["evalue"]))
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
