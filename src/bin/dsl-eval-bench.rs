//! Throughput of the event DSL's vectorised evaluator, against the same formulas written as
//! polars expressions on the same columns (both on one core).
//!
//! `cargo run --release --features polars-lazy-bench --bin dsl-eval-bench [ROWS]` prints formula terms per second, where a
//! term is one bytecode operation applied to one row.

use std::time::Instant;

use polars::prelude::*;
use powerperf_events::{load_str, DefinitionSet, LoadOptions, Op, Syntax};

/// LCPI (Moore 2012 form), IPC, and a few metrics with selects and comparisons.
const FORMULAS: &str = "\
overall_cpi = PAPI_TOT_CYC / PAPI_TOT_INS
data_accesses = (PAPI_L1_DCA*3 + PAPI_L2_DCA*17 + PAPI_L2_DCM*60 + PAPI_L3_TCM*540) / PAPI_TOT_INS
instruction_accesses = (PAPI_L1_ICA*2 + PAPI_L2_ICA*17 + PAPI_L2_ICM*60) / PAPI_TOT_INS
data_tlb = PAPI_TLB_DM*50 / PAPI_TOT_INS
branches = (PAPI_BR_INS*2 + PAPI_BR_MSP*12) / PAPI_TOT_INS
floating_point = ((PAPI_FML_INS + PAPI_FAD_INS)*4 + (PAPI_FDV_INS + PAPI_FSQ_INS)*38) / PAPI_TOT_INS
ipc = PAPI_TOT_INS / PAPI_TOT_CYC
miss_ratio = PAPI_BR_MSP / PAPI_BR_INS if PAPI_BR_INS > 0 else 0
bound = data_accesses - branches * 2 if ipc < 1 else -data_tlb
";

fn to_polars(set: &DefinitionSet, i: usize, done: &[Option<Expr>]) -> Expr {
    let mut st: Vec<Expr> = Vec::new();
    for op in &set.definitions[i].program.ops {
        let e = match *op {
            Op::Const(v) => lit(v),
            Op::Load(s) => col(set.variables[s as usize].as_str()),
            Op::LoadDef(d) => done[d as usize].clone().expect("definitions in order"),
            Op::Neg => {
                let a = st.pop().unwrap();
                lit(0.0) - a
            }
            Op::Select => {
                let o = st.pop().unwrap();
                let t = st.pop().unwrap();
                let c = st.pop().unwrap();
                when(c.neq(lit(0.0))).then(t).otherwise(o)
            }
            other => {
                let b = st.pop().unwrap();
                let a = st.pop().unwrap();
                match other {
                    Op::Add => a + b,
                    Op::Sub => a - b,
                    Op::Mul => a * b,
                    Op::Div => a / b,
                    Op::Lt => a.lt(b).cast(DataType::Float64),
                    Op::Gt => a.gt(b).cast(DataType::Float64),
                    o => panic!("bench formulas use + - * / < > and if-else only, not {o:?}"),
                }
            }
        };
        st.push(e);
    }
    st.pop().unwrap()
}

fn main() {
    // One core for polars too (its thread pool reads this when it starts).
    if std::env::var_os("POLARS_MAX_THREADS").is_none() {
        std::env::set_var("POLARS_MAX_THREADS", "1");
    }
    let rows: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 20);
    let set = load_str(
        FORMULAS,
        "bench.txt",
        Some(Syntax::Infix),
        &LoadOptions::default(),
    )
    .expect("bench formulas compile");
    // Deterministic pseudo-random counter columns (a linear congruential generator).
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let cols: Vec<Vec<f64>> = set
        .variables
        .iter()
        .map(|_| {
            (0..rows)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    1.0 + (x >> 40) as f64
                })
                .collect()
        })
        .collect();
    let terms_per_row: usize = set.definitions.iter().map(|d| d.program.ops.len()).sum();

    // powerperf bytecode, vectorised over chunks.
    let lookup = |n: &str| {
        set.variables
            .iter()
            .position(|v| v == n)
            .map(|i| cols[i].as_slice())
    };
    let mut reps = 0u32;
    let t0 = Instant::now();
    let mut check = 0.0;
    while reps < 3 || t0.elapsed().as_secs_f64() < 1.0 {
        let out = set.evaluate_columns(&lookup, rows);
        check += out[0][rows / 2];
        reps += 1;
    }
    let ours = t0.elapsed().as_secs_f64() / reps as f64;
    let ours_tps = (terms_per_row * rows) as f64 / ours;

    // The same formulas as polars expressions, one thread.
    let df = DataFrame::new(
        rows,
        set.variables
            .iter()
            .zip(&cols)
            .map(|(n, c)| Column::new(n.as_str().into(), c.clone()))
            .collect(),
    )
    .expect("frame");
    let mut done: Vec<Option<Expr>> = vec![None; set.definitions.len()];
    let mut exprs = Vec::new();
    for (i, d) in set.definitions.iter().enumerate() {
        let e = to_polars(&set, i, &done);
        done[i] = Some(e.clone());
        exprs.push(e.alias(d.name.as_str()));
    }
    let mut preps = 0u32;
    let t1 = Instant::now();
    while preps < 3 || t1.elapsed().as_secs_f64() < 1.0 {
        let out = df
            .clone()
            .lazy()
            .select(exprs.clone())
            .collect()
            .expect("polars");
        check += out
            .column("overall_cpi")
            .unwrap()
            .f64()
            .unwrap()
            .get(rows / 2)
            .unwrap_or(0.0);
        preps += 1;
    }
    let theirs = t1.elapsed().as_secs_f64() / preps as f64;
    let polars_tps = (terms_per_row * rows) as f64 / theirs;

    println!(
        "definitions: {}, terms per row: {terms_per_row}, rows: {rows}",
        set.definitions.len()
    );
    println!(
        "powerperf bytecode: {:.3} ms per pass, {:.1} M terms/s",
        ours * 1e3,
        ours_tps / 1e6
    );
    println!(
        "polars expressions: {:.3} ms per pass, {:.1} M terms/s (POLARS_MAX_THREADS={})",
        theirs * 1e3,
        polars_tps / 1e6,
        std::env::var("POLARS_MAX_THREADS").unwrap_or_else(|_| "unset".into())
    );
    println!("ratio powerperf/polars: {:.2}", ours_tps / polars_tps);
    println!("(checksum {check:.6})");
}
