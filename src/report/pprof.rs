//! `--pprof FILE`: the leak report as a gzipped `profile.proto` (github.com/google/pprof/proto/profile.proto),
//! the format fleet profilers ingest (Pyroscope, Parca, Grafana) and `go tool pprof` reads. One sample per
//! traced stack, with the values of [`SAMPLE_TYPES`] (growth first, the default). Frames become locations with
//! function, file and line; calls inlined at an address are several lines of one location, the caller last.
//! The protobuf is written by hand: only the few messages and field kinds this needs.

use crate::model::stack::Frame;
use std::collections::HashMap;
use std::io::{self, Write};

/// One sample: frames innermost first, its values in [`SAMPLE_TYPES`] order, and its labels (key, value): a
/// session's samples carry `pid` and `process`, so a fleet profiler can filter by process.
#[derive(Clone)]
pub struct Sample<'a> {
    pub frames: &'a [Frame],
    pub values: [i64; 6],
    pub labels: &'a [(&'a str, String)],
}

/// (type, unit) of each sample value; the first is the default. Named as heap profiles name what means the same
/// (still mapped: `inuse_space`; mmap calls: `alloc_objects`; bytes mapped: `alloc_space`), so fleet profilers
/// read the file without a type config.
pub const SAMPLE_TYPES: [(&str, &str); 6] = [
    ("growth", "bytes"),
    ("inuse_space", "bytes"),
    ("resident", "bytes"),
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("calls", "count"),
];

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(out, field, 0);
        varint(out, v);
    }
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn packed(out: &mut Vec<u8>, field: u32, vals: impl Iterator<Item = u64>) {
    let mut body = Vec::new();
    for v in vals {
        varint(&mut body, v);
    }
    bytes(out, field, &body);
}

#[derive(Default)]
struct Builder {
    strings: Vec<String>,
    string_ids: HashMap<String, u64>,
    functions: Vec<u8>,
    function_ids: HashMap<(u64, u64), u64>,
    locations: Vec<u8>,
    /// By (native, address) for a native frame, (python, its name and line) for a Python frame (address 0).
    location_ids: HashMap<(bool, u64), u64>,
}

impl Builder {
    fn string(&mut self, s: &str) -> u64 {
        if self.strings.is_empty() {
            self.strings.push(String::new());
            self.string_ids.insert(String::new(), 0);
        }
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    fn function(&mut self, f: &Frame) -> u64 {
        let name = match (&f.function, &f.module) {
            (Some(func), _) => func.clone(),
            (None, Some(m)) => format!("{m}+{:#x}", f.offset.unwrap_or(0)),
            (None, None) => format!("{:#x}", f.addr),
        };
        let name = self.string(&name);
        let file = self.string(f.file.as_deref().unwrap_or(""));
        if let Some(&id) = self.function_ids.get(&(name, file)) {
            return id;
        }
        let id = self.function_ids.len() as u64 + 1;
        self.function_ids.insert((name, file), id);
        let mut m = Vec::new();
        uint(&mut m, 1, id);
        uint(&mut m, 2, name);
        uint(&mut m, 3, name);
        uint(&mut m, 4, file);
        bytes(&mut self.functions, 5, &m);
        id
    }

    /// The location of one real frame and the frames inlined into it at its address (innermost first).
    fn location(&mut self, group: &[&Frame]) -> u64 {
        let Some(last) = group.last() else { return 0 };
        let key = (last.kind == crate::model::stack::FrameKind::Native, crate::analysis::leaks::frame_key(last));
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let id = self.location_ids.len() as u64 + 1;
        self.location_ids.insert(key, id);
        let mut m = Vec::new();
        uint(&mut m, 1, id);
        uint(&mut m, 3, last.addr);
        for f in group {
            let func = self.function(f);
            let mut line = Vec::new();
            uint(&mut line, 1, func);
            uint(&mut line, 2, u64::from(f.line.unwrap_or(0)));
            bytes(&mut m, 4, &line);
        }
        bytes(&mut self.locations, 4, &m);
        id
    }

    /// Location ids of a stack, leaf first: each run of inlined frames joins the real frame after it.
    fn stack(&mut self, frames: &[Frame]) -> Vec<u64> {
        let mut ids = Vec::new();
        let mut group: Vec<&Frame> = Vec::new();
        for f in frames {
            group.push(f);
            if !f.inlined {
                ids.push(self.location(&group));
                group.clear();
            }
        }
        if !group.is_empty() {
            ids.push(self.location(&group));
        }
        ids
    }
}

/// (type, unit) of the heap profile of `--malloc` (`--heap-pprof`): the types Go's heap profiles, jemalloc's and
/// tcmalloc's use, so fleet profilers show it as a heap profile; the first (`inuse_space`) is the default.
pub const HEAP_TYPES: [(&str, &str); 4] =
    [("inuse_space", "bytes"), ("inuse_objects", "count"), ("alloc_space", "bytes"), ("alloc_objects", "count")];

/// The uncompressed profile.
#[cfg(test)]
pub fn encode(samples: &[Sample], duration_ns: u64) -> Vec<u8> {
    encode_types(samples, &SAMPLE_TYPES, duration_ns)
}

/// The uncompressed profile of `types` (each sample's first `types.len()` values).
pub fn encode_types(samples: &[Sample], types: &[(&str, &str)], duration_ns: u64) -> Vec<u8> {
    let mut b = Builder::default();
    let mut out = Vec::new();
    for &(t, u) in types {
        let mut vt = Vec::new();
        uint(&mut vt, 1, b.string(t));
        uint(&mut vt, 2, b.string(u));
        bytes(&mut out, 1, &vt);
    }
    for s in samples {
        let ids = b.stack(s.frames);
        let mut m = Vec::new();
        packed(&mut m, 1, ids.into_iter());
        packed(&mut m, 2, s.values.iter().take(types.len()).map(|&v| v as u64));
        for (k, v) in s.labels {
            let mut label = Vec::new();
            uint(&mut label, 1, b.string(k));
            uint(&mut label, 2, b.string(v));
            bytes(&mut m, 3, &label);
        }
        bytes(&mut out, 2, &m);
    }
    let default = b.string(types.first().map_or("", |t| t.0));
    out.extend_from_slice(&b.locations);
    out.extend_from_slice(&b.functions);
    let strings = std::mem::take(&mut b.strings);
    for s in &strings {
        bytes(&mut out, 6, s.as_bytes());
    }
    uint(&mut out, 10, duration_ns);
    // Growth is what a viewer shows first (without this field, the last sample type).
    uint(&mut out, 14, default);
    out
}

/// Pyroscope's default ingest limits (`max_profile_stacktrace_samples`, `max_profile_size_bytes`): a profile past
/// them is refused whole. Parca's are wider.
pub const MAX_SAMPLES: usize = 16_000;
pub const MAX_BYTES: usize = 4 << 20;

/// Writes the gzipped profile, within [`MAX_SAMPLES`] and [`MAX_BYTES`]: past them, the stacks of most growth (then
/// most still mapped) are kept and the rest are folded into one sample, `(other stacks)`, whose values are their
/// sums (every total stays true).
pub fn write(w: &mut dyn Write, samples: &[Sample], duration_ns: u64) -> io::Result<()> {
    write_types(w, samples, &SAMPLE_TYPES, duration_ns)
}

/// [`write`] with sample types `types` (the samples kept past the limits: those of the first two values).
pub fn write_types(w: &mut dyn Write, samples: &[Sample], types: &[(&str, &str)], duration_ns: u64) -> io::Result<()> {
    let other = [Frame { function: Some("(other stacks)".into()), ..Frame::default() }];
    let mut keep = samples.len().min(MAX_SAMPLES);
    loop {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&encode_types(&fit(samples, keep, &other), types, duration_ns))?;
        let gz = gz.finish()?;
        if gz.len() <= MAX_BYTES || keep <= 1 {
            w.write_all(&gz)?;
            return w.flush();
        }
        keep /= 2;
    }
}

/// At most `keep` samples: all of them if they fit, else the `keep - 1` of most growth, then most still mapped,
/// in their order, and one of the rest's sums on the frames `other`.
fn fit<'a>(samples: &[Sample<'a>], keep: usize, other: &'a [Frame]) -> Vec<Sample<'a>> {
    if samples.len() <= keep {
        return samples.to_vec();
    }
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse((samples[i].values[0], samples[i].values[1])));
    let mut kept = vec![false; samples.len()];
    for &i in &order[..keep.saturating_sub(1)] {
        kept[i] = true;
    }
    let mut values = [0i64; 6];
    for s in samples.iter().zip(&kept).filter(|(_, k)| !**k).map(|(s, _)| s) {
        for (sum, v) in values.iter_mut().zip(s.values) {
            *sum = sum.saturating_add(v);
        }
    }
    let mut out: Vec<Sample> = samples.iter().zip(&kept).filter(|(_, k)| **k).map(|(s, _)| s.clone()).collect();
    out.push(Sample { frames: other, values, labels: &[] });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_an_inlined_frame_shares_its_callers_location() {
        let mut v = Vec::new();
        varint(&mut v, 300);
        assert_eq!(v, [0xac, 0x02]);
        let frames = vec![
            Frame { addr: 0x10, function: Some("leaf".into()), inlined: true, line: Some(3), ..Frame::default() },
            Frame { addr: 0x10, function: Some("caller".into()), line: Some(9), ..Frame::default() },
            Frame { addr: 0x20, function: Some("main".into()), ..Frame::default() },
        ];
        let mut b = Builder::default();
        assert_eq!(b.stack(&frames), [1, 2]);
        assert_eq!(b.stack(&frames[1..]), [1, 2], "same addresses, same locations");
        assert_eq!(b.function_ids.len(), 3);
        let labels = [("pid", "1234".to_string())];
        let p = encode(&[Sample { frames: &frames, values: [4096, 4096, 4096, 1, 4096, 1], labels: &labels }], 1);
        assert!(p.windows(6).any(|w| w == b"caller"));
        // The label's key and value are in the string table.
        assert!(p.windows(4).any(|w| w == b"1234") && p.windows(3).any(|w| w == b"pid"));
    }

    /// A profile of 20,000 stacks, as a long trace of a busy worker may have: Pyroscope refuses one of more than
    /// 16,000 samples, so the 15,999 of most growth are kept and the rest folded into one, the totals the same.
    #[test]
    fn a_profile_keeps_within_pyroscopes_limits() {
        let frames: Vec<Vec<Frame>> = (0..20_000u64)
            .map(|i| vec![Frame { addr: 0x1000 + i * 16, function: Some(format!("f{i}")), ..Frame::default() }])
            .collect();
        let samples: Vec<Sample> = frames
            .iter()
            .enumerate()
            .map(|(i, f)| Sample { frames: f, values: [i as i64, 4096, 0, 1, 4096, 1], labels: &[] })
            .collect();
        let other = [Frame { function: Some("(other stacks)".into()), ..Frame::default() }];
        let fitted = fit(&samples, MAX_SAMPLES, &other);
        assert_eq!(fitted.len(), MAX_SAMPLES);
        assert_eq!(fitted[0].values[0], 4001, "the 15,999 of most growth, in their order");
        let total = |s: &[Sample], k: usize| s.iter().map(|s| s.values[k]).sum::<i64>();
        for k in 0..6 {
            assert_eq!(total(&fitted, k), total(&samples, k));
        }
        let mut file = Vec::new();
        write(&mut file, &samples, 1).unwrap();
        assert!(file.len() <= MAX_BYTES);
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&file[..]), &mut raw).unwrap();
        assert!(raw.windows(14).any(|w| w == b"(other stacks)") && !raw.windows(5).any(|w| w == b"f4000"));
        assert_eq!(fit(&samples[..10], MAX_SAMPLES, &other).len(), 10, "a small profile is whole");
    }

    #[test]
    fn python_frames_are_locations_of_their_own() {
        use crate::model::stack::FrameKind;
        let py = |name: &str, line: u32| Frame {
            kind: FrameKind::Python,
            function: Some(name.into()),
            file: Some("app.py".into()),
            line: Some(line),
            ..Frame::default()
        };
        let frames =
            vec![py("temporary", 42), py("run", 48), py("temporary", 42), Frame { addr: 0x20, ..Frame::default() }];
        let mut b = Builder::default();
        // All Python frames have address 0: each is known by its name and line.
        assert_eq!(b.stack(&frames), [1, 2, 1, 3]);
    }
}
