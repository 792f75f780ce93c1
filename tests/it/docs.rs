//! The documentation against the code, both ways: every relative link in README.md and docs/*.md resolves (the
//! file exists, and so does the heading an `#anchor` names), and the user guide documents exactly the options that
//! `syscatch --help` and each subcommand's `--help` list: none missing, none that does not exist. Nothing here
//! traces.
//!
//! The guide's convention, which this test reads: a command's section is a `## ` heading that starts with
//! ``## `syscatch SUBCOMMAND`` (the trace: ``## `syscatch [options] ...`` ), and its options are the rows of
//! tables in that section whose first cell names them in code (`` | `-p, --pid N` | ... | ``).

use crate::common::{repo, run_syscatch};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const GUIDE: &str = "docs/guide.md";

/// The options of one `--help` text: each line of an `Options:` list, `  -p, --pid <PID>  ...` or
/// `      --json  ...` (descriptions are indented further, so they never count). `--help` itself is left out.
fn parse_help_options(help: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_options = false;
    for line in help.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            in_options = line.trim_end() == "Options:";
            continue;
        }
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if in_options && (indent == 2 || indent == 6) && t.starts_with('-') {
            let head = t.split("  ").next().unwrap_or("");
            out.extend(option_names(head));
        }
    }
    out.remove("-h");
    out.remove("--help");
    out
}

/// The subcommands listed under `Commands:` (`help` left out: it is clap's).
fn parse_help_commands(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_commands = false;
    for line in help.lines() {
        if !line.starts_with(' ') {
            in_commands = line.trim_end() == "Commands:";
            continue;
        }
        let t = line.trim_start();
        if in_commands && line.len() - t.len() == 2 {
            let name = t.split_whitespace().next().unwrap_or("");
            if name != "help" {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// `-p`, `--pid` out of `-p, --pid <PID>` or `` `--fast`, `--no-fast` `` or `--for=DURATION`.
fn option_names(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == '`' || c == '/')
        .filter_map(|tok| {
            let tok = tok.split(['=', '<', '[']).next().unwrap_or("");
            let valid = if let Some(long) = tok.strip_prefix("--") {
                !long.is_empty() && long.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            } else if let Some(short) = tok.strip_prefix('-') {
                short.len() == 1 && short.chars().all(|c| c.is_ascii_alphabetic())
            } else {
                false
            };
            valid.then(|| tok.to_string())
        })
        .collect()
}

/// Lines outside fenced code blocks.
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |l| {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The options the guide documents, by command: "" for the trace, else the subcommand's name.
fn parse_guide_options(guide: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in prose_lines(guide) {
        if let Some(heading) = line.strip_prefix("## ") {
            current = heading.strip_prefix("`syscatch").map(|rest| {
                let word = rest.trim_start().split(['`', ' ']).next().unwrap_or("");
                let sub = if word.starts_with(|c: char| c.is_ascii_lowercase()) { word } else { "" };
                out.entry(sub.to_string()).or_default();
                sub.to_string()
            });
            continue;
        }
        let (Some(cmd), Some(row)) = (&current, line.strip_prefix('|')) else { continue };
        let first = row.split('|').next().unwrap_or("");
        // Only what is in code in the first cell: `--pid N`; prose may mention options freely.
        let code: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
        let names = out.get_mut(cmd).expect("section entered");
        for span in code {
            names.extend(option_names(span));
        }
    }
    out
}

/// The differences between what `--help` lists and what the guide documents, one line each.
fn option_mismatches(
    help: &BTreeMap<String, BTreeSet<String>>,
    guide: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let name = |c: &str| if c.is_empty() { "syscatch (the trace)".to_string() } else { format!("syscatch {c}") };
    let mut out = Vec::new();
    for (cmd, listed) in help {
        let Some(documented) = guide.get(cmd) else {
            out.push(format!("{}: no section in {GUIDE} (a `## `syscatch {cmd}...` heading)", name(cmd)));
            continue;
        };
        for o in listed.difference(documented) {
            out.push(format!("{}: {o} is in --help but not documented in {GUIDE}", name(cmd)));
        }
        for o in documented.difference(listed) {
            out.push(format!("{}: {GUIDE} documents {o}, which --help does not list", name(cmd)));
        }
    }
    for cmd in guide.keys().filter(|c| !help.contains_key(*c)) {
        out.push(format!("{}: {GUIDE} has a section for a command that does not exist", name(cmd)));
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor a Markdown text defines (repeated headings get `-1`, `-2`, as on GitHub).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let s = slug(&line[hashes..]);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 { s.clone() } else { format!("{s}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of inline links `[text](target)` and reference definitions `[x]: target`, outside code.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        // Drop inline code spans, which may hold brackets that are no link.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            out.push(after[..end].split_whitespace().next().unwrap_or("").to_string());
            rest = &after[end..];
        }
        if let Some(def) = plain.trim_start().strip_prefix('[')
            && let Some((_, target)) = def.split_once("]: ")
        {
            out.push(target.trim().to_string());
        }
    }
    out
}

/// Broken relative links of one file (`file` is its path, for resolving and for the message).
fn broken_links(file: &Path, text: &str, read: &dyn Fn(&Path) -> Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    let dir = file.parent().unwrap_or(Path::new(""));
    for target in link_targets(text) {
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = target.split_once('#').map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
        let resolved = if path.is_empty() { file.to_path_buf() } else { normalize(&dir.join(path)) };
        let Some(content) = read(&resolved) else {
            out.push(format!("{}: link to {target}: {} does not exist", file.display(), resolved.display()));
            continue;
        };
        if let Some(anchor) = anchor
            && !anchors(&content).contains(anchor)
        {
            out.push(format!("{}: link to {target}: no heading with anchor #{anchor}", file.display()));
        }
    }
    out
}

/// `docs/../README.md` as `README.md`, without asking the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

fn markdown_files() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// A directory counts as existing (a link to `scripts/probes/`); its "content" has no anchors.
fn read_for_links(p: &Path) -> Option<String> {
    if p.is_dir() { Some(String::new()) } else { std::fs::read_to_string(p).ok() }
}

#[test]
fn every_relative_link_in_readme_and_docs_resolves() {
    let root = repo();
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let rel = file.strip_prefix(&root).unwrap().to_path_buf();
        broken.extend(broken_links(&rel, &text, &|p| read_for_links(&root.join(p))));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_guide_documents_exactly_the_options_of_every_help() {
    let help_of = |args: &[&str]| {
        let (code, out, err) = run_syscatch(args);
        assert_eq!(code, 0, "syscatch {args:?} failed: {err}");
        out
    };
    let top = help_of(&["--help"]);
    let commands = parse_help_commands(&top);
    assert!(commands.iter().any(|c| c == "stack"), "no subcommands read from --help:\n{top}");
    let mut help = BTreeMap::from([(String::new(), parse_help_options(&top))]);
    for cmd in commands {
        let options = parse_help_options(&help_of(&[&cmd, "--help"]));
        help.insert(cmd, options);
    }
    assert!(help[""].contains("--pid") && help["report"].contains("--leaks"), "options not read: {help:?}");
    let guide = std::fs::read_to_string(repo().join(GUIDE)).unwrap();
    let mismatches = option_mismatches(&help, &parse_guide_options(&guide));
    assert!(
        mismatches.is_empty(),
        "the user guide and --help disagree (document a new option in its command's section of {GUIDE}, as a \
         table row whose first cell names it in code):\n{}",
        mismatches.join("\n")
    );
}

/// The checkers themselves fail on what they are for: a missing file, a missing anchor, an option missing from
/// the guide, one documented that does not exist, a command without a section.
#[test]
fn the_doc_checkers_catch_broken_links_and_option_drift() {
    let files = BTreeMap::from([
        ("docs/a.md", "# Top\n## Exit status\n## Exit status\n```\n## not a heading\n```\n"),
        ("README.md", "x"),
    ]);
    let read = |p: &Path| files.get(p.to_str().unwrap()).map(|s| s.to_string());
    let text = "[ok](a.md#exit-status) [dup](a.md#exit-status-1) [r](../README.md) [web](https://x.org/y#z)\n\
                [gone](b.md) [bad](a.md#not-a-heading) `[code](nowhere.md)` [self](#top)\n[ref]: missing.md\n";
    let broken = broken_links(Path::new("docs/a.md"), text, &read);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(broken[0].contains("b.md") && broken[1].contains("#not-a-heading") && broken[2].contains("missing.md"));
    assert!(broken_links(Path::new("docs/a.md"), "[self](#top) [x](a.md#top)", &read).is_empty());
    assert_eq!(slug(" `syscatch stack --pid N [--json]`"), "syscatch-stack---pid-n---json");

    let help = "Usage: syscatch [OPTIONS]\n\nCommands:\n  stack  Dump\n  help   Print\n\nOptions:\n  \
                -p, --pid <PID>\n          Process to attach to, see --json\n\n      --json  JSON Lines\n  \
                -h, --help  Print help\n\nExamples:\n      syscatch --pid 1 --for 10s\n";
    assert_eq!(parse_help_commands(help), ["stack"]);
    let options = parse_help_options(help);
    assert_eq!(options.iter().map(String::as_str).collect::<Vec<_>>(), ["--json", "--pid", "-p"]);
    let guide = "## `syscatch [options] --pid N`\n| option | what |\n|---|---|\n| `-p, --pid N` | see `--for` |\n\
                 | `--gone` | x |\n```\n| `--in-code` | x |\n```\n## JSON\n| `--json` | not a command's section |\n\
                 ## `syscatch nosuch`\n";
    let documented = parse_guide_options(guide);
    let help = BTreeMap::from([(String::new(), options), ("stack".to_string(), BTreeSet::new())]);
    let mismatches = option_mismatches(&help, &documented);
    assert_eq!(mismatches.len(), 4, "{mismatches:#?}");
    assert!(mismatches[0].contains("--json is in --help"), "{mismatches:#?}");
    assert!(mismatches[1].contains("documents --gone"), "{mismatches:#?}");
    assert!(mismatches[2].contains("syscatch stack: no section"), "{mismatches:#?}");
    assert!(mismatches[3].contains("syscatch nosuch") && mismatches[3].contains("does not exist"), "{mismatches:#?}");
}
