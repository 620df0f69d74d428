//! Plain-text table in the layout of `perf stat`.

use super::{ending_line, value_and_unit, Summary};
use std::fmt::Write;

pub(super) fn render(s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\n Performance counter stats for '{}':\n", s.command);
    for r in &s.events {
        let (v, unit) = value_and_unit(r);
        let rate = match (&r.rate, &r.rate_unit) {
            (Some(x), Some(u)) if u == "insn per cycle" || u == "CPUs utilized" => {
                format!("  #  {x:>8.2}  {u}")
            }
            (Some(x), Some(u)) if u == "/sec" && *x >= 1e6 => {
                format!("  #  {:>8.3} M/sec", x * 1e-6)
            }
            (Some(x), Some(u)) if u == "/sec" && *x >= 1e3 => {
                format!("  #  {:>8.3} K/sec", x * 1e-3)
            }
            (Some(x), Some(u)) if u.starts_with('%') => format!("  #  {x:>8.2}{u}"),
            (Some(x), Some(u)) => format!("  #  {x:>8.3} {u}"),
            _ => String::new(),
        };
        let _ = writeln!(o, "{v:>20} {unit:<4} {:<24}{rate}", r.event);
    }
    if !s.threads.is_empty() {
        // As `perf stat --per-thread`: one line per thread and event, `comm-tid` first.
        let _ = writeln!(o, "\n Per thread:\n");
        for t in &s.threads {
            let who = format!("{}-{}", t.comm, t.tid);
            for r in &s.events {
                let Some(&v) = t.counts.get(&r.event) else {
                    continue;
                };
                let one = super::Row {
                    value: Some(v),
                    ..r.clone()
                };
                let (v, unit) = value_and_unit(&one);
                let _ = writeln!(o, "  {who:>24} {v:>20} {unit:<4} {}", r.event);
            }
        }
    }
    let _ = writeln!(o, "\n{:>20.6} seconds time elapsed", s.duration_s);
    for g in &s.gpus {
        let check = match (g.power_integral_j, g.integral_vs_counter_pct) {
            (Some(i), Some(d)) => format!("; integral of sampled power {i:.2} J ({d:+.2} %)"),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "  {}: {:.2} J from the NVML energy counter, mean {:.2} W{check}",
            g.gpu, g.energy_j, g.mean_power_w
        );
    }
    for d in &s.power_devices {
        let how = match (d.energy_from.as_str(), d.power_from.as_str()) {
            ("power_integral", _) => "the integral of sampled power, not a counter",
            (_, "energy_rate") => "its energy counter; power is its rate",
            _ => "its energy counter",
        };
        match (d.energy_j, d.mean_power_w) {
            (Some(e), Some(w)) => {
                let _ = writeln!(
                    o,
                    "  {} ({}, {}): {e:.2} J, mean {w:.2} W ({how}); {}",
                    d.stem, d.origin, d.label, d.source
                );
            }
            _ => {
                let sampled = d.sampled_power_w.map_or(String::new(), |w| {
                    format!(", sampled power {w:.2} W on average")
                });
                let _ = writeln!(
                    o,
                    "  {} ({}, {}): no energy (see its event){sampled}; {}",
                    d.stem, d.origin, d.label, d.source
                );
            }
        }
    }
    let _ = writeln!(o, "  command {}", ending_line(s));
    // Events that failed for the same reason are listed together, as perf does.
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for r in s.events.iter().filter(|r| r.value.is_none()) {
        if let Some(why) = &r.reason {
            let generic = why.replace(&format!("`{}`", r.event), "the event");
            match groups.iter_mut().find(|(g, _)| *g == generic) {
                Some((_, evs)) => evs.push(&r.event),
                None => groups.push((generic, vec![&r.event])),
            }
        }
    }
    for (why, evs) in groups {
        let _ = writeln!(o, "  {}: {why}", evs.join(", "));
    }
    for n in &s.notes {
        let _ = writeln!(o, "  note: {n}");
    }
    o.push('\n');
    if !s.regions.is_empty() {
        o.push_str(&super::regions::render_text(
            &s.regions,
            &s.command,
            s.duration_s,
        ));
        o.push('\n');
    }
    if let Some(g) = &s.gpu_activity {
        o.push_str(&super::gpu::render_text(g, s.duration_s));
        o.push('\n');
    }
    if let Some(p) = &s.pc_samples {
        o.push_str(&super::pc::render_text(p));
        o.push('\n');
    }
    o
}
