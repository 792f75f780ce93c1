//! The parser's lexer: whitespace and comments, tokens with their positions, and spans for errors.

use super::*;

impl Parser<'_> {
    pub(super) fn span_of(&self, pos: usize) -> Span {
        let line = self.line_starts.partition_point(|&s| s <= pos).max(1);
        let start = self.line_starts.get(line - 1).copied().unwrap_or(0);
        Span { line, col: pos.saturating_sub(start) + 1 }
    }

    pub(super) fn err_at(&self, pos: usize, message: impl Into<String>) -> ParseError {
        ParseError::at(self.file, self.text, self.span_of(pos), message)
    }

    pub(super) fn ch(&self, pos: usize) -> Option<char> {
        self.chars.get(pos).copied()
    }

    pub(super) fn skip_ws(&mut self) {
        while let Some(c) = self.ch(self.pos) {
            if c == '#' {
                while self.ch(self.pos).is_some_and(|c| c != '\n') {
                    self.pos += 1;
                }
            } else if c.is_whitespace() {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// The next token after whitespace, its start and end, without consuming it.
    pub(super) fn peek(&mut self) -> R<(Tok, usize, usize)> {
        self.skip_ws();
        let start = self.pos;
        let Some(c) = self.ch(start) else {
            return Ok((Tok::Eof, start, start));
        };
        let mut end = start + 1;
        let tok = if is_ident_start(c) {
            while self.ch(end).is_some_and(is_ident_char) {
                end += 1;
            }
            Tok::Ident(self.chars[start..end].iter().collect())
        } else if c.is_ascii_digit() {
            // A `.` between digits belongs to the number (`1.5s`), so durations read as on the command line.
            while self.ch(end).is_some_and(is_ident_char)
                || (self.ch(end) == Some('.') && self.ch(end + 1).is_some_and(|d| d.is_ascii_digit()))
            {
                end += 1;
            }
            Tok::Number(self.chars[start..end].iter().collect())
        } else if c == '"' {
            let (s, e) = self.string_at(start)?;
            end = e;
            Tok::Str(s)
        } else if let Some(p) =
            PUNCTS.iter().find(|p| p.chars().enumerate().all(|(i, pc)| self.ch(start + i) == Some(pc)))
        {
            end = start + p.len();
            Tok::Punct(p)
        } else if c == '=' {
            return Err(self.err_at(start, "unexpected `=`: comparison is `==`"));
        } else {
            return Err(self.err_at(start, format!("unexpected character {c:?}")));
        };
        Ok((tok, start, end))
    }

    /// A `"..."` string starting at `start` (escapes: `\"`, `\\`, `\n`, `\t`); its value and end.
    pub(super) fn string_at(&self, start: usize) -> R<(String, usize)> {
        let mut s = String::new();
        let mut i = start + 1;
        loop {
            match self.ch(i) {
                None | Some('\n') => return Err(self.err_at(start, "unterminated string: expected a closing `\"`")),
                Some('"') => return Ok((s, i + 1)),
                Some('\\') => {
                    let e = match self.ch(i + 1) {
                        Some('"') => '"',
                        Some('\\') => '\\',
                        Some('n') => '\n',
                        Some('t') => '\t',
                        _ => return Err(self.err_at(i, "unknown escape: expected \\\", \\\\, \\n or \\t")),
                    };
                    s.push(e);
                    i += 2;
                }
                Some(c) => {
                    s.push(c);
                    i += 1;
                }
            }
        }
    }

    pub(super) fn bump(&mut self) -> R<(Tok, usize)> {
        let (t, start, end) = self.peek()?;
        self.pos = end;
        Ok((t, start))
    }

    pub(super) fn eat_punct(&mut self, p: &str) -> R<bool> {
        let (t, _, end) = self.peek()?;
        if t == Tok::Punct(punct(p)) {
            self.pos = end;
            return Ok(true);
        }
        Ok(false)
    }

    pub(super) fn expect_punct(&mut self, p: &str, what: &str) -> R<usize> {
        let (t, start, end) = self.peek()?;
        if t == Tok::Punct(punct(p)) {
            self.pos = end;
            return Ok(start);
        }
        Err(self.err_at(start, format!("expected `{p}` {what}, found {}", t.describe())))
    }

    pub(super) fn eat_keyword(&mut self, kw: &str) -> R<bool> {
        let (t, _, end) = self.peek()?;
        if matches!(&t, Tok::Ident(s) if s == kw) {
            self.pos = end;
            return Ok(true);
        }
        Ok(false)
    }
}
