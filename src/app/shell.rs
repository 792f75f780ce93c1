//! What a packaged tool installs besides its binary, generated from the clap definitions so they never drift
//! from the real options: shell completion scripts and man pages.

use crate::cli::{Cli, CompletionsArgs, EXAMPLES, ManpageArgs, PERMISSIONS};
use anyhow::Context;
use clap::CommandFactory;
use std::io::Write;

/// `syscatch completions SHELL`: the completion script on stdout.
pub fn completions(a: &CompletionsArgs) -> anyhow::Result<i32> {
    clap_complete::generate(a.shell, &mut Cli::command(), "syscatch", &mut std::io::stdout().lock());
    Ok(0)
}

/// `syscatch manpage DIR`: syscatch.1 and syscatch-SUBCOMMAND.1 (hidden subcommands left out).
pub fn manpage(a: &ManpageArgs) -> anyhow::Result<i32> {
    let fail = || format!("cannot write man pages into {}", a.dir.display());
    std::fs::create_dir_all(&a.dir).with_context(fail)?;
    clap_mangen::generate_to(Cli::command(), &a.dir).with_context(fail)?;
    let mut page = Vec::new();
    render_main_page(&mut page).with_context(fail)?;
    std::fs::write(a.dir.join("syscatch.1"), page).with_context(fail)?;
    Ok(0)
}

/// syscatch.1 with an EXAMPLES section of its own: clap_mangen would fill the `--help` examples into one
/// paragraph.
fn render_main_page(w: &mut dyn Write) -> std::io::Result<()> {
    let mut cmd = Cli::command().after_help(None::<&str>);
    cmd.build();
    let man = clap_mangen::Man::new(cmd);
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    man.render_subcommands_section(w)?;
    writeln!(w, ".SH EXAMPLES")?;
    for (cmd, what) in EXAMPLES {
        writeln!(w, ".TP\n{}\n{}", roff_escape(what), roff_escape(&format!("\\fB{cmd}\\fR")))?;
    }
    writeln!(w, ".SH PERMISSIONS\n{}", roff_escape(PERMISSIONS))?;
    man.render_version_section(w)
}

/// Text safe as a roff line: a leading `.` or `'` would be a request; `-` must be `\-` to copy as a hyphen.
fn roff_escape(s: &str) -> String {
    let s = s.replace('-', "\\-");
    if s.starts_with(['.', '\'']) { format!("\\&{s}") } else { s }
}
