//! `--metrics ADDR`: a small HTTP server for the fleet's existing engine. `GET /metrics` answers the latest
//! figures in the Prometheus text format (version 0.0.4: `# HELP`, `# TYPE`, one sample a line); `GET
//! /debug/pprof/allocs` (and `/debug/pprof/heap`) the latest capture's gzipped pprof profile, as Go programs
//! answer those paths (what Parca and `go tool pprof http://ADDR/debug/pprof/allocs` pull). One thread, one
//! request per connection, a few seconds at most each: a scraper cannot hold the watch up.

use crate::analysis::leaks::LeakReport;
use anyhow::Result;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server answers, replaced whole at each sample.
#[derive(Default)]
struct Published {
    text: String,
    pprof: Option<Vec<u8>>,
}

pub struct Server {
    published: Arc<Mutex<Published>>,
    pub addr: SocketAddr,
}

impl Server {
    /// Listens on `addr` (`127.0.0.1:9464`; port 0 takes a free one); a bad or taken address is refused. An IP
    /// address, not a host name: a name would need the resolver, which the static build cannot carry.
    pub fn start(addr: &str) -> Result<Server> {
        let refuse = |e: String| crate::app::trace::usage(format!("cannot serve --metrics on {addr}: {e}"));
        let parsed: SocketAddr =
            addr.parse().map_err(|_| refuse("not an IP:PORT (such as 127.0.0.1:9464 or [::1]:9464)".into()))?;
        let listener = TcpListener::bind(parsed).map_err(|e| refuse(format!("{e} (name a free IP:PORT)")))?;
        let addr = listener.local_addr()?;
        let published = Arc::new(Mutex::new(Published::default()));
        let shared = Arc::clone(&published);
        std::thread::Builder::new().name("metrics".into()).spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = answer(stream, &shared);
            }
        })?;
        Ok(Server { published, addr })
    }

    pub fn publish(&self, text: String) {
        if let Ok(mut p) = self.published.lock() {
            p.text = text;
        }
    }

    pub fn publish_pprof(&self, profile: Vec<u8>) {
        if let Ok(mut p) = self.published.lock() {
            p.pprof = Some(profile);
        }
    }
}

fn answer(mut stream: TcpStream, published: &Mutex<Published>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(3)))?;
    stream.set_write_timeout(Some(Duration::from_secs(3)))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16384 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let first = String::from_utf8_lossy(&request);
    let mut words = first.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, kind, body): (&str, &str, Vec<u8>) = {
        let p = published.lock().map_err(|_| std::io::Error::other("poisoned"))?;
        match (method, path) {
            ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", p.text.clone().into_bytes()),
            ("GET", "/debug/pprof/allocs" | "/debug/pprof/heap") => match &p.pprof {
                Some(bytes) => ("200 OK", "application/octet-stream", bytes.clone()),
                None => ("404 Not Found", "text/plain", b"no capture yet\n".to_vec()),
            },
            ("GET", _) => ("404 Not Found", "text/plain", b"/metrics or /debug/pprof/allocs\n".to_vec()),
            _ => ("405 Method Not Allowed", "text/plain", b"GET only\n".to_vec()),
        }
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(&body)?;
    stream.flush()
}

/// Labels of one series, in order.
pub type Labels = Vec<(&'static str, String)>;

/// The text of one scrape: families in the order first named, each with its samples; samples of the same
/// labels are added up (processes whose labels are the same are one series: there is no pid label, which would
/// make a new series of every restart).
#[derive(Default)]
pub struct Exposition {
    families: Vec<(&'static str, &'static str, &'static str)>,
    samples: BTreeMap<&'static str, BTreeMap<Labels, f64>>,
}

impl Exposition {
    /// One that starts with `syscatch_build_info` (always 1, labelled with the version and build), as Prometheus'
    /// conventions ask of every exporter.
    pub fn with_build_info() -> Exposition {
        let mut e = Exposition::default();
        e.family("syscatch_build_info", "gauge", "syscatch's version and build, always 1.");
        let labels = vec![("version", env!("CARGO_PKG_VERSION").into()), ("build", env!("SYSCATCH_BUILD_INFO").into())];
        e.add("syscatch_build_info", labels, 1.0);
        e
    }

    /// `kind`: `gauge` or `counter`.
    pub fn family(&mut self, name: &'static str, kind: &'static str, help: &'static str) {
        if !self.families.iter().any(|f| f.0 == name) {
            self.families.push((name, kind, help));
        }
    }

    pub fn add(&mut self, name: &'static str, labels: Labels, value: f64) {
        *self.samples.entry(name).or_default().entry(labels).or_default() += value;
    }

    /// As [`Self::add`], keeping the least value of the same labels instead of the sum.
    pub fn least(&mut self, name: &'static str, labels: Labels, value: f64) {
        let v = self.samples.entry(name).or_default().entry(labels).or_insert(value);
        *v = v.min(value);
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        for (name, kind, help) in &self.families {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (labels, value) in self.samples.get(name).into_iter().flatten() {
                out.push_str(name);
                if !labels.is_empty() {
                    let parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
                    out.push_str(&format!("{{{}}}", parts.join(",")));
                }
                out.push_str(&format!(" {}\n", number(*value)));
            }
        }
        out
    }
}

/// The leak report's stacks named in `/metrics` (the rest are added up as `stack="other"`): a bounded number of
/// series, as Prometheus' conventions ask.
const TOP_STACKS: usize = 10;

/// A trace's figures (`--leaks --metrics`) as `/metrics` serves them: the anonymous memory and its rate (the
/// names `watch` uses), and the leak candidates of most growth, each by a short id stable across runs (a hash of
/// its functions and modules) and its first frame outside libc.
pub fn leaks_exposition(report: &LeakReport, process: &str, rank: &str) -> String {
    let mut e = Exposition::with_build_info();
    let labels: Labels = vec![("process", process.into()), ("rank", rank.into())];
    e.family("syscatch_anon_bytes", "gauge", "Rss+Swap of the anonymous memory, at the latest sample.");
    if let Some(kb) = report.series.total.last() {
        e.add("syscatch_anon_bytes", labels.clone(), (kb * 1024) as f64);
    }
    let rates = [
        ("syscatch_growth_bytes_per_second", "Lasting growth rate: the trend of the Rss+Swap floor."),
        ("syscatch_growth_low_bytes_per_second", "Lower end of the growth rate's interval."),
        ("syscatch_growth_high_bytes_per_second", "Upper end of the growth rate's interval."),
    ];
    for (name, help) in rates {
        e.family(name, "gauge", help);
    }
    if let Some(t) = report.rate {
        for ((name, _), v) in rates.iter().zip([t.per_sec, t.low, t.high]) {
            e.add(name, labels.clone(), v);
        }
    }
    e.family("syscatch_stack_growth_bytes_per_second", "gauge", "A leak candidate's rate (the trend of its bytes).");
    e.family("syscatch_stack_mapped_bytes", "gauge", "Bytes a leak candidate still maps.");
    for (i, c) in report.leaks.iter().enumerate() {
        let mut l = labels.clone();
        let stack = report.stack(c.id);
        if i < TOP_STACKS {
            l.push(("stack", stack.map(short_id).unwrap_or_default()));
            l.push(("caller", stack.map(caller).unwrap_or_default()));
        } else {
            l.extend([("stack", "other".to_string()), ("caller", String::new())]);
        }
        // (No rate before four samples: a series says nothing rather than something untrue.)
        if let Some(t) = c.rate {
            e.add("syscatch_stack_growth_bytes_per_second", l.clone(), t.per_sec);
        }
        e.add("syscatch_stack_mapped_bytes", l, c.stats.still_mapped as f64);
    }
    e.text()
}

/// A stack's caller in `/metrics`: its first function outside libc, with its module (`pool_grow (libucx.so)`), the
/// same in every run.
fn caller(stack: &crate::model::stack::Stack) -> String {
    let f = stack.frames.iter().find(|f| !f.in_libc() && !f.inlined).or(stack.frames.first());
    f.map(|f| match (&f.function, &f.module, &f.file) {
        (Some(func), Some(m), _) => format!("{func} ({m})"),
        (Some(func), None, Some(file)) => format!("{func} ({})", crate::model::modules::file_name(file)),
        (Some(func), None, None) => func.clone(),
        (None, m, _) => m.clone().unwrap_or_default(),
    })
    .unwrap_or_default()
}

/// A stack's id in `/metrics`: 8 hex digits of an FNV-1a hash of its frames' functions and modules (addresses
/// differ from run to run; these do not).
fn short_id(stack: &crate::model::stack::Stack) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in crate::report::diff::stack_key(stack).join(";").bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

/// A label value as the text format writes it: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_has_help_type_and_added_up_series() {
        let mut e = Exposition::default();
        e.family("syscatch_build_info", "gauge", "syscatch's version.");
        e.add("syscatch_build_info", vec![("version", "1.0".into())], 1.0);
        e.family("syscatch_rss_swap_bytes", "gauge", "Rss+Swap.");
        e.add("syscatch_rss_swap_bytes", vec![("process", "w\"1\\".into())], 10.0);
        e.add("syscatch_rss_swap_bytes", vec![("process", "w\"1\\".into())], 5.0);
        e.add("syscatch_rss_swap_bytes", vec![("process", "a".into())], f64::INFINITY);
        assert_eq!(
            e.text(),
            "# HELP syscatch_build_info syscatch's version.\n# TYPE syscatch_build_info gauge\n\
             syscatch_build_info{version=\"1.0\"} 1\n\
             # HELP syscatch_rss_swap_bytes Rss+Swap.\n# TYPE syscatch_rss_swap_bytes gauge\n\
             syscatch_rss_swap_bytes{process=\"a\"} +Inf\nsyscatch_rss_swap_bytes{process=\"w\\\"1\\\\\"} 15\n"
        );
    }
}
