//! `syscatch hooks`.

use crate::cli::HooksArgs;

pub fn run(_args: &HooksArgs) -> anyhow::Result<i32> {
    Err(crate::app::usage("`syscatch hooks` is not available yet"))
}
