//! The syntax tree every format parses into, before it is compiled to bytecode.

use super::error::Pos;

/// Unary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `!x`: 1 when x is 0, else 0.
    Not,
}

/// Binary operators. Comparisons and logic yield 1.0 or 0.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// Plain division: x/0 is NaN and is reported as a division by zero.
    Div,
    /// Remainder of the operands truncated to integers (as perf's `%`); x%0 is NaN.
    Rem,
    Lt,
    Gt,
    Le,
    Ge,
    Eq,
    Ne,
    /// Logical and (perf `&`): 1 when both are non-zero.
    And,
    /// Logical or (perf `|`): 1 when either is non-zero.
    Or,
    /// Logical exclusive or (perf `^`).
    Xor,
    /// `min(a, b)`
    Min,
    /// `max(a, b)`
    Max,
    /// perf's `d_ratio(a, b)`: a/b, and 0 when b is 0.
    DRatio,
}

/// An expression. Names are resolved when the set is compiled: a name is a constant of the
/// file, another definition of the set, or an event/external constant looked up at evaluation.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Num(f64),
    Var {
        name: String,
        pos: Pos,
    },
    /// 1 when the named event has a value, else 0 (perf `has_event`).
    Defined {
        name: String,
        pos: Pos,
    },
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `then if cond else otherwise`.
    Select {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
}

impl Expr {
    /// Every name the expression refers to, in order of first appearance.
    pub fn names(&self, out: &mut Vec<String>) {
        match self {
            Expr::Num(_) => {}
            Expr::Var { name, .. } | Expr::Defined { name, .. } => {
                if !out.contains(name) {
                    out.push(name.clone())
                }
            }
            Expr::Unary(_, a) => a.names(out),
            Expr::Binary(_, a, b) => {
                a.names(out);
                b.names(out)
            }
            Expr::Select {
                cond,
                then,
                otherwise,
            } => {
                cond.names(out);
                then.names(out);
                otherwise.names(out)
            }
        }
    }

    /// Rename every variable through `f` (e.g. LIKWID counter registers to their events).
    pub fn rename(&mut self, f: &dyn Fn(&str) -> Option<String>) {
        match self {
            Expr::Num(_) => {}
            Expr::Var { name, .. } | Expr::Defined { name, .. } => {
                if let Some(n) = f(name) {
                    *name = n
                }
            }
            Expr::Unary(_, a) => a.rename(f),
            Expr::Binary(_, a, b) => {
                a.rename(f);
                b.rename(f)
            }
            Expr::Select {
                cond,
                then,
                otherwise,
            } => {
                cond.rename(f);
                then.rename(f);
                otherwise.rename(f)
            }
        }
    }
}
