//! Builds the bundled demo target (`syscatch demo`) with the C compiler cargo already uses for capstone, so the
//! demo needs no compiler at run time, and records what `--version` reports: the git commit and how the binary
//! was built. A source tarball has no .git: `SYSCATCH_COMMIT` then names the commit, else it says `unknown`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    build_demo();
    build_blob("src/x86/known.c", "known");
    build_blob("src/x86/alloc.c", "alloc");
    println!("cargo:rustc-env=SYSCATCH_BUILD_INFO={}", build_info());
}

fn build_demo() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("syscatch-demo");
    let src = "testprogs/demo.c";
    println!("cargo:rerun-if-changed={src}");
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    // Its debug info names the source as the repository does (testprogs/demo.c), not where it was built.
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let status = compiler
        .to_command()
        .args(["-O2", "-g", "-fomit-frame-pointer"])
        .arg(format!("-fdebug-prefix-map={dir}=."))
        .arg("-o")
        .arg(&out)
        .arg(src)
        .status()
        .expect("the C compiler runs");
    assert!(status.success(), "compiling {src} failed");
}

/// Code copied into the trampoline's pages (the known-stack matcher of `--fast`, src/x86/known.c; the allocation
/// sampler of `--malloc`, src/x86/alloc.c) as bytes: compiled freestanding and position-independent, its `.text`
/// taken whole. It must have no relocations (nothing is linked), which is checked here, nor data (only `.text` is
/// taken), and its one function must start the bytes (it is called there).
fn build_blob(src: &str, name: &str) {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let (obj, bin) = (out_dir.join(format!("{name}.o")), out_dir.join(format!("{name}.bin")));
    println!("cargo:rerun-if-changed={src}");
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    let flags = [
        "-O2",
        "-fPIC",
        "-fno-stack-protector",
        "-fno-asynchronous-unwind-tables",
        "-fno-unwind-tables",
        "-ffreestanding",
        "-fno-builtin",
        "-nostdlib",
        "-mgeneral-regs-only",
        "-fno-jump-tables",
        "-fcf-protection=none",
        "-mno-red-zone",
        "-fno-plt",
        "-g0",
        "-fno-function-sections",
        "-fno-data-sections",
        "-c",
        "-o",
    ];
    let status = compiler.to_command().args(flags).arg(&obj).arg(src).status().expect("the C compiler runs");
    assert!(status.success(), "compiling {src} failed");
    let relocs = Command::new("readelf").arg("-r").arg(&obj).output().expect("readelf (binutils) runs");
    let text = String::from_utf8_lossy(&relocs.stdout);
    assert!(
        relocs.status.success() && !text.contains("Relocation section '.rela.text"),
        "{src} needs relocations:\n{text}"
    );
    let syms = Command::new("nm").arg("--defined-only").arg("-g").arg(&obj).output().expect("nm (binutils) runs");
    let syms = String::from_utf8_lossy(&syms.stdout);
    let functions: Vec<&str> = syms.lines().filter(|l| l.split_whitespace().nth(1) == Some("T")).collect();
    assert!(
        functions.len() == 1 && functions[0].starts_with("0000000000000000 "),
        "{src} must define one function, at the start of .text: {syms}"
    );
    let status = Command::new("objcopy")
        .args(["-O", "binary", "-j", ".text"])
        .arg(&obj)
        .arg(&bin)
        .status()
        .expect("objcopy (binutils) runs");
    assert!(status.success(), "objcopy of {src} failed");
}

/// `commit 1a2b3c4d5e6f, features: static, release, x86_64-unknown-linux-gnu`.
fn build_info() -> String {
    println!("cargo:rerun-if-env-changed=SYSCATCH_COMMIT");
    let commit = std::env::var("SYSCATCH_COMMIT").ok().filter(|c| !c.is_empty()).or_else(git_commit);
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(|f| f.to_lowercase().replace('_', "-")))
        .collect();
    features.sort();
    let target_features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    // crt-static: libc linked in, no dynamic loader needed (scripts/dist.sh).
    let linkage = if target_features.split(',').any(|f| f == "crt-static") { "static" } else { "dynamic" };
    features.push(linkage.to_string());
    features.push(std::env::var("PROFILE").unwrap_or_default());
    features.push(std::env::var("TARGET").unwrap_or_default());
    format!("commit {}, features: {}", commit.as_deref().unwrap_or("unknown"), features.join(", "))
}

/// The commit checked out, or None outside a git work tree (a source tarball) or without git.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    // A source tree unpacked inside some other repository must not report that repository's commit.
    let top = std::fs::canonicalize(git(&["rev-parse", "--show-toplevel"])?).ok()?;
    if top != std::fs::canonicalize(std::env::var("CARGO_MANIFEST_DIR").ok()?).ok()? {
        return None;
    }
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it names (a commit), packed refs.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch])?);
    }
    watched.extend(git(&["rev-parse", "--git-path", "packed-refs"]));
    // Only files that exist: cargo reruns the script on every build for a watched path that does not.
    for path in watched.iter().filter_map(|p| std::fs::canonicalize(p).ok()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(commit)
}
