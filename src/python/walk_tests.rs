//! The frame walk on the fuzz corpus's memory images of two-frame threads, one per version.

use super::*;
use crate::python::error::WalkError;
use crate::python::layout::{layout_for, parse_version_from_name};

/// Memory images of two-frame threads, one per version (the fuzz corpus seeds): byte 0 picks the version,
/// bytes 1..9 are `_PyRuntime`, 9..17 `PyCode_Type`, 17..25 the thread's fs_base; addresses are offsets.
struct Image(&'static [u8]);

impl Memory for Image {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(src) = usize::try_from(addr).ok().and_then(|a| self.0.get(a..a.checked_add(buf.len())?)) else {
            return false;
        };
        buf.copy_from_slice(src);
        true
    }
}

fn walk(image: &'static [u8], version: &str) -> Result<Vec<(String, Option<u32>, u32)>, WalkError> {
    let (maj, min) = parse_version_from_name(version).unwrap();
    let rt = Runtime {
        layout: layout_for(maj, min).unwrap(),
        runtime: u64_at(image, 1),
        code_type: u64_at(image, 9),
        unicode_type: 0,
        bytes_type: 0,
        frame_type: 0,
    };
    let mut w = Walker::new(rt);
    let mut mem = Image(image);
    let first = w.read_frames(&mut mem, 1, u64_at(image, 17))?;
    // The second walk goes through both caches and must agree: the very same frames, shared.
    let second = w.read_frames(&mut mem, 1, u64_at(image, 17))?;
    assert!(Arc::ptr_eq(&second, &first) || first.is_empty());
    assert!(w.read_frames(&mut mem, 2, 0)?.is_empty(), "another thread has no frames");
    Ok(first.iter().map(|f| (f.function.to_string(), f.line, f.call)).collect())
}

fn v(f: &[(&str, u32, u32)]) -> Vec<(String, Option<u32>, u32)> {
    f.iter().map(|&(n, l, c)| (n.to_string(), Some(l), c)).collect()
}

#[test]
fn walks_each_version_layout() {
    let img: [(&[u8], &str, _); 4] = [
        (include_bytes!("../../fuzz/corpus/python/walk-3.9"), "python3.9", v(&[("grow", 10, 0), ("serve", 12, 1)])),
        (include_bytes!("../../fuzz/corpus/python/walk-3.10"), "python3.10", v(&[("grow", 12, 0), ("serve", 12, 1)])),
        (
            include_bytes!("../../fuzz/corpus/python/walk-3.11"),
            "python3.11",
            v(&[("Pool.grow", 12, 0), ("Pool.serve", 12, 0)]),
        ),
        (
            include_bytes!("../../fuzz/corpus/python/walk-3.12"),
            "python3.12",
            v(&[("Pool.grow", 12, 0), ("Pool.serve", 12, 0)]),
        ),
    ];
    for (image, version, want) in img {
        assert_eq!(walk(image, version).unwrap(), want, "{version}");
    }
}

#[test]
fn a_wrong_code_type_or_a_cycle_fails_the_walk() {
    let image: &'static [u8] = include_bytes!("../../fuzz/corpus/python/walk-3.11");
    let mut bad = image.to_vec();
    bad[9] ^= 1;
    let bad: &'static [u8] = Vec::leak(bad);
    let e = walk(bad, "python3.11").unwrap_err();
    assert!(matches!(e, WalkError::NotCode { .. }), "{e}");
    assert!(e.to_string().contains("is not a code object (type "), "{e}");
    // Point the outer frame's `previous` back at the inner frame.
    let l = layout_for(3, 11).unwrap();
    let rt = u64_at(image, 1);
    let interp = u64_at(image, rt + l.runtime_interpreters_head);
    let ts = u64_at(image, interp + l.interp_threads_head);
    let cframe = u64_at(image, ts + l.ts_cframe.unwrap());
    let f1 = u64_at(image, cframe + l.cframe_current_frame);
    let f2 = u64_at(image, f1 + l.frame_back);
    let mut cyc = image.to_vec();
    let at = (f2 + l.frame_back) as usize;
    cyc[at..at + 8].copy_from_slice(&f1.to_le_bytes());
    let e = walk(Vec::leak(cyc), "python3.11").unwrap_err();
    assert_eq!(e.to_string(), format!("the frame chain has a cycle or more than {MAX_FRAMES} frames"));
}

#[test]
fn a_thread_that_moved_gets_new_frames() {
    let image: &'static [u8] = include_bytes!("../../fuzz/corpus/python/walk-3.11");
    let l = layout_for(3, 11).unwrap();
    let rt = Runtime {
        layout: l.clone(),
        runtime: u64_at(image, 1),
        code_type: u64_at(image, 9),
        unicode_type: 0,
        bytes_type: 0,
        frame_type: 0,
    };
    let mut w = Walker::new(rt);
    let fs_base = u64_at(image, 17);
    let first = w.read_frames(&mut Image(image), 1, fs_base).unwrap();
    assert_eq!(first.len(), 2);
    // The inner frame returned: the C frame's current frame is now the outer one.
    let interp = u64_at(image, u64_at(image, 1) + l.runtime_interpreters_head);
    let ts = u64_at(image, interp + l.interp_threads_head);
    let cframe = u64_at(image, ts + l.ts_cframe.unwrap());
    let f1 = u64_at(image, cframe + l.cframe_current_frame);
    let f2 = u64_at(image, f1 + l.frame_back);
    let mut moved = image.to_vec();
    let at = (cframe + l.cframe_current_frame) as usize;
    moved[at..at + 8].copy_from_slice(&f2.to_le_bytes());
    let second = w.read_frames(&mut Image(Vec::leak(moved)), 1, fs_base).unwrap();
    assert_eq!(&second[..], &first[1..]);
    // And back: equal to the first frames again, not the last ones.
    assert_eq!(w.read_frames(&mut Image(image), 1, fs_base).unwrap(), first);
}
