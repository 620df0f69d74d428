//! The one bytecode every format compiles to: a typed reverse-Polish program over f64.
//!
//! Every value is an `f64`; comparisons and logical operators yield 1.0 or 0.0, and a value
//! is true when it is not 0 (NaN is true, as in perf's expr.y). A program's stack depth is
//! computed when it is compiled, so evaluation never grows a stack.

use super::ast::{BinOp, Expr, UnOp};

/// One instruction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// Push a constant.
    Const(f64),
    /// Push variable `slot` of the set (an event or an external constant).
    Load(u32),
    /// Push the value of definition `index` of the set (evaluated before this one).
    LoadDef(u32),
    /// Push 1 when variable `slot` has a value, else 0 (perf `has_event`).
    Defined(u32),
    Neg,
    Not,
    Add,
    Sub,
    Mul,
    /// a/b; b = 0 gives NaN and marks the evaluation as having divided by zero.
    Div,
    /// trunc(a) % trunc(b); b = 0 gives NaN.
    Rem,
    Lt,
    Gt,
    Le,
    Ge,
    Eq,
    Ne,
    And,
    Or,
    Xor,
    Min,
    Max,
    /// a/b, 0 when b = 0 (perf `d_ratio`).
    DRatio,
    /// Pops `otherwise`, `then`, `cond`; pushes `then` when cond != 0, else `otherwise`.
    Select,
}

impl Op {
    /// The token this op is written as in the RPN form.
    pub fn symbol(&self) -> &'static str {
        match self {
            Op::Const(_) | Op::Load(_) | Op::LoadDef(_) => "",
            Op::Defined(_) => "defined",
            Op::Neg => "neg",
            Op::Not => "!",
            Op::Add => "+",
            Op::Sub => "-",
            Op::Mul => "*",
            Op::Div => "/",
            Op::Rem => "%",
            Op::Lt => "<",
            Op::Gt => ">",
            Op::Le => "<=",
            Op::Ge => ">=",
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::And => "&",
            Op::Or => "or",
            Op::Xor => "^",
            Op::Min => "min",
            Op::Max => "max",
            Op::DRatio => "d_ratio",
            Op::Select => "select",
        }
    }
}

/// A compiled definition.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Program {
    pub ops: Vec<Op>,
    /// The deepest the stack gets while this program runs.
    pub max_stack: usize,
}

/// How a name in an expression resolves at compile time.
pub enum Resolved {
    Const(f64),
    Def(u32),
    Var(u32),
}

/// Compile `e`; `resolve` says what each name is.
pub fn compile(
    e: &Expr,
    resolve: &mut dyn FnMut(&str) -> Resolved,
    defined_slot: &mut dyn FnMut(&str) -> u32,
) -> Program {
    let mut p = Program::default();
    let mut depth = 0usize;
    emit(e, resolve, defined_slot, &mut p, &mut depth);
    p
}

fn push(p: &mut Program, depth: &mut usize, op: Op) {
    match op {
        Op::Const(_) | Op::Load(_) | Op::LoadDef(_) | Op::Defined(_) => *depth += 1,
        Op::Neg | Op::Not => {}
        Op::Select => *depth -= 2,
        _ => *depth -= 1,
    }
    p.max_stack = p.max_stack.max(*depth);
    p.ops.push(op);
}

fn emit(
    e: &Expr,
    resolve: &mut dyn FnMut(&str) -> Resolved,
    defined_slot: &mut dyn FnMut(&str) -> u32,
    p: &mut Program,
    depth: &mut usize,
) {
    match e {
        Expr::Num(v) => push(p, depth, Op::Const(*v)),
        Expr::Var { name, .. } => {
            let op = match resolve(name) {
                Resolved::Const(v) => Op::Const(v),
                Resolved::Def(i) => Op::LoadDef(i),
                Resolved::Var(s) => Op::Load(s),
            };
            push(p, depth, op)
        }
        Expr::Defined { name, .. } => {
            let s = defined_slot(name);
            push(p, depth, Op::Defined(s))
        }
        Expr::Unary(op, a) => {
            emit(a, resolve, defined_slot, p, depth);
            push(p, depth, if *op == UnOp::Neg { Op::Neg } else { Op::Not })
        }
        Expr::Binary(op, a, b) => {
            emit(a, resolve, defined_slot, p, depth);
            emit(b, resolve, defined_slot, p, depth);
            let o = match op {
                BinOp::Add => Op::Add,
                BinOp::Sub => Op::Sub,
                BinOp::Mul => Op::Mul,
                BinOp::Div => Op::Div,
                BinOp::Rem => Op::Rem,
                BinOp::Lt => Op::Lt,
                BinOp::Gt => Op::Gt,
                BinOp::Le => Op::Le,
                BinOp::Ge => Op::Ge,
                BinOp::Eq => Op::Eq,
                BinOp::Ne => Op::Ne,
                BinOp::And => Op::And,
                BinOp::Or => Op::Or,
                BinOp::Xor => Op::Xor,
                BinOp::Min => Op::Min,
                BinOp::Max => Op::Max,
                BinOp::DRatio => Op::DRatio,
            };
            push(p, depth, o)
        }
        Expr::Select {
            cond,
            then,
            otherwise,
        } => {
            emit(cond, resolve, defined_slot, p, depth);
            emit(then, resolve, defined_slot, p, depth);
            emit(otherwise, resolve, defined_slot, p, depth);
            push(p, depth, Op::Select)
        }
    }
}

#[inline(always)]
fn b(x: bool) -> f64 {
    if x {
        1.0
    } else {
        0.0
    }
}

#[inline(always)]
fn truthy(x: f64) -> bool {
    x != 0.0
}

#[inline(always)]
fn rem(a: f64, b: f64) -> f64 {
    let (a, b) = (a.trunc(), b.trunc());
    if b == 0.0 {
        f64::NAN
    } else {
        a % b
    }
}

#[inline(always)]
fn binop(op: Op, x: f64, y: f64) -> f64 {
    match op {
        Op::Add => x + y,
        Op::Sub => x - y,
        Op::Mul => x * y,
        Op::Div => {
            if y == 0.0 {
                f64::NAN
            } else {
                x / y
            }
        }
        Op::Rem => rem(x, y),
        Op::Lt => b(x < y),
        Op::Gt => b(x > y),
        Op::Le => b(x <= y),
        Op::Ge => b(x >= y),
        Op::Eq => b(x == y),
        Op::Ne => b(x != y),
        Op::And => b(truthy(x) && truthy(y)),
        Op::Or => b(truthy(x) || truthy(y)),
        Op::Xor => b(truthy(x) != truthy(y)),
        Op::Min => x.min(y),
        Op::Max => x.max(y),
        Op::DRatio => {
            if y == 0.0 {
                0.0
            } else {
                x / y
            }
        }
        _ => f64::NAN,
    }
}

/// What a scalar evaluation saw besides its value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    /// A plain `/` had a zero divisor.
    pub div_by_zero: bool,
}

impl Program {
    /// Evaluate on one set of values. `vars[slot]` is NaN for a missing variable;
    /// `present[slot]` says whether it has a value; `defs[i]` holds already evaluated
    /// definitions. `stack` is scratch space (reused across calls).
    pub fn eval(
        &self,
        vars: &[f64],
        present: &[bool],
        defs: &[f64],
        stack: &mut Vec<f64>,
        flags: &mut Flags,
    ) -> f64 {
        stack.clear();
        for &op in &self.ops {
            match op {
                Op::Const(v) => stack.push(v),
                Op::Load(s) => stack.push(vars[s as usize]),
                Op::LoadDef(d) => stack.push(defs[d as usize]),
                Op::Defined(s) => stack.push(b(present[s as usize])),
                Op::Neg => {
                    let x = stack.pop().unwrap_or(f64::NAN);
                    stack.push(-x)
                }
                Op::Not => {
                    let x = stack.pop().unwrap_or(f64::NAN);
                    stack.push(b(!truthy(x)))
                }
                Op::Select => {
                    let o = stack.pop().unwrap_or(f64::NAN);
                    let t = stack.pop().unwrap_or(f64::NAN);
                    let c = stack.pop().unwrap_or(f64::NAN);
                    stack.push(if truthy(c) { t } else { o })
                }
                _ => {
                    let y = stack.pop().unwrap_or(f64::NAN);
                    let x = stack.pop().unwrap_or(f64::NAN);
                    if op == Op::Div && y == 0.0 {
                        flags.div_by_zero = true;
                    }
                    stack.push(binop(op, x, y))
                }
            }
        }
        stack.pop().unwrap_or(f64::NAN)
    }

    /// Evaluate over `n` rows (`n <= CHUNK`) at once: `vars[slot]` and `defs[i]` are column
    /// chunks of at least `n` values. `stack` is scratch (`max_stack` chunks). Writes `out[..n]`.
    pub fn eval_chunk(
        &self,
        vars: &[&[f64]],
        present: &[bool],
        defs: &[&[f64]],
        n: usize,
        stack: &mut Vec<[f64; CHUNK]>,
        out: &mut [f64],
    ) {
        if stack.len() < self.max_stack.max(1) {
            stack.resize(self.max_stack.max(1), [0.0; CHUNK]);
        }
        let mut sp = 0usize;
        for &op in &self.ops {
            match op {
                Op::Const(v) => {
                    stack[sp][..n].fill(v);
                    sp += 1
                }
                Op::Load(s) => {
                    stack[sp][..n].copy_from_slice(&vars[s as usize][..n]);
                    sp += 1
                }
                Op::LoadDef(d) => {
                    stack[sp][..n].copy_from_slice(&defs[d as usize][..n]);
                    sp += 1
                }
                Op::Defined(s) => {
                    stack[sp][..n].fill(b(present[s as usize]));
                    sp += 1
                }
                Op::Neg => stack[sp - 1][..n].iter_mut().for_each(|x| *x = -*x),
                Op::Not => stack[sp - 1][..n]
                    .iter_mut()
                    .for_each(|x| *x = b(!truthy(*x))),
                Op::Select => {
                    let (lo, hi) = stack.split_at_mut(sp - 2);
                    let c = &mut lo[sp - 3];
                    let (t, o) = hi.split_at_mut(1);
                    for i in 0..n {
                        c[i] = if truthy(c[i]) { t[0][i] } else { o[0][i] };
                    }
                    sp -= 2
                }
                _ => {
                    let (lo, hi) = stack.split_at_mut(sp - 1);
                    let x = &mut lo[sp - 2][..n];
                    let y = &hi[0][..n];
                    match op {
                        Op::Add => x.iter_mut().zip(y).for_each(|(a, b)| *a += b),
                        Op::Sub => x.iter_mut().zip(y).for_each(|(a, b)| *a -= b),
                        Op::Mul => x.iter_mut().zip(y).for_each(|(a, b)| *a *= b),
                        Op::Div => x
                            .iter_mut()
                            .zip(y)
                            .for_each(|(a, &b)| *a = if b == 0.0 { f64::NAN } else { *a / b }),
                        _ => x
                            .iter_mut()
                            .zip(y)
                            .for_each(|(a, &b)| *a = binop(op, *a, b)),
                    }
                    sp -= 1
                }
            }
        }
        out[..n].copy_from_slice(&stack[0][..n]);
    }
}

/// Rows evaluated at once by [`Program::eval_chunk`].
pub const CHUNK: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(ops: Vec<Op>) -> Program {
        let mut p = Program::default();
        let mut d = 0;
        for o in ops {
            push(&mut p, &mut d, o);
        }
        p
    }

    #[test]
    fn stack_depth_is_computed() {
        // (a + b) * (c - d): depth 3 at most.
        let p = prog(vec![
            Op::Load(0),
            Op::Load(1),
            Op::Add,
            Op::Load(2),
            Op::Load(3),
            Op::Sub,
            Op::Mul,
        ]);
        assert_eq!(p.max_stack, 3);
        let mut f = Flags::default();
        let v = p.eval(
            &[1.0, 2.0, 5.0, 3.0],
            &[true; 4],
            &[],
            &mut Vec::new(),
            &mut f,
        );
        assert_eq!(v, 6.0);
        assert!(!f.div_by_zero);
    }

    #[test]
    fn division_flags_and_d_ratio() {
        let mut f = Flags::default();
        let p = prog(vec![Op::Const(1.0), Op::Const(0.0), Op::Div]);
        assert!(p.eval(&[], &[], &[], &mut Vec::new(), &mut f).is_nan());
        assert!(f.div_by_zero);
        let mut f = Flags::default();
        let p = prog(vec![Op::Const(1.0), Op::Const(0.0), Op::DRatio]);
        assert_eq!(p.eval(&[], &[], &[], &mut Vec::new(), &mut f), 0.0);
        assert!(!f.div_by_zero);
    }

    #[test]
    fn chunk_matches_scalar_with_select_and_defined() {
        let p = prog(vec![
            Op::Load(0),
            Op::Const(2.0),
            Op::Gt,
            Op::Load(0),
            Op::Defined(1),
            Op::Select,
            Op::Const(3.0),
            Op::Rem,
        ]);
        let a: Vec<f64> = (0..10).map(|i| i as f64 * 1.5).collect();
        let nan = vec![f64::NAN; 10];
        let mut out = vec![0.0; 10];
        p.eval_chunk(
            &[&a, &nan],
            &[true, false],
            &[],
            10,
            &mut Vec::new(),
            &mut out,
        );
        for i in 0..10 {
            let mut f = Flags::default();
            let s = p.eval(
                &[a[i], f64::NAN],
                &[true, false],
                &[],
                &mut Vec::new(),
                &mut f,
            );
            assert_eq!(s.to_bits(), out[i].to_bits(), "row {i}");
        }
        assert_eq!(out[3], 4.5f64.trunc() % 3.0);
        assert_eq!(out[0], 0.0);
    }
}
