//! Region reports: a GPTL-style indented tree per thread (Called, Wallclock, max, min) with a
//! SUM row over threads, and an IPM-style banner (wallclock, time, count and %wall per
//! region). Sources: GPTL's timing.* output (Rosinski); IPM's banner (Fürlinger et al.).

use powerperf_format::regions::RegionRecord;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Energy attributed to a region, J: the RAPL `package` and `dram` domains plus every GPU
/// (None when the run has none of them). `core` and `uncore` lie inside the package and
/// `psys` covers it, so adding them would count energy twice.
pub fn energy_j(r: &RegionRecord) -> Option<f64> {
    let mut any = false;
    let mut sum = 0.0;
    for (k, v) in &r.values {
        let counted = (k.starts_with("energy_package") || k.starts_with("energy_dram"))
            || (k.starts_with("gpu") && k.ends_with("_energy_j"));
        if counted {
            any = true;
            sum += v;
        }
    }
    any.then_some(sum)
}

fn secs(ns: u64) -> f64 {
    ns as f64 * 1e-9
}

/// The rows of `regions` summed over processes and threads, one per region path, in tree
/// order (a parent before its children): calls, inclusive time, exit-closed instances and
/// attributed values added; min and max over the threads. `pid` and `tid` are 0.
pub fn sum_over_threads(regions: &[RegionRecord]) -> Vec<RegionRecord> {
    let mut sum: BTreeMap<Vec<&str>, RegionRecord> = BTreeMap::new();
    for r in regions {
        let s = sum
            .entry(r.path.split('/').collect())
            .or_insert_with(|| RegionRecord {
                pid: 0,
                tid: 0,
                min_ns: u64::MAX,
                max_ns: 0,
                calls: 0,
                incl_ns: 0,
                exit_closed: 0,
                values: BTreeMap::new(),
                ..r.clone()
            });
        s.calls += r.calls;
        s.incl_ns += r.incl_ns;
        s.min_ns = s.min_ns.min(r.min_ns);
        s.max_ns = s.max_ns.max(r.max_ns);
        s.exit_closed += r.exit_closed;
        for (k, v) in &r.values {
            *s.values.entry(k.clone()).or_default() += v;
        }
    }
    sum.into_values().collect()
}

/// The GPTL-style tree and the IPM-style banner as text.
pub fn render_text(regions: &[RegionRecord], command: &str, wall_s: f64) -> String {
    let mut o = String::new();
    let has_energy = regions.iter().any(|r| energy_j(r).is_some());
    let header = |o: &mut String, first: &str| {
        let _ = writeln!(
            o,
            "  {first:<10} {:>8} {:>12} {:>10} {:>10}{}  region",
            "Called",
            "Wallclock",
            "max",
            "min",
            if has_energy {
                format!(" {:>10}", "energy_J")
            } else {
                String::new()
            }
        );
    };
    let line = |o: &mut String, first: &str, r: &RegionRecord| {
        let e = match (has_energy, energy_j(r)) {
            (true, Some(e)) => format!(" {e:>10.3}"),
            (true, None) => format!(" {:>10}", "-"),
            _ => String::new(),
        };
        let mark = if r.exit_closed > 0 {
            " (closed at exit)"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "  {first:<10} {:>8} {:>12.6} {:>10.6} {:>10.6}{e}  {}{}{mark}",
            r.calls,
            secs(r.incl_ns),
            secs(r.max_ns),
            secs(r.min_ns),
            "  ".repeat(r.depth as usize),
            r.region
        );
    };
    let _ = writeln!(o, "Regions (GPTL-style, inclusive seconds):");
    let mut threads: BTreeMap<(u32, u32), Vec<&RegionRecord>> = BTreeMap::new();
    for r in regions {
        threads.entry((r.pid, r.tid)).or_default().push(r);
    }
    header(&mut o, "Thd");
    for ((pid, tid), rows) in &threads {
        let label = if pid == tid {
            format!("{pid}")
        } else {
            format!("{pid}.{tid}")
        };
        for r in rows {
            line(&mut o, &label, r);
        }
    }
    let sum = sum_over_threads(regions);
    if threads.len() > 1 {
        for r in &sum {
            line(&mut o, "SUM", r);
        }
    }
    let _ = writeln!(
        o,
        "  (Thd is the process id, with .thread id for other threads)"
    );
    let _ = writeln!(o, "\n##IPM-style banner{}", "#".repeat(52));
    let _ = writeln!(o, "# command   : {command}");
    let _ = writeln!(o, "# wallclock : {wall_s:.6} s");
    let _ = writeln!(
        o,
        "# {:<24} {:>12} {:>10} {:>8}{}",
        "region",
        "[time s]",
        "[count]",
        "<%wall>",
        if has_energy {
            format!(" {:>12}", "[energy J]")
        } else {
            String::new()
        }
    );
    for r in &sum {
        let pct = if wall_s > 0.0 {
            100.0 * secs(r.incl_ns) / wall_s
        } else {
            f64::NAN
        };
        let e = match (has_energy, energy_j(r)) {
            (true, Some(e)) => format!(" {e:>12.3}"),
            (true, None) => format!(" {:>12}", "-"),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "# {:<24} {:>12.6} {:>10} {:>8.2}{e}",
            r.path,
            secs(r.incl_ns),
            r.calls,
            pct
        );
    }
    let _ = writeln!(
        o,
        "# (time and %wall sum over threads, so threaded regions can exceed 100 %)"
    );
    let _ = writeln!(o, "{}", "#".repeat(70));
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tid: u32, path: &str, depth: u32, incl_ns: u64, e: f64) -> RegionRecord {
        RegionRecord {
            pid: 10,
            tid,
            region: path.rsplit('/').next().unwrap().into(),
            path: path.into(),
            depth,
            calls: 2,
            incl_ns,
            min_ns: incl_ns / 4,
            max_ns: incl_ns * 3 / 4,
            exit_closed: 0,
            values: [
                ("energy_package_0_j".to_string(), e),
                ("task-clock".to_string(), 1.0),
            ]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn tree_sum_and_banner() {
        let rows = vec![
            rec(10, "solve", 0, 800_000_000, 8.0),
            rec(10, "solve/step", 1, 400_000_000, 4.0),
            rec(11, "solve", 0, 600_000_000, 6.0),
        ];
        let t = render_text(&rows, "./a.out", 1.0);
        assert!(t.contains("  step"), "nested regions are indented:\n{t}");
        assert!(t.contains("10.11"), "other threads are pid.tid:\n{t}");
        let sum = t
            .lines()
            .find(|l| l.starts_with("  SUM") && l.ends_with("solve"))
            .unwrap();
        assert!(
            sum.contains(" 4 ") && sum.contains("1.400000") && sum.contains("14.000"),
            "{sum}"
        );
        let banner = t.lines().find(|l| l.starts_with("# solve ")).unwrap();
        assert!(banner.contains("140.00"), "{banner}");
    }
}
