//! `syscatch stack`.

use crate::cli::StackArgs;

pub fn run(_args: &StackArgs) -> anyhow::Result<i32> {
    Err(crate::app::usage("`syscatch stack` is not available yet"))
}
