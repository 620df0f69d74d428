//! Randomised tests with a fixed seed (no extra dependency): every parser returns a result
//! for any input, never panics; and random expressions evaluate through infix → bytecode and
//! through bytecode → PAPI RPN → bytecode exactly as an independent tree evaluator says.

use powerperf::events_dsl::{load_str, LoadOptions, Syntax};

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "A",
    "B",
    "x.y",
    "N0",
    "N9",
    "#",
    "#smt_on",
    "@",
    "cpu@X\\,c\\=1@",
    "1",
    "2.5",
    "1e",
    "1e-3",
    ".",
    "+",
    "-",
    "*",
    "/",
    "%",
    "|",
    "||",
    "&",
    "^",
    "<",
    ">=",
    "==",
    "!",
    "(",
    ")",
    ",",
    " ",
    "\t",
    "\n",
    "=",
    "if",
    "else",
    "min(",
    "max(",
    "d_ratio(",
    "has_event(",
    "#define ",
    "PRESET,",
    "CPU,",
    "DERIVED_POSTFIX,",
    "DERIVED_INFIX,",
    "NOT_DERIVED,",
    "EVENTSET\n",
    "METRICS\n",
    "LONG\n",
    "PMC0 ",
    "[MB/s] ",
    "\"",
    "'",
    "\\",
    "é",
    "\u{3000}",
    "名",
    "[",
    "]",
    "{",
    "}",
    "\"MetricExpr\": ",
    "\"MetricName\": ",
    ":",
];

#[test]
fn parsers_never_panic_on_random_input() {
    let mut r = Lcg(42);
    let syntaxes = [
        Syntax::PapiUser,
        Syntax::PapiCsv,
        Syntax::PerfExpert,
        Syntax::Likwid,
        Syntax::PerfJson,
        Syntax::Infix,
    ];
    for case in 0..20_000 {
        let n = 1 + r.below(30);
        let text: String = (0..n).map(|_| PIECES[r.below(PIECES.len())]).collect();
        let syntax = syntaxes[case % syntaxes.len()];
        for s in [Some(syntax), None] {
            if let Ok(set) = load_str(&text, "fuzz.txt", s, &LoadOptions::default()) {
                let _ = set.evaluate(&|_| Some(1.0));
                for i in 0..set.definitions.len() {
                    let _ = set.rpn(i);
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
enum T {
    Num(f64),
    Var(usize),
    Neg(Box<T>),
    Bin(char, Box<T>, Box<T>),
    Sel(Box<T>, Box<T>, Box<T>),
    Fun(&'static str, Box<T>, Box<T>),
}

const VARS: &[&str] = &["A", "B", "C_1", "d.e"];
const VALS: &[f64] = &[3.0, -2.5, 0.0, 7.25];

fn gen(r: &mut Lcg, depth: usize, full: bool) -> T {
    if depth == 0 || r.below(4) == 0 {
        return if r.below(2) == 0 {
            T::Num([0.0, 1.0, 2.0, 0.5, 10.0][r.below(5)])
        } else {
            T::Var(r.below(VARS.len()))
        };
    }
    let ops: &[char] = if full {
        &['+', '-', '*', '/', '<', '>', '&', '|']
    } else {
        &['+', '-', '*', '/']
    };
    match if full { r.below(5) } else { 0 } {
        1 => T::Neg(Box::new(gen(r, depth - 1, full))),
        2 => T::Sel(
            Box::new(gen(r, depth - 1, full)),
            Box::new(gen(r, depth - 1, full)),
            Box::new(gen(r, depth - 1, full)),
        ),
        3 => T::Fun(
            ["min", "max", "d_ratio"][r.below(3)],
            Box::new(gen(r, depth - 1, full)),
            Box::new(gen(r, depth - 1, full)),
        ),
        _ => T::Bin(
            ops[r.below(ops.len())],
            Box::new(gen(r, depth - 1, full)),
            Box::new(gen(r, depth - 1, full)),
        ),
    }
}

/// Fully parenthesised infix.
fn infix(t: &T) -> String {
    match t {
        T::Num(v) => format!("{v:?}"),
        T::Var(i) => VARS[*i].to_string(),
        T::Neg(a) => format!("(-{})", infix(a)),
        T::Bin(op, a, b) => format!("({} {op} {})", infix(a), infix(b)),
        T::Sel(c, a, b) => format!("({} if {} else {})", infix(a), infix(c), infix(b)),
        T::Fun(f, a, b) => format!("{f}({}, {})", infix(a), infix(b)),
    }
}

/// The reference: a tree evaluator written from the documented semantics.
fn value(t: &T) -> f64 {
    let b = |x: bool| if x { 1.0 } else { 0.0 };
    match t {
        T::Num(v) => *v,
        T::Var(i) => VALS[*i],
        T::Neg(a) => -value(a),
        T::Bin(op, a, c) => {
            let (x, y) = (value(a), value(c));
            match op {
                '+' => x + y,
                '-' => x - y,
                '*' => x * y,
                '/' => {
                    if y == 0.0 {
                        f64::NAN
                    } else {
                        x / y
                    }
                }
                '<' => b(x < y),
                '>' => b(x > y),
                '&' => b(x != 0.0 && y != 0.0),
                _ => b(x != 0.0 || y != 0.0),
            }
        }
        T::Sel(c, a, e) => {
            if value(c) != 0.0 {
                value(a)
            } else {
                value(e)
            }
        }
        T::Fun(f, a, c) => {
            let (x, y) = (value(a), value(c));
            match *f {
                "min" => x.min(y),
                "max" => x.max(y),
                _ => {
                    if y == 0.0 {
                        0.0
                    } else {
                        x / y
                    }
                }
            }
        }
    }
}

fn lookup(n: &str) -> Option<f64> {
    VARS.iter().position(|v| *v == n).map(|i| VALS[i])
}

fn same(a: Option<f64>, b: f64) -> bool {
    match a {
        Some(x) => x.to_bits() == b.to_bits() || (x == 0.0 && b == 0.0),
        None => !b.is_finite(),
    }
}

#[test]
fn random_infix_matches_tree_evaluator() {
    let mut r = Lcg(7);
    for _ in 0..3000 {
        let t = gen(&mut r, 6, true);
        let src = format!("x = {}\n", infix(&t));
        let set = load_str(&src, "r.txt", Some(Syntax::Infix), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{src}: {e}"));
        let got = set.evaluate(&lookup)[0].value;
        assert!(
            same(got, value(&t)),
            "{src}: bytecode {got:?}, tree {}",
            value(&t)
        );
    }
}

#[test]
fn rpn_form_round_trips_through_papi_user_events() {
    let mut r = Lcg(11);
    for _ in 0..3000 {
        let t = gen(&mut r, 7, false);
        let set = load_str(
            &format!("x = {}\n", infix(&t)),
            "r.txt",
            Some(Syntax::Infix),
            &LoadOptions::default(),
        )
        .unwrap();
        let rpn = set.rpn(0);
        let back = load_str(
            &format!("x, {rpn}|\n"),
            "r.txt",
            Some(Syntax::PapiUser),
            &LoadOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{rpn}: {e}"));
        assert_eq!(back.rpn(0), rpn, "RPN is stable");
        assert_eq!(back.definitions[0].program, set.definitions[0].program);
        let got = back.evaluate(&lookup)[0].value;
        assert!(same(got, value(&t)), "{rpn}: {got:?} vs {}", value(&t));
    }
}
