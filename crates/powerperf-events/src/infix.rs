//! Infix formulas: the grammar shared by plain infix files, PerfExpert `lcpi.properties`,
//! LIKWID `METRICS` and Linux perf `MetricExpr` (tools/perf/util/expr.y and expr.l).
//!
//! Precedence, lowest first (as perf's expr.y): `A if C else B` (right-associative, allowed at
//! the top, inside parentheses and as a function argument), `|`, `^`, `&`, comparisons
//! (`< > <= >= == !=`), `+ -`, `* / %`, unary `-` and `!`. Functions: `min(a,b)`,
//! `max(a,b)`, `d_ratio(a,b)` and, in perf, `has_event(E)`, `source_count(E)`,
//! `strcmp_cpuid_str(S)`.

use super::ast::{BinOp, Expr, UnOp};
use super::error::{DslError, Pos};
use super::MAX_DEPTH;

/// Which tool's lexical rules apply to names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Plain infix, PerfExpert and LIKWID: names `[A-Za-z_][A-Za-z0-9_.:]*`, `\x` escapes one
    /// character (so `branch\-misses` names the perf event `branch-misses`).
    Plain,
    /// Linux perf expr.l: names of `[0-9a-zA-Z_.:@?]` and `\-`, `\,`, `\=` escapes;
    /// `#literal`s such as `#smt_on`; `^` is logical exclusive or.
    Perf,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Name(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
    If,
    Else,
    Eof,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    /// Char index of the token in the formula.
    at: usize,
    /// The token as written.
    text: String,
}

fn is_plain_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}
fn is_plain_cont(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == ':'
}
fn is_perf_sym(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '@' | '?')
}

/// The end of the number that starts at `chars[i]`: digits, an optional fraction, and an
/// exponent (`e`, optional sign, digits) where one follows.
fn number_end(chars: &[char], i: usize) -> usize {
    let mut j = i;
    while j < chars.len() && chars[j].is_ascii_digit() {
        j += 1;
    }
    if j < chars.len() && chars[j] == '.' {
        j += 1;
        while j < chars.len() && chars[j].is_ascii_digit() {
            j += 1;
        }
    }
    if j < chars.len() && (chars[j] == 'e' || chars[j] == 'E') {
        let mut k = j + 1;
        if k < chars.len() && (chars[k] == '-' || chars[k] == '+') {
            k += 1;
        }
        if k < chars.len() && chars[k].is_ascii_digit() {
            while k < chars.len() && chars[k].is_ascii_digit() {
                k += 1;
            }
            j = k;
        }
    }
    j
}

fn lex(
    text: &str,
    dialect: Dialect,
    locate: &dyn Fn(usize) -> Pos,
) -> Result<Vec<Token>, DslError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let err = |at: usize, msg: &str, tok: String, hint: Option<&str>| {
        DslError::syntax(locate(at), msg, tok, hint)
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        // Names (and perf symbols, which may start with a digit).
        let name_start = match dialect {
            Dialect::Plain => is_plain_start(c) || c == '\\',
            Dialect::Perf => is_perf_sym(c) || c == '\\' || c == '#',
        };
        let number_start = c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()));
        if number_start {
            let j = number_end(&chars, i);
            let follows_name = chars.get(j).is_some_and(|&d| match dialect {
                Dialect::Plain => is_plain_cont(d),
                Dialect::Perf => is_perf_sym(d) || d == '\\',
            });
            if !follows_name {
                let s: String = chars[i..j].iter().collect();
                let v: f64 = s
                    .parse()
                    .map_err(|_| err(i, "malformed number", s.clone(), None))?;
                out.push(Token {
                    tok: Tok::Num(v),
                    at: start,
                    text: s,
                });
                i = j;
                continue;
            }
            if dialect == Dialect::Plain {
                let mut k = j;
                while k < chars.len() && is_plain_cont(chars[k]) {
                    k += 1;
                }
                let s: String = chars[i..k].iter().collect();
                return Err(err(
                    i,
                    "a name cannot start with a digit",
                    s,
                    Some("write `2*x`, not `2x`"),
                ));
            }
            // perf: a symbol that starts with digits, e.g. `0x1a@`.
        }
        if name_start || number_start {
            let mut name = String::new();
            let mut j = i;
            if dialect == Dialect::Perf && chars[j] == '#' {
                name.push('#');
                j += 1;
                while j < chars.len()
                    && (chars[j].is_ascii_alphanumeric() || matches!(chars[j], '_' | '.' | '-'))
                {
                    name.push(chars[j]);
                    j += 1;
                }
                if name.len() == 1 {
                    return Err(err(
                        i,
                        "`#` must start a literal such as",
                        "#smt_on".into(),
                        Some("perf literals are #smt_on, #num_cpus, #slots, …"),
                    ));
                }
                // perf compares literals without regard to case (`#SMT_on` is `#smt_on`).
                out.push(Token {
                    tok: Tok::Name(name.to_ascii_lowercase()),
                    at: start,
                    text: name,
                });
                i = j;
                continue;
            }
            loop {
                if j >= chars.len() {
                    break;
                }
                let d = chars[j];
                if d == '\\' {
                    match chars.get(j + 1) {
                        Some(&e) if !e.is_whitespace() => {
                            name.push(e);
                            j += 2;
                        }
                        _ => {
                            return Err(err(
                                j,
                                "a backslash must escape a character",
                                "\\".into(),
                                None,
                            ))
                        }
                    }
                    continue;
                }
                let ok = match dialect {
                    Dialect::Plain => is_plain_cont(d),
                    Dialect::Perf => is_perf_sym(d),
                };
                if !ok {
                    break;
                }
                name.push(d);
                j += 1;
            }
            let text: String = chars[i..j].iter().collect();
            let tok = match name.as_str() {
                "if" => Tok::If,
                "else" => Tok::Else,
                _ => Tok::Name(name),
            };
            out.push(Token {
                tok,
                at: start,
                text,
            });
            i = j;
            continue;
        }
        let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
        let (tok, len) = match two.as_str() {
            "<=" => (Tok::Op("<="), 2),
            ">=" => (Tok::Op(">="), 2),
            "==" => (Tok::Op("=="), 2),
            "!=" => (Tok::Op("!="), 2),
            "&&" => (Tok::Op("&"), 2),
            "||" => (Tok::Op("|"), 2),
            _ => match c {
                '+' => (Tok::Op("+"), 1),
                '-' => (Tok::Op("-"), 1),
                '*' => (Tok::Op("*"), 1),
                '/' => (Tok::Op("/"), 1),
                '%' => (Tok::Op("%"), 1),
                '<' => (Tok::Op("<"), 1),
                '>' => (Tok::Op(">"), 1),
                '&' => (Tok::Op("&"), 1),
                '|' => (Tok::Op("|"), 1),
                '!' => (Tok::Op("!"), 1),
                '^' if dialect == Dialect::Perf => (Tok::Op("^"), 1),
                '^' => {
                    return Err(err(
                        i,
                        "unexpected token",
                        "^".into(),
                        Some("`^` is only perf's logical xor; powers are not supported"),
                    ))
                }
                '(' => (Tok::LParen, 1),
                ')' => (Tok::RParen, 1),
                ',' => (Tok::Comma, 1),
                _ => return Err(err(i, "unexpected character", c.to_string(), None)),
            },
        };
        let text: String = chars[i..i + len].iter().collect();
        out.push(Token {
            tok,
            at: start,
            text,
        });
        i += len;
    }
    out.push(Token {
        tok: Tok::Eof,
        at: chars.len(),
        text: "end of formula".into(),
    });
    Ok(out)
}

struct Parser<'a> {
    toks: Vec<Token>,
    i: usize,
    locate: &'a dyn Fn(usize) -> Pos,
    dialect: Dialect,
}

type P = (Expr, usize);

fn bin(op: BinOp, a: P, b: P) -> P {
    (
        Expr::Binary(op, Box::new(a.0), Box::new(b.0)),
        1 + a.1.max(b.1),
    )
}

impl<'a> Parser<'a> {
    fn peek(&self) -> &Token {
        &self.toks[self.i]
    }
    fn next(&mut self) -> Token {
        let t = self.toks[self.i].clone();
        if self.i + 1 < self.toks.len() {
            self.i += 1;
        }
        t
    }
    fn err(&self, t: &Token, msg: &str, hint: Option<&str>) -> DslError {
        DslError::syntax((self.locate)(t.at), msg, t.text.clone(), hint)
    }
    fn check_depth(&self, p: P, at: usize, text: &str) -> Result<P, DslError> {
        if p.1 > MAX_DEPTH {
            return Err(DslError::TooDeep {
                pos: (self.locate)(at),
                token: text.to_string(),
                limit: MAX_DEPTH,
            });
        }
        Ok(p)
    }
    fn expect(&mut self, want: Tok, what: &str) -> Result<Token, DslError> {
        let t = self.next();
        if t.tok != want {
            return Err(self.err(&t, &format!("expected {what}, found"), None));
        }
        Ok(t)
    }

    /// if_expr := expr [ 'if' expr 'else' if_expr ]
    fn if_expr(&mut self, depth: usize) -> Result<P, DslError> {
        let t0 = self.peek().clone();
        if depth > MAX_DEPTH {
            return Err(DslError::TooDeep {
                pos: (self.locate)(t0.at),
                token: t0.text,
                limit: MAX_DEPTH,
            });
        }
        let then = self.binary(0, depth + 1)?;
        if self.peek().tok == Tok::If {
            self.next();
            let cond = self.binary(0, depth + 1)?;
            let t = self.peek().clone();
            if t.tok != Tok::Else {
                return Err(self.err(
                    &t,
                    "expected `else`, found",
                    Some("write `A if COND else B`"),
                ));
            }
            self.next();
            let other = self.if_expr(depth + 1)?;
            let d = 1 + then.1.max(cond.1).max(other.1);
            let e = Expr::Select {
                cond: Box::new(cond.0),
                then: Box::new(then.0),
                otherwise: Box::new(other.0),
            };
            return self.check_depth((e, d), t0.at, &t0.text);
        }
        Ok(then)
    }

    fn prec(tok: &Tok) -> Option<(usize, BinOp)> {
        let Tok::Op(o) = tok else { return None };
        Some(match *o {
            "|" => (1, BinOp::Or),
            "^" => (2, BinOp::Xor),
            "&" => (3, BinOp::And),
            "<" => (4, BinOp::Lt),
            ">" => (4, BinOp::Gt),
            "<=" => (4, BinOp::Le),
            ">=" => (4, BinOp::Ge),
            "==" => (4, BinOp::Eq),
            "!=" => (4, BinOp::Ne),
            "+" => (5, BinOp::Add),
            "-" => (5, BinOp::Sub),
            "*" => (6, BinOp::Mul),
            "/" => (6, BinOp::Div),
            "%" => (6, BinOp::Rem),
            _ => return None,
        })
    }

    /// Precedence climbing over the left-associative binary operators.
    fn binary(&mut self, min_prec: usize, depth: usize) -> Result<P, DslError> {
        let mut lhs = self.unary(depth + 1)?;
        while let Some((p, op)) = Self::prec(&self.peek().tok) {
            if p < min_prec {
                break;
            }
            let t = self.next();
            let rhs = self.binary(p + 1, depth + 1)?;
            lhs = self.check_depth(bin(op, lhs, rhs), t.at, &t.text)?;
        }
        Ok(lhs)
    }

    fn unary(&mut self, depth: usize) -> Result<P, DslError> {
        let t = self.peek().clone();
        if depth > MAX_DEPTH {
            return Err(DslError::TooDeep {
                pos: (self.locate)(t.at),
                token: t.text,
                limit: MAX_DEPTH,
            });
        }
        match t.tok {
            Tok::Op("-") | Tok::Op("!") | Tok::Op("+") => {
                self.next();
                let a = self.unary(depth + 1)?;
                let e = match t.tok {
                    Tok::Op("-") => Expr::Unary(UnOp::Neg, Box::new(a.0)),
                    Tok::Op("!") => Expr::Unary(UnOp::Not, Box::new(a.0)),
                    _ => return Ok(a),
                };
                Ok((e, a.1 + 1))
            }
            _ => self.primary(depth + 1),
        }
    }

    fn primary(&mut self, depth: usize) -> Result<P, DslError> {
        let t = self.next();
        match &t.tok {
            Tok::Num(v) => Ok((Expr::Num(*v), 1)),
            Tok::LParen => {
                let e = self.if_expr(depth + 1)?;
                self.expect(Tok::RParen, "`)`")?;
                Ok(e)
            }
            Tok::Name(n) if self.peek().tok == Tok::LParen => self.call(n.clone(), &t, depth),
            Tok::Name(n) => Ok((
                Expr::Var {
                    name: n.clone(),
                    pos: (self.locate)(t.at),
                },
                1,
            )),
            Tok::Eof => Err(self.err(
                &t,
                "formula ends where a value is expected:",
                Some("an operand is missing"),
            )),
            _ => Err(self.err(
                &t,
                "unexpected token",
                Some("expected a number, a name or `(`"),
            )),
        }
    }

    fn call(&mut self, f: String, t: &Token, depth: usize) -> Result<P, DslError> {
        self.next(); // (
        let lower = f.to_ascii_lowercase();
        match lower.as_str() {
            "min" | "max" | "d_ratio" => {
                let a = self.if_expr(depth + 1)?;
                self.expect(Tok::Comma, "`,` between the two arguments")?;
                let b = self.if_expr(depth + 1)?;
                self.expect(Tok::RParen, "`)` after the two arguments")?;
                let op = match lower.as_str() {
                    "min" => BinOp::Min,
                    "max" => BinOp::Max,
                    _ => BinOp::DRatio,
                };
                self.check_depth(bin(op, a, b), t.at, &t.text)
            }
            "has_event" | "source_count" | "strcmp_cpuid_str" if self.dialect == Dialect::Perf => {
                let arg = self.next();
                let Tok::Name(n) = arg.tok.clone() else {
                    return Err(self.err(&arg, &format!("{f}() takes an event name, found"), None));
                };
                self.expect(Tok::RParen, "`)`")?;
                let pos = (self.locate)(arg.at);
                let e = match lower.as_str() {
                    // A run total aggregates its sources into one value: one source when the
                    // event is present, none when it is absent.
                    "has_event" | "source_count" => Expr::Defined { name: n, pos },
                    _ => Expr::Var { name: format!("strcmp_cpuid_str({n})"), pos },
                };
                Ok((e, 1))
            }
            _ => Err(self.err(t, "unknown function", Some("functions are min, max, d_ratio (and in perf metrics has_event, source_count, strcmp_cpuid_str)"))),
        }
    }
}

/// Parse one infix formula. `locate` maps a char index in `text` to its place in the file.
///
/// # Errors
/// [`DslError::Syntax`] with the position and token; [`DslError::TooDeep`] past
/// [`MAX_DEPTH`].
pub fn parse(
    text: &str,
    dialect: Dialect,
    locate: &dyn Fn(usize) -> Pos,
) -> Result<Expr, DslError> {
    let toks = lex(text, dialect, locate)?;
    let mut p = Parser {
        toks,
        i: 0,
        locate,
        dialect,
    };
    let (e, _) = p.if_expr(0)?;
    let t = p.peek().clone();
    if t.tok != Tok::Eof {
        return Err(p.err(
            &t,
            "unexpected token",
            Some("an operator is missing before it, or a `(` is unbalanced"),
        ));
    }
    Ok(e)
}

/// A `locate` for a formula that starts at `line`, column `col0` (1-based) of `file`.
pub fn at_line(file: &str, line: usize, col0: usize) -> impl Fn(usize) -> Pos + '_ {
    move |i| Pos {
        file: file.to_string(),
        line,
        col: col0 + i,
    }
}
