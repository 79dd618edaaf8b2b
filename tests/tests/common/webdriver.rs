//! A small W3C WebDriver client for the dashboard tests: a real headless Chromium driven by
//! `chromedriver` on a loopback port. Blocking HTTP/1.1 over `std::net`, one connection per
//! command, JSON through `serde_json`: the suite is synchronous, and the commands the tests
//! use (session, navigate, find, click, type, script, screenshot, window size) are a few
//! lines each, where a WebDriver crate (fantoccini) would add an async runtime and some 57
//! crates (two ICU stacks, `url`, `time`, `cookie`) to the test build.
//!
//! Nothing reaches another machine: chromedriver listens on 127.0.0.1 only, and Chromium runs
//! with background networking off, every non-loopback request sent to a dead proxy, and
//! every host name other than `localhost` resolved to nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::http::free_port;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The W3C name of an element reference in JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// The longest one WebDriver command may take.
const COMMAND_BOUND: Duration = Duration::from_secs(60);

const MISSING: &str = "the dashboard tests drive a real headless Chromium: install the \
    Debian packages chromium and chromium-driver (`apt-get install -y chromium \
    chromium-driver`; .ci/run does), or name the binaries in HOMEBASED_CHROMIUM and \
    HOMEBASED_CHROMEDRIVER";

fn find_binary(env: &str, candidates: &[&str]) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "{env}={} is not a file: {MISSING}",
            p.display()
        );
        return p;
    }
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{} not found: {MISSING}", candidates[0]))
}

/// One browser session; dropping it ends the session and stops chromedriver (and with it
/// the browser).
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

/// An element on the page.
#[derive(Debug, Clone)]
pub struct Element(pub String);

impl Browser {
    /// Starts chromedriver on a free loopback port and a headless Chromium session of
    /// `width` x `height` CSS pixels.
    pub fn start(width: u32, height: u32) -> Browser {
        // Debian's /usr/bin/chromium is a shell wrapper; the binary itself is under lib.
        let chromium = find_binary(
            "HOMEBASED_CHROMIUM",
            &[
                "/usr/lib/chromium/chromium",
                "/usr/bin/chromium",
                "/usr/bin/chromium-browser",
            ],
        );
        let chromedriver = find_binary(
            "HOMEBASED_CHROMEDRIVER",
            &["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"],
        );
        let port = free_port();
        let profile = tempfile::Builder::new()
            .prefix("homebased-chromium-")
            .tempdir()
            .unwrap();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}: {MISSING}", chromedriver.display()));
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let started = Instant::now();
        loop {
            if let Ok(status) = browser.raw("GET", "/status", None) {
                if status["value"]["ready"] == true {
                    break;
                }
            }
            assert!(
                started.elapsed() < crate::common::PATIENCE,
                "chromedriver never answered on 127.0.0.1:{port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut args = vec![
            "--headless=new".to_string(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--no-first-run".into(),
            "--no-default-browser-check".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-extensions".into(),
            "--disable-default-apps".into(),
            "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication".into(),
            // Loopback goes direct (Chromium never proxies it); anything else would go to
            // a proxy that does not exist, and no name but localhost resolves.
            "--proxy-server=http://127.0.0.1:9".into(),
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1".into(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", browser._profile.path().display()),
        ];
        if nix::unistd::geteuid().is_root() {
            args.push("--no-sandbox".into());
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let created = browser.command("POST", "/session", Some(caps));
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        browser.set_size(width, height);
        browser
    }

    /// Sends one command; `Err` when the connection failed.
    fn raw(&self, method: &str, path: &str, body: Option<Value>) -> std::io::Result<Value> {
        let mut conn = TcpStream::connect(("127.0.0.1", self.port))?;
        conn.set_read_timeout(Some(COMMAND_BOUND))?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
             Content-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        );
        conn.write_all(request.as_bytes())?;
        // chromedriver keeps the connection open whatever the request says: read the head,
        // then exactly its Content-Length (or chunks up to the last one).
        let mut answer = Vec::new();
        let mut chunk = [0u8; 16384];
        let end = loop {
            if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            let n = conn.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::Error::other("closed before the HTTP head"));
            }
            answer.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
        let chunked = head.contains("transfer-encoding: chunked");
        let length = head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "content-length").then(|| v.trim().parse::<usize>().ok())?
        });
        let mut payload = answer[end + 4..].to_vec();
        loop {
            let complete = match length {
                Some(n) => payload.len() >= n,
                None if chunked => payload.ends_with(b"0\r\n\r\n"),
                None => false,
            };
            if complete {
                break;
            }
            let n = conn.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            payload.extend_from_slice(&chunk[..n]);
        }
        if let Some(n) = length {
            payload.truncate(n);
        } else if chunked {
            payload = dechunk(&payload);
        }
        serde_json::from_slice(&payload).map_err(std::io::Error::other)
    }

    /// A command whose failure fails the test, with WebDriver's own error.
    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let answer = self
            .raw(method, path, body)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
        if let Some(error) = answer["value"]["error"].as_str() {
            panic!(
                "WebDriver {method} {path}: {error}: {}",
                answer["value"]["message"]
            );
        }
        answer["value"].clone()
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    pub fn set_size(&self, width: u32, height: u32) {
        self.command(
            "POST",
            &self.session_path("/window/rect"),
            Some(json!({"width": width, "height": height})),
        );
    }

    pub fn goto(&self, url: &str) {
        self.command(
            "POST",
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        );
    }

    /// Every element matching the CSS selector, in document order.
    pub fn find_all(&self, css: &str) -> Vec<Element> {
        let found = self.command(
            "POST",
            &self.session_path("/elements"),
            Some(json!({"using": "css selector", "value": css})),
        );
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|e| Element(e[ELEMENT].as_str().unwrap().to_string()))
            .collect()
    }

    pub fn find(&self, css: &str) -> Option<Element> {
        self.find_all(css).into_iter().next()
    }

    /// Clicks like a person: scrolled into view, at its centre. `Err` with WebDriver's
    /// error (an element a re-render replaced is `stale element reference`).
    pub fn try_click(&self, e: &Element) -> Result<(), String> {
        let answer = self
            .raw(
                "POST",
                &self.session_path(&format!("/element/{}/click", e.0)),
                Some(json!({})),
            )
            .map_err(|e| e.to_string())?;
        match answer["value"]["error"].as_str() {
            Some(error) => Err(error.to_string()),
            None => Ok(()),
        }
    }

    /// Finds the first element matching `css` and clicks it, again if a re-render of the
    /// page replaced it in between (the page re-renders once a second).
    pub fn click(&self, css: &str) {
        wait_for(&format!("a click on {css}"), || {
            let e = self.find(css)?;
            self.try_click(&e).ok()
        });
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let e = wait_for(&format!("the element {css}"), || self.find(css));
        self.command(
            "POST",
            &self.session_path(&format!("/element/{}/value", e.0)),
            Some(json!({ "text": text })),
        );
    }

    /// Runs `body` (a function body: `return ...;`) in the page; its result.
    pub fn script(&self, body: &str, args: Value) -> Value {
        self.command(
            "POST",
            &self.session_path("/execute/sync"),
            Some(json!({"script": body, "args": args})),
        )
    }

    /// Runs `body`, which ends by calling `arguments[arguments.length - 1](result)`.
    pub fn async_script(&self, body: &str, args: Value) -> Value {
        self.command(
            "POST",
            &self.session_path("/execute/async"),
            Some(json!({"script": body, "args": args})),
        )
    }

    /// The text a person sees in the elements matching `css`, joined by newlines.
    pub fn text(&self, css: &str) -> String {
        self.script(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText).join('\\n');",
            json!([css]),
        )
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// A Chrome DevTools command (chromedriver's `goog/cdp/execute`).
    pub fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.command(
            "POST",
            &self.session_path("/goog/cdp/execute"),
            Some(json!({"cmd": cmd, "params": params})),
        )
    }

    /// A PNG of the whole page as it is laid out now (the window's height grown to the
    /// document's), saved as `path`.
    pub fn screenshot(&self, path: &Path, width: u32) {
        let height = self
            .script(
                "return Math.ceil(document.documentElement.scrollHeight);",
                json!([]),
            )
            .as_u64()
            .unwrap_or(900)
            .clamp(400, 4000);
        self.cdp(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        let png = self.command("GET", &self.session_path("/screenshot"), None);
        self.cdp("Emulation.clearDeviceMetricsOverride", json!({}));
        let bytes = base64_decode(png.as_str().expect("a screenshot is base64 text"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, bytes).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.raw("DELETE", &self.session_path(""), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Polls `f` every 50 ms until it answers `Some`; panics with `what` after
/// [`crate::common::PATIENCE`].
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    wait_within(what, crate::common::PATIENCE, &mut f)
}

/// Polls `f` every 50 ms until it answers `Some`; panics with `what` after `bound`.
pub fn wait_within<T>(what: &str, bound: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            started.elapsed() < bound,
            "gave up after {bound:?} waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where the test run saves its screenshots: `$HOMEBASED_SCREENSHOTS`, else
/// `target/screenshots`.
pub fn screenshot_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HOMEBASED_SCREENSHOTS") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/<test> -> target/screenshots
    exe.ancestors()
        .nth(3)
        .expect("the test executable lives in target/<profile>/deps")
        .join("screenshots")
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&data[..end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = end + 2;
        out.extend_from_slice(&data[start..(start + size).min(data.len())]);
        data = &data[(start + size + 2).min(data.len())..];
    }
    out
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for v in text.bytes().filter_map(value) {
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}
