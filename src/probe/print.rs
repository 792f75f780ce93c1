//! The script printer: a canonical text for a script, such that `parse(print(s)) == s`. Names, modules and
//! symbols that the lexer would not read back as one word are quoted; expressions get the parentheses C
//! precedence needs and no more.

use super::ast::*;
use super::parse::{is_module_char, is_symbol_char};
use crate::model::syscalls;
use std::fmt::Write;
use std::time::Duration;

pub fn print(s: &Script) -> String {
    let mut out = String::new();
    let st = &s.settings;
    if let Some(d) = st.duration {
        let _ = writeln!(out, "set duration {}", duration(d));
    }
    if let Some(j) = st.json {
        let _ = writeln!(out, "set format {}", if j { "json" } else { "text" });
    }
    if let Some(d) = st.smaps_every {
        let _ = writeln!(out, "set smaps_every {}", duration(d));
    }
    for p in &s.probes {
        if !out.is_empty() {
            out.push('\n');
        }
        out += &probe(p);
    }
    out
}

/// One probe, as the `check` command shows it and as a script holds it.
pub fn probe(p: &ProbeDecl) -> String {
    let mut out = format!("probe {} at {}", name(&p.name), location(&p.location));
    if let Some(c) = &p.condition {
        let _ = write!(out, " if {}", expr(c));
    }
    out += " {\n";
    for stmt in body(p) {
        let _ = writeln!(out, "    {stmt}");
    }
    out += "}\n";
    out
}

/// The statements of a probe's body: `collect ...`, `max N`, `sample 1 in N`.
pub fn body(p: &ProbeDecl) -> Vec<String> {
    let mut v = Vec::new();
    let c = &p.collect;
    let mut items = Vec::new();
    if c.args {
        items.push("args".to_string());
    }
    if c.ret {
        items.push("ret".to_string());
    }
    if let Some(d) = c.stack {
        items.push(if d == DEFAULT_STACK_DEPTH { "stack".to_string() } else { format!("stack({d})") });
    }
    if !c.regs.is_empty() {
        let regs: Vec<&str> = c.regs.iter().map(|r| reg_name(*r)).collect();
        items.push(format!("regs({})", regs.join(", ")));
    }
    if !items.is_empty() {
        v.push(format!("collect {}", items.join(", ")));
    }
    if let Some(n) = p.max_events {
        v.push(format!("max {n}"));
    }
    if let Some(n) = p.sample_one_in {
        v.push(format!("sample 1 in {n}"));
    }
    v
}

pub fn location(l: &Location) -> String {
    match l {
        Location::Syscall { numbers } => {
            let names: Vec<String> = numbers
                .iter()
                .map(|&n| syscalls::name(n).map(str::to_string).unwrap_or_else(|| n.to_string()))
                .collect();
            format!("syscall({})", names.join(", "))
        }
        Location::Function { module, symbol, offset } => {
            let mut s = String::new();
            if let Some(m) = module {
                s += &word(m, is_module_char);
                s.push(':');
            }
            s += &word(symbol, is_symbol_char);
            if *offset != 0 {
                let _ = write!(s, "+{offset:#x}");
            }
            s
        }
        Location::Address(a) => format!("{a:#x}"),
    }
}

fn name(n: &str) -> String {
    let ident = n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ident && n != "at" { n.to_string() } else { quote(n) }
}

/// `s` bare if it reads back as one word of `ok` characters, else quoted.
fn word(s: &str, ok: fn(char) -> bool) -> String {
    if !s.is_empty() && s.chars().all(ok) && !s.starts_with(|c: char| c.is_ascii_digit()) {
        s.to_string()
    } else {
        quote(s)
    }
}

fn quote(s: &str) -> String {
    let mut q = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => q += "\\\"",
            '\\' => q += "\\\\",
            '\n' => q += "\\n",
            '\t' => q += "\\t",
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

pub fn duration(d: Duration) -> String {
    let (s, n) = (d.as_secs(), d.subsec_nanos());
    if n == 0 {
        if s.is_multiple_of(3600) {
            format!("{}h", s / 3600)
        } else if s.is_multiple_of(60) {
            format!("{}m", s / 60)
        } else {
            format!("{s}s")
        }
    } else {
        let ns = d.as_nanos();
        if ns.is_multiple_of(1_000_000) {
            format!("{}ms", ns / 1_000_000)
        } else if ns.is_multiple_of(1000) {
            format!("{}us", ns / 1000)
        } else {
            format!("{ns}ns")
        }
    }
}

pub fn expr(e: &Expr) -> String {
    let mut s = String::new();
    write_expr(&mut s, e, 0);
    s
}

/// Unary operators bind tighter than any binary one.
const UNARY: u8 = 11;

fn write_expr(out: &mut String, e: &Expr, min: u8) {
    match e {
        Expr::Int(v) => out.push_str(&int(*v)),
        Expr::Var(Var::Nr) => out.push_str("nr"),
        Expr::Var(Var::Arg(n)) => {
            let _ = write!(out, "arg{n}");
        }
        Expr::Var(Var::Reg(r)) => out.push_str(reg_name(*r)),
        Expr::Unary(op, x) => {
            out.push_str(op.symbol());
            write_expr(out, x, UNARY);
        }
        Expr::Binary(op, a, b) => {
            let p = op.precedence();
            if p < min {
                out.push('(');
            }
            write_expr(out, a, p);
            let _ = write!(out, " {} ", op.symbol());
            // Left-associative: a right operand of the same precedence needs parentheses.
            write_expr(out, b, p + 1);
            if p < min {
                out.push(')');
            }
        }
    }
}

/// Small numbers in decimal, sizes with a suffix, the rest (addresses, flags) in hex.
fn int(v: u64) -> String {
    if v < 0x10000 {
        v.to_string()
    } else if v.is_multiple_of(1 << 30) {
        format!("{}G", v >> 30)
    } else if v.is_multiple_of(1 << 20) {
        format!("{}M", v >> 20)
    } else {
        format!("{v:#x}")
    }
}
