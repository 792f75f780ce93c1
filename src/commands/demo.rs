//! `syscatch demo`.

use crate::cli::DemoArgs;

pub fn run(_args: &DemoArgs) -> anyhow::Result<i32> {
    Err(crate::app::usage("`syscatch demo` is not available yet"))
}
