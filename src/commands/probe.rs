//! `syscatch run FILE` and `syscatch check FILE`.

use crate::cli::{CheckArgs, RunArgs};

pub fn run(_args: &RunArgs) -> anyhow::Result<i32> {
    Err(crate::app::usage("probe scripts are not available yet"))
}

pub fn check(_args: &CheckArgs) -> anyhow::Result<i32> {
    Err(crate::app::usage("probe scripts are not available yet"))
}
