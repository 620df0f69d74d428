//! Property tests (proptest; failures shrink to a minimal input and are kept in
//! `tests/events_random.proptest-regressions`): every parser returns a result for any input,
//! never panics; and random expressions evaluate through infix → bytecode and through
//! bytecode → PAPI RPN → bytecode exactly as an independent tree evaluator says.

use powerperf_events::{load_str, LoadOptions, Syntax};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

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

const SYNTAXES: [Syntax; 6] = Syntax::ALL;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// Any text made of the pieces the grammars care about gets a result from every parser,
    /// with its syntax given and found from the text: never a panic or unbounded recursion.
    #[test]
    fn parsers_never_panic_on_random_input(
        pieces in prop::collection::vec(prop::sample::select(PIECES), 1..31),
        syntax in prop::sample::select(SYNTAXES.to_vec()),
    ) {
        let text: String = pieces.concat();
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

/// Expression trees: numbers and variables at the leaves; with `full`, every operator,
/// unary minus, `A if C else B`, min, max and d_ratio (perf's metric expression grammar).
fn tree(full: bool) -> impl Strategy<Value = T> {
    let leaf = prop_oneof![
        prop::sample::select(vec![0.0, 1.0, 2.0, 0.5, 10.0]).prop_map(T::Num),
        (0..VARS.len()).prop_map(T::Var),
    ];
    leaf.prop_recursive(6, 64, 3, move |inner| {
        let ops: Vec<char> = if full {
            vec!['+', '-', '*', '/', '<', '>', '&', '|']
        } else {
            vec!['+', '-', '*', '/']
        };
        let bin = (prop::sample::select(ops), inner.clone(), inner.clone())
            .prop_map(|(op, a, b)| T::Bin(op, Box::new(a), Box::new(b)));
        if !full {
            return bin.boxed();
        }
        prop_oneof![
            3 => bin,
            1 => inner.clone().prop_map(|a| T::Neg(Box::new(a))),
            1 => (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(c, a, b)| T::Sel(Box::new(c), Box::new(a), Box::new(b))),
            1 => (prop::sample::select(vec!["min", "max", "d_ratio"]), inner.clone(), inner)
                .prop_map(|(f, a, b)| T::Fun(f, Box::new(a), Box::new(b))),
        ]
        .boxed()
    })
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Any expression tree, printed as infix and compiled, evaluates as the tree evaluator
    /// written from the documented semantics says.
    #[test]
    fn random_infix_matches_tree_evaluator(t in tree(true)) {
        let src = format!("x = {}\n", infix(&t));
        let set = load_str(&src, "r.txt", Some(Syntax::Infix), &LoadOptions::default())
            .map_err(|e| TestCaseError::fail(format!("{src}: {e}")))?;
        let got = set.evaluate(&lookup)[0].value;
        prop_assert!(same(got, value(&t)), "{}: bytecode {:?}, tree {}", src, got, value(&t));
    }

    /// The RPN form `events check` prints is a PAPI user event that compiles to the same
    /// bytecode and value (round trip infix → RPN → PAPI user events).
    #[test]
    fn rpn_form_round_trips_through_papi_user_events(t in tree(false)) {
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
        .map_err(|e| TestCaseError::fail(format!("{rpn}: {e}")))?;
        prop_assert_eq!(back.rpn(0), rpn.clone(), "RPN is stable");
        prop_assert_eq!(&back.definitions[0].program, &set.definitions[0].program);
        let got = back.evaluate(&lookup)[0].value;
        prop_assert!(same(got, value(&t)), "{}: {:?} vs {}", rpn, got, value(&t));
    }
}
