//! The probe-script syntax tree, as the parser builds it and the tracer consumes it, and the pure evaluator of
//! conditions. Plain data: no positions take part in equality, so `parse(print(script)) == script`.

use crate::model::regs::Reg;
use std::time::Duration;

/// A whole script: settings (which the command line may override) and the probes, in file order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Script {
    pub settings: Settings,
    pub probes: Vec<ProbeDecl>,
}

/// `set duration 10s`, `set format json|text`, `set smaps_every 1s`; `None` when the script does not say.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    pub duration: Option<Duration>,
    /// `Some(true)` for `set format json`, `Some(false)` for `set format text`.
    pub json: Option<bool>,
    pub smaps_every: Option<Duration>,
}

/// One `probe NAME at LOCATION [if CONDITION] { ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeDecl {
    /// Unique within a script. An unnamed probe gets one from its location (`mmap_munmap`, `ucs_mpool_grow`,
    /// `0x7f00001234`), made unique with `_2`, `_3`, ... suffixes.
    pub name: String,
    pub location: Location,
    /// Evaluated at every hit, before anything is collected; `None` means every hit counts.
    pub condition: Option<Expr>,
    pub collect: Collect,
    /// Stop this probe (disarm it) after this many events.
    pub max_events: Option<u64>,
    /// Keep one event in N of those that pass the condition.
    pub sample_one_in: Option<u64>,
    /// Where the `probe` keyword is.
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// libc's syscall() wrapper filtered by syscall numbers (the `--syscall` case); `nr` and `arg0..arg5` are the
    /// syscall's own.
    Syscall {
        numbers: Vec<u64>,
    },
    /// A function entry (or entry + offset), optionally in a named module; `arg0..arg5` = rdi, rsi, rdx, rcx, r8, r9.
    Function {
        module: Option<String>,
        symbol: String,
        offset: u64,
    },
    Address(u64),
}

/// A condition. All values are unsigned 64-bit; see [`eval`] for the exact semantics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Int(u64),
    Var(Var),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// A register as it is at the breakpoint (for `syscall(...)` locations: at the wrapper's entry).
    Reg(Reg),
    /// `arg0..arg5` (0..=5): the syscall's arguments at `syscall(...)` locations (rsi, rdx, rcx, r8, r9 and the
    /// seventh on the stack), else the C ABI argument registers rdi, rsi, rdx, rcx, r8, r9.
    Arg(u8),
    /// The syscall number (rdi at the wrapper's entry); only at `syscall(...)` locations.
    Nr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    /// `!x`: 1 if x is 0, else 0.
    Not,
    /// `~x`
    BitNot,
    /// `-x`: two's complement.
    Neg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Mul,
    Div,
    Rem,
    Add,
    Sub,
    Shl,
    Shr,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    BitAnd,
    BitXor,
    BitOr,
    And,
    Or,
}

impl BinOp {
    /// C precedence: higher binds tighter. All binary operators are left-associative.
    pub fn precedence(self) -> u8 {
        use BinOp::*;
        match self {
            Mul | Div | Rem => 10,
            Add | Sub => 9,
            Shl | Shr => 8,
            Lt | Le | Gt | Ge => 7,
            Eq | Ne => 6,
            BitAnd => 5,
            BitXor => 4,
            BitOr => 3,
            And => 2,
            Or => 1,
        }
    }

    pub fn symbol(self) -> &'static str {
        use BinOp::*;
        match self {
            Mul => "*",
            Div => "/",
            Rem => "%",
            Add => "+",
            Sub => "-",
            Shl => "<<",
            Shr => ">>",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            Eq => "==",
            Ne => "!=",
            BitAnd => "&",
            BitXor => "^",
            BitOr => "|",
            And => "&&",
            Or => "||",
        }
    }

    /// Every operator, for tables and generated tests.
    pub const ALL: [BinOp; 18] = {
        use BinOp::*;
        [Mul, Div, Rem, Add, Sub, Shl, Shr, Lt, Le, Gt, Ge, Eq, Ne, BitAnd, BitXor, BitOr, And, Or]
    };
}

impl UnOp {
    pub fn symbol(self) -> &'static str {
        match self {
            UnOp::Not => "!",
            UnOp::BitNot => "~",
            UnOp::Neg => "-",
        }
    }
}

/// What an event carries besides its probe name, thread and time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Collect {
    /// `arg0..arg5` as defined for the location (and `nr` at `syscall(...)` locations).
    pub args: bool,
    /// The return value: of the syscall, or of this call of the function (function entries only).
    pub ret: bool,
    /// Stack with at most this many frames; bare `stack` means [`DEFAULT_STACK_DEPTH`].
    pub stack: Option<usize>,
    /// Registers at the breakpoint, in the order written.
    pub regs: Vec<Reg>,
}

/// Frames of a bare `collect stack`: the same as `--stack-depth`'s default.
pub const DEFAULT_STACK_DEPTH: usize = 128;
/// Most frames `stack(N)` may ask for.
pub const MAX_STACK_DEPTH: usize = 1024;

/// A position in the script, 1-based; columns count characters. Positions are not part of a script's meaning:
/// any two spans compare equal, so a script equals its reprint (`parse(print(s)) == s`).
#[derive(Debug, Clone, Copy, Eq, Default)]
pub struct Span {
    pub line: usize,
    pub col: usize,
}

impl PartialEq for Span {
    fn eq(&self, _other: &Span) -> bool {
        true
    }
}

/// The register names a script may use, in the order `Reg` declares them.
pub const REGS: [(&str, Reg); 17] = [
    ("rax", Reg::Rax),
    ("rbx", Reg::Rbx),
    ("rcx", Reg::Rcx),
    ("rdx", Reg::Rdx),
    ("rsi", Reg::Rsi),
    ("rdi", Reg::Rdi),
    ("rbp", Reg::Rbp),
    ("rsp", Reg::Rsp),
    ("r8", Reg::R8),
    ("r9", Reg::R9),
    ("r10", Reg::R10),
    ("r11", Reg::R11),
    ("r12", Reg::R12),
    ("r13", Reg::R13),
    ("r14", Reg::R14),
    ("r15", Reg::R15),
    ("rip", Reg::Rip),
];

pub fn reg_name(r: Reg) -> &'static str {
    REGS.iter().find(|(_, x)| *x == r).map(|(n, _)| *n).unwrap_or("?")
}

/// Evaluates a condition. Arithmetic wraps; comparisons are unsigned and give 0 or 1; `&&` and `||` give 0 or
/// 1 and do not evaluate their right side when the left decides; division and remainder by zero give 0 (the
/// checker rejects a literal zero divisor); shifts by 64 or more give 0. Never panics.
pub fn eval(e: &Expr, get: &dyn Fn(Var) -> u64) -> u64 {
    match e {
        Expr::Int(v) => *v,
        Expr::Var(v) => get(*v),
        Expr::Unary(op, x) => {
            let x = eval(x, get);
            match op {
                UnOp::Not => (x == 0) as u64,
                UnOp::BitNot => !x,
                UnOp::Neg => x.wrapping_neg(),
            }
        }
        Expr::Binary(op, a, b) => {
            let a = eval(a, get);
            match op {
                BinOp::And if a == 0 => 0,
                BinOp::Or if a != 0 => 1,
                _ => apply(*op, a, eval(b, get)),
            }
        }
    }
}

/// One binary operator on two values, as [`eval`] defines it (without short-circuit).
pub fn apply(op: BinOp, a: u64, b: u64) -> u64 {
    use BinOp::*;
    match op {
        Mul => a.wrapping_mul(b),
        Div => a.checked_div(b).unwrap_or(0),
        Rem => a.checked_rem(b).unwrap_or(0),
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Shl => u32::try_from(b).ok().and_then(|b| a.checked_shl(b)).unwrap_or(0),
        Shr => u32::try_from(b).ok().and_then(|b| a.checked_shr(b)).unwrap_or(0),
        Lt => (a < b) as u64,
        Le => (a <= b) as u64,
        Gt => (a > b) as u64,
        Ge => (a >= b) as u64,
        Eq => (a == b) as u64,
        Ne => (a != b) as u64,
        BitAnd => a & b,
        BitXor => a ^ b,
        BitOr => a | b,
        And => (a != 0 && b != 0) as u64,
        Or => (a != 0 || b != 0) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: u64) -> Box<Expr> {
        Box::new(Expr::Int(v))
    }
    fn bin(op: BinOp, a: u64, b: u64) -> u64 {
        eval(&Expr::Binary(op, int(a), int(b)), &|_| 0)
    }

    #[test]
    fn operators() {
        use BinOp::*;
        let cases: &[(BinOp, u64, u64, u64)] = &[
            (Mul, u64::MAX, 2, u64::MAX - 1),
            (Div, 7, 2, 3),
            (Div, 7, 0, 0),
            (Rem, 7, 0, 0),
            (Rem, 7, 4, 3),
            (Add, u64::MAX, 2, 1),
            (Sub, 0, 1, u64::MAX),
            (Shl, 1, 63, 1 << 63),
            (Shl, 1, 64, 0),
            (Shl, 1, u64::MAX, 0),
            (Shr, 1 << 63, 63, 1),
            (Shr, 1, 1 << 40, 0),
            (Lt, 1, u64::MAX, 1),
            (Le, 2, 2, 1),
            (Gt, 2, 2, 0),
            (Ge, 2, 3, 0),
            (Eq, 5, 5, 1),
            (Ne, 5, 5, 0),
            (BitAnd, 0b1100, 0b1010, 0b1000),
            (BitXor, 0b1100, 0b1010, 0b0110),
            (BitOr, 0b1100, 0b1010, 0b1110),
            (And, 2, 3, 1),
            (And, 2, 0, 0),
            (Or, 0, 0, 0),
            (Or, 0, 7, 1),
        ];
        for &(op, a, b, want) in cases {
            assert_eq!(bin(op, a, b), want, "{a} {} {b}", op.symbol());
        }
        let un = |op, v| eval(&Expr::Unary(op, int(v)), &|_| 0);
        assert_eq!(un(UnOp::Not, 0), 1);
        assert_eq!(un(UnOp::Not, 9), 0);
        assert_eq!(un(UnOp::BitNot, 0), u64::MAX);
        assert_eq!(un(UnOp::Neg, 1), u64::MAX);
        assert_eq!(un(UnOp::Neg, 0), 0);
    }

    #[test]
    fn variables_and_short_circuit() {
        use std::cell::Cell;
        let reads = Cell::new(0);
        let get = |v: Var| {
            reads.set(reads.get() + 1);
            match v {
                Var::Nr => 9,
                Var::Arg(n) => 100 + n as u64,
                Var::Reg(r) => r as u64,
            }
        };
        let var = |v| Box::new(Expr::Var(v));
        // nr == 9 && arg1 >= 101
        let e = Expr::Binary(
            BinOp::And,
            Box::new(Expr::Binary(BinOp::Eq, var(Var::Nr), int(9))),
            Box::new(Expr::Binary(BinOp::Ge, var(Var::Arg(1)), int(101))),
        );
        assert_eq!(eval(&e, &get), 1);
        assert_eq!(reads.get(), 2);
        // 0 && arg0: the right side is not read; 1 || arg0 neither.
        reads.set(0);
        assert_eq!(eval(&Expr::Binary(BinOp::And, int(0), var(Var::Arg(0))), &get), 0);
        assert_eq!(eval(&Expr::Binary(BinOp::Or, int(5), var(Var::Arg(0))), &get), 1);
        assert_eq!(reads.get(), 0);
        assert_eq!(eval(&Expr::Var(Var::Reg(Reg::Rdi)), &get), Reg::Rdi as u64);
    }

    #[test]
    fn spans_do_not_take_part_in_equality() {
        assert_eq!(Span { line: 1, col: 2 }, Span { line: 30, col: 4 });
        assert!(REGS.iter().all(|(n, r)| Reg::from_name(n) == Some(*r) && reg_name(*r) == *n));
    }
}
