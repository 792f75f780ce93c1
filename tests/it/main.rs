//! One integration-test binary: every test drives real target processes (testprogs/, compiled here) with the
//! real `syscatch` binary and real ptrace. Tracing needs root or CAP_SYS_PTRACE; without it the tests fail
//! loudly with the reason rather than skip. (docs.rs traces nothing: it holds README.md and docs/ to the code.)

mod common;
mod container;
mod core;
mod dist;
mod docs;
mod fast;
mod findings;
mod fuzz_replay;
mod growth;
mod guardian;
mod heap;
mod hooks;
mod html;
mod known;
mod leaks;
mod malloc;
mod mem;
mod paths;
mod probe;
mod probe_run;
mod python;
mod record;
mod review;
mod ring;
mod roots;
mod session;
mod stack;
mod torture;
mod tree;
mod watch;
mod webdriver;
