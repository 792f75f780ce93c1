//! Tests of recordings: exact times, samples old and new, sessions, truncation.
use super::*;

/// A report must print the live run's times to the last digit: an event's time survives the recording
/// exactly (serde_json's default float parser is off by an ulp on some values; this one, from a real trace).
#[test]
fn event_times_round_trip_exactly() {
    let ev = Event {
        time: 1.4843709409999999,
        tid: 1,
        probe: None,
        func: None,
        nr: 9,
        args: [0; 6],
        regs: Vec::new(),
        ret: Some(0x7f00_0000_0000),
        ret_missing: None,
        capture: None,
        also: Vec::new(),
    };
    let line = serde_json::to_string(&Record::Event(Box::new(RecEvent::new(&ev, None, &[], false)))).unwrap();
    let Ok(Record::Event(back)) = serde_json::from_str::<Record>(&line) else { panic!("{line}") };
    assert_eq!(back.event().unwrap().time.to_bits(), ev.time.to_bits(), "{line}");
}

/// Samples are streamed among the events: the new record and the whole smaps of earlier recordings, which is
/// read back as the spans the leak model keeps.
#[test]
fn samples_old_and_new_stream_as_spans() {
    let region = crate::model::smaps::parse_smaps("1000-3000 rw-p 0 00:00 0\nRss: 8 kB\nSwap: 4 kB\n").remove(0);
    let span = Span::of(&region);
    assert_eq!((span.start, span.end, span.anon, span.rss_swap), (0x1000, 0x3000, true, 12));
    for rec in
        [Record::Smaps { regions: vec![region] }, Record::Sample { spans: vec![span], time: Some(1.5), baseline: true }]
    {
        let line = serde_json::to_string(&rec).unwrap();
        assert!(STREAMED.iter().any(|p| line.starts_with(p)), "{line}");
        let back = match serde_json::from_str::<Record>(&line).unwrap() {
            Record::Smaps { regions } => regions.iter().map(Span::of).collect(),
            Record::Sample { spans, .. } => spans,
            _ => panic!("{line}"),
        };
        assert_eq!(back, [span]);
    }
}

/// Writes `records` as one gzip member appended to `path`.
fn append(path: &Path, records: &[Record]) {
    let f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    for r in records {
        serde_json::to_writer(&mut gz, r).unwrap();
        gz.write_all(b"\n").unwrap();
    }
    gz.finish().unwrap();
}

fn one(pid: Tid, version: u32, time: f64) -> Vec<Record> {
    let header = Record::Header { format: FORMAT.into(), version, pid, syscatch: "test".into(), stack_bytes: 0 };
    let sample = Record::Sample { spans: Vec::new(), time: Some(time), baseline: false };
    vec![header, sample, Record::End { events: 0 }]
}

/// A recording of version 1 still reads; a session's is its processes' recordings one after another, each
/// streaming only its own samples, and who they were; one cut short or with records after its end is refused.
#[test]
fn a_session_is_its_processes_recordings_in_turn() {
    let dir = std::env::temp_dir().join(format!("syscatch-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let old = dir.join("old.rec");
    append(&old, &one(7, 1, 0.5));
    let opened = Reader::open_all(&old).unwrap();
    assert_eq!((opened.parts.len(), opened.processes.len(), opened.parts[0].pid), (1, 0, 7));

    let session = dir.join("session.rec");
    append(&session, &one(10, VERSION, 1.0));
    append(&session, &one(11, VERSION, 2.0));
    let who = |pid| RecProcess {
        pid,
        name: "w".into(),
        command: "w --rank".into(),
        nspid: vec![pid],
        joined: 0.0,
        end: Ok(End::Duration),
    };
    append(&session, &[Record::Session { processes: vec![who(11), who(10), who(12)] }]);
    let opened = Reader::open_all(&session).unwrap();
    let pids: Vec<Tid> = opened.parts.iter().map(|r| r.pid).collect();
    assert_eq!(pids, [10, 11]);
    assert_eq!(opened.processes.iter().map(|p| p.pid).collect::<Vec<_>>(), [11, 10, 12]);
    for (r, want) in opened.parts.iter().zip([1.0, 2.0]) {
        let times: Vec<Option<f64>> = r
            .stream()
            .unwrap()
            .map(|s| match s.unwrap() {
                Streamed::Sample(t, ..) => t,
                Streamed::Event(..) | Streamed::Stack(..) | Streamed::Changes(..) => None,
            })
            .collect();
        assert_eq!(times, [Some(want)], "process {}", r.pid);
    }

    let cut = dir.join("cut.rec");
    let mut records = one(10, VERSION, 1.0);
    records.pop();
    append(&cut, &one(11, VERSION, 1.0));
    append(&cut, &records);
    let err = Reader::open_all(&cut).err().unwrap().to_string();
    assert!(err.contains("truncated"), "{err}");
    // One process's recording without its end (syscatch killed while recording): read, and said truncated.
    let alone = dir.join("alone.rec");
    append(&alone, &records);
    let opened = Reader::open_all(&alone).unwrap();
    assert_eq!(opened.parts[0].truncated.as_deref(), Some("no end record"));
    assert_eq!(opened.parts[0].stream().unwrap().filter(Result::is_ok).count(), 1, "its sample");
    let after = dir.join("after.rec");
    append(&after, &one(10, VERSION, 1.0));
    append(&after, &[Record::Session { processes: vec![who(10)] }, Record::End { events: 0 }]);
    let err = Reader::open_all(&after).err().unwrap().to_string();
    assert!(err.contains("after the session's end"), "{err}");
    let newer = dir.join("newer.rec");
    append(&newer, &one(10, VERSION + 1, 1.0));
    let err = Reader::open_all(&newer).err().unwrap().to_string();
    assert!(err.contains(&format!("is a version {} recording", VERSION + 1)), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
