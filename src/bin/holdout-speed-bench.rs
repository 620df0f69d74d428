//! Speed of workload holdout on about 1,000 points (issue 21, item 7: under 10 s).
//!
//! `cargo build --release --bin holdout-speed-bench && target/release/holdout-speed-bench [REPEATS] [SET]`
//! (SET: one set's rows only)
//!
//! Sets: two bundled sets cut to about 1,000 mean points through their shipped specs
//! (`datasets/*.toml`): the Titan X microbenchmarks, the first 32 workloads by name × 32
//! settings (1,024 points, PTX static features), and the V100 sweep, the first 9 applications
//! by name × 117 clocks (1,053 points, DCGM counters). Each model runs the whole protocol
//! ([`powerperf_core::models::eval::workload_holdout`], held-out workloads refitted in parallel on
//! the available cores) from the maximum of every knob. A third set, `gpu-2clock-synth`, is
//! synthetic: 40 kernels × 5 core × 5 memory clocks (1,000 points) with nvprof's counts
//! (`inst_executed`, `dram_read_transactions`, `dram_write_transactions`), each kernel's time
//! `max(0.02·n/f, 0.125·d/m) + lat` and power `40 + 60·f/f_max + 20·m/m_max + s` W, the shape
//! where `auto` takes the stack with the two-clock base-CPI form (its cost, not its accuracy,
//! is what this row measures). A fourth, `gpu-2clock-wide` (since stop 34), is the same grid
//! with 24 more nvprof metrics per point (`gld_transactions` … `flop_count_dp` as counts,
//! `achieved_occupancy` … `tex_utilization` as rates; kernel-specific values, the rates
//! moving with the clocks), the width of a per-kernel nvprof export, where the data-driven
//! members' feature selection has candidates to screen. The table gives the wall-clock seconds
//! (median of REPEATS runs, default 1; loading not included), the points predicted and the
//! time and power MAPE beside the median-ratio baseline's.

use powerperf_core::models::eval::workload_holdout;
use powerperf_core::models::features::mean_points;
use powerperf_core::models::{FitParams, ModelKind};
use powerperf_core::store::import::{import, ImportSpec};
use powerperf_format::set::{Point, TrainingSet};
use powerperf_node::plan_file::Knobs;
use std::path::Path;
use std::time::Instant;

fn load(name: &str, workloads: usize) -> anyhow::Result<(TrainingSet, Vec<Point>)> {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("datasets")
        .join(format!("{name}.toml"));
    let spec = ImportSpec::load(&spec)?;
    let set = import(&spec, None)?.set;
    let mut names = set.workloads();
    names.sort();
    names.truncate(workloads);
    let pts: Vec<Point> = mean_points(&set)
        .into_iter()
        .filter(|p| names.contains(&p.workload))
        .collect();
    Ok((set, pts))
}

/// The synthetic core × memory clock grid of the module docs
/// ([`powerperf_core::models::synthetic`]).
fn gpu_two_clock_grid() -> (TrainingSet, Vec<Point>) {
    use powerperf_core::models::synthetic::{gpu_kernel_point, nvprof_meta};
    let mut points = Vec::new();
    for k in 0..40u32 {
        // Spread over compute- and memory-bound kernels, deterministically.
        let u = f64::from(k) / 39.0;
        let n = 1e8 * (1.0 + 7.0 * ((f64::from(k) * 0.618).fract()));
        let d = 1e5 + 9e7 * u * u;
        let lat = 0.001 * ((f64::from(k) * 0.377).fract() * 10.0);
        for m in [500.0, 600.0, 700.0, 800.0, 900.0] {
            for f in [600.0, 750.0, 900.0, 1050.0, 1200.0] {
                let p = 40.0 + 60.0 * f / 1200.0 + 20.0 * m / 900.0 + 5.0 * u;
                points.push(gpu_kernel_point(
                    &format!("kernel{k:02}"),
                    (n, d, lat),
                    f,
                    m,
                    p,
                ));
            }
        }
    }
    let set = TrainingSet {
        meta: nvprof_meta(),
        points: points.clone(),
    };
    (set, points)
}

/// Further nvprof metrics (Kepler to Volta names) for `gpu-2clock-wide`: counts, then rates.
const WIDE_COUNTS: [&str; 17] = [
    "gld_transactions",
    "gst_transactions",
    "l2_read_transactions",
    "l2_write_transactions",
    "shared_load_transactions",
    "shared_store_transactions",
    "local_load_transactions",
    "local_store_transactions",
    "inst_fp_32",
    "inst_fp_64",
    "inst_integer",
    "inst_control",
    "inst_compute_ld_st",
    "inst_misc",
    "inst_bit_convert",
    "flop_count_sp",
    "flop_count_dp",
];
const WIDE_RATES: [&str; 7] = [
    "achieved_occupancy",
    "sm_efficiency",
    "ipc",
    "issue_slot_utilization",
    "dram_utilization",
    "l2_utilization",
    "tex_utilization",
];

/// `gpu-2clock-synth` with the 24 metrics above beside nvprof's three (the width of a
/// per-kernel nvprof export): each a fixed, kernel-specific multiple of the kernel's
/// instructions (counts) or a kernel-specific fraction that moves with the clocks (rates).
/// What the features cost the selection, not what they explain, is measured.
fn gpu_two_clock_wide() -> (TrainingSet, Vec<Point>) {
    use powerperf_format::set::CounterKind;
    let (mut set, _) = gpu_two_clock_grid();
    for c in WIDE_COUNTS {
        set.meta.counters.insert(c.into(), CounterKind::Count);
    }
    for c in WIDE_RATES {
        set.meta.counters.insert(c.into(), CounterKind::Rate);
    }
    for p in &mut set.points {
        let k: f64 = p
            .workload
            .trim_start_matches("kernel")
            .parse()
            .unwrap_or(0.0);
        let n = p.counters.get("inst_executed").copied().unwrap_or(0.0);
        let fc = p.knobs.get("core_freq_mhz").copied().unwrap_or(1.0);
        let fm = p.knobs.get("mem_freq_mhz").copied().unwrap_or(1.0);
        for (j, c) in WIDE_COUNTS.iter().enumerate() {
            let share = ((k + 1.0) * (j as f64 + 1.0) * 0.618_034).fract();
            p.counters.insert((*c).into(), n * share);
        }
        for (j, c) in WIDE_RATES.iter().enumerate() {
            let base = ((k + 3.0) * (j as f64 + 2.0) * 0.377).fract();
            let r = (base * (0.7 + 0.3 * fc / 1200.0) * (0.8 + 0.2 * fm / 900.0)).min(1.0);
            p.counters.insert((*c).into(), r);
        }
    }
    let points = set.points.clone();
    (set, points)
}

fn main() -> anyhow::Result<()> {
    let repeats: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1)
        .max(1);
    println!(
        "workload holdout speed (issue 21, item 7), {} core(s), median of {repeats} run(s)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "{:<16} {:>6} {:>9} {:<10} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "set",
        "points",
        "workloads",
        "model",
        "seconds",
        "predicted",
        "time_%",
        "base_time%",
        "power_%",
        "base_pow%"
    );
    let only = std::env::args().nth(2);
    for (name, workloads) in [
        ("titanx-micro", 32),
        ("v100-dcgm-sweep", 9),
        ("gpu-2clock-synth", 40),
        ("gpu-2clock-wide", 40),
    ] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let (set, pts) = match name {
            "gpu-2clock-synth" => gpu_two_clock_grid(),
            "gpu-2clock-wide" => gpu_two_clock_wide(),
            _ => load(name, workloads)?,
        };
        let mut base = Knobs::new();
        for k in &set.meta.knobs {
            if let Some(v) = pts
                .iter()
                .filter_map(|p| p.knobs.get(k).copied())
                .max_by(f64::total_cmp)
            {
                base.insert(k.clone(), v);
            }
        }
        let nw = {
            let mut w: Vec<&str> = pts.iter().map(|p| p.workload.as_str()).collect();
            w.sort();
            w.dedup();
            w.len()
        };
        for kind in [ModelKind::Auto, ModelKind::Spca, ModelKind::Linear] {
            let mut secs = Vec::new();
            let mut last = None;
            for _ in 0..repeats {
                let t0 = Instant::now();
                let ev = workload_holdout(kind, &set.meta, &pts, &base, &FitParams::default());
                secs.push(t0.elapsed().as_secs_f64());
                last = Some(ev);
            }
            secs.sort_by(f64::total_cmp);
            let ev = last.expect("at least one run");
            let v = ev.versus(&set.meta);
            let f = |t: &str, base: bool| {
                v.get(t)
                    .map(|x| if base { x.baseline } else { x.model })
                    .filter(|e| e.n > 0)
                    .map_or("-".to_string(), |e| format!("{:.2}", e.mape_pct))
            };
            println!(
                "{:<16} {:>6} {:>9} {:<10} {:>9.2} {:>10} {:>10} {:>10} {:>10} {:>10}",
                name,
                pts.len(),
                nw,
                ev.kind.name(),
                secs[secs.len() / 2],
                format!("{}/{}", ev.results.len(), ev.held_out_points),
                f("time_s", false),
                f("time_s", true),
                f("power_w", false),
                f("power_w", true)
            );
        }
    }
    Ok(())
}
