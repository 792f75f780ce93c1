//! Conditions: binary operators by precedence, unary operators, and the names an expression may use (registers,
//! arguments, constants).

use super::*;

impl Parser<'_> {
    pub(super) fn expr(&mut self) -> R<(Expr, usize)> {
        self.binary(1)
    }

    /// An expression of operators binding at least as tightly as `min`.
    pub(super) fn binary(&mut self, min: u8) -> R<(Expr, usize)> {
        let mut left = self.unary()?;
        loop {
            let (t, at, end) = self.peek()?;
            let Tok::Punct(p) = t else { break };
            let Some(op) = BinOp::ALL.into_iter().find(|o| o.symbol() == p && o.precedence() >= min) else {
                break;
            };
            self.pos = end;
            let right_at = self.peek()?.1;
            // Left-associative: the right operand takes only operators that bind tighter.
            let right = self.nested(at, |p| p.binary(op.precedence() + 1))?;
            if let Some(m) = check::divisor_problem(op, &right.0) {
                return Err(self.err_at(right_at, m));
            }
            let depth = 1 + left.1.max(right.1);
            if depth > MAX_EXPR_DEPTH {
                return Err(self.err_at(at, format!("expression too deep (more than {MAX_EXPR_DEPTH} levels)")));
            }
            left = (Expr::Binary(op, Box::new(left.0), Box::new(right.0)), depth);
        }
        Ok(left)
    }

    pub(super) fn nested<T>(&mut self, at: usize, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        if self.nesting >= MAX_NESTING {
            return Err(self.err_at(
                at,
                format!("expression nested too deeply (more than {MAX_NESTING} parentheses or unary operators)"),
            ));
        }
        self.nesting += 1;
        let r = f(self);
        self.nesting -= 1;
        r
    }

    pub(super) fn unary(&mut self) -> R<(Expr, usize)> {
        let (t, at, end) = self.peek()?;
        let op = match t {
            Tok::Punct("!") => UnOp::Not,
            Tok::Punct("~") => UnOp::BitNot,
            Tok::Punct("-") => UnOp::Neg,
            _ => return self.primary(),
        };
        self.pos = end;
        let (x, d) = self.nested(at, |p| p.unary())?;
        Ok((Expr::Unary(op, Box::new(x)), d + 1))
    }

    pub(super) fn primary(&mut self) -> R<(Expr, usize)> {
        let (t, at) = self.bump()?;
        match &t {
            Tok::Number(n) => Ok((Expr::Int(parse_int(n).map_err(|m| self.err_at(at, m))?), 1)),
            Tok::Ident(name) => {
                let e = self.name(name).map_err(|m| self.err_at(at, m))?;
                if let (Expr::Var(v), Some(loc)) = (&e, &self.location)
                    && let Some(m) = check::var_problem(*v, loc)
                {
                    return Err(self.err_at(at, m));
                }
                Ok((e, 1))
            }
            Tok::Punct("(") => {
                let e = self.nested(at, |p| p.expr())?;
                let open = self.span_of(at);
                self.expect_punct(")", &format!("to close the `(` at column {}", open.col))?;
                Ok(e)
            }
            _ => Err(self.err_at(at, format!("expected a number, a name or `(`, found {}", t.describe()))),
        }
    }

    pub(super) fn name(&self, name: &str) -> Result<Expr, String> {
        if name == "nr" {
            return Ok(Expr::Var(Var::Nr));
        }
        if let Some((_, r)) = REGS.iter().find(|(n, _)| *n == name) {
            return Ok(Expr::Var(Var::Reg(*r)));
        }
        if let Some(digits) = name.strip_prefix("arg")
            && !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
        {
            return match digits.parse::<u8>() {
                Ok(n) if n <= 5 && (digits.len() == 1) => Ok(Expr::Var(Var::Arg(n))),
                _ => Err(format!("`{name}` is out of range: the arguments are arg0..arg5")),
            };
        }
        if let Some(sys) = name.strip_prefix("SYS_") {
            return syscalls::parse(sys)
                .filter(|_| !sys.starts_with(|c: char| c.is_ascii_digit()))
                .map(Expr::Int)
                .ok_or_else(|| format!("unknown syscall `{sys}` in `{name}`"));
        }
        if let Some(v) = crate::model::consts::flag_value(name) {
            return Ok(Expr::Int(v));
        }
        if name == "ret" {
            return Err(
                "`ret` is not known when the condition is evaluated (at the call); collect it with `collect ret`"
                    .into(),
            );
        }
        Err(format!(
            "unknown name `{name}`: expected arg0..arg5, nr, a register (rax..r15, rip), SYS_<syscall> or a \
             constant such as MAP_ANONYMOUS"
        ))
    }
}
