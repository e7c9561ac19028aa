//! The HTML book (mdBook + KaTeX, figures copied in), its checks in headless
//! Chromium, a small static server, and exercise grading.

use crate::setup;
use crate::util::{self, capture, root, run, Result};
use std::collections::BTreeMap;
use std::process::Command;

/// Build the HTML book into `book/` with mdBook (math rendered by
/// mdbook-katex) from the chapters as they are, and copy the figures in.
pub fn build() -> Result<()> {
    let bin = util::cargo_bin();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = root().join("book");
    run(Command::new(bin.join("mdbook"))
        .arg("build")
        .arg("--dest-dir")
        .arg(&out)
        .env("PATH", path)
        .current_dir(root()))?;
    // Figures live at the top level of the repository; the pages link to figures/NAME.
    let figures = out.join("figures");
    std::fs::create_dir_all(&figures).map_err(|e| e.to_string())?;
    for entry in std::fs::read_dir(root().join("figures")).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path
            .extension()
            .is_some_and(|ext| ext == "svg" || ext == "png" || ext == "html")
        {
            std::fs::copy(&path, figures.join(path.file_name().unwrap()))
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Serve `book/` on 127.0.0.1:`port` until interrupted.
pub fn serve(port: u16) -> Result<()> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("cannot listen on port {port}: {e}"))?;
    eprintln!("serving the book on http://127.0.0.1:{port}/ (Ctrl-C to stop)");
    serve_on(listener);
    Ok(())
}

fn serve_on(listener: std::net::TcpListener) {
    use std::io::{BufRead, BufReader, Write};
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let mut reader = BufReader::new(&stream);
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                return;
            }
            let mut line = String::new();
            while reader.read_line(&mut line).map(|n| n > 2).unwrap_or(false) {
                line.clear();
            }
            let raw = request.split_whitespace().nth(1).unwrap_or("/");
            let raw = raw.split(['?', '#']).next().unwrap_or("/");
            let mut rel = raw.trim_start_matches('/').replace("%20", " ");
            if rel.is_empty() || rel.ends_with('/') {
                rel.push_str("index.html");
            }
            let path = root().join("book").join(&rel);
            let mut stream = &stream;
            let safe = !rel.split('/').any(|part| part == "..");
            match std::fs::read(&path) {
                Ok(body) if safe => {
                    let kind = match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
                        "html" => "text/html; charset=utf-8",
                        "css" => "text/css",
                        "js" => "application/javascript",
                        "svg" => "image/svg+xml",
                        "png" => "image/png",
                        "woff2" => "font/woff2",
                        "json" => "application/json",
                        _ => "application/octet-stream",
                    };
                    let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                    let _ = stream.write_all(&body);
                }
                _ => {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                }
            }
        });
    }
}

/// The checks of the built pages that need no browser: no page loads anything
/// from a CDN (so the book reads offline), every formula rendered at build
/// time, no include was left unexpanded, and every relative link names a file
/// of the built book. One line per problem.
pub fn static_problems() -> Result<Vec<String>> {
    let book = root().join("book");
    let mut problems = Vec::new();
    for entry in
        std::fs::read_dir(&book).map_err(|e| format!("cannot list {}: {e}", book.display()))?
    {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "html") {
            let html = util::read(&path)?;
            for needle in [
                "cdn.jsdelivr",
                "cdnjs",
                "unpkg.com",
                "katex-error",
                "{{#include",
            ] {
                if html.contains(needle) {
                    problems.push(format!("{} contains {needle:?}", path.display()));
                }
            }
            for target in dead_links(&book, &html) {
                problems.push(format!(
                    "{} links to {target}, which is not in the built book",
                    path.display()
                ));
            }
        }
    }
    Ok(problems)
}

/// Static checks of the built pages, then Chapter 1 (and 0) loaded in headless Chromium.
pub fn check_html() -> Result<()> {
    let book = root().join("book");
    let mut problems = static_problems()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || serve_on(listener));
    for chapter in crate::chapter::all()? {
        let page = format!("{}.html", chapter.name);
        if !book.join(&page).exists() {
            problems.push(format!(
                "chapter {} has no page in the built book",
                chapter.name
            ));
            continue;
        }
        // Images only: a chapter may also link to a page it generates (Chapter 18's viewer).
        let figures = chapter
            .figures()
            .iter()
            .filter(|f| f.ends_with(".svg") || f.ends_with(".png"))
            .count() as u64;
        let math = chapter.lines.iter().any(|line| line.contains('$'));
        problems.extend(
            check_page(
                &format!("http://127.0.0.1:{port}/{page}"),
                &page,
                figures,
                math,
            )
            .unwrap_or_else(|e| vec![e]),
        );
    }
    // Pages a chapter generates (Chapter 18's trajectory viewer): they load, navigate and count right.
    for entry in std::fs::read_dir(book.join("figures")).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "html") {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            problems.extend(
                check_viewer(
                    &format!("http://127.0.0.1:{port}/figures/{name}"),
                    &name,
                    &util::read(&path)?,
                )
                .unwrap_or_else(|e| vec![e]),
            );
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// What a trajectory viewer's `#counts` line must read for each of its
/// episodes, computed here from the data the page embeds (not by its script).
fn expected_counts(html: &str) -> Result<Vec<String>> {
    let start = html
        .find("id=\"episodes\">")
        .ok_or("the viewer holds no episode data")?
        + "id=\"episodes\">".len();
    let end = start
        + html[start..]
            .find("</script>")
            .ok_or("the episode data is not closed")?;
    let episodes: Vec<serde_json::Value> = serde_json::from_str(&html[start..end])
        .map_err(|e| format!("the episode data is not JSON: {e}"))?;
    let n = episodes.len();
    episodes
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let tokens = e["tokens"].as_array().ok_or("an episode without tokens")?;
            let policy = tokens.iter().filter(|t| t["owner"] == "policy").count();
            let masked = tokens.iter().filter(|t| t["mask"] == true).count();
            let reward = e["reward"].as_f64().ok_or("an episode without a reward")?;
            Ok(format!("episode {} of {n} · {} · reward {reward} · {} tokens · {policy} by the policy · {masked} in the loss", i + 1, e["title"].as_str().unwrap_or_default(), tokens.len()))
        })
        .collect()
}

/// Load a trajectory viewer in Chromium, step through it with its buttons and
/// check what it shows against the data it embeds.
fn check_viewer(url: &str, page: &str, html: &str) -> Result<Vec<String>> {
    let expected = expected_counts(html)?;
    let chromium =
        setup::chromium_path().ok_or("chromium is not installed (cargo xtask setup --browser)")?;
    let mut tab = crate::cdp::Page::open(&chromium, (1200, 900))?;
    tab.navigate(url)?;
    let probe = r#"(() => {
        const read = () => document.getElementById('counts').textContent;
        const next = document.getElementById('next'), prev = document.getElementById('prev');
        const shown = [read()];
        const prevDisabledAtStart = prev.disabled;
        while (!next.disabled && shown.length < 10000) { next.click(); shown.push(read()); }
        prev.click();
        const afterPrev = read();
        const spans = document.querySelectorAll('#tokens span').length;
        const masked = document.querySelectorAll('#tokens span[data-mask="1"]').length;
        document.querySelector('input[value=advantage]').click();
        document.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowLeft' }));
        return JSON.stringify({ shown, prevDisabledAtStart, afterPrev, spans, masked, afterKey: read() });
    })()"#;
    let value = tab.evaluate(probe)?;
    let facts: serde_json::Value =
        serde_json::from_str(value.as_str().ok_or("the viewer probe returned nothing")?)
            .map_err(|e| e.to_string())?;
    let shown: Vec<String> = facts["shown"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    eprintln!("  figures/{page}: {} episodes stepped through", shown.len());
    let mut problems = Vec::new();
    if shown != expected {
        let first = shown
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(shown.len().min(expected.len()));
        problems.push(format!("figures/{page}: the viewer showed {} episodes, the data holds {}; first difference at episode {}: {:?} vs {:?}", shown.len(), expected.len(), first + 1, shown.get(first), expected.get(first)));
    }
    if facts["prevDisabledAtStart"] != true {
        problems.push(format!(
            "figures/{page}: 'previous' is enabled on the first episode"
        ));
    }
    let n = expected.len();
    if n >= 2 && facts["afterPrev"].as_str() != expected.get(n - 2).map(|s| s.as_str()) {
        problems.push(format!(
            "figures/{page}: 'previous' from the last episode did not show episode {}",
            n - 1
        ));
    }
    // The page's spans on episode n − 1 (after 'previous'), against the data.
    if n >= 2 && !expected[n - 2].contains(&format!("· {} tokens ·", facts["spans"])) {
        problems.push(format!(
            "figures/{page}: {} token spans shown for: {}",
            facts["spans"],
            expected[n - 2]
        ));
    }
    if n >= 2 && !expected[n - 2].ends_with(&format!("· {} in the loss", facts["masked"])) {
        problems.push(format!(
            "figures/{page}: {} spans marked as in the loss for: {}",
            facts["masked"],
            expected[n - 2]
        ));
    }
    if n >= 3 && facts["afterKey"].as_str() != expected.get(n - 3).map(|s| s.as_str()) {
        problems.push(format!(
            "figures/{page}: the left arrow key did not step back"
        ));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    problems.extend(tab.errors().iter().map(|e| format!("figures/{page}: {e}")));
    Ok(problems)
}

/// The relative `href` and `src` targets of `html` (a page at the top of `book`)
/// that name no file of the built book. Links to other sites and to anchors of
/// the same page are not checked.
fn dead_links(book: &std::path::Path, html: &str) -> Vec<String> {
    let mut dead = Vec::new();
    for attribute in ["href=\"", "src=\""] {
        for piece in html.split(attribute).skip(1) {
            let target = piece.split('"').next().unwrap_or_default();
            let file = target.split(['#', '?']).next().unwrap_or_default();
            let external = target.contains("://")
                || target.starts_with("mailto:")
                || target.starts_with("data:");
            if external || file.is_empty() || dead.iter().any(|d| d == target) {
                continue;
            }
            if !book.join(file).exists() {
                dead.push(target.to_string());
            }
        }
    }
    dead
}

/// Load one chapter page and check that its math rendered (if it has any), its
/// `figures` figures loaded, its code is highlighted and the console stayed clean.
fn check_page(url: &str, page: &str, figures: u64, math: bool) -> Result<Vec<String>> {
    let chromium =
        setup::chromium_path().ok_or("chromium is not installed (cargo xtask setup --browser)")?;
    let mut tab = crate::cdp::Page::open(&chromium, (1200, 900))?;
    tab.navigate(url)?;
    let probe = r#"(async () => {
        await document.fonts.ready;
        const imgs = [...document.querySelectorAll('main img')];
        await Promise.all(imgs.map(i => i.complete ? 0 : new Promise(r => { i.onload = r; i.onerror = r; })));
        return JSON.stringify({
            katex: document.querySelectorAll('main .katex').length,
            katexErrors: document.querySelectorAll('.katex-error').length,
            katexFont: document.fonts.check('16px KaTeX_Main'),
            katexFontLoaded: [...document.fonts].some(f => f.family.includes('KaTeX') && f.status === 'loaded'),
            images: imgs.length,
            brokenImages: imgs.filter(i => !(i.naturalWidth > 0)).map(i => i.getAttribute('src')),
            codeBlocks: document.querySelectorAll('main pre code').length,
            highlighted: document.querySelectorAll('main pre code .hljs-keyword').length,
            title: document.title,
        });
    })()"#;
    let value = tab.evaluate(probe)?;
    let facts: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(value.as_str().ok_or("the page probe returned nothing")?)
            .map_err(|e| e.to_string())?;
    let screenshot = tab.screenshot()?;
    let shot = root()
        .join("target/book-check")
        .join(page.replace(".html", ".png"));
    std::fs::create_dir_all(shot.parent().unwrap()).map_err(|e| e.to_string())?;
    std::fs::write(&shot, screenshot).map_err(|e| e.to_string())?;
    eprintln!("  {page}: {}", serde_json::to_string(&facts).unwrap());
    let mut problems = Vec::new();
    let num = |k: &str| facts.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    if math && num("katex") == 0 {
        problems.push(format!("{page}: no rendered math"));
    }
    if num("images") < figures {
        problems.push(format!(
            "{page}: {} figures shown, the chapter has {figures}",
            num("images")
        ));
    }
    if num("katex") > 0 && facts.get("katexFontLoaded") != Some(&serde_json::Value::Bool(true)) {
        problems.push(format!("{page}: KaTeX fonts did not load"));
    }
    if num("katexErrors") > 0 {
        problems.push(format!("{page}: {} KaTeX errors", num("katexErrors")));
    }
    if let Some(broken) = facts
        .get("brokenImages")
        .and_then(|v| v.as_array())
        .filter(|b| !b.is_empty())
    {
        problems.push(format!("{page}: figures that did not load: {broken:?}"));
    }
    if num("codeBlocks") == 0 || num("highlighted") == 0 {
        problems.push(format!("{page}: code blocks missing or not highlighted"));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    problems.extend(tab.errors().iter().map(|e| format!("{page}: {e}")));
    Ok(problems)
}

/// Exercises: every grading test must pass with the solutions and fail with the stubs.
pub fn grade_exercises() -> Result<()> {
    let outcome = |solutions: bool| -> Result<BTreeMap<String, bool>> {
        let mut cmd = Command::new("cargo");
        cmd.args(["test", "-p", "exercises", "--lib"])
            .env("OMP_WAIT_POLICY", "PASSIVE")
            .current_dir(root());
        if solutions {
            cmd.args(["--features", "solutions"]);
        }
        let out = capture(&mut cmd)?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !text.contains("test result:") {
            return Err(format!(
                "the exercises did not build:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(text
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("test ")?;
                let (name, verdict) = rest.rsplit_once(" ... ")?;
                Some((name.to_string(), verdict.trim() == "ok"))
            })
            .collect())
    };
    let with_solutions = outcome(true)?;
    let with_stubs = outcome(false)?;
    let mut problems = Vec::new();
    if with_solutions.is_empty() {
        problems.push("no exercise tests found".to_string());
    }
    for (name, ok) in &with_solutions {
        if !ok {
            problems.push(format!("{name} fails with the reference solutions"));
        }
        match with_stubs.get(name) {
            Some(false) => {}
            Some(true) => problems.push(format!(
                "{name} passes with the stubs: it does not grade anything"
            )),
            None => problems.push(format!("{name} does not run with the stubs")),
        }
    }
    eprintln!(
        "  exercises: {} tests; solutions pass {}, stubs fail {}",
        with_solutions.len(),
        with_solutions.values().filter(|ok| **ok).count(),
        with_stubs.values().filter(|ok| !**ok).count()
    );
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::dead_links;

    #[test]
    fn links_to_missing_pages_and_images_are_dead_and_others_are_not() {
        let book = std::env::temp_dir().join(format!("xtask-links-{}", std::process::id()));
        std::fs::create_dir_all(book.join("figures")).unwrap();
        std::fs::write(book.join("02-rl.html"), "").unwrap();
        std::fs::write(book.join("figures/a.svg"), "").unwrap();
        let html = r##"<a href="02-rl.html#bandits">ok</a> <a href="11-rewards.html">planned</a>
            <img src="figures/a.svg"> <img src="figures/b.svg"> <a href="#top">same page</a>
            <a href="https://example.org/x.html">elsewhere</a> <a href="11-rewards.html">again</a>"##;
        let dead = dead_links(&book, html);
        std::fs::remove_dir_all(&book).unwrap();
        assert_eq!(dead, ["11-rewards.html", "figures/b.svg"]);
    }
}
