//! Each definition format on tiny exact cases, error positions, and evaluation semantics.

use powerperf_events::{load_str, DslError, LoadOptions, Problem, Syntax, MAX_DEPTH};

fn opts() -> LoadOptions {
    LoadOptions::default()
}

fn eval(
    text: &str,
    file: &str,
    syntax: Option<Syntax>,
    vals: &[(&str, f64)],
) -> Vec<(String, Option<f64>, Option<Problem>)> {
    let set = load_str(text, file, syntax, &opts()).unwrap_or_else(|e| panic!("{e}"));
    set.evaluate(&|n: &str| vals.iter().find(|(k, _)| *k == n).map(|(_, v)| *v))
        .into_iter()
        .map(|v| (v.name, v.value, v.problem))
        .collect()
}

fn err(text: &str, file: &str, syntax: Option<Syntax>) -> DslError {
    match load_str(text, file, syntax, &opts()) {
        Ok(_) => panic!("expected an error for {text:?}"),
        Err(e) => e,
    }
}

const PAPI_USER: &str = "\
# Moore 2012 branch category, PAPI user-defined events
#define BR_lat 2
#define BR_miss_lat 12
Branch_cat, PAPI_BR_INS|BR_lat|*|PAPI_BR_MSP|BR_miss_lat|*|+|PAPI_TOT_INS|/
Twice, Branch_cat|2|*|
";

#[test]
fn papi_user_events_rpn_constants_and_references() {
    let set = load_str(PAPI_USER, "defs.txt", None, &opts()).unwrap();
    assert_eq!(set.syntax, Syntax::PapiUser);
    assert_eq!(
        set.rpn(0),
        "PAPI_BR_INS|2|*|PAPI_BR_MSP|12|*|+|PAPI_TOT_INS|/"
    );
    assert_eq!(set.rpn(1), "def:Branch_cat|2|*");
    assert_eq!(
        set.definitions[0].file_constants,
        vec!["BR_lat", "BR_miss_lat"]
    );
    let v = eval(
        PAPI_USER,
        "defs.txt",
        None,
        &[
            ("PAPI_BR_INS", 100.0),
            ("PAPI_BR_MSP", 10.0),
            ("PAPI_TOT_INS", 1000.0),
        ],
    );
    // (100*2 + 10*12) / 1000 = 0.32, evaluated in f64 (PAPI would truncate to 0).
    assert_eq!(v[0].1, Some(0.32));
    assert_eq!(v[1].1, Some(0.64));
}

#[test]
fn papi_user_error_names_line_column_and_token() {
    let e = err("#define A 1\nX, PAPI_TOT_INS|A|+|*|\n", "defs.txt", None);
    assert_eq!(
        e.to_string(),
        "defs.txt:2:21: unexpected token `*|`: `*` needs two values before it, the stack holds 1"
    );
    let e = err("X, A|B\n", "defs.txt", Some(Syntax::PapiUser));
    assert!(
        e.to_string()
            .starts_with("defs.txt:1:6: the formula leaves 2 values on the stack after `B`"),
        "{e}"
    );
    let e = err("X, A||B|+\n", "defs.txt", Some(Syntax::PapiUser));
    assert!(
        e.to_string().starts_with("defs.txt:1:6: empty token `|`"),
        "{e}"
    );
    let e = err("#define A x1\n", "defs.txt", Some(Syntax::PapiUser));
    assert!(
        e.to_string()
            .starts_with("defs.txt:1:11: a #define value must be a number, found `x1`"),
        "{e}"
    );
    let e = err("X, A|1|+\nX, A\n", "defs.txt", Some(Syntax::PapiUser));
    assert!(matches!(e, DslError::Duplicate { .. }), "{e}");
}

#[test]
fn cycles_between_user_events_are_errors() {
    let e = err(
        "A, B|1|+\nB, C|2|*\nC, A\n",
        "cyc.txt",
        Some(Syntax::PapiUser),
    );
    let DslError::Cycle { cycle, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(cycle.len(), 4, "{e}");
    assert!(
        e.to_string().contains("A -> B -> C -> A")
            || e.to_string().contains("B -> C -> A -> B")
            || e.to_string().contains("C -> A -> B -> C"),
        "{e}"
    );
    let e = err("A = A + 1\n", "self.txt", Some(Syntax::Infix));
    assert_eq!(
        e.to_string(),
        "self.txt:1:1: definition `A` depends on itself: A -> A"
    );
}

#[test]
fn infix_named_and_bare_formulas() {
    let text = "Branch = (BR_INS*BR_lat + BR_MSP*BR_miss_lat)/TOT_INS\nBR_INS / TOT_INS\n";
    let set = load_str(text, "f.txt", None, &opts()).unwrap();
    assert_eq!(set.syntax, Syntax::Infix);
    assert_eq!(set.definitions[0].name, "Branch");
    assert_eq!(
        set.definitions[1].name, "BR_INS / TOT_INS",
        "a bare formula is named by its text"
    );
    assert_eq!(
        set.rpn(0),
        "BR_INS|BR_lat|*|BR_MSP|BR_miss_lat|*|+|TOT_INS|/"
    );
    let v = eval(
        text,
        "f.txt",
        None,
        &[
            ("BR_INS", 10.0),
            ("BR_lat", 2.0),
            ("BR_MSP", 1.0),
            ("BR_miss_lat", 20.0),
            ("TOT_INS", 40.0),
        ],
    );
    assert_eq!(v[0].1, Some(1.0));
    assert_eq!(v[1].1, Some(0.25));
}

#[test]
fn infix_precedence_and_operators() {
    let cases: &[(&str, f64)] = &[
        ("1 + 2 * 3", 7.0),
        ("(1 + 2) * 3", 9.0),
        ("-2 * 3", -6.0),
        ("2 - 3 - 4", -5.0),
        ("8 / 4 / 2", 1.0),
        ("7 % 4", 3.0),
        ("1 < 2", 1.0),
        ("2 >= 3", 0.0),
        ("1 == 1 & 0 == 1", 0.0),
        ("1 | 0", 1.0),
        ("min(3, 4) + max(3, 4)", 7.0),
        ("d_ratio(1, 0)", 0.0),
        ("d_ratio(1, 4)", 0.25),
        ("1.E-06 * 2e6", 2.0),
        ("10 if 0 else 20 if 1 else 30", 20.0),
        ("!0", 1.0),
    ];
    for (src, want) in cases {
        let text = format!("x = {src}\n");
        let v = eval(&text, "p.txt", Some(Syntax::Infix), &[]);
        assert_eq!(v[0].1, Some(*want), "{src}");
    }
}

#[test]
fn division_by_zero_is_nan_and_reported() {
    let v = eval(
        "r = A / B\n",
        "d.txt",
        Some(Syntax::Infix),
        &[("A", 1.0), ("B", 0.0)],
    );
    assert_eq!(v[0].1, None);
    assert_eq!(v[0].2, Some(Problem::DivisionByZero));
    let v = eval("r = A / B\n", "d.txt", Some(Syntax::Infix), &[("A", 1.0)]);
    assert_eq!(v[0].2, Some(Problem::Missing(vec!["B".into()])));
}

#[test]
fn infix_error_positions() {
    let e = err("ok = 1\nx = (A + 2*)/B\n", "defs.txt", Some(Syntax::Infix));
    assert_eq!(
        e.to_string(),
        "defs.txt:2:12: unexpected token `)`: expected a number, a name or `(`"
    );
    let e = err("x = A + 2x\n", "defs.txt", Some(Syntax::Infix));
    assert!(
        e.to_string()
            .starts_with("defs.txt:1:9: a name cannot start with a digit `2x`"),
        "{e}"
    );
    let e = err("x = (A + B\n", "defs.txt", Some(Syntax::Infix));
    assert!(
        e.to_string()
            .starts_with("defs.txt:1:11: expected `)`, found `end of formula`"),
        "{e}"
    );
    let e = err("x = foo(A)\n", "defs.txt", Some(Syntax::Infix));
    assert!(
        e.to_string()
            .starts_with("defs.txt:1:5: unknown function `foo`"),
        "{e}"
    );
    let e = err("x = A $ B\n", "defs.txt", Some(Syntax::Infix));
    assert!(
        e.to_string()
            .starts_with("defs.txt:1:7: unexpected character `$`"),
        "{e}"
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = format!("x = {}1{}\n", "(".repeat(100_000), ")".repeat(100_000));
    assert!(matches!(
        err(&deep, "d.txt", Some(Syntax::Infix)),
        DslError::TooDeep { .. }
    ));
    let long = format!("x = 1{}\n", " + 1".repeat(MAX_DEPTH + 10));
    assert!(matches!(
        err(&long, "d.txt", Some(Syntax::Infix)),
        DslError::TooDeep { .. }
    ));
    let neg = format!("x = {}1\n", "-".repeat(100_000));
    assert!(matches!(
        err(&neg, "d.txt", Some(Syntax::Infix)),
        DslError::TooDeep { .. }
    ));
    let rpn = format!("X, 1{}\n", "|1|+".repeat(MAX_DEPTH + 10));
    assert!(matches!(
        err(&rpn, "d.txt", Some(Syntax::PapiUser)),
        DslError::TooDeep { .. }
    ));
    let natives: Vec<String> = (0..100_000).map(|i| format!("E{i}")).collect();
    let csv = format!("CPU,x\nPRESET,P,DERIVED_ADD,{}\n", natives.join(","));
    assert!(matches!(
        err(&csv, "p.csv", Some(Syntax::PapiCsv)),
        DslError::TooDeep { .. }
    ));
    // Within the limit, a long sum compiles and evaluates.
    let ok = format!("x = 1{}\n", " + 1".repeat(MAX_DEPTH - 5));
    let v = eval(&ok, "d.txt", Some(Syntax::Infix), &[]);
    assert_eq!(v[0].1, Some((MAX_DEPTH - 4) as f64));
}

#[test]
fn papi_csv_derived_types() {
    let text = "\
CPU,test_pmu
PRESET,PAPI_TOT_INS,NOT_DERIVED,INS
PRESET,PAPI_L1_TCA,DERIVED_ADD,A,B,C
PRESET,PAPI_L1_DCH,DERIVED_SUB,A,B,C,NOTE,\"hits, roughly\"
PRESET,PAPI_FLOPS,DERIVED_PS,CYC,FLOP
PRESET,PAPI_X_PS,DERIVED_ADD_PS,CYC,A,B
PRESET,PAPI_SP_OPS,DERIVED_POSTFIX,N0|N1|4|*|+|,A,B
PRESET,PAPI_HZ,DERIVED_POSTFIX,|N0|#|/|,CYC
PRESET,PAPI_INF,DERIVED_INFIX,(N0+N1)*2,A,B
PRESET,PAPI_CMP, DERIVED_CMPD, A, B
CPU,other
PRESET,PAPI_TOT_INS,NOT_DERIVED,OTHER_INS
";
    let set = load_str(
        text,
        "papi_events.csv",
        None,
        &LoadOptions {
            cpu: Some("test_pmu".into()),
        },
    )
    .unwrap();
    assert_eq!(set.syntax, Syntax::PapiCsv);
    let vals = [
        ("INS", 5.0),
        ("A", 10.0),
        ("B", 3.0),
        ("C", 1.0),
        ("CYC", 2e9),
        ("FLOP", 4e9),
        ("#cpu_max_hz", 1e9),
    ];
    let got = set.evaluate(&|n: &str| vals.iter().find(|(k, _)| *k == n).map(|x| x.1));
    let g = |name: &str| got.iter().find(|v| v.name == name).unwrap().value;
    assert_eq!(g("PAPI_TOT_INS"), Some(5.0));
    assert_eq!(g("PAPI_L1_TCA"), Some(14.0));
    assert_eq!(g("PAPI_L1_DCH"), Some(6.0));
    assert_eq!(g("PAPI_FLOPS"), Some(2e9), "FLOP · hz / CYC");
    assert_eq!(g("PAPI_X_PS"), Some(6.5), "(A+B) · hz / CYC");
    assert_eq!(g("PAPI_SP_OPS"), Some(22.0));
    assert_eq!(g("PAPI_HZ"), Some(2.0));
    assert_eq!(g("PAPI_INF"), Some(26.0));
    assert_eq!(g("PAPI_CMP"), Some(10.0));
    assert_eq!(
        set.get("PAPI_L1_DCH").unwrap().description.as_deref(),
        Some("hits, roughly")
    );
    // Without --cpu every section is loaded, names qualified by section.
    let all = load_str(text, "papi_events.csv", None, &opts()).unwrap();
    assert!(all.get("other/PAPI_TOT_INS").is_some());
    let e = err(
        "CPU,x\nPRESET,P,DERIVED_POSTFIX,N0|N3|+|,A,B\n",
        "papi_events.csv",
        None,
    );
    assert!(
        e.to_string().starts_with(
            "papi_events.csv:2:29: refers to a native event that is not listed: `N3|`"
        ),
        "{e}"
    );
    let e = err("CPU,x\nPRESET,P,DERIVED_MUL,A,B\n", "papi_events.csv", None);
    assert!(
        e.to_string()
            .starts_with("papi_events.csv:2:10: unknown derived type `DERIVED_MUL`"),
        "{e}"
    );
}

#[test]
fn likwid_group() {
    let text = "\
SHORT Branch prediction miss rate/ratio

EVENTSET
FIXC0 INSTR_RETIRED_ANY
FIXC1 CPU_CLK_UNHALTED_CORE
PMC0  BR_INST_RETIRED_ALL_BRANCHES
PMC1  BR_MISP_RETIRED_ALL_BRANCHES

METRICS
Runtime (RDTSC) [s] time
CPI  FIXC1/FIXC0
Branch misprediction ratio PMC1/PMC0
Branch rate [%] 100*PMC0/FIXC0

LONG
Formulas:
Branch rate = BR_INST_RETIRED_ALL_BRANCHES/INSTR_RETIRED_ANY
";
    let set = load_str(text, "BRANCH.txt", None, &opts()).unwrap();
    assert_eq!(set.syntax, Syntax::Likwid);
    let names: Vec<&str> = set.definitions.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "Runtime (RDTSC)",
            "CPI",
            "Branch misprediction ratio",
            "Branch rate"
        ]
    );
    assert_eq!(set.get("Branch rate").unwrap().unit.as_deref(), Some("%"));
    assert_eq!(set.rpn(1), "CPU_CLK_UNHALTED_CORE|INSTR_RETIRED_ANY|/");
    let v = set.evaluate(&|n: &str| match n {
        "INSTR_RETIRED_ANY" => Some(200.0),
        "CPU_CLK_UNHALTED_CORE" => Some(100.0),
        "BR_INST_RETIRED_ALL_BRANCHES" => Some(50.0),
        "BR_MISP_RETIRED_ALL_BRANCHES" => Some(5.0),
        _ => None,
    });
    assert_eq!(v[1].value, Some(0.5));
    assert_eq!(v[2].value, Some(0.1));
    assert_eq!(v[3].value, Some(25.0));
    let e = err(
        "EVENTSET\nPMC0 X\nMETRICS\nBad PMC0*/2\n",
        "G.txt",
        Some(Syntax::Likwid),
    );
    assert!(
        e.to_string()
            .starts_with("G.txt:4:10: unexpected token `/`"),
        "{e}"
    );
}

#[test]
fn perfexpert_properties() {
    let text = "version = 1.0\n\n# comment\noverall = PAPI_TOT_CYC / PAPI_TOT_INS\ndata_TLB.overall = (PAPI_TLB_DM*TLB_lat) / PAPI_TOT_INS\nfloating-point_instr.slow = L1I:CYCLES_STALLED / PAPI_TOT_INS\n";
    let set = load_str(text, "x.lcpi.properties", None, &opts()).unwrap();
    assert_eq!(set.syntax, Syntax::PerfExpert);
    let names: Vec<&str> = set.definitions.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        ["overall", "data_TLB.overall", "floating-point_instr.slow"]
    );
    assert_eq!(
        set.definitions[2].vars,
        ["L1I:CYCLES_STALLED", "PAPI_TOT_INS"]
    );
}

#[test]
fn perf_json_metrics() {
    let text = r#"[
    {
        "MetricName": "ipc",
        "MetricExpr": "INST_RETIRED.ANY / CPU_CLK_UNHALTED.THREAD",
        "MetricGroup": "Summary",
        "ScaleUnit": "1per_cycle"
    },
    {
        "MetricName": "smt_share",
        "MetricExpr": "(1 - cpu@X\\,cmask\\=1@ / ipc if #SMT_on else 0)"
    },
    {
        "MetricName": "guarded",
        "MetricExpr": "d_ratio(duration_time, 0) + (1 if has_event(cstate_core@c6\\-residency@) else 2) + source_count(Y)"
    },
    {
        "BriefDescription": "no expression: skipped"
    }
]"#;
    let set = load_str(text, "m.json", None, &opts()).unwrap();
    assert_eq!(set.syntax, Syntax::PerfJson);
    assert_eq!(set.definitions.len(), 3);
    assert_eq!(set.definitions[1].vars, ["#smt_on", "cpu@X,cmask=1@"]);
    assert_eq!(set.definitions[1].refs, ["ipc"]);
    assert_eq!(set.definitions[0].unit.as_deref(), Some("1per_cycle"));
    let v = set.evaluate(&|n: &str| match n {
        "INST_RETIRED.ANY" => Some(300.0),
        "CPU_CLK_UNHALTED.THREAD" => Some(100.0),
        "#smt_on" => Some(1.0),
        "cpu@X,cmask=1@" => Some(1.5),
        "duration_time" => Some(2.0),
        _ => None,
    });
    assert_eq!(v[0].value, Some(3.0));
    assert_eq!(v[1].value, Some(0.5));
    // d_ratio(x, 0) = 0; has_event of an absent event is 0 (so 2); source_count(Y) = 0.
    assert_eq!(v[2].value, Some(2.0));
    // An error inside a MetricExpr is placed at its line and column in the JSON file.
    let bad = "[\n  {\"MetricName\": \"m\",\n   \"MetricExpr\": \"a + * b\"}\n]";
    let e = err(bad, "bad.json", None);
    assert_eq!(
        e.to_string(),
        "bad.json:3:23: unexpected token `*`: expected a number, a name or `(`"
    );
}

#[test]
fn syntax_override_and_detection() {
    assert_eq!(
        powerperf_events::detect("x.json", "[]").unwrap(),
        Syntax::PerfJson
    );
    assert_eq!(
        powerperf_events::detect("a.txt", "A, B|C|+\n").unwrap(),
        Syntax::PapiUser
    );
    assert_eq!(
        powerperf_events::detect("a.txt", "A = B + C\n").unwrap(),
        Syntax::Infix
    );
    assert_eq!(
        powerperf_events::detect("a.properties", "A = B + C\n").unwrap(),
        Syntax::PerfExpert
    );
    assert!(matches!(
        powerperf_events::detect("a.txt", "\n\n"),
        Err(DslError::UnknownSyntax { .. })
    ));
    // `--syntax infix` reads a file that detection would take for PAPI.
    let set = load_str("min(A, B)\n", "a.txt", Some(Syntax::Infix), &opts()).unwrap();
    assert_eq!(set.definitions[0].name, "min(A, B)");
}

#[test]
fn vectorised_evaluation_matches_scalar() {
    let text =
        "ipc = INS / CYC\nx = (INS - 2*CYC) if CYC > 3 else d_ratio(INS, CYC - 2)\ny = ipc * 2\n";
    let set = load_str(text, "v.txt", Some(Syntax::Infix), &opts()).unwrap();
    let n = 1000;
    let ins: Vec<f64> = (0..n).map(|i| (i * 7 % 13) as f64).collect();
    let cyc: Vec<f64> = (0..n).map(|i| (i % 5) as f64).collect();
    let cols = set.evaluate_columns(
        &|name: &str| match name {
            "INS" => Some(ins.as_slice()),
            "CYC" => Some(cyc.as_slice()),
            _ => None,
        },
        n,
    );
    for r in 0..n {
        let s = set.evaluate(&|name: &str| match name {
            "INS" => Some(ins[r]),
            "CYC" => Some(cyc[r]),
            _ => None,
        });
        for (d, v) in s.iter().enumerate() {
            let c = cols[d][r];
            match v.value {
                Some(x) => assert_eq!(x, c, "row {r} def {d}"),
                None => assert!(!c.is_finite(), "row {r} def {d}: {c}"),
            }
        }
    }
}
