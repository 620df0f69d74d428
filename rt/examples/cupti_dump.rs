//! Summary of a `gpu_activity/<pid>.bin` written by the CUDA injection
//! (`libpowerperf_rt_cuda.so`): devices, kernels by name (count, total and mean time),
//! copies by kind, other activities, API calls by function, clock pairs, dropped records.
//!
//! ```sh
//! cargo run -p powerperf-rt --features cuda --example cupti_dump -- RUN/gpu_activity/4242.bin [--kernels]
//! ```
//! `--kernels` also lists every kernel (start in CLOCK_MONOTONIC ns, duration ns, name) in
//! start order.

use std::collections::BTreeMap;
use std::process::ExitCode;

use powerperf_rt::cupti::{self, ActivityKind};

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`cupti_dump f.bin | head`).
    // SAFETY: restoring the default action of SIGPIPE has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: cupti_dump FILE.bin [--kernels]");
        return ExitCode::from(2);
    };
    let f = match cupti::read_file(path.as_ref()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("Error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "pid {} cupti_version {} cuda_driver {} bindings {} truncated {} dropped_records {} api_records_lost {}",
        f.pid,
        f.cupti_version,
        f.cuda_driver_version,
        f.bindings_cuda_version,
        f.truncated,
        f.dropped_records,
        f.api_records_lost
    );
    for n in &f.notes {
        println!("note: {n}");
    }
    for d in &f.devices {
        println!("device {d:?}");
    }
    if let (Some(a), Some(b)) = (f.clock_pairs.first(), f.clock_pairs.last()) {
        let span = b.0.saturating_sub(a.0) as f64;
        let drift = if span > 0.0 {
            ((b.1 as f64 - a.1 as f64) - span) / span * 1e6
        } else {
            0.0
        };
        println!(
            "clock pairs {}: first (cupti {}, mono {}), offset mono-cupti first {} last {} ns, drift {drift:.3} ppm",
            f.clock_pairs.len(),
            a.0,
            a.1,
            a.1 as i128 - a.0 as i128,
            b.1 as i128 - b.0 as i128
        );
    }
    // Kernels by name.
    let mut kernels: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut copies: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    let mut other: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for a in &f.activities {
        let dur = a.end.saturating_sub(a.start);
        match a.kind {
            ActivityKind::Kernel => {
                let e = kernels.entry(a.name.as_deref().unwrap_or("?")).or_default();
                e.0 += 1;
                e.1 += dur;
            }
            ActivityKind::Memcpy => {
                let k = format!(
                    "{} {}->{}",
                    a.copy_kind.unwrap_or("?"),
                    a.src_kind.unwrap_or("?"),
                    a.dst_kind.unwrap_or("?")
                );
                let e = copies.entry(k).or_default();
                e.0 += 1;
                e.1 += a.bytes;
                e.2 += dur;
            }
            k => {
                let key = match k {
                    ActivityKind::Sync => format!("Sync {}", a.sync_kind.unwrap_or("?")),
                    ActivityKind::Memset => {
                        format!("Memset {}", a.memory_kind.unwrap_or("?"))
                    }
                    _ => format!("{k:?} {}", a.memory_kind.unwrap_or("?")),
                };
                let e = other.entry(key).or_default();
                e.0 += 1;
                e.1 += if matches!(
                    k,
                    ActivityKind::Alloc | ActivityKind::Free | ActivityKind::Memset
                ) {
                    a.bytes
                } else {
                    dur
                };
            }
        }
    }
    println!(
        "kernels {} ({} names)",
        kernels.values().map(|v| v.0).sum::<u64>(),
        kernels.len()
    );
    for (n, (c, t)) in &kernels {
        println!(
            "  kernel {c:>7} x  total {t:>12} ns  mean {:>10} ns  {n}",
            t / c
        );
    }
    for (k, (c, b, t)) in &copies {
        println!("  memcpy {k:<28} {c:>6} x  {b:>12} B  {t:>10} ns");
    }
    for (k, (c, v)) in &other {
        println!("  {k:<35} {c:>6} x  {v:>12} (ns for syncs, B otherwise)");
    }
    let mut apis: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    for c in &f.api_calls {
        let e = apis.entry((c.domain, c.name.as_str())).or_default();
        e.0 += 1;
        e.1 += c.exit_ns.saturating_sub(c.enter_ns);
    }
    println!("api calls {}", f.api_calls.len());
    for ((d, n), (c, t)) in &apis {
        println!("  {d:<7} {n:<32} {c:>7} x  total {t:>12} ns");
    }
    // Correlation: which API call (domain) launched each activity.
    let mut by_corr: BTreeMap<u32, Vec<&cupti::ApiCall>> = BTreeMap::new();
    for c in &f.api_calls {
        by_corr.entry(c.correlation_id).or_default().push(c);
    }
    let mut matched: BTreeMap<(String, &str), u64> = BTreeMap::new();
    for a in &f.activities {
        if matches!(a.kind, ActivityKind::Alloc | ActivityKind::Free) {
            continue;
        }
        let doms: Vec<&str> = by_corr
            .get(&a.correlation_id)
            .map(|v| v.iter().map(|c| c.domain).collect())
            .unwrap_or_default();
        let key = if doms.is_empty() {
            "no api call".to_string()
        } else {
            doms.join("+")
        };
        *matched.entry((key, kind_name(a.kind))).or_default() += 1;
    }
    for ((k, kind), n) in &matched {
        println!("  correlation: {kind:<7} {n:>7} x matched to {k}");
    }
    let shared = by_corr
        .values()
        .filter(|v| {
            v.iter().any(|c| c.domain == "runtime") && v.iter().any(|c| c.domain == "driver")
        })
        .count();
    println!("  correlation ids shared by a runtime and a driver call: {shared}");
    if args.iter().any(|a| a == "--kernels") {
        let mut ks: Vec<_> = f
            .activities
            .iter()
            .filter(|a| a.kind == ActivityKind::Kernel)
            .collect();
        ks.sort_by_key(|a| a.start);
        for a in ks {
            println!(
                "  K {} {} {} corr {} stream {}",
                f.to_monotonic(a.start),
                a.end - a.start,
                a.name.as_deref().unwrap_or("?"),
                a.correlation_id,
                a.stream
            );
        }
    }
    ExitCode::SUCCESS
}

fn kind_name(k: ActivityKind) -> &'static str {
    match k {
        ActivityKind::Kernel => "kernel",
        ActivityKind::Memcpy => "memcpy",
        ActivityKind::Memset => "memset",
        ActivityKind::Sync => "sync",
        ActivityKind::Alloc => "alloc",
        ActivityKind::Free => "free",
    }
}
