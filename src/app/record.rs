//! Recordings: `--record FILE` writes what a trace captured, and `syscatch report FILE` runs the same analysis on
//! it later, with the target gone, as `perf record` / `perf report` do.
//!
//! A recording is gzipped JSON Lines, one [`Record`] per line, the header first and `end` last (a file without
//! it was cut short: syscatch was killed while recording; it is read up to the cut and said to be truncated). It holds everything the analysis uses: each event with its registers, Python
//! frames and the part of its stack window the unwinder read; the memory maps as the analysis read them (one
//! generation per read, as libraries come and go) with each module's build-id, and the vDSO's image; the smaps
//! samples in order among the events; page residency; the facts the findings rules look at; the plan's depth
//! limits and watched paths; the trace's summary. Modules and debug files are read again on the machine that
//! reports, and used only if their build-ids match the recorded ones; those missing are named. Past
//! [`CALLS_FOR`], a `--leaks` recording holds the leak model instead of each mapping call: each stack once
//! ([`Record::Stack`]) and the model's changes before each sample ([`Record::Changes`]), so that it grows with
//! stacks and time, not with calls.

use crate::analysis::correlate::Changes;
use crate::analysis::modules::{ModuleSource, SourceError};
use crate::analysis::rules::ProcessFacts;
use crate::model::Tid;
use crate::model::bytes::Bytes;
use crate::model::event::{End, Event, StackCapture, Summary};
use crate::model::modules::{Module, ModuleMap, hex, unhex};
use crate::model::regs::{Reg, Regs};
use crate::model::smaps::{SmapsRegion, Span};
use crate::model::stack::PyFrame;
use crate::model::watch::Watched;
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long (seconds since attach) a `--leaks` recording keeps each mapping call; past it, the leak model's changes
/// at each sample (the calls of a short trace are all there, to report as events or in any window; an hours-long
/// one grows with its stacks and samples, not its calls).
pub const CALLS_FOR: f64 = 60.0;

/// [`CALLS_FOR`], or no time at all when a test asks (fault `record-changes`).
pub fn calls_for() -> f64 {
    if crate::os::faults::injected("record-changes") { 0.0 } else { CALLS_FOR }
}

/// The first field of the header: what the file is.
pub const FORMAT: &str = "syscatch-recording";
/// Bumped when a record changes meaning; a reader refuses versions it does not know. Version 2 adds sessions:
/// a file of several recordings one after another, each its own gzip member, and a [`Record::Session`] last.
/// Version 3 adds [`Record::Stack`] and [`Record::Changes`]: past [`CALLS_FOR`], a `--leaks` recording keeps
/// the leak model's changes at each sample instead of each call.
pub const VERSION: u32 = 3;
/// The versions this syscatch reads.
const READS: std::ops::RangeInclusive<u32> = 1..=VERSION;

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One line of a recording.
#[derive(Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Record {
    Header {
        format: String,
        version: u32,
        pid: Tid,
        /// The syscatch that wrote it (`--version`).
        syscatch: String,
        stack_bytes: usize,
    },
    /// The memory map, each time the analysis read it.
    Maps {
        text: String,
    },
    /// A module the analysis loaded: its build-id (hex), to check the file read back later.
    Module {
        path: String,
        start: u64,
        build_id: Option<String>,
    },
    /// The vDSO's image (it has no file), hex.
    Vdso {
        start: u64,
        image: String,
    },
    Event(Box<RecEvent>),
    /// A call whose stack the leak model had not met, once the recording keeps its changes: only its stack
    /// counts (the call is in the next [`Record::Changes`]).
    Stack(Box<RecEvent>),
    /// How the leak model changed since the last of these (or since it stopped recording each call), written
    /// before each sample and at the end; `nested`: the calls it counted once so far (see `SeenTwice`).
    Changes {
        time: f64,
        changes: Box<Changes>,
        nested: u64,
    },
    /// A whole smaps sample, as earlier recordings hold them (read back as spans).
    Smaps {
        regions: Vec<SmapsRegion>,
    },
    /// A sample of the regions as the leak model keeps it, at its place among the events.
    Sample {
        spans: Vec<Span>,
        /// When it was taken, in seconds since attach (recordings before schema 3 have none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time: Option<f64>,
        /// The baseline of growth, taken right after arming.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        baseline: bool,
    },
    /// Page residency of one range: how many pagemap entries were read and the resident bytes they show.
    Residency {
        start: u64,
        end: u64,
        max: u64,
        pages: u64,
        resident: u64,
    },
    Plan {
        depths: BTreeMap<String, usize>,
        watched: Watched,
        /// `--malloc-every` (0 or absent: no `--malloc`): the report weighs the recorded samples with it.
        #[serde(default, skip_serializing_if = "is_zero")]
        malloc_every: u64,
        /// `--fault-every` (0 or absent: no `--faults`).
        #[serde(default, skip_serializing_if = "is_zero")]
        fault_every: u64,
    },
    Facts(Box<ProcessFacts>),
    Summary(Box<Summary>),
    End {
        events: u64,
    },
    /// After the recordings of a session's processes: each process traced (those without a recording too), in
    /// the report's order.
    Session {
        processes: Vec<RecProcess>,
    },
}

/// One process of a recorded session.
#[derive(Serialize, Deserialize, Clone)]
pub struct RecProcess {
    pub pid: Tid,
    pub name: String,
    pub command: String,
    pub nspid: Vec<Tid>,
    /// Seconds after the session's start that its trace began.
    pub joined: f64,
    /// How its trace ended, or why it failed.
    pub end: Result<End, String>,
}

/// One captured call.
#[derive(Serialize, Deserialize)]
pub struct RecEvent {
    pub time: f64,
    pub tid: Tid,
    pub probe: Option<String>,
    pub func: Option<String>,
    pub nr: u64,
    pub args: [u64; 6],
    pub regs: Vec<(Reg, u64)>,
    pub ret: Option<u64>,
    pub ret_missing: Option<String>,
    pub also: Vec<String>,
    pub stack: Option<RecStack>,
    /// The tracer dropped the stack window (the analysis was behind).
    pub stack_dropped: bool,
    /// The number the leak model gave the call's stack (to match [`Record::Changes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leak: Option<u32>,
}

/// A stack capture, cut to the bytes the unwinder read.
#[derive(Serialize, Deserialize)]
pub struct RecStack {
    /// The registers, in [`Reg::ALL`] order.
    pub regs: Vec<u64>,
    pub fs_base: u64,
    pub asked: usize,
    /// The window's length when captured; only `bytes` of it are kept (the rest was never read).
    pub len: usize,
    pub bytes: String,
    pub python: Vec<PyFrame>,
    /// Copies of other stacks taken at the same stop ([`StackCapture::more`]), cut as `bytes` is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more: Vec<RecPiece>,
}

/// One more stack copy of a capture: its address, its length when captured, the bytes the unwinder read.
#[derive(Serialize, Deserialize)]
pub struct RecPiece {
    pub addr: u64,
    pub len: usize,
    pub bytes: String,
}

impl RecEvent {
    /// `seen`: how many bytes of each stack copy the unwinder read, the main one first (the rest is not kept).
    pub fn new(ev: &Event, capture: Option<&StackCapture>, seen: &[usize], stack_dropped: bool) -> RecEvent {
        let seen_of = |i: usize| seen.get(i).copied().unwrap_or(0);
        RecEvent {
            time: ev.time,
            tid: ev.tid,
            probe: ev.probe.as_deref().map(str::to_string),
            func: ev.func.as_deref().map(str::to_string),
            nr: ev.nr,
            args: ev.args,
            regs: ev.regs.clone(),
            ret: ev.ret,
            ret_missing: ev.ret_missing.clone(),
            also: ev.also.iter().map(|a| a.to_string()).collect(),
            stack: capture.map(|c| RecStack {
                regs: Reg::ALL.iter().map(|&r| c.regs.get(r)).collect(),
                fs_base: c.regs.0.fs_base,
                asked: c.asked,
                len: c.stack.len(),
                bytes: hex(&c.stack[..seen_of(0).min(c.stack.len())]),
                python: c.python.to_vec(),
                more: c
                    .more
                    .iter()
                    .enumerate()
                    .map(|(i, (addr, w))| RecPiece {
                        addr: *addr,
                        len: w.len(),
                        bytes: hex(&w[..seen_of(i + 1).min(w.len())]),
                    })
                    .collect(),
            }),
            stack_dropped,
            leak: None,
        }
    }

    /// The event as captured (the stack window padded back to its length: the padding is never read).
    pub fn event(&self) -> Result<Event, String> {
        let capture = match &self.stack {
            None => None,
            Some(s) => {
                let mut regs = Regs::zeroed();
                if s.regs.len() != Reg::ALL.len() {
                    return Err(format!("an event has {} registers, not {}", s.regs.len(), Reg::ALL.len()));
                }
                for (&r, &v) in Reg::ALL.iter().zip(&s.regs) {
                    regs.set(r, v);
                }
                regs.0.fs_base = s.fs_base;
                let mut stack = unhex(&s.bytes).ok_or("an event's stack bytes are not hex")?;
                if stack.len() > s.len || s.len > 1 << 30 {
                    return Err("an event's stack window is longer than its recorded length".into());
                }
                stack.resize(s.len, 0);
                let mut more = Vec::new();
                for p in &s.more {
                    let mut b = unhex(&p.bytes).ok_or("an event's stack bytes are not hex")?;
                    if b.len() > p.len || p.len > 1 << 30 {
                        return Err("an event's stack window is longer than its recorded length".into());
                    }
                    b.resize(p.len, 0);
                    more.push((p.addr, b.into()));
                }
                Some(StackCapture {
                    regs,
                    stack: stack.into(),
                    asked: s.asked,
                    python: s.python.as_slice().into(),
                    more,
                    known: None,
                    known_id: None,
                })
            }
        };
        Ok(Event {
            time: self.time,
            tid: self.tid,
            probe: self.probe.as_deref().map(Arc::from),
            func: self.func.as_deref().map(Arc::from),
            nr: self.nr,
            args: self.args,
            regs: self.regs.clone(),
            ret: self.ret,
            ret_missing: self.ret_missing.clone(),
            capture,
            also: self.also.iter().map(|a| Arc::from(a.as_str())).collect(),
        })
    }
}

type Gz = flate2::write::GzEncoder<std::io::BufWriter<std::fs::File>>;

/// Writes a recording; shared by the threads that produce its records. The first write error is kept (and
/// reported at the end): a full disk loses the recording, never the trace. What was written is flushed to the file
/// by the first record written [`FLUSH_EVERY`] after the last flush, whole records at a time, so a syscatch killed
/// while recording leaves a readable prefix (`report` reads it, saying it is truncated).
pub struct Recorder {
    /// The open file (`None` once finished), the first error, and when it was last flushed.
    out: Mutex<(Option<Gz>, Option<String>, Instant)>,
    events: std::sync::atomic::AtomicU64,
}

/// How often a recording is flushed to its file (by the next record written).
const FLUSH_EVERY: Duration = Duration::from_secs(1);

impl Recorder {
    /// Creates the file and writes the header.
    pub fn create(path: &Path, pid: Tid, stack_bytes: usize) -> Result<Arc<Recorder>> {
        let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let gz = flate2::write::GzEncoder::new(std::io::BufWriter::new(file), flate2::Compression::fast());
        let r = Recorder { out: Mutex::new((Some(gz), None, Instant::now())), events: Default::default() };
        r.write(&Record::Header {
            format: FORMAT.into(),
            version: VERSION,
            pid,
            syscatch: crate::cli::VERSION.into(),
            stack_bytes,
        });
        Ok(Arc::new(r))
    }

    pub fn write(&self, rec: &Record) {
        if matches!(rec, Record::Event(_)) {
            self.events.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let mut g = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let (Some(w), None, flushed) = &mut *g else { return };
        let mut done =
            serde_json::to_writer(&mut *w, rec).map_err(std::io::Error::from).and_then(|_| w.write_all(b"\n"));
        // A sync flush: the compressed stream so far ends on a byte boundary in the file, its last line whole.
        if done.is_ok() && flushed.elapsed() >= FLUSH_EVERY {
            done = w.flush();
            *flushed = Instant::now();
        }
        if let Err(e) = done {
            g.1 = Some(e.to_string());
        }
    }

    /// Writes the end record and closes the file; the first error of the whole recording, if any.
    pub fn finish(&self) -> Result<()> {
        let events = self.events.load(std::sync::atomic::Ordering::Relaxed);
        self.write(&Record::End { events });
        let mut g = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = g.1.take() {
            bail!("the recording is incomplete: {e}");
        }
        let w = g.0.take().ok_or_else(|| anyhow!("the recording was already closed"))?;
        let mut inner = w.finish().context("cannot finish the recording")?;
        inner.flush().context("cannot finish the recording")?;
        Ok(())
    }
}

/// A live [`ModuleSource`] whose answers are also written to a recording.
pub struct Recording {
    pub inner: Box<dyn ModuleSource>,
    pub rec: Arc<Recorder>,
}

impl ModuleSource for Recording {
    fn maps(&mut self) -> Option<String> {
        let text = self.inner.maps()?;
        self.rec.write(&Record::Maps { text: text.clone() });
        Some(text)
    }

    fn module(&mut self, g: &ModuleMap) -> Result<Module, SourceError> {
        let m = self.inner.module(g)?;
        if g.path == "[vdso]" {
            self.rec.write(&Record::Vdso { start: g.start, image: hex(&m.data) });
        } else {
            self.rec.write(&Record::Module {
                path: g.path.clone(),
                start: g.start,
                build_id: m.build_id.as_deref().map(hex),
            });
        }
        Ok(m)
    }

    fn debug_file(&mut self, path: &str, data: &[u8]) -> Option<(String, Bytes)> {
        self.inner.debug_file(path, data)
    }
}

/// Everything of a recording but its events and samples, which [`Reader::stream`] reads in order.
pub struct Reader {
    pub path: std::path::PathBuf,
    pub pid: Tid,
    pub syscatch: String,
    pub maps: Vec<String>,
    pub modules: HashMap<(String, u64), Option<String>>,
    pub vdso: HashMap<u64, String>,
    pub residency: HashMap<(u64, u64, u64), (u64, u64)>,
    pub plan: Option<(BTreeMap<String, usize>, Watched)>,
    /// The trace's `--malloc-every` (0: no `--malloc`).
    pub malloc_every: u64,
    /// The trace's `--fault-every` (0: no `--faults`).
    pub fault_every: u64,
    pub facts: Option<ProcessFacts>,
    pub summary: Option<Summary>,
    pub events: u64,
    /// Why the recording ends early (syscatch was killed while recording: no end record, or a cut line): what it
    /// holds is read up to there.
    pub truncated: Option<String>,
    /// Which recording of the file it is (0 but in a session's).
    segment: usize,
}

/// A recording file: one process's recording, or a session's (several, and who each process is).
pub struct Opened {
    pub parts: Vec<Reader>,
    /// A session's processes, in its report's order; empty for one process's recording.
    pub processes: Vec<RecProcess>,
}

fn open_lines(path: &Path) -> Result<impl Iterator<Item = std::io::Result<String>> + use<>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // A session's recording is several gzip members one after another.
    Ok(BufReader::new(flate2::read::MultiGzDecoder::new(BufReader::new(file))).lines())
}

/// Records whose lines start so are read only by [`Reader::stream`].
const STREAMED: [&str; 5] =
    [r#"{"t":"event""#, r#"{"t":"smaps""#, r#"{"t":"sample""#, r#"{"t":"stack""#, r#"{"t":"changes""#];

impl Reader {
    /// Reads every header and every record but events and samples; refuses a file that is not a recording, of
    /// a version this syscatch does not read, or truncated, with one line.
    pub fn open_all(path: &Path) -> Result<Opened> {
        let name = path.display();
        let bad = |what: String| anyhow!("{name} is not a syscatch recording ({what}); make one with --record FILE");
        let mut parts: Vec<Reader> = Vec::new();
        let mut processes = None;
        // Whether the last recording has its end record.
        let mut ended = true;
        for (n, line) in open_lines(path)?.enumerate() {
            let line = match (line, n, parts.last_mut().filter(|_| !ended)) {
                (Ok(l), ..) => l,
                (Err(e), 0, _) => return Err(bad(e.to_string())),
                (Err(e), _, Some(r)) => {
                    r.truncated = Some(e.to_string());
                    break;
                }
                (Err(e), _, None) => return Err(truncated(path, &e.to_string())),
            };
            if processes.is_some() {
                bail!("{name}: records after the session's end (line {}): not one recording", n + 1);
            }
            if !ended && STREAMED.iter().any(|p| line.starts_with(p)) {
                continue;
            }
            let rec: Record = match serde_json::from_str(&line) {
                Ok(rec) => rec,
                Err(_) if n == 0 => return Err(bad("no header".into())),
                Err(e) => bail!("{name}: line {} is not a record this syscatch knows ({e})", n + 1),
            };
            match (rec, parts.last_mut().filter(|_| !ended)) {
                (Record::Header { format, version, pid, syscatch, .. }, None) if format == FORMAT => {
                    if !READS.contains(&version) {
                        bail!(
                            "{name} is a version {version} recording; this syscatch ({}) reads versions {} to \
                             {VERSION}: report it with the syscatch that wrote it ({syscatch})",
                            crate::cli::VERSION,
                            READS.start()
                        );
                    }
                    parts.push(Reader::new(path, pid, syscatch, parts.len()));
                    ended = false;
                }
                (Record::Header { .. }, None) if n == 0 => return Err(bad("no header".into())),
                (Record::Header { .. }, _) => bail!("{name}: a second header at line {}: not one recording", n + 1),
                (Record::Session { processes: p }, None) if n > 0 => processes = Some(p),
                (_, None) if n == 0 => return Err(bad("no header".into())),
                (_, None) => bail!("{name}: records after the end record (line {}): not one recording", n + 1),
                (rec, Some(r)) => ended = r.take(rec),
            }
        }
        if parts.is_empty() {
            return Err(bad("it is empty".into()));
        }
        // A session's recordings are whole (each is copied in once its process is done).
        let several = processes.is_some() || parts.len() > 1;
        if let Some(r) = parts.last_mut().filter(|_| !ended) {
            if several {
                return Err(truncated(path, "no end record"));
            }
            r.truncated.get_or_insert_with(|| "no end record".into());
        }
        Ok(Opened { parts, processes: processes.unwrap_or_default() })
    }

    fn new(path: &Path, pid: Tid, syscatch: String, segment: usize) -> Reader {
        Reader {
            path: path.to_path_buf(),
            pid,
            syscatch,
            maps: Vec::new(),
            modules: HashMap::new(),
            vdso: HashMap::new(),
            residency: HashMap::new(),
            plan: None,
            malloc_every: 0,
            fault_every: 0,
            facts: None,
            summary: None,
            events: 0,
            truncated: None,
            segment,
        }
    }

    /// Takes one record of its recording (not an event or a sample); true for the end record.
    fn take(&mut self, rec: Record) -> bool {
        match rec {
            Record::Maps { text } => self.maps.push(text),
            Record::Module { path, start, build_id } => {
                self.modules.insert((path, start), build_id);
            }
            Record::Vdso { start, image } => {
                self.vdso.insert(start, image);
            }
            Record::Residency { start, end, max, pages, resident } => {
                self.residency.insert((start, end, max), (pages, resident));
            }
            Record::Plan { depths, watched, malloc_every, fault_every } => {
                self.plan = Some((depths, watched));
                self.malloc_every = malloc_every;
                self.fault_every = fault_every;
            }
            Record::Facts(f) => self.facts = Some(*f),
            Record::Summary(s) => self.summary = Some(*s),
            Record::End { events } => {
                self.events = events;
                return true;
            }
            Record::Header { .. } | Record::Session { .. } => {}
            Record::Event(_)
            | Record::Stack(_)
            | Record::Changes { .. }
            | Record::Smaps { .. }
            | Record::Sample { .. } => {}
        }
        false
    }

    /// The events and smaps samples of its recording, in the order the analysis met them.
    pub fn stream(&self) -> Result<impl Iterator<Item = Result<Streamed>> + use<>> {
        let path = self.path.clone();
        let segment = self.segment;
        let cut = self.truncated.is_some();
        let lines = open_lines(&path)?;
        // Each header starts the next recording of the file.
        let mut headers = 0;
        let mine = lines.enumerate().filter(move |(_, line)| {
            if line.as_ref().is_ok_and(|l| l.starts_with(r#"{"t":"header""#)) {
                headers += 1;
            }
            headers == segment + 1 || line.is_err()
        });
        Ok(mine
            .filter_map(move |(n, line)| {
                let line = match line {
                    Ok(l) => l,
                    Err(e) => return Some(Err(truncated(&path, &e.to_string()))),
                };
                if !STREAMED.iter().any(|p| line.starts_with(p)) {
                    return None;
                }
                let bad = |e: String| anyhow!("{}: line {}: {e}", path.display(), n + 1);
                Some(match serde_json::from_str::<Record>(&line) {
                    Ok(Record::Event(e)) => {
                        e.event().map(|ev| Streamed::Event(ev, e.stack_dropped, e.leak)).map_err(bad)
                    }
                    Ok(Record::Stack(e)) => match e.leak {
                        Some(n) => e.event().map(|ev| Streamed::Stack(ev, n)).map_err(bad),
                        None => Err(bad("a stack record without its number".into())),
                    },
                    Ok(Record::Changes { time, changes, nested }) => Ok(Streamed::Changes(time, changes, nested)),
                    Ok(Record::Smaps { regions }) => {
                        Ok(Streamed::Sample(None, regions.iter().map(Span::of).collect(), false))
                    }
                    Ok(Record::Sample { spans, time, baseline }) => Ok(Streamed::Sample(time, spans, baseline)),
                    Ok(_) => Err(bad("not an event".into())),
                    Err(e) => Err(bad(e.to_string())),
                })
            })
            // A truncated recording is read up to its cut.
            .take_while(move |r| !(cut && r.is_err())))
    }
}

fn truncated(path: &Path, why: &str) -> anyhow::Error {
    anyhow!("{} is truncated ({why}): was syscatch stopped while recording? Record again", path.display())
}

/// An event or a sample read back from a recording.
#[allow(clippy::large_enum_variant)]
pub enum Streamed {
    /// A call, whether its stack window was dropped, and the number the leak model gave its stack.
    Event(Event, bool, Option<u32>),
    /// A stack the leak model numbered so, and the call it came with (counted in the next changes).
    Stack(Event, u32),
    /// The leak model's changes: when, what, and how many calls it had counted once so far.
    Changes(f64, Box<Changes>, u64),
    Sample(Option<f64>, Vec<Span>, bool),
}

/// The recorded process's modules, read on this machine: each module file by its path, used only when its
/// build-id is the recorded one; the vDSO from the recording; the maps generation by generation, in the order
/// the live analysis read them. What cannot be found is named in `missing`.
pub struct Replay {
    maps: Vec<String>,
    next: usize,
    modules: HashMap<(String, u64), Option<String>>,
    vdso: HashMap<u64, String>,
    pub missing: Arc<Mutex<Vec<String>>>,
}

impl Replay {
    pub fn new(r: &Reader) -> Replay {
        Replay {
            maps: r.maps.clone(),
            next: 0,
            modules: r.modules.clone(),
            vdso: r.vdso.clone(),
            missing: Arc::default(),
        }
    }

    fn miss(&self, why: String) -> String {
        self.missing.lock().unwrap_or_else(|e| e.into_inner()).push(why.clone());
        why
    }
}

impl ModuleSource for Replay {
    fn maps(&mut self) -> Option<String> {
        let text = self.maps.get(self.next).or_else(|| self.maps.last())?.clone();
        self.next += 1;
        Some(text)
    }

    fn module(&mut self, g: &ModuleMap) -> Result<Module, SourceError> {
        if g.path == "[vdso]" {
            let image = self.vdso.get(&g.start).and_then(|h| unhex(h)).ok_or("the vDSO image was not recorded")?;
            return Ok(Module::parse(g.clone(), image)?);
        }
        let Some(want) = self.modules.get(&(g.path.clone(), g.start)).cloned() else {
            return Err(format!("{}: not loaded while recording", g.path).into());
        };
        let data = crate::os::filemap::read_file(&g.path).map_err(|e| self.miss(format!("{}: {e}", g.path)))?;
        let m = Module::parse(g.clone(), data).map_err(|e| self.miss(format!("{}: {e}", g.path)))?;
        let have = m.build_id.as_deref().map(hex);
        if have != want {
            return Err(self
                .miss(format!(
                    "{}: the file here is not the one recorded (build-id {} here, {} recorded)",
                    g.path,
                    have.as_deref().unwrap_or("none"),
                    want.as_deref().unwrap_or("none")
                ))
                .into());
        }
        Ok(m)
    }

    fn debug_file(&mut self, path: &str, data: &[u8]) -> Option<(String, Bytes)> {
        crate::analysis::symbolize::find_debug_file("", path, data, |p| crate::os::filemap::read_file(p).ok())
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
