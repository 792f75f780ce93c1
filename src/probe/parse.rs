//! The probe-script parser: a hand-written lexer and a recursive-descent parser over the text, with exact
//! positions. Names (registers, `argN`, `SYS_*`, constants, syscalls) are resolved here, and the checker's rules
//! are applied where the offending token is known, so every error points at it. Never panics: nesting and
//! expression depth are bounded, numbers are checked.

mod expr;
mod lex;

use super::ast::*;
use super::check;
use crate::model::syscalls;
use std::collections::HashMap;
use std::fmt;

/// Most nested parentheses and unary operators.
pub const MAX_NESTING: usize = 64;
/// Deepest expression tree (a chain of 256 `||` is fine; deeper is surely a mistake).
pub const MAX_EXPR_DEPTH: usize = 256;

/// A script error: where, what was expected, and the offending line to show with a caret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
    /// The text of line `line`, without its newline.
    pub source_line: String,
}

impl ParseError {
    /// An error at `span` of `text` (for errors found after parsing, e.g. by [`check::check_script`]).
    pub fn at(file: &str, text: &str, span: Span, message: impl Into<String>) -> ParseError {
        let source_line = text.lines().nth(span.line.saturating_sub(1)).unwrap_or("").to_string();
        ParseError { file: file.to_string(), line: span.line, col: span.col, message: message.into(), source_line }
    }

    /// `FILE:LINE:COL: message`, without the source line.
    pub fn one_line(&self) -> String {
        format!("{}:{}:{}: {}", self.file, self.line, self.col, self.message)
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.one_line())?;
        let num = self.line.to_string();
        writeln!(f, " {num} | {}", self.source_line)?;
        // Tabs are kept so the caret lines up however the terminal expands them.
        let pad: String = self
            .source_line
            .chars()
            .take(self.col.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(f, " {} | {pad}^", " ".repeat(num.len()))
    }
}

impl std::error::Error for ParseError {}

/// Parses a script; `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<Script, ParseError> {
    Parser::new(file, text).script()
}

/// Parses a script named `<input>` in errors: the fuzzing entry point. Never panics.
pub fn parse_str(text: &str) -> Result<Script, ParseError> {
    parse("<input>", text)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// A digit followed by letters, digits and `_`: an integer or a duration, read by context.
    Number(String),
    Str(String),
    Punct(&'static str),
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) | Tok::Number(s) => format!("`{s}`"),
            Tok::Str(s) => format!("the string {s:?}"),
            Tok::Punct(p) => format!("`{p}`"),
            Tok::Eof => "end of file".into(),
        }
    }
}

const PUNCTS: [&str; 27] = [
    "&&", "||", "==", "!=", "<=", ">=", "<<", ">>", "(", ")", "{", "}", ",", ";", ":", "+", "-", "*", "/", "%", "&",
    "|", "^", "~", "!", "<", ">",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}
fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}
/// Characters of an unquoted module name (`libstdc++.so.6`, `libucs-2be8eb38.so.0.0.0`, `/usr/lib/libc.so.6`).
pub(crate) fn is_module_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.$@/+-~".contains(c)
}
/// Characters of an unquoted symbol (`ucs_mpool_grow`, `foo.cold`, `_ZN3foo3barEv`).
pub(crate) fn is_symbol_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.$@".contains(c)
}

struct Parser<'a> {
    file: &'a str,
    text: &'a str,
    chars: Vec<char>,
    line_starts: Vec<usize>,
    pos: usize,
    nesting: usize,
    /// The location of the probe being parsed, for the rules that depend on it.
    location: Option<Location>,
}

type R<T> = Result<T, ParseError>;

impl<'a> Parser<'a> {
    fn new(file: &'a str, text: &'a str) -> Parser<'a> {
        let chars: Vec<char> = text.chars().collect();
        let mut line_starts = vec![0];
        line_starts.extend(chars.iter().enumerate().filter(|(_, c)| **c == '\n').map(|(i, _)| i + 1));
        Parser { file, text, chars, line_starts, pos: 0, nesting: 0, location: None }
    }

    fn script(mut self) -> R<Script> {
        let mut script = Script::default();
        let mut set_at: HashMap<&'static str, usize> = HashMap::new();
        let mut named_at: HashMap<String, usize> = HashMap::new();
        let mut named = Vec::new();
        loop {
            let (t, start, _) = self.peek()?;
            match &t {
                Tok::Eof => break,
                Tok::Punct(";") => self.pos += 1,
                Tok::Ident(k) if k == "set" => self.setting(&mut script.settings, &mut set_at)?,
                Tok::Ident(k) if k == "probe" => {
                    let (probe, name_pos) = self.probe()?;
                    if let Some(name_pos) = name_pos {
                        if let Some(&first) = named_at.get(&probe.name) {
                            return Err(self.err_at(
                                name_pos,
                                format!(
                                    "a probe named `{}` is already declared at line {}: names must be unique",
                                    probe.name,
                                    self.span_of(first).line
                                ),
                            ));
                        }
                        named_at.insert(probe.name.clone(), start);
                    }
                    named.push(name_pos.is_some());
                    script.probes.push(probe);
                }
                _ => {
                    return Err(self.err_at(start, format!("expected `probe` or `set`, found {}", t.describe())));
                }
            }
        }
        if script.probes.is_empty() {
            return Err(self.err_at(self.pos, "expected `probe`: a script needs at least one probe"));
        }
        let mut used: std::collections::HashSet<String> = named_at.into_keys().collect();
        for (p, named) in script.probes.iter_mut().zip(named) {
            if named {
                continue;
            }
            let base = auto_name(&p.location);
            let mut name = base.clone();
            let mut k = 2;
            while used.contains(&name) {
                name = format!("{base}_{k}");
                k += 1;
            }
            used.insert(name.clone());
            p.name = name;
        }
        Ok(script)
    }

    fn setting(&mut self, settings: &mut Settings, set_at: &mut HashMap<&'static str, usize>) -> R<()> {
        let (_, set_pos) = self.bump()?;
        let (t, start) = self.bump()?;
        let key: &'static str = match &t {
            Tok::Ident(k) if k == "duration" => "duration",
            Tok::Ident(k) if k == "format" => "format",
            Tok::Ident(k) if k == "smaps_every" => "smaps_every",
            _ => {
                return Err(self.err_at(
                    start,
                    format!(
                        "expected a setting (`duration`, `format` or `smaps_every`) after `set`, found {}",
                        t.describe()
                    ),
                ));
            }
        };
        if let Some(&first) = set_at.get(key) {
            return Err(self.err_at(set_pos, format!("`{key}` is already set at line {}", self.span_of(first).line)));
        }
        set_at.insert(key, set_pos);
        let (t, start) = self.bump()?;
        match (key, &t) {
            ("format", Tok::Ident(v)) if v == "json" => settings.json = Some(true),
            ("format", Tok::Ident(v)) if v == "text" => settings.json = Some(false),
            ("format", _) => {
                return Err(self.err_at(start, format!("expected `json` or `text`, found {}", t.describe())));
            }
            (_, Tok::Number(n)) => {
                let d = crate::model::duration::parse_duration(n).map_err(|m| self.err_at(start, m.to_string()))?;
                if key == "duration" {
                    settings.duration = Some(d);
                } else {
                    settings.smaps_every = Some(d);
                }
            }
            _ => {
                return Err(
                    self.err_at(start, format!("expected a duration (`500ms`, `10s`, `2m`), found {}", t.describe()))
                );
            }
        }
        Ok(())
    }

    /// A probe, and where its explicit name is (`None`: unnamed, to be named after its location).
    fn probe(&mut self) -> R<(ProbeDecl, Option<usize>)> {
        let (_, probe_pos) = self.bump()?;
        let (t, start, end) = self.peek()?;
        let mut name_pos = None;
        let mut name = String::new();
        match t {
            Tok::Ident(s) if s != "at" => {
                name = s;
                name_pos = Some(start);
                self.pos = end;
            }
            Tok::Str(s) => {
                if let Some(m) = check::name_problem(&s) {
                    return Err(self.err_at(start, m));
                }
                name = s;
                name_pos = Some(start);
                self.pos = end;
            }
            _ => {}
        }
        if !self.eat_keyword("at")? {
            let (t, start, _) = self.peek()?;
            let what = if name_pos.is_some() { "after the probe name" } else { "or a probe name after `probe`" };
            return Err(self.err_at(start, format!("expected `at` {what}, found {}", t.describe())));
        }
        let location = self.location()?;
        self.location = Some(location.clone());
        let condition = if self.eat_keyword("if")? { Some(self.expr()?.0) } else { None };
        let (t, start, end) = self.peek()?;
        if t != Tok::Punct("{") {
            let what = if condition.is_some() { "`{` after the condition" } else { "`if` or `{` after the location" };
            return Err(self.err_at(start, format!("expected {what}, found {}", t.describe())));
        }
        self.pos = end;
        let mut probe = ProbeDecl {
            name,
            location,
            condition,
            collect: Collect::default(),
            max_events: None,
            sample_one_in: None,
            span: self.span_of(probe_pos),
        };
        self.body(&mut probe, start)?;
        Ok((probe, name_pos))
    }

    fn location(&mut self) -> R<Location> {
        self.skip_ws();
        let start = self.pos;
        let expected = "expected a location: `syscall(NAME, ...)`, `[MODULE:]SYMBOL[+OFFSET]` or an address";
        let Some(c) = self.ch(start) else {
            return Err(self.err_at(start, format!("{expected}, found end of file")));
        };
        if c.is_ascii_digit() {
            let (t, _) = self.bump()?;
            let Tok::Number(n) = t else {
                return Err(self.err_at(start, expected));
            };
            return Ok(Location::Address(parse_int(&n).map_err(|m| self.err_at(start, m))?));
        }
        // `syscall(...)`; a bare `syscall` is the function.
        if is_ident_start(c)
            && let (Tok::Ident(s), _, end) = self.peek()?
            && s == "syscall"
        {
            self.pos = end;
            self.skip_ws();
            if self.ch(self.pos) == Some('(') {
                self.pos += 1;
                return self.syscall_list(start);
            }
            self.pos = start;
        }
        let module = self.module_prefix()?;
        let sym_start = self.pos;
        let symbol = if self.ch(sym_start) == Some('"') {
            let (s, end) = self.string_at(sym_start)?;
            self.pos = end;
            s
        } else {
            let mut end = sym_start;
            while self.ch(end).is_some_and(is_symbol_char) {
                end += 1;
            }
            let s: String = self.chars[sym_start..end].iter().collect();
            if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
                let found = match self.peek() {
                    Ok((t, _, _)) => t.describe(),
                    Err(_) => format!("{:?}", self.ch(sym_start).unwrap_or(' ')),
                };
                let msg = match &module {
                    Some(m) => format!("expected a symbol name after `{m}:`, found {found}"),
                    None => format!("{expected}, found {found}"),
                };
                return Err(self.err_at(sym_start, msg));
            }
            self.pos = end;
            s
        };
        if symbol.is_empty() {
            return Err(self.err_at(sym_start, "a symbol name cannot be empty"));
        }
        let mut offset = 0;
        if self.eat_punct("+")? {
            let (t, start) = self.bump()?;
            let Tok::Number(n) = &t else {
                return Err(self.err_at(start, format!("expected an offset after `+`, found {}", t.describe())));
            };
            offset = parse_int(n).map_err(|m| self.err_at(start, m))?;
        }
        Ok(Location::Function { module, symbol, offset })
    }

    /// `MODULE:` (unquoted or quoted) if the text at the position starts with one; else nothing is consumed.
    fn module_prefix(&mut self) -> R<Option<String>> {
        let start = self.pos;
        let (name, end) = if self.ch(start) == Some('"') {
            self.string_at(start)?
        } else {
            let mut end = start;
            while self.ch(end).is_some_and(is_module_char) {
                end += 1;
            }
            (self.chars[start..end].iter().collect(), end)
        };
        if end > start && self.ch(end) == Some(':') {
            if name.is_empty() {
                return Err(self.err_at(start, "a module name cannot be empty"));
            }
            self.pos = end + 1;
            return Ok(Some(name));
        }
        Ok(None)
    }

    fn syscall_list(&mut self, start: usize) -> R<Location> {
        let mut numbers: Vec<u64> = Vec::new();
        loop {
            let (t, at) = self.bump()?;
            let nr = match &t {
                Tok::Ident(name) => {
                    syscalls::parse(name).ok_or_else(|| self.err_at(at, format!("unknown syscall `{name}`")))?
                }
                Tok::Number(n) => parse_int(n).map_err(|m| self.err_at(at, m))?,
                _ => {
                    return Err(self.err_at(at, format!("expected a syscall name or number, found {}", t.describe())));
                }
            };
            if let Some(m) = check::syscall_number_problem(nr) {
                return Err(self.err_at(at, m));
            }
            if numbers.contains(&nr) {
                return Err(self.err_at(at, format!("{} is listed twice", syscall_label(nr))));
            }
            numbers.push(nr);
            let (t, at) = self.bump()?;
            match t {
                Tok::Punct(",") => {}
                Tok::Punct(")") => break,
                _ => {
                    return Err(self.err_at(
                        at,
                        format!(
                            "expected `,` or `)` in the syscall list opened at column {}, found {}",
                            self.span_of(start).col,
                            t.describe()
                        ),
                    ));
                }
            }
        }
        Ok(Location::Syscall { numbers })
    }

    fn body(&mut self, probe: &mut ProbeDecl, open: usize) -> R<()> {
        let mut max_at = None;
        let mut sample_at = None;
        loop {
            let (t, start, end) = self.peek()?;
            match &t {
                Tok::Punct("}") => {
                    self.pos = end;
                    return Ok(());
                }
                Tok::Punct(";") => self.pos = end,
                Tok::Ident(k) if k == "collect" => {
                    self.pos = end;
                    self.collect(probe)?;
                }
                Tok::Ident(k) if k == "max" => {
                    self.pos = end;
                    if let Some(first) = max_at {
                        return Err(
                            self.err_at(start, format!("`max` is already given at line {}", self.span_of(first).line))
                        );
                    }
                    max_at = Some(start);
                    probe.max_events = Some(self.limit("after `max`")?);
                    self.eat_keyword("events")?;
                }
                Tok::Ident(k) if k == "sample" => {
                    self.pos = end;
                    if let Some(first) = sample_at {
                        return Err(self
                            .err_at(start, format!("`sample` is already given at line {}", self.span_of(first).line)));
                    }
                    sample_at = Some(start);
                    let (t, at) = self.bump()?;
                    if t != Tok::Number("1".into()) {
                        return Err(
                            self.err_at(at, format!("expected `1` (as in `sample 1 in 10`), found {}", t.describe()))
                        );
                    }
                    if !self.eat_keyword("in")? {
                        let (t, at, _) = self.peek()?;
                        return Err(self.err_at(at, format!("expected `in` after `sample 1`, found {}", t.describe())));
                    }
                    probe.sample_one_in = Some(self.limit("after `sample 1 in`")?);
                }
                Tok::Eof => {
                    let open = self.span_of(open);
                    return Err(self.err_at(
                        start,
                        format!(
                            "expected `}}` to close the probe body opened at line {} column {}, found end of file",
                            open.line, open.col
                        ),
                    ));
                }
                _ => {
                    return Err(self.err_at(
                        start,
                        format!("expected `collect`, `max`, `sample` or `}}`, found {}", t.describe()),
                    ));
                }
            }
        }
    }

    /// A positive count.
    fn limit(&mut self, what: &str) -> R<u64> {
        let (t, at) = self.bump()?;
        let Tok::Number(n) = &t else {
            return Err(self.err_at(at, format!("expected a number {what}, found {}", t.describe())));
        };
        let v = parse_int(n).map_err(|m| self.err_at(at, m))?;
        if let Some(m) = check::limit_problem(v) {
            return Err(self.err_at(at, m));
        }
        Ok(v)
    }

    fn collect(&mut self, probe: &mut ProbeDecl) -> R<()> {
        loop {
            let (t, at) = self.bump()?;
            let c = &mut probe.collect;
            match &t {
                Tok::Ident(k) if k == "args" => {
                    if c.args {
                        return Err(self.err_at(at, "`args` is already collected"));
                    }
                    c.args = true;
                }
                Tok::Ident(k) if k == "ret" => {
                    if c.ret {
                        return Err(self.err_at(at, "`ret` is already collected"));
                    }
                    if let Some(m) = check::ret_problem(&probe.location) {
                        return Err(self.err_at(at, m));
                    }
                    c.ret = true;
                }
                Tok::Ident(k) if k == "stack" => {
                    if c.stack.is_some() {
                        return Err(self.err_at(at, "`stack` is already collected"));
                    }
                    let mut depth = DEFAULT_STACK_DEPTH;
                    if self.eat_punct("(")? {
                        let (t, at) = self.bump()?;
                        let Tok::Number(n) = &t else {
                            return Err(self.err_at(at, format!("expected a number of frames, found {}", t.describe())));
                        };
                        let v = parse_int(n).map_err(|m| self.err_at(at, m))?;
                        if let Some(m) = check::stack_problem(v) {
                            return Err(self.err_at(at, m));
                        }
                        depth = v as usize;
                        self.expect_punct(")", "after the number of frames")?;
                    }
                    probe.collect.stack = Some(depth);
                }
                Tok::Ident(k) if k == "regs" => {
                    self.expect_punct("(", "after `regs`")?;
                    loop {
                        let (t, at) = self.bump()?;
                        let reg = match &t {
                            Tok::Ident(n) => REGS.iter().find(|(r, _)| r == n).map(|(_, r)| *r),
                            _ => None,
                        };
                        let Some(reg) = reg else {
                            return Err(
                                self.err_at(at, format!("expected a register (rax..r15, rip), found {}", t.describe()))
                            );
                        };
                        if probe.collect.regs.contains(&reg) {
                            return Err(self.err_at(at, format!("`{}` is already collected", reg_name(reg))));
                        }
                        probe.collect.regs.push(reg);
                        if !self.eat_punct(",")? {
                            break;
                        }
                    }
                    self.expect_punct(")", "to close `regs(`")?;
                }
                Tok::Ident(k) if REGS.iter().any(|(r, _)| r == k) => {
                    return Err(self.err_at(at, format!("to collect a register, write `regs({k})`")));
                }
                _ => {
                    return Err(self.err_at(
                        at,
                        format!(
                            "expected `args`, `ret`, `stack` or `regs(...)` after `collect`, found {}",
                            t.describe()
                        ),
                    ));
                }
            }
            if !self.eat_punct(",")? {
                return Ok(());
            }
        }
    }

    // Expressions, by precedence climbing (one frame per operator or parenthesis, not per C level); each
    // returns the tree and its depth.
}

fn punct(p: &str) -> &'static str {
    PUNCTS.iter().find(|q| **q == p).copied().unwrap_or("")
}

/// The name a probe gets from its location when the script gives none.
pub fn auto_name(loc: &Location) -> String {
    match loc {
        Location::Syscall { numbers } => numbers
            .iter()
            .map(|&n| syscalls::name(n).map(str::to_string).unwrap_or_else(|| format!("sys{n}")))
            .collect::<Vec<_>>()
            .join("_"),
        Location::Function { symbol, offset: 0, .. } => symbol.clone(),
        Location::Function { symbol, offset, .. } => format!("{symbol}+{offset:#x}"),
        Location::Address(a) => format!("{a:#x}"),
    }
}

/// `mmap` for a known number, else the number.
pub fn syscall_label(nr: u64) -> String {
    syscalls::name(nr).map(|n| format!("`{n}`")).unwrap_or_else(|| format!("syscall {nr}"))
}

/// An integer literal: decimal, `0x` hex or `0b` binary, `_` separators, optional `K`, `M`, `G` (powers of 1024).
pub fn parse_int(text: &str) -> Result<u64, String> {
    let bad = || format!("invalid number `{text}`: expected decimal, 0x hex or 0b binary, optionally with K, M or G");
    let (body, mult) = match text.chars().last() {
        Some('K') => (&text[..text.len() - 1], 1u64 << 10),
        Some('M') => (&text[..text.len() - 1], 1 << 20),
        Some('G') => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    let (digits, radix) = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
        (b, 2)
    } else {
        (body, 10)
    };
    let digits: String = digits.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad());
    }
    let too_big = || format!("number `{text}` does not fit in 64 bits");
    u64::from_str_radix(&digits, radix).map_err(|_| too_big())?.checked_mul(mult).ok_or_else(too_big)
}
