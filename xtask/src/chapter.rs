//! A chapter as the tooling sees it: Markdown with executable `rust` cells,
//! each followed by the `text,output` block that its run printed.

use crate::util::{self, root, Result};
use std::path::PathBuf;

pub const CELL_FENCE: &str = "rust";
pub const OUTPUT_FENCE: &str = "text,output";

/// One executable cell and the output block under it (if any).
#[derive(Clone, Debug)]
pub struct Cell {
    pub code: String,
    /// 1-based line of the cell's first code line, for error messages.
    pub line: usize,
    /// Line index just after the cell's closing fence.
    pub end: usize,
    /// The output block's text and its line span `[start, end)` including fences.
    pub output: Option<(String, usize, usize)>,
}

#[derive(Clone)]
pub struct Chapter {
    /// File stem, e.g. `01-what-is-agentic-rl`.
    pub name: String,
    pub path: PathBuf,
    pub lines: Vec<String>,
    pub cells: Vec<Cell>,
}

/// Every written chapter, in order (`chapters/NN-*.md`).
pub fn all() -> Result<Vec<Chapter>> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("chapters"))
        .map_err(|err| format!("cannot list chapters/: {err}"))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| {
            name.len() > 3
                && name.as_bytes()[..2].iter().all(u8::is_ascii_digit)
                && name.ends_with(".md")
        })
        .map(|name| name.trim_end_matches(".md").to_string())
        .collect();
    names.sort();
    names.iter().map(|name| load(name)).collect()
}

/// Find a chapter by name or number prefix (`1`, `01`, `01-what-is-agentic-rl`).
pub fn find(query: &str) -> Result<Chapter> {
    let chapters = all()?;
    let wanted = if query.len() == 1 && query.as_bytes()[0].is_ascii_digit() {
        format!("0{query}")
    } else {
        query.to_string()
    };
    chapters
        .into_iter()
        .find(|chapter| chapter.name == wanted || chapter.name.starts_with(&format!("{wanted}-")))
        .ok_or_else(|| format!("no chapter matches {query:?} (chapters/NN-name.md)"))
}

fn fence_of(line: &str) -> Option<(usize, &str)> {
    let ticks = line.len() - line.trim_start_matches('`').len();
    (ticks >= 3).then(|| (ticks, line[ticks..].trim()))
}

pub fn load(name: &str) -> Result<Chapter> {
    let path = root().join("chapters").join(format!("{name}.md"));
    let text = util::read(&path)?;
    parse_lines(name, path, text.lines().map(str::to_string).collect())
}

fn parse_lines(name: &str, path: PathBuf, lines: Vec<String>) -> Result<Chapter> {
    let mut cells = Vec::new();
    let mut i = 0;
    // (ticks, info, first body line) of each fenced block in order
    let mut blocks: Vec<(String, usize, usize)> = Vec::new(); // info, body start, index after close
    while i < lines.len() {
        if let Some((ticks, info)) = fence_of(&lines[i]) {
            let start = i + 1;
            let mut j = start;
            while j < lines.len()
                && !fence_of(&lines[j]).is_some_and(|(t, rest)| t >= ticks && rest.is_empty())
            {
                j += 1;
            }
            if j == lines.len() {
                return Err(format!(
                    "{}:{}: code fence is never closed",
                    path.display(),
                    i + 1
                ));
            }
            blocks.push((info.to_string(), start, j + 1));
            i = j + 1;
        } else {
            i += 1;
        }
    }
    let mut k = 0;
    while k < blocks.len() {
        let (info, start, end) = &blocks[k];
        if info == OUTPUT_FENCE {
            return Err(format!(
                "{}:{}: an output block must directly follow a `rust` cell",
                path.display(),
                start
            ));
        }
        if info == CELL_FENCE {
            let code = lines[*start..end - 1].join("\n");
            let mut output = None;
            if let Some((next_info, next_start, next_end)) = blocks.get(k + 1) {
                let between_blank = lines[*end..next_start - 1]
                    .iter()
                    .all(|l| l.trim().is_empty());
                if next_info == OUTPUT_FENCE && between_blank {
                    output = Some((
                        lines[*next_start..next_end - 1].join("\n"),
                        next_start - 1,
                        *next_end,
                    ));
                    k += 1;
                }
            }
            cells.push(Cell {
                code,
                line: start + 1,
                end: *end,
                output,
            });
        }
        k += 1;
    }
    Ok(Chapter {
        name: name.to_string(),
        path,
        lines,
        cells,
    })
}

impl Chapter {
    /// The chapter's text with each cell's output block replaced by `outputs[i]`
    /// (an empty output removes the block).
    pub fn with_outputs(&self, outputs: &[String]) -> String {
        assert_eq!(outputs.len(), self.cells.len());
        let mut lines = self.lines.clone();
        for (cell, out) in self.cells.iter().zip(outputs).rev() {
            let block: Vec<String> = if out.is_empty() {
                vec![]
            } else {
                let mut b = vec![String::new(), format!("```{OUTPUT_FENCE}")];
                b.extend(out.lines().map(str::to_string));
                b.push("```".into());
                b
            };
            match cell.output {
                // replace from the end of the cell (dropping blank lines in between) to the block's end
                Some((_, _, out_end)) => {
                    lines.splice(cell.end..out_end, block);
                }
                None => {
                    lines.splice(cell.end..cell.end, block);
                }
            }
        }
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }

    /// Figures that the chapter's Markdown shows (`](figures/NAME)`).
    pub fn figures(&self) -> Vec<String> {
        let mut found = Vec::new();
        for line in &self.lines {
            let mut rest = line.as_str();
            while let Some(at) = rest.find("](figures/") {
                rest = &rest[at + 10..];
                if let Some(end) = rest.find(')') {
                    found.push(rest[..end].to_string());
                }
            }
        }
        found
    }
}

/// Expand mdBook's `{{#include path:anchor}}` (and whole-file includes) in `text`,
/// relative to `chapters/`, the way mdBook does: anchor lines themselves are dropped.
pub fn expand_includes(text: &str) -> Result<String> {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(spec) = trimmed
            .strip_prefix("{{#include ")
            .and_then(|s| s.strip_suffix("}}"))
        {
            let (file, anchor) = match spec.trim().rsplit_once(':') {
                Some((f, a)) if !a.chars().all(|c| c.is_ascii_digit()) => (f, Some(a)),
                _ => (spec.trim(), None),
            };
            let source = util::read(&root().join("chapters").join(file))?;
            let mut inside = anchor.is_none();
            let mut found = false;
            for src_line in source.lines() {
                let marker = src_line.trim();
                if let Some(a) = anchor {
                    if marker.ends_with(&format!("ANCHOR: {a}")) {
                        if found {
                            return Err(format!(
                                "include {spec}: the anchor `{a}` opens twice in {file}"
                            ));
                        }
                        inside = true;
                        found = true;
                        continue;
                    }
                    if marker.ends_with(&format!("ANCHOR_END: {a}")) {
                        inside = false;
                        continue;
                    }
                }
                if inside && !marker.contains("ANCHOR: ") && !marker.contains("ANCHOR_END: ") {
                    out.push_str(src_line);
                    out.push('\n');
                }
            }
            if anchor.is_some() && !found {
                return Err(format!("include {spec}: anchor not found"));
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// Mentions of another chapter ("Chapter 12") in the prose of `text` (the
/// chapter numbered `own`, if any) that are not links to it: outside code
/// blocks, inline code, headings, images and includes, every mention links to
/// the chapter's page. Returns (line number, the chapter mentioned).
pub fn unlinked_mentions(text: &str, own: Option<u32>) -> Vec<(usize, u32)> {
    let mut found = Vec::new();
    let mut fence = false;
    let lines: Vec<&str> = text.lines().collect();
    for (number, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence
            || line.starts_with('#')
            || line.trim_start().starts_with("![")
            || line.starts_with("{{#")
        {
            continue;
        }
        // A mention broken across lines ("Chapter" at the end of one, the number opening the next).
        let next_number = lines.get(number + 1).and_then(|next| {
            next.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u32>()
                .ok()
        });
        if let Some(n) =
            next_number.filter(|&n| line.trim_end().ends_with(" Chapter") && Some(n) != own)
        {
            found.push((number + 1, n));
        }
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 1 {
                continue; // inline code
            }
            let mut rest = part;
            while let Some(at) = rest.find("Chapter ") {
                let before = &rest[..at];
                let after = &rest[at + "Chapter ".len()..];
                let digits: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
                let linked = before.ends_with('[') && after[digits.len()..].starts_with("](");
                let word_start = before.chars().last().is_none_or(|c| !c.is_alphanumeric());
                if let Ok(n) = digits.parse::<u32>() {
                    if !linked && word_start && Some(n) != own && n <= 20 {
                        found.push((number + 1, n));
                    }
                }
                rest = after;
            }
        }
    }
    found
}

/// [`unlinked_mentions`] in every chapter and answer page.
pub fn link_problems() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root().join("chapters")) else {
        return vec!["cannot read chapters/".into()];
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            n.ends_with(".md")
                && n != "SUMMARY.md"
                && !n.starts_with("appendix-performance-measured")
        })
        .collect();
    names.sort();
    let mut problems = Vec::new();
    for name in names {
        let Ok(text) = util::read(&root().join("chapters").join(&name)) else {
            continue;
        };
        let own = name.get(..2).and_then(|n| n.parse::<u32>().ok());
        for (line, n) in unlinked_mentions(&text, own) {
            problems.push(format!(
                "chapters/{name} line {line}: \"Chapter {n}\" is not a link to its page"
            ));
        }
    }
    problems
}

/// Every `ANCHOR: name` in the library and the exercises opens once per file
/// and is closed by its `ANCHOR_END: name`: a chapter that includes it shows
/// exactly one piece of code.
pub fn anchor_problems() -> Vec<String> {
    let mut problems = Vec::new();
    let mut files = Vec::new();
    for dir in ["agentrl", "exercises"] {
        collect_rust_files(&root().join(dir), &mut files);
    }
    for file in files {
        let Ok(text) = util::read(&file) else {
            continue;
        };
        let mut open: Vec<&str> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if let Some(name) = line.strip_prefix("// ANCHOR: ") {
                if !seen.insert(name.trim()) {
                    problems.push(format!(
                        "{} line {}: the anchor `{}` opens a second time",
                        file.display(),
                        number + 1,
                        name.trim()
                    ));
                }
                open.push(name.trim());
            } else if let Some(name) = line.strip_prefix("// ANCHOR_END: ") {
                match open.iter().position(|n| *n == name.trim()) {
                    Some(i) => {
                        open.remove(i);
                    }
                    None => problems.push(format!(
                        "{} line {}: `ANCHOR_END: {}` without its opening",
                        file.display(),
                        number + 1,
                        name.trim()
                    )),
                }
            }
        }
        for name in open {
            problems.push(format!(
                "{}: the anchor `{name}` is never closed",
                file.display()
            ));
        }
    }
    problems
}

fn collect_rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
            collect_rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_has_no_duplicate_or_unclosed_anchor() {
        assert_eq!(anchor_problems(), Vec::<String>::new());
    }

    fn parse(text: &str) -> Chapter {
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        parse_lines("test", PathBuf::from("test.md"), lines).unwrap()
    }

    const CHAPTER: &str = "# T\n\n```rust\nlet a = 1;\nprintln!(\"{a}\");\n```\n\n```text,output\nold\n```\n\nprose\n\n```rust\nlet b = 2;\n```\n\n```rust,ignore\nnot a cell\n```\n\n````markdown\n```rust\nnot a cell either\n```\n````\n";

    #[test]
    fn cells_and_their_outputs_are_found() {
        let chapter = parse(CHAPTER);
        assert_eq!(chapter.cells.len(), 2);
        assert_eq!(chapter.cells[0].code, "let a = 1;\nprintln!(\"{a}\");");
        assert_eq!(chapter.cells[0].line, 4);
        assert_eq!(chapter.cells[0].output.as_ref().unwrap().0, "old");
        assert!(chapter.cells[1].output.is_none());
    }

    #[test]
    fn outputs_are_replaced_inserted_and_removed() {
        let chapter = parse(CHAPTER);
        let text = chapter.with_outputs(&["new\nlines".into(), "two".into()]);
        assert!(text.contains("```rust\nlet a = 1;\nprintln!(\"{a}\");\n```\n\n```text,output\nnew\nlines\n```\n\nprose"));
        assert!(text.contains("let b = 2;\n```\n\n```text,output\ntwo\n```\n\n```rust,ignore"));
        let again = parse(&text).with_outputs(&["new\nlines".into(), "two".into()]);
        assert_eq!(again, text, "refreshing twice changes nothing");
        let removed = parse(&text).with_outputs(&[String::new(), String::new()]);
        assert!(!removed.contains("text,output"));
        assert_eq!(parse(&removed).cells.len(), 2);
    }

    #[test]
    fn an_orphan_output_block_is_an_error() {
        let lines = "text\n\n```text,output\nx\n```\n"
            .lines()
            .map(str::to_string)
            .collect();
        assert!(parse_lines("t", PathBuf::from("t.md"), lines).is_err());
    }
}

/// The chapter of each library module, from the first line of its doc
/// comment (`//! Chapter N: ...`).
fn module_chapters() -> (std::collections::BTreeMap<String, u32>, Vec<String>) {
    let mut chapters = std::collections::BTreeMap::new();
    let mut problems = Vec::new();
    let Ok(entries) = std::fs::read_dir(root().join("agentrl/src")) else {
        return (chapters, vec!["cannot read agentrl/src".into()]);
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".rs"))
        else {
            continue;
        };
        if name == "lib" {
            continue;
        }
        let text = util::read(&path).unwrap_or_default();
        let number = text
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("//! Chapter "))
            .and_then(|rest| rest.split(':').next())
            .and_then(|n| n.trim().parse::<u32>().ok());
        match number {
            Some(n) => {
                chapters.insert(name.to_string(), n);
            }
            None => problems.push(format!(
                "agentrl/src/{name}.rs: the doc comment must begin with `//! Chapter N:`"
            )),
        }
    }
    (chapters, problems)
}

/// The names `prefix` is followed by in `text` (`crate::gym::Task` gives `gym`).
fn paths_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.match_indices(prefix)
        .filter(|(at, _)| !text[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(at, _)| {
            let rest = &text[at + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// The order rule: a module uses only modules of its own or earlier chapters,
/// and a chapter (its cells, its includes) and its exercises use only those.
pub fn order_problems() -> Vec<String> {
    let (chapters, mut problems) = module_chapters();
    let later = |user: &str, own: u32, module: &str, problems: &mut Vec<String>| {
        if let Some(&n) = chapters.get(module) {
            if n > own {
                problems.push(format!(
                    "{user} (Chapter {own}) uses `{module}` of Chapter {n}"
                ));
            }
        }
    };
    for (module, &own) in &chapters {
        let text = util::read(&root().join(format!("agentrl/src/{module}.rs"))).unwrap_or_default();
        for used in paths_after(&text, "crate::") {
            later(&format!("module `{module}`"), own, used, &mut problems);
        }
    }
    let Ok(book) = all() else {
        return vec!["cannot list the chapters".into()];
    };
    for chapter in book {
        let Some(own) = chapter.name.get(..2).and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // the code: its cells, and the library code it includes
        let code: String = chapter
            .cells
            .iter()
            .map(|cell| cell.code.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let text = util::read(&chapter.path).unwrap_or_default();
        let mut used = paths_after(&code, "agentrl::");
        used.extend(paths_after(&text, "{{#include ../agentrl/src/"));
        for module in used {
            later(
                &format!("chapters/{}.md", chapter.name),
                own,
                module,
                &mut problems,
            );
        }
        let mut files = Vec::new();
        collect_rust_files(
            &root().join(format!("exercises/src/ch{:02}", own)),
            &mut files,
        );
        for file in files {
            let text = util::read(&file).unwrap_or_default();
            for module in paths_after(&text, "agentrl::") {
                later(
                    &format!("{}", file.strip_prefix(root()).unwrap_or(&file).display()),
                    own,
                    module,
                    &mut problems,
                );
            }
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

#[cfg(test)]
mod order_tests {
    use super::*;

    #[test]
    fn module_paths_are_read_from_use_lines_and_paths() {
        let text = "use crate::gym::{Task};\nlet x = crate::book::seeded(0);\nmy_crate::pg::x; agentrl::stats::Streams";
        assert_eq!(paths_after(text, "crate::"), vec!["gym", "book"]);
        assert_eq!(paths_after(text, "agentrl::"), vec!["stats"]);
    }

    #[test]
    fn the_library_chapters_and_exercises_follow_the_order_rule() {
        let problems = order_problems();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

/// Cells that keep a closure in a top-level variable: evcxr, the notebooks'
/// kernel, cannot carry a closure from one cell to the next, so such a cell
/// runs in the chapter and fails in Jupyter. A closure inside a block, or a
/// `fn`, is fine.
pub fn kept_closure_problems() -> Vec<String> {
    let Ok(book) = all() else {
        return vec!["cannot list the chapters".into()];
    };
    let mut problems = Vec::new();
    for chapter in book {
        for cell in &chapter.cells {
            for (offset, line) in kept_closures(&cell.code) {
                problems.push(format!("chapters/{}.md line {}: a closure kept between cells (`{}`); put it in a block or write a fn", chapter.name, cell.line + offset, line.trim()));
            }
        }
    }
    problems
}

/// The lines of a cell (with their offsets) that bind a closure at the top level.
fn kept_closures(code: &str) -> Vec<(usize, &str)> {
    code.lines()
        .enumerate()
        .filter(|(_, line)| {
            let value = line
                .strip_prefix("let ")
                .and_then(|rest| rest.split_once('='))
                .map(|(_, v)| v.trim_start())
                .unwrap_or("");
            value.starts_with('|') || value.starts_with("move |")
        })
        .collect()
}

#[cfg(test)]
mod closure_tests {
    #[test]
    fn no_chapter_keeps_a_closure_between_cells() {
        let problems = super::kept_closure_problems();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn a_planted_top_level_closure_is_caught_and_a_block_or_fn_is_not() {
        let cell = "let f = |x: f64| x + 1.0;\nlet g = move |x: f64| x;\n{\n    let h = |x: f64| x;\n}\nfn k(x: f64) -> f64 { x }\nlet n = 3;";
        let found: Vec<usize> = super::kept_closures(cell)
            .iter()
            .map(|(offset, _)| *offset)
            .collect();
        assert_eq!(found, [0, 1]);
    }

    #[test]
    fn mentions_of_other_chapters_must_be_links() {
        let text = "# 3. Title about Chapter 2\nSee Chapter 2 and [Chapter 4](04-x.md); Chapter 3 is this one.\n`Chapter 5` in code\n```text\nChapter 6\n```\nChapters 7 and 8, Chapter 9's loop, and Chapter\n10's.";
        assert_eq!(
            super::unlinked_mentions(text, Some(3)),
            [(2, 2), (7, 10), (7, 9)]
        );
    }
}
