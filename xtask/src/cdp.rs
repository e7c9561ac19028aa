//! A small client of the Chrome DevTools Protocol: enough to start headless
//! Chromium, open a page, wait for it to load, evaluate a script, collect the
//! console's errors and take a screenshot. One WebSocket, JSON messages, and
//! a read timeout on every wait, so that a stuck browser is an error, not a hang.

use crate::util::Result;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tungstenite::{Message, WebSocket};

/// How long any one answer or event may take.
const WAIT: Duration = Duration::from_secs(60);

/// A headless Chromium and one page in it.
pub struct Page {
    browser: Child,
    socket: WebSocket<TcpStream>,
    session: String,
    next_id: u64,
    /// Events that arrived while we waited for something else.
    events: Vec<Value>,
    _profile: TempDir,
}

/// A folder removed when dropped (Chromium's throwaway profile).
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Page {
    /// Start `chromium` headless with a fresh profile and open an empty page.
    pub fn open(chromium: &Path, window: (u32, u32)) -> Result<Page> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let profile =
            std::env::temp_dir().join(format!("agentrl-chromium-{}-{stamp}", std::process::id()));
        std::fs::create_dir_all(&profile).map_err(|e| e.to_string())?;
        let profile = TempDir(profile);
        let mut browser = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-quic",
                "--no-first-run",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--window-size={},{}", window.0, window.1))
            .arg(format!("--user-data-dir={}", profile.0.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", chromium.display()))?;
        // Chromium prints the browser's WebSocket address on stderr.
        let stderr = browser.stderr.take().expect("piped stderr");
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    let _ = sender.send(url.trim().to_string());
                }
            }
        });
        let url = match receiver.recv_timeout(WAIT) {
            Ok(url) => url,
            Err(_) => {
                let _ = browser.kill();
                return Err("chromium did not report its DevTools address".into());
            }
        };
        let address = url
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let stream = TcpStream::connect(&address)
            .map_err(|e| format!("cannot connect to chromium at {address}: {e}"))?;
        stream
            .set_read_timeout(Some(WAIT))
            .map_err(|e| e.to_string())?;
        let (socket, _) = tungstenite::client(url.as_str(), stream)
            .map_err(|e| format!("WebSocket handshake with chromium: {e}"))?;
        let mut page = Page {
            browser,
            socket,
            session: String::new(),
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        };
        let target = page.call_browser("Target.createTarget", json!({ "url": "about:blank" }))?;
        let target = target["targetId"]
            .as_str()
            .ok_or("no target id")?
            .to_string();
        let attached = page.call_browser(
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        )?;
        page.session = attached["sessionId"]
            .as_str()
            .ok_or("no session id")?
            .to_string();
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            page.call(domain, json!({}))?;
        }
        Ok(page)
    }

    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<u64> {
        self.next_id += 1;
        let mut message = json!({ "id": self.next_id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        self.socket
            .send(Message::text(message.to_string()))
            .map_err(|e| format!("{method}: {e}"))?;
        Ok(self.next_id)
    }

    /// The next message from the browser, as JSON.
    fn receive(&mut self) -> Result<Value> {
        loop {
            match self
                .socket
                .read()
                .map_err(|e| format!("reading from chromium: {e}"))?
            {
                Message::Text(text) => {
                    return serde_json::from_str(text.as_str()).map_err(|e| e.to_string())
                }
                Message::Close(_) => return Err("chromium closed the connection".into()),
                _ => {}
            }
        }
    }

    fn wait_for_answer(&mut self, id: u64, method: &str) -> Result<Value> {
        let start = Instant::now();
        while start.elapsed() < WAIT {
            let message = self.receive()?;
            if message["id"].as_u64() == Some(id) {
                if let Some(error) = message.get("error") {
                    return Err(format!("{method}: {error}"));
                }
                return Ok(message["result"].clone());
            }
            self.events.push(message);
        }
        Err(format!("{method}: no answer within {} s", WAIT.as_secs()))
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.send(None, method, params)?;
        self.wait_for_answer(id, method)
    }

    /// Call `method` on the page.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let session = self.session.clone();
        let id = self.send(Some(&session), method, params)?;
        self.wait_for_answer(id, method)
    }

    /// Load `url` and wait for its load event.
    pub fn navigate(&mut self, url: &str) -> Result<()> {
        self.events
            .retain(|event| event["method"] != "Page.loadEventFired");
        self.call("Page.navigate", json!({ "url": url }))?;
        let start = Instant::now();
        while start.elapsed() < WAIT {
            if self
                .events
                .iter()
                .any(|event| event["method"] == "Page.loadEventFired")
            {
                return Ok(());
            }
            let message = self.receive()?;
            self.events.push(message);
        }
        Err(format!(
            "{url} did not finish loading within {} s",
            WAIT.as_secs()
        ))
    }

    /// Evaluate `expression` (awaiting a promise) and return its value.
    pub fn evaluate(&mut self, expression: &str) -> Result<Value> {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "awaitPromise": true, "returnByValue": true }),
        )?;
        if let Some(details) = result.get("exceptionDetails") {
            return Err(format!("the script threw: {details}"));
        }
        Ok(result["result"]["value"].clone())
    }

    /// A PNG of the page.
    pub fn screenshot(&mut self) -> Result<Vec<u8>> {
        use base64::Engine;
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }))?;
        let data = shot["data"].as_str().ok_or("no screenshot data")?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| e.to_string())
    }

    /// Console errors, uncaught exceptions and error log entries seen so far.
    pub fn errors(&mut self) -> Vec<String> {
        // Drain what has already arrived, without waiting for more.
        let _ = self.socket.get_mut().set_nonblocking(true);
        while let Ok(message) = self.receive() {
            self.events.push(message);
        }
        let _ = self.socket.get_mut().set_nonblocking(false);
        self.events
            .iter()
            .filter_map(|event| {
                let params = &event["params"];
                match event["method"].as_str()? {
                    "Log.entryAdded" if params["entry"]["level"] == "error" => Some(format!(
                        "console: {} {}",
                        params["entry"]["text"].as_str().unwrap_or(""),
                        params["entry"]["url"].as_str().unwrap_or("")
                    )),
                    "Runtime.consoleAPICalled" if params["type"] == "error" => {
                        Some(format!("console.error: {}", params["args"][0]["value"]))
                    }
                    "Runtime.exceptionThrown" => Some(format!(
                        "exception: {}",
                        params["exceptionDetails"]["text"].as_str().unwrap_or("")
                    )),
                    _ => None,
                }
            })
            .collect()
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = self.socket.close(None);
        let _ = self.browser.kill();
        let _ = self.browser.wait();
    }
}

#[cfg(test)]
mod tests {
    /// The client sees what a page does: a script's value, its console
    /// errors and its uncaught exceptions (the test command installs Chromium
    /// before it runs these tests).
    #[test]
    fn a_page_reports_values_console_errors_and_exceptions() {
        let chromium = crate::setup::chromium_path()
            .expect("chromium is installed (cargo xtask setup --browser)");
        let mut page = super::Page::open(&chromium, (800, 600)).unwrap();
        let html = "<p>one</p><p>two</p><script>console.error('bad thing'); setTimeout(() => { throw new Error('boom'); }, 0);</script>";
        page.navigate(&format!("data:text/html,{html}")).unwrap();
        let count = page
            .evaluate(
                "new Promise(r => setTimeout(() => r(document.querySelectorAll('p').length), 50))",
            )
            .unwrap();
        assert_eq!(count, serde_json::json!(2));
        let errors = page.errors();
        assert!(errors.iter().any(|e| e.contains("bad thing")), "{errors:?}");
        assert!(
            errors.iter().any(|e| e.starts_with("exception:")),
            "{errors:?}"
        );
        assert!(page.screenshot().unwrap().starts_with(b"\x89PNG"));
        assert!(page.evaluate("(() => { throw new Error('x') })()").is_err());
    }
}
