//! `syscatch demo`: writes the bundled demo program (built by cargo with the crate) to a temporary file and
//! traces it with `--leaks` and `--syscall mmap,munmap`, as a newcomer's first run.

use crate::cli::{DemoArgs, TraceArgs};
use anyhow::Context;
use std::os::unix::fs::PermissionsExt;

const DEMO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/syscatch-demo"));

pub fn run(args: &DemoArgs) -> anyhow::Result<i32> {
    let path = std::env::temp_dir().join(format!("syscatch-demo-{}", std::process::id()));
    std::fs::write(&path, DEMO).with_context(|| format!("cannot write {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    eprintln!("syscatch demo: tracing a program that leaks 1 MiB every 100 ms through syscall(SYS_mmap)");
    let trace = TraceArgs {
        syscall: vec!["mmap".into(), "munmap".into()],
        leaks: true,
        smaps_every: std::time::Duration::from_millis(500),
        duration: Some(args.duration),
        json: args.json,
        stack_depth: 128,
        stack_bytes: 65536,
        cmd: vec![path.to_string_lossy().into_owned()],
        ..TraceArgs::default()
    };
    let result = crate::app::trace::trace(&trace);
    let _ = std::fs::remove_file(&path);
    result.map(|_| 0)
}
