//! A small WebDriver client for the HTML report's browser test: chromedriver (Debian's `chromium-driver`) driving
//! headless Chromium over WebDriver's HTTP API (W3C WebDriver, https://www.w3.org/TR/webdriver2/), with
//! plain HTTP/1.1 over a TcpStream and serde_json: no HTTP or WebDriver crate needed.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// The key of an element reference in WebDriver's JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// chromedriver, started on a free port, and one browser session.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> Value {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("chromedriver accepts connections");
    // A browser that stops answering fails the test instead of hanging it.
    s.set_read_timeout(Some(std::time::Duration::from_secs(120))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    // chromedriver may keep the connection open: read the head, then exactly the body it announces.
    let mut r = BufReader::new(s);
    let mut head = String::new();
    let mut length = None;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
        chunked |= lower.starts_with("transfer-encoding:") && lower.contains("chunked");
        head.push_str(&line);
    }
    let payload = match length {
        Some(n) => {
            let mut body = vec![0; n];
            r.read_exact(&mut body).unwrap();
            String::from_utf8_lossy(&body).into_owned()
        }
        None if chunked => read_chunked(&mut r),
        None => {
            let mut body = String::new();
            r.read_to_string(&mut body).unwrap();
            body
        }
    };
    assert!(head.starts_with("HTTP/1."), "no HTTP reply to {method} {path}: {head}");
    let v: Value = serde_json::from_str(&payload).unwrap_or_else(|e| panic!("{method} {path}: {e}: {payload}"));
    if v["value"].get("error").is_some() {
        panic!("{method} {path} failed: {}", v["value"]);
    }
    v["value"].clone()
}

/// A chunked body (RFC 9112, 7.1), read up to its last chunk.
fn read_chunked(r: &mut impl BufRead) -> String {
    let mut out = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16).unwrap_or(0);
        if n == 0 {
            return String::from_utf8_lossy(&out).into_owned();
        }
        let mut chunk = vec![0; n + 2];
        r.read_exact(&mut chunk).unwrap();
        out.extend_from_slice(&chunk[..n]);
    }
}

impl Browser {
    /// Starts chromedriver (waiting for the line that says on which port it listens) and a headless session.
    pub fn start(browser: &std::path::Path, driver: &std::path::Path, profile: &std::path::Path) -> Browser {
        let mut child = Command::new(driver)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = loop {
            let line = lines.next().expect("chromedriver says where it listens").unwrap();
            if let Some(rest) = line.split(" on port ").nth(1).filter(|_| line.contains("started successfully")) {
                break rest.trim_end_matches('.').parse::<u16>().expect("a port");
            }
        };
        // Keep draining its output so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": browser,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1400,1800", format!("--user-data-dir={}", profile.display())],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let mut b = Browser { driver: child, port, session: String::new() };
        let v = http(port, "POST", "/session", Some(&caps));
        b.session = v["sessionId"].as_str().expect("a session id").to_string();
        b
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        http(self.port, method, &format!("/session/{}{path}", self.session), body.as_ref())
    }

    /// Opens `url` (returns once the page has loaded: its scripts have run).
    pub fn open(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url})));
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub fn eval(&self, script: &str) -> Value {
        self.call("POST", "/execute/sync", Some(json!({"script": script, "args": []})))
    }

    /// Runs `script`, which calls `arguments[0]` (the callback) when it is done, and returns what it passed.
    pub fn eval_async(&self, script: &str) -> Value {
        self.call("POST", "/timeouts", Some(json!({"script": 30000})));
        self.call("POST", "/execute/async", Some(json!({"script": script, "args": []})))
    }

    /// Clicks the first element matching the CSS `selector`, as a user would (the pointer at its centre).
    pub fn click(&self, selector: &str) {
        let el = self.call("POST", "/element", Some(json!({"using": "css selector", "value": selector})));
        let id = el[ELEMENT].as_str().unwrap_or_else(|| panic!("no element {selector}: {el}")).to_string();
        self.call("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    /// The browser's console messages so far (level and message).
    pub fn console(&self) -> Vec<(String, String)> {
        let v = self.call("POST", "/se/log", Some(json!({"type": "browser"})));
        let entries = v.as_array().cloned().unwrap_or_default();
        entries
            .iter()
            .map(|e| (e["level"].as_str().unwrap_or("").to_string(), e["message"].as_str().unwrap_or("").to_string()))
            .collect()
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self) -> Vec<u8> {
        let v = self.call("GET", "/screenshot", None);
        base64_decode(v.as_str().expect("base64 PNG"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = std::panic::catch_unwind(|| http(self.port, "DELETE", &format!("/session/{}", self.session), None));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let (mut out, mut acc, mut bits) = (Vec::with_capacity(s.len() * 3 / 4), 0u32, 0);
    for v in s.bytes().filter_map(val) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

#[test]
fn base64_decodes() {
    assert_eq!(base64_decode("iVBORw0KGgo="), b"\x89PNG\r\n\x1a\n");
    assert_eq!(read_chunked(&mut &b"5\r\nhello\r\n1\r\n!\r\n0\r\n\r\n"[..]), "hello!");
}
