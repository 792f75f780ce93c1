//! Builds the bundled demo target (`syscatch demo`) with the C compiler cargo already uses for capstone, so the
//! demo needs no compiler at run time.

fn main() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("syscatch-demo");
    let src = "testprogs/demo.c";
    println!("cargo:rerun-if-changed={src}");
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    let status = compiler
        .to_command()
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&out)
        .arg(src)
        .status()
        .expect("the C compiler runs");
    assert!(status.success(), "compiling {src} failed");
}
