//! `syscatch mem`.

use crate::cli::MemArgs;

pub fn run(_args: &MemArgs) -> anyhow::Result<i32> {
    Err(crate::app::usage("`syscatch mem` is not available yet"))
}
