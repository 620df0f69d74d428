//! Tests of `combine = base_cpi`: CPU sweeps on one or more threads, GPU warp
//! instructions, and the two-clock (core × memory) form.

use super::*;

fn meta_cpu() -> SetMeta {
    let mut m = SetMeta {
        knobs: vec!["core_freq_mhz".into(), "threads".into()],
        ..Default::default()
    };
    m.counters.insert("cpu_cycles".into(), CounterKind::Count);
    m.counters.insert("inst_retired".into(), CounterKind::Count);
    m
}

/// A CPU workload with `n` instructions at base CPI 1.2, `ts` s of stall (cycles counted,
/// clock-independent) and `ti` s off the core (not counted) on `threads` threads:
/// t(f) = ti + n·1.2/(f·threads) + ts, C = n·1.2 + ts·f·threads; P = 0.2 + (f/1000)^2.
fn cpu_pt(w: &str, f: f64, threads: f64, n: f64, ts: f64, ti: f64) -> Point {
    let hz = f * 1e6;
    let t = ti + n * 1.2 / (hz * threads) + ts;
    Point {
        workload: w.into(),
        knobs: [
            ("core_freq_mhz".to_string(), f),
            ("threads".to_string(), threads),
        ]
        .into_iter()
        .collect(),
        time_s: Some(t),
        power_w: Some(0.2 + (f / 1000.0f64).powi(2)),
        counters: [
            ("inst_retired".to_string(), n),
            ("cpu_cycles".to_string(), n * 1.2 + ts * hz * threads),
        ]
        .into_iter()
        .collect(),
        ..Point::default()
    }
}

const CPU_WORKLOADS: [(&str, f64, f64, f64); 5] = [
    ("bitcount", 3e10, 0.5, 0.0),
    ("crc32", 2e10, 20.0, 0.5),
    ("rijndael", 4e10, 5.0, 15.0),
    ("qsort", 1e10, 2.0, 1.0),
    ("dijkstra", 5e9, 3.0, 0.2),
];

fn cpu_world(threads: &[f64]) -> Vec<Point> {
    let mut pts = Vec::new();
    for &(w, n, ts, ti) in &CPU_WORKLOADS {
        for &th in threads {
            for f in [1000.0, 1500.0, 2000.0] {
                pts.push(cpu_pt(w, f, th, n, ts, ti));
            }
        }
    }
    pts
}

#[test]
fn base_cpi_known_answer_from_one_point() {
    // β is recovered from the other workloads' clocks, and a workload known at 2000 MHz
    // alone gets its exact curve from its own cycles and instructions, on 1 and 2 threads.
    let all = cpu_world(&[1.0, 2.0]);
    let pts: Vec<Point> = all
        .iter()
        .filter(|p| p.workload != "crc32" || p.knobs["core_freq_mhz"] == 2000.0)
        .cloned()
        .collect();
    let m = fit(&meta_cpu(), &pts, &AnalyticCountersParams::base_cpi()).unwrap();
    assert!((m.base_cpi.unwrap() - 1.2).abs() < 1e-6, "{:?}", m.base_cpi);
    assert_eq!(m.instructions_counter.as_deref(), Some("inst_retired"));
    assert_eq!(m.cycles_counter.as_deref(), Some("cpu_cycles"));
    // Off-core time on every thread at once (`ti`): the per-thread reading is exact.
    assert_eq!(m.thread_idle, ThreadIdle::OffCore);
    for p in all.iter().filter(|p| p.workload == "crc32") {
        let got = m.predict("crc32", &p.knobs).unwrap().time_s.unwrap();
        let want = p.time_s.unwrap();
        assert!(
            (got - want).abs() < 1e-6 * want,
            "{:?}: {got} vs {want}",
            p.knobs
        );
    }
    assert!(m.explain().contains("β (base CPI"), "{}", m.explain());
    // The model file round-trips; older files (no base-CPI fields) still read.
    let back: AnalyticCountersModel =
        serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
}

/// The workloads of [`CPU_WORKLOADS`] as pipelines whose threads take turns (one stage
/// hands each buffer to the next): on any thread count one thread runs at a time, so the
/// time is the one-thread time, `t(f) = ti + n·1.2/f + ts`, and the cycles are
/// `C = n·1.2 + ts·f`; the idle thread waits for the busy one.
fn turn_world() -> Vec<Point> {
    let mut pts = Vec::new();
    for &(w, n, ts, ti) in &CPU_WORKLOADS {
        for th in [1.0, 2.0] {
            for f in [1000.0, 1500.0, 2000.0] {
                let mut p = cpu_pt(w, f, 1.0, n, ts, ti);
                p.knobs.insert("threads".into(), th);
                pts.push(p);
            }
        }
    }
    pts
}

#[test]
fn base_cpi_reads_idle_threads_as_waiting_where_that_fits_the_training_points() {
    // Per thread, a 2-thread run is half idle; read as off-core time (not scaling) that
    // would halve the clock-scaled share. The training points choose the other reading:
    // β, and a held-out workload's curve from its one point, exact on 1 and 2 threads.
    let all = turn_world();
    let pts: Vec<Point> = all
        .iter()
        .filter(|p| p.workload != "rijndael" || p.knobs["core_freq_mhz"] == 2000.0)
        .cloned()
        .collect();
    let m = fit(&meta_cpu(), &pts, &AnalyticCountersParams::base_cpi()).unwrap();
    assert_eq!(m.thread_idle, ThreadIdle::Waits);
    assert!((m.base_cpi.unwrap() - 1.2).abs() < 1e-6, "{:?}", m.base_cpi);
    for p in all.iter().filter(|p| p.workload == "rijndael") {
        let got = m.predict("rijndael", &p.knobs).unwrap().time_s.unwrap();
        let want = p.time_s.unwrap();
        assert!(
            (got - want).abs() < 1e-6 * want,
            "{:?}: {got} vs {want}",
            p.knobs
        );
    }
    assert!(m.explain().contains("waits"), "{}", m.explain());
    let text = serde_json::to_string(&m).unwrap();
    assert!(text.contains("\"thread_idle\":\"waits\""), "{text}");
    let back: AnalyticCountersModel = serde_json::from_str(&text).unwrap();
    assert_eq!(back, m);
    // One thread only: the two readings are the same, and the field stays out of the file.
    let one: Vec<Point> = pts
        .iter()
        .filter(|p| p.knobs["threads"] == 1.0)
        .cloned()
        .collect();
    let m1 = fit(&meta_cpu(), &one, &AnalyticCountersParams::base_cpi()).unwrap();
    assert_eq!(m1.thread_idle, ThreadIdle::OffCore);
    assert!(!serde_json::to_string(&m1).unwrap().contains("thread_idle"));
}

#[test]
fn base_cpi_without_instructions_names_the_fix_and_bad_counts_do_not_panic() {
    let mut meta = meta_cpu();
    meta.counters.remove("inst_retired");
    let e = fit(
        &meta,
        &cpu_world(&[1.0]),
        &AnalyticCountersParams::base_cpi(),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("retired-instructions") && msg.contains("instructions_counter"),
        "{msg}"
    );
    // Zero, negative and NaN counts and times: no prediction or a finite one, no panic.
    let mut pts = cpu_world(&[1.0]);
    for (i, p) in pts.iter_mut().enumerate() {
        match i % 4 {
            0 => {
                p.counters.insert("inst_retired".into(), 0.0);
            }
            1 => {
                p.counters.insert("cpu_cycles".into(), f64::NAN);
            }
            2 => p.time_s = Some(-1.0),
            _ => {}
        }
    }
    let m = fit(&meta_cpu(), &pts, &AnalyticCountersParams::base_cpi()).unwrap();
    for p in &pts {
        if let Ok(pr) = m.predict(&p.workload, &p.knobs) {
            if let Some(t) = pr.time_s {
                assert!(t.is_finite() && t > 0.0, "{t}");
            }
        }
    }
}

#[test]
fn auto_stack_takes_base_cpi_on_a_cpu_clock_sweep_and_scores_its_fallback() {
    // A clock sweep with cycles and instructions: `auto` in workload holdout is the stack
    // with the base-CPI form, chosen and exact on data it describes exactly. With two
    // thread counts the stack scores what it takes where the form has no prediction.
    use crate::models::{eval, FitParams, ModelKind};
    let base: Knobs = [
        ("core_freq_mhz".to_string(), 2000.0),
        ("threads".to_string(), 1.0),
    ]
    .into_iter()
    .collect();
    let pts = cpu_world(&[1.0]);
    let e = eval::workload_holdout(
        ModelKind::Auto,
        &meta_cpu(),
        &pts,
        &base,
        &FitParams::default(),
    );
    assert_stack_exact(&e, &pts, 10, "time_s: analytic_counters ×5", &["time_s"]);
    assert!(crate::models::stack::auto_applies(&meta_cpu(), &pts));
    // Two thread counts: the form predicts along the clock at the baseline's thread count
    // (exact there); at the other thread count the stack takes the neighbours or the
    // common response, chosen on the training workloads' points there (every workload's
    // time halves from 1 to 2 threads but for its stall and off-core time, so neither is
    // exact), and every point is predicted.
    let two = cpu_world(&[1.0, 2.0]);
    assert!(crate::models::stack::auto_applies(&meta_cpu(), &two));
    let e = eval::workload_holdout(
        ModelKind::Auto,
        &meta_cpu(),
        &two,
        &base,
        &FitParams::default(),
    );
    assert_eq!(e.kind, ModelKind::Stack);
    assert!(e.failures.is_empty(), "{:?}", e.failures);
    assert_eq!(e.results.len(), 25);
    assert!(
        e.summary
            .protocol
            .contains("(where the physical form has no prediction:"),
        "{}",
        e.summary.protocol
    );
    let same_threads: Vec<_> = e
        .results
        .iter()
        .filter(|r| r.knobs["threads"] == 1.0)
        .cloned()
        .collect();
    assert_eq!(same_threads.len(), 10);
    assert_results_exact(&same_threads, &two, &["time_s"], 1e-6);
    let m = crate::models::stack::fit(&meta_cpu(), &two, &FitParams::default()).unwrap();
    assert!(
        ["neighbors", "common_response"].contains(&m.fallback["time_s"].as_str()),
        "{m:?}"
    );
    assert!(m
        .explain()
        .contains("time_s where the physical form has no prediction"));
    // Issue 41's rule: at a thread count the form does not model, the fallback's member
    // predicts, whatever the choice where the form predicts (even `scaling`, the
    // reference, or the blend): a workload known at its baseline point alone, predicted
    // at 2 threads.
    let q = two.iter().find(|p| p.knobs["threads"] == 2.0).unwrap();
    let known: Vec<Point> = two
        .iter()
        .filter(|p| {
            p.workload != q.workload || crate::models::features::matches_setting(&p.knobs, &base)
        })
        .cloned()
        .collect();
    let mut at_base = FitParams::default();
    at_base.scaling.baseline = Some(base.clone());
    let m = crate::models::stack::fit(&meta_cpu(), &known, &at_base).unwrap();
    let phys = m.physical.as_ref().unwrap().predict(&q.workload, &q.knobs);
    assert!(
        phys.map_or(true, |p| p.time_s.is_none()),
        "the form models it"
    );
    let member = match m.fallback["time_s"].as_str() {
        "neighbors" => m.neighbors.as_ref(),
        _ => m.common.as_ref(),
    }
    .unwrap();
    let want = member.predict(&q.workload, &q.knobs).unwrap().time_s;
    assert!(want.is_some());
    for c in ["scaling", "blend", "analytic_counters", "neighbors"] {
        let mut forced = m.clone();
        forced.choice.insert("time_s".into(), c.into());
        let got = forced.predict(&q.workload, &q.knobs).unwrap().time_s;
        assert_eq!(got, want, "{c}");
    }
    let back: crate::models::stack::StackModel =
        serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
}

/// A GPU sweep with warp instructions executed (`inst_executed`) and no cycles counter:
/// a kernel issues `n` warp instructions at 0.02 cycles each chip-wide (peak 50 per
/// cycle) and waits `tm` s on memory: t(f) = tm + 0.02·n/f.
fn gpu_inst_world() -> (SetMeta, Vec<Point>) {
    let mut meta = SetMeta {
        knobs: vec!["core_freq_mhz".into(), "mem_freq_mhz".into()],
        ..Default::default()
    };
    meta.counters
        .insert("inst_executed".into(), CounterKind::Count);
    meta.counters
        .insert("achieved_occupancy".into(), CounterKind::Rate);
    let kernels = [
        ("sgemm", 6e8, 0.002),
        ("stream", 1e8, 0.05),
        ("spmv", 3e8, 0.01),
        ("stencil", 4e8, 0.004),
        ("nbody", 8e8, 0.0),
        ("bfs", 2e8, 0.02),
    ];
    let mut pts = Vec::new();
    for (i, &(w, n, tm)) in kernels.iter().enumerate() {
        for f in [600.0, 800.0, 1000.0, 1200.0] {
            pts.push(Point {
                workload: w.into(),
                knobs: [
                    ("core_freq_mhz".to_string(), f),
                    ("mem_freq_mhz".to_string(), 715.0),
                ]
                .into_iter()
                .collect(),
                time_s: Some(tm + 0.02 * n / (f * 1e6)),
                power_w: Some(40.0 + 60.0 * (f / 1200.0)),
                counters: [
                    ("inst_executed".to_string(), n),
                    ("achieved_occupancy".to_string(), 0.3 + 0.1 * i as f64),
                ]
                .into_iter()
                .collect(),
                ..Point::default()
            });
        }
    }
    (meta, pts)
}

#[test]
fn gpu_warp_instructions_without_cycles_take_the_base_cpi_stack() {
    // `inst_executed` alone (nvprof's warp instructions, no cycles counter): the base-CPI
    // form applies with φ = β·N/(f0·t0), β = 0.02 is recovered from the other kernels,
    // and `auto` in workload holdout is the stack, exact on every held-out point.
    use crate::models::{eval, FitParams, ModelKind};
    let (meta, pts) = gpu_inst_world();
    assert_eq!(
        instructions_counter(&meta).as_deref(),
        Some("inst_executed")
    );
    assert!(crate::models::stack::auto_applies(&meta, &pts));
    let train: Vec<Point> = pts
        .iter()
        .filter(|p| p.workload != "spmv" || p.knobs["core_freq_mhz"] == 1200.0)
        .cloned()
        .collect();
    let m = fit(&meta, &train, &AnalyticCountersParams::base_cpi()).unwrap();
    assert!(
        (m.base_cpi.unwrap() - 0.02).abs() < 1e-8,
        "{:?}",
        m.base_cpi
    );
    assert_eq!(m.cycles_counter, None);
    let base: Knobs = [
        ("core_freq_mhz".to_string(), 1200.0),
        ("mem_freq_mhz".to_string(), 715.0),
    ]
    .into_iter()
    .collect();
    let e = eval::workload_holdout(ModelKind::Auto, &meta, &pts, &base, &FitParams::default());
    assert_stack_exact(&e, &pts, 18, "time_s: analytic_counters ×6", &["time_s"]);
}

/// A core × memory clock grid with nvprof's counts: the six kernels of
/// [`crate::models::synthetic`] (t = max(0.02·n/f, 0.125·d/m) + lat).
fn gpu_two_clock_world() -> (SetMeta, Vec<Point>) {
    use crate::models::synthetic::{gpu_kernel_point, nvprof_meta, KERNELS};
    let mut pts = Vec::new();
    for (w, n, d, lat) in KERNELS {
        for m in [500.0, 700.0, 900.0] {
            for f in [600.0, 800.0, 1000.0, 1200.0] {
                let p = 40.0 + 60.0 * (f / 1200.0) + 20.0 * (m / 900.0);
                pts.push(gpu_kernel_point(w, (n, d, lat), f, m, p));
            }
        }
    }
    (nvprof_meta(), pts)
}

#[test]
fn two_clock_known_answer_recovers_beta_and_gamma_and_predicts_every_memory_clock() {
    // β = 0.02 and γ = 0.125 come back from the other kernels' grids, and a kernel known
    // at its baseline point alone is predicted exactly over the whole core × memory grid:
    // `auto` in workload holdout is the stack with the two-clock form on every point.
    use crate::models::{eval, FitParams, ModelKind};
    let (meta, pts) = gpu_two_clock_world();
    assert_eq!(
        dram_counters(&meta),
        vec!["dram_read_transactions", "dram_write_transactions"]
    );
    let base: Knobs = [
        ("core_freq_mhz".to_string(), 1200.0),
        ("mem_freq_mhz".to_string(), 900.0),
    ]
    .into_iter()
    .collect();
    let train: Vec<Point> = pts
        .iter()
        .filter(|p| p.workload != "spmv" || p.knobs == base)
        .cloned()
        .collect();
    let m = fit(&meta, &train, &AnalyticCountersParams::base_cpi()).unwrap();
    assert_eq!(m.mem_knob.as_deref(), Some("mem_freq_mhz"));
    assert!(
        (m.base_cpi.unwrap() - 0.02).abs() < 1e-6,
        "{:?}",
        m.base_cpi
    );
    let gamma = m.mem_cycles_per_transaction.unwrap();
    assert!((gamma - 0.125).abs() < 1e-5, "{gamma}");
    for p in pts.iter().filter(|p| p.workload == "spmv") {
        let t = m.predict("spmv", &p.knobs).unwrap().time_s.unwrap();
        let want = p.time_s.unwrap();
        assert!(
            ((t - want) / want).abs() < 1e-5,
            "{:?}: {t} vs {want}",
            p.knobs
        );
    }
    assert!(
        m.explain().contains("γ (memory-clock cycles"),
        "{}",
        m.explain()
    );
    let back: AnalyticCountersModel =
        serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
    let e = eval::workload_holdout(ModelKind::Auto, &meta, &pts, &base, &FitParams::default());
    assert_stack_exact(&e, &pts, 66, "time_s: analytic_counters ×6", &["time_s"]);
}

#[test]
fn two_clock_form_without_a_second_memory_clock_refuses_other_memory_clocks() {
    // Trained at one memory clock, γ cannot be fitted: the model says so and gives no
    // time at another memory clock (never a silent μ = 0), while the trained clock keeps
    // its predictions. A setting without the memory knob names it.
    let (meta, pts) = gpu_two_clock_world();
    let train: Vec<Point> = pts
        .iter()
        .filter(|p| p.knobs["mem_freq_mhz"] == 900.0)
        .cloned()
        .collect();
    let m = fit(&meta, &train, &AnalyticCountersParams::base_cpi()).unwrap();
    assert_eq!(m.mem_cycles_per_transaction, None);
    assert!(m.explain().contains("not fitted"), "{}", m.explain());
    let at = |f: f64, mem: f64| {
        let k: Knobs = [
            ("core_freq_mhz".to_string(), f),
            ("mem_freq_mhz".to_string(), mem),
        ]
        .into_iter()
        .collect();
        m.predict("bfs", &k).unwrap().time_s
    };
    assert_eq!(at(800.0, 500.0), None);
    assert!(at(800.0, 900.0).is_some());
    // A DRAM counter named in the params must be a count of the set.
    let named = AnalyticCountersParams {
        dram_counters: vec!["dram_bytes".into()],
        ..AnalyticCountersParams::base_cpi()
    };
    let e = fit(&meta, &train, &named).unwrap_err().to_string();
    assert!(e.contains("DRAM counter `dram_bytes`"), "{e}");
    let only_core: Knobs = [("core_freq_mhz".to_string(), 800.0)].into_iter().collect();
    assert!(matches!(
        m.predict("bfs", &only_core),
        Err(ModelError::MissingKnob { .. })
    ));
}
