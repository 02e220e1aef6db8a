//! A headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
//! JSON messages ended by a NUL byte, the browser reading fd 3 and writing fd 4), so that no
//! port is opened and no client library is needed.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fresh_dir;

/// How long one protocol command or page load may take.
const WAIT: Duration = Duration::from_secs(60);

/// The browser's executable: `$CHROMIUM`, else the first of Debian's and others' names on the
/// `PATH`.
pub(crate) fn find_chromium() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(
        "no Chromium found (chromium, chromium-browser, google-chrome on the PATH, or \
         $CHROMIUM): install it with `apt-get install -y chromium` (Debian; `.ci/run` does)"
            .into(),
    )
}

/// A headless browser with one page (a tab) attached.
pub(crate) struct Browser {
    child: Child,
    input: ChildStdin,
    output: Receiver<Value>,
    next_id: u64,
    session: String,
    /// Events received and not yet looked at, in order.
    events: Vec<Value>,
    profile: PathBuf,
}

impl Browser {
    /// Starts `chromium` headless, with a fresh profile under `scratch`, and opens a page.
    pub(crate) fn start(chromium: &Path, scratch: &Path) -> Result<Browser, String> {
        let profile = scratch.join(format!("chromium-profile-{}", std::process::id()));
        let profile = fresh_dir(&profile)?;
        let mut child = spawn(chromium, &profile, scratch)?;
        let input = child.stdin.take().ok_or("no pipe to the browser")?;
        let from = child.stdout.take().ok_or("no pipe from the browser")?;
        let mut browser = Browser {
            child,
            input,
            output: read_messages(from),
            next_id: 0,
            session: String::new(),
            events: Vec::new(),
            profile,
        };
        browser.attach()?;
        Ok(browser)
    }

    /// Opens a page (a target), attaches to it, and enables the domains whose events the
    /// checks read.
    fn attach(&mut self) -> Result<(), String> {
        let target = self.call("Target.createTarget", json!({ "url": "about:blank" }))?;
        let target = target["targetId"].as_str().ok_or("no targetId")?.to_owned();
        let attached = self.call(
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        )?;
        self.session = attached["sessionId"]
            .as_str()
            .ok_or("no sessionId")?
            .to_owned();
        for domain in ["Page", "Network", "Runtime", "Log"] {
            self.call(&format!("{domain}.enable"), json!({}))?;
        }
        Ok(())
    }

    /// Sends `method` (to the page once attached) and waits for its result.
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = Value::from(self.session.clone());
        }
        let mut bytes = serde_json::to_vec(&message).map_err(|e| e.to_string())?;
        bytes.push(0);
        self.input
            .write_all(&bytes)
            .map_err(|e| format!("the browser went away ({method}): {e}"))?;
        let deadline = Instant::now() + WAIT;
        loop {
            let reply = self.receive(deadline, method)?;
            if reply["id"].as_u64() == Some(id) {
                if let Some(error) = reply.get("error") {
                    return Err(format!("{method}: {error}"));
                }
                return Ok(reply["result"].clone());
            }
            self.events.push(reply);
        }
    }

    fn receive(&mut self, deadline: Instant, what: &str) -> Result<Value, String> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.output.recv_timeout(left) {
            Ok(value) => Ok(value),
            Err(RecvTimeoutError::Timeout) => Err(format!("the browser did not answer {what}")),
            Err(RecvTimeoutError::Disconnected) => Err(format!(
                "the browser closed its pipe while waiting for {what}"
            )),
        }
    }

    /// Waits for event `method` (one already received counts) and returns its parameters.
    pub(crate) fn event(&mut self, method: &str) -> Result<Value, String> {
        if let Some(i) = self.events.iter().position(|e| e["method"] == method) {
            return Ok(self.events.remove(i)["params"].clone());
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let event = self.receive(deadline, method)?;
            if event["method"] == method {
                return Ok(event["params"].clone());
            }
            self.events.push(event);
        }
    }

    /// Loads `url` and waits for its load event; the events of earlier pages are dropped.
    pub(crate) fn open(&mut self, url: &str) -> Result<(), String> {
        self.events.clear();
        let navigated = self.call("Page.navigate", json!({ "url": url }))?;
        if let Some(error) = navigated.get("errorText") {
            return Err(format!("cannot open {url}: {error}"));
        }
        self.event("Page.loadEventFired").map(|_| ())
    }

    /// The value of JavaScript `expression` in the page (a promise awaited).
    pub(crate) fn evaluate(&mut self, expression: &str) -> Result<Value, String> {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        )?;
        if let Some(e) = result.get("exceptionDetails") {
            return Err(format!("the page's script failed: {e}"));
        }
        Ok(result["result"]["value"].clone())
    }

    /// The events received so far (since the last page was opened).
    pub(crate) fn events(&mut self) -> &[Value] {
        // Whatever arrived since the last call.
        while let Ok(event) = self.output.try_recv() {
            self.events.push(event);
        }
        &self.events
    }

    /// A PNG of the whole page at `width` CSS pixels, at most `max_height` tall.
    pub(crate) fn screenshot(&mut self, width: u32, max_height: u32) -> Result<Vec<u8>, String> {
        let metrics = self.call("Page.getLayoutMetrics", json!({}))?;
        let height = metrics["cssContentSize"]["height"]
            .as_f64()
            .unwrap_or(f64::from(max_height))
            .min(f64::from(max_height))
            .ceil();
        let shot = self.call(
            "Page.captureScreenshot",
            json!({
                "format": "png",
                "captureBeyondViewport": true,
                "clip": { "x": 0, "y": 0, "width": width, "height": height, "scale": 1 },
            }),
        )?;
        base64(shot["data"].as_str().ok_or("no screenshot data")?)
    }

    /// Sets the page's viewport to `width` × `height` CSS pixels.
    pub(crate) fn viewport(&mut self, width: u32, height: u32) -> Result<(), String> {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )
        .map(|_| ())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Starts `chromium` headless with `profile`, speaking the DevTools protocol on the child's
/// stdin and stdout, its stderr written to `scratch/chromium.log`.
fn spawn(chromium: &Path, profile: &Path, scratch: &Path) -> Result<Child, String> {
    let log = std::fs::File::create(scratch.join("chromium.log"))
        .map_err(|e| format!("cannot create chromium.log: {e}"))?;
    // The shell moves our pipes to fds 3 (the browser reads) and 4 (it writes).
    Command::new("sh")
        .arg("-c")
        .arg("exec \"$0\" \"$@\" 3<&0 4>&1 0</dev/null 1>&2")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--mute-audio",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", chromium.display()))
}

/// The browser's messages (JSON, each ended by a NUL byte) read from `from` on a thread of their
/// own, until the pipe closes or the receiver is dropped.
fn read_messages(from: ChildStdout) -> Receiver<Value> {
    let (send, output) = channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut message = Vec::new();
        while reader.read_until(0, &mut message).is_ok_and(|n| n > 0) {
            if message.last() == Some(&0) {
                message.pop();
            }
            if let Ok(value) = serde_json::from_slice::<Value>(&message)
                && send.send(value).is_err()
            {
                return;
            }
            message.clear();
        }
    });
    output
}

/// Standard base64 (with padding) decoded.
fn base64(text: &str) -> Result<Vec<u8>, String> {
    let value = |c: u8| -> Result<u32, String> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("not base64: {:?}", c as char)),
        }
        .into())
    };
    let bytes: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|&c| c != b'=').collect();
        let mut n = 0u32;
        for &c in &data {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * (4 - data.len() as u32);
        let full = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&full[..data.len().saturating_sub(1)]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decodes() {
        assert_eq!(super::base64("aGVsbG8=").as_deref(), Ok(&b"hello"[..]));
        assert_eq!(super::base64("aGk=").as_deref(), Ok(&b"hi"[..]));
        assert_eq!(super::base64("YWJj").as_deref(), Ok(&b"abc"[..]));
    }
}
