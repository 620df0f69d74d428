//! A self-contained HTML report of one run, in the spirit of IPM's HTML profile (Fürlinger
//! et al.): a banner of the run, tables of the events, the energy per RAPL domain and per GPU,
//! the regions (a GPTL-style per-thread tree and an IPM-style banner summed over threads),
//! LCPI, the notes, and the plots as inline SVG. No scripts, no external resources: one file
//! that opens anywhere. Every piece of text that comes from the run is HTML-escaped.

use super::plots::NamedPlot;
use super::{display_value, ending_line, Summary};
use anyhow::Result;
use powerperf_events::lcpi;
use powerperf_format::regions::RegionRecord;
use powerperf_format::run::RunMeta;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Escape `&`, `<`, `>`, `"` and `'` for HTML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const CSS: &str = r#"
body { font-family: "DejaVu Sans", Verdana, Arial, sans-serif; font-size: 13px; margin: 16px 24px; color: #111; background: #fff; }
h1 { font-size: 20px; background: #1f4e79; color: #fff; padding: 8px 12px; margin: 0 0 12px 0; }
h2 { font-size: 15px; background: #dde6f0; color: #1f4e79; padding: 4px 10px; margin: 22px 0 8px 0; border-left: 5px solid #1f4e79; }
table { border-collapse: collapse; margin: 4px 0 10px 0; }
th, td { border: 1px solid #b8c4d0; padding: 3px 8px; }
th { background: #eef2f7; text-align: left; }
td.num { text-align: right; font-family: "DejaVu Sans Mono", monospace; }
tr.missing td { color: #8a1c1c; background: #fff6f6; }
table.kv th { width: 14em; }
.small { color: #555; font-size: 12px; }
figure { margin: 8px 0 18px 0; }
figcaption { font-size: 12px; color: #444; }
ul.notes li { margin: 3px 0; }
"#;

fn num(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "-".into()
    }
}

fn kv(o: &mut String, k: &str, v: &str) {
    let _ = writeln!(o, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
}

fn secs(ns: u64) -> f64 {
    ns as f64 * 1e-9
}

/// The HTML report of a run: `s` with its regions filled in, `meta` for the banner, the
/// plots to inline (drawn here as SVG) and the LCPI tables ([`super::plots::lcpi_tables`]).
///
/// # Errors
/// A plot that cannot be drawn (font or drawing errors).
pub fn render(
    s: &Summary,
    meta: &RunMeta,
    plots: &[NamedPlot],
    lcpi_tables: &[(String, lcpi::Table)],
) -> Result<String> {
    let mut o = String::new();
    let short_cmd: String = if s.command.chars().count() > 90 {
        s.command.chars().take(90).collect::<String>() + " …"
    } else {
        s.command.clone()
    };
    let title = format!("powerperf report: {short_cmd}");
    let _ = writeln!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>",
        escape(&title)
    );
    let _ = writeln!(o, "<h1>{}</h1>", escape(&title));

    // Banner.
    let _ = writeln!(o, "<h2 id=\"run\">Run</h2>\n<table class=\"kv\">");
    kv(&mut o, "command", &s.command);
    if let Some(w) = &s.workload {
        kv(&mut o, "workload", w);
    }
    kv(&mut o, "ended", &ending_line(s));
    kv(&mut o, "wallclock", &format!("{:.6} s", s.duration_s));
    kv(&mut o, "host", &meta.run.host);
    kv(&mut o, "CPU", &meta.run.cpu_model);
    kv(&mut o, "kernel", &meta.run.kernel);
    if let Some(r) = meta.run.rank {
        kv(&mut o, "MPI rank", &r.to_string());
    }
    kv(
        &mut o,
        "sampling",
        &format!(
            "{} samples every {} ms{}",
            meta.run.samples,
            num(meta.run.interval_ns as f64 * 1e-6, 1),
            if meta.run.truncated {
                " (timeline truncated)"
            } else {
                ""
            }
        ),
    );
    if let Some(f) = meta.knobs.core_freq_mhz {
        kv(&mut o, "core frequency", &format!("{f:.0} MHz"));
    }
    if let Some(g) = &meta.knobs.governor {
        kv(&mut o, "governor", g);
    }
    if let Some(ipc) = s.ipc {
        kv(&mut o, "IPC", &format!("{ipc:.3} instructions per cycle"));
    }
    let total_j: f64 =
        s.energy_j.values().sum::<f64>() + s.gpus.iter().map(|g| g.energy_j).sum::<f64>();
    if !s.energy_j.is_empty() || !s.gpus.is_empty() {
        kv(
            &mut o,
            "energy (all domains listed below)",
            &format!("{total_j:.3} J"),
        );
    }
    kv(&mut o, "powerperf", &meta.run.tool_version);
    o.push_str("</table>\n");

    // Events.
    let _ = writeln!(
        o,
        "<h2 id=\"events\">Events</h2>\n<table class=\"events\">\n<tr><th>event</th><th>backend</th><th>status</th><th>value</th><th>rate</th><th>reason</th></tr>"
    );
    for r in &s.events {
        let rate = match (r.rate, &r.rate_unit) {
            (Some(x), Some(u)) => format!("{} {u}", num(x, 3)),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            if r.value.is_none() { " class=\"missing\"" } else { "" },
            escape(&r.event),
            escape(&r.backend),
            escape(&r.status),
            escape(&display_value(r)),
            escape(&rate),
            escape(r.reason.as_deref().unwrap_or(""))
        );
    }
    o.push_str("</table>\n");

    // Energy.
    let _ = writeln!(o, "<h2 id=\"energy\">Energy</h2>");
    if s.energy_j.is_empty() {
        o.push_str(
            "<p class=\"small\">No RAPL domain was counted (see the events and the notes).</p>\n",
        );
    } else {
        o.push_str("<table class=\"rapl\">\n<tr><th>RAPL domain</th><th>energy (J)</th><th>mean power (W)</th></tr>\n");
        for (d, j) in &s.energy_j {
            let w = s.mean_power_w.get(d).copied().unwrap_or(f64::NAN);
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                escape(d),
                num(*j, 3),
                num(w, 2)
            );
        }
        o.push_str("</table>\n");
    }
    if s.gpus.is_empty() {
        o.push_str("<p class=\"small\">No GPU energy (no NVML GPU was sampled).</p>\n");
    } else {
        o.push_str("<table class=\"gpu\">\n<tr><th>GPU</th><th>energy (J, NVML counter)</th><th>mean power (W)</th><th>∫ sampled power (J)</th><th>difference (%)</th></tr>\n");
        for g in &s.gpus {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                escape(&g.gpu),
                num(g.energy_j, 3),
                num(g.mean_power_w, 2),
                g.power_integral_j.map_or("-".into(), |v| num(v, 3)),
                g.integral_vs_counter_pct.map_or("-".into(), |v| format!("{v:+.2}"))
            );
        }
        o.push_str("</table>\n");
    }

    if !s.power_devices.is_empty() {
        o.push_str("<table class=\"devices\">\n<tr><th>power device</th><th>origin</th><th>label</th><th>energy (J)</th><th>mean power (W)</th><th>energy from</th><th>source</th></tr>\n");
        for d in &s.power_devices {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
                escape(&d.stem),
                escape(&d.origin),
                escape(&d.label),
                d.energy_j.map_or("-".into(), |v| num(v, 3)),
                d.mean_power_w.map_or("-".into(), |v| num(v, 2)),
                escape(&d.energy_from),
                escape(&d.source)
            );
        }
        o.push_str("</table>\n");
    }

    // Plots.
    let _ = writeln!(o, "<h2 id=\"plots\">Plots</h2>");
    if plots.is_empty() {
        o.push_str("<p class=\"small\">No plots: the run has no timeline.</p>\n");
    }
    for p in plots {
        let svg = p.plot.svg()?;
        let _ = writeln!(
            o,
            "<figure id=\"plot-{}\">\n{svg}\n<figcaption>{}</figcaption>\n</figure>",
            escape(&p.name),
            escape(&p.name)
        );
    }

    // Regions.
    let _ = writeln!(o, "<h2 id=\"regions\">Regions</h2>");
    if s.regions.is_empty() {
        o.push_str("<p class=\"small\">No regions: the program marked none (powerperf-rt, see rt/README.md).</p>\n");
    } else {
        regions_html(&mut o, &s.regions, s.duration_s);
    }

    // GPU activity (collect --gpu).
    if let Some(g) = &s.gpu_activity {
        let _ = writeln!(
            o,
            "<h2 id=\"gpu-activity\">GPU activity</h2>\n<pre>{}</pre>",
            escape(&super::gpu::render_text(g, s.duration_s))
        );
    }

    // PC samples (collect --pc-sampling cpu).
    if let Some(p) = &s.pc_samples {
        let _ = writeln!(
            o,
            "<h2 id=\"pc-samples\">Top functions (PC samples)</h2>\n<pre>{}</pre>",
            escape(&super::pc::render_text(p))
        );
    }

    // LCPI.
    let _ = writeln!(
        o,
        "<h2 id=\"lcpi\">LCPI (upper bounds, cycles per instruction)</h2>"
    );
    lcpi_html(&mut o, lcpi_tables);

    // Notes.
    let _ = writeln!(o, "<h2 id=\"notes\">Notes</h2>");
    if s.notes.is_empty() {
        o.push_str("<p class=\"small\">None.</p>\n");
    } else {
        o.push_str("<ul class=\"notes\">\n");
        for n in &s.notes {
            let _ = writeln!(o, "<li>{}</li>", escape(n));
        }
        o.push_str("</ul>\n");
    }
    let _ = writeln!(
        o,
        "<p class=\"small\">Written by powerperf {}; run directory format: docs/run-format.md.</p>\n</body>\n</html>",
        escape(env!("CARGO_PKG_VERSION"))
    );
    Ok(o)
}

fn regions_html(o: &mut String, regions: &[RegionRecord], wall_s: f64) {
    let has_energy = regions
        .iter()
        .any(|r| super::regions::energy_j(r).is_some());
    let energy =
        |r: &RegionRecord| super::regions::energy_j(r).map_or("-".to_string(), |e| num(e, 3));
    let _ = writeln!(
        o,
        "<p class=\"small\">GPTL-style: inclusive seconds per thread (Thd is the process id, with .thread id for other threads).</p>\n<table class=\"regions\">\n<tr><th>Thd</th><th>Called</th><th>Wallclock (s)</th><th>max (s)</th><th>min (s)</th>{}<th>region</th></tr>",
        if has_energy { "<th>energy (J)</th>" } else { "" }
    );
    let mut threads: BTreeMap<(u32, u32), Vec<&RegionRecord>> = BTreeMap::new();
    for r in regions {
        threads.entry((r.pid, r.tid)).or_default().push(r);
    }
    for ((pid, tid), rows) in &threads {
        let label = if pid == tid {
            format!("{pid}")
        } else {
            format!("{pid}.{tid}")
        };
        for r in rows {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>{}<td style=\"padding-left:{}em\">{}{}</td></tr>",
                escape(&label),
                r.calls,
                num(secs(r.incl_ns), 6),
                num(secs(r.max_ns), 6),
                num(secs(r.min_ns), 6),
                if has_energy { format!("<td class=\"num\">{}</td>", energy(r)) } else { String::new() },
                0.5 + 1.5 * r.depth as f64,
                escape(&r.region),
                if r.exit_closed > 0 { " <span class=\"small\">(closed at exit)</span>" } else { "" }
            );
        }
    }
    o.push_str("</table>\n");
    // IPM-style banner: per path, summed over threads.
    let mut sum: BTreeMap<&str, (u64, u64, BTreeMap<String, f64>)> = BTreeMap::new();
    for r in regions {
        let e = sum.entry(r.path.as_str()).or_default();
        e.0 += r.incl_ns;
        e.1 += r.calls;
        for (k, v) in &r.values {
            *e.2.entry(k.clone()).or_default() += v;
        }
    }
    let _ = writeln!(
        o,
        "<p class=\"small\">IPM-style banner: time, count and %wall per region, summed over threads (threaded regions can exceed 100 %).</p>\n<table class=\"banner\">\n<tr><th>region</th><th>[time s]</th><th>[count]</th><th>&lt;%wall&gt;</th>{}</tr>",
        if has_energy { "<th>[energy J]</th>" } else { "" }
    );
    for (path, (ns, calls, values)) in &sum {
        let pct = if wall_s > 0.0 {
            100.0 * secs(*ns) / wall_s
        } else {
            f64::NAN
        };
        let rec = RegionRecord {
            pid: 0,
            tid: 0,
            region: String::new(),
            path: String::new(),
            depth: 0,
            calls: 0,
            incl_ns: 0,
            min_ns: 0,
            max_ns: 0,
            exit_closed: 0,
            values: values.clone(),
        };
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{calls}</td><td class=\"num\">{}</td>{}</tr>",
            escape(path),
            num(secs(*ns), 6),
            num(pct, 2),
            if has_energy { format!("<td class=\"num\">{}</td>", energy(&rec)) } else { String::new() }
        );
    }
    o.push_str("</table>\n");
}

fn lcpi_html(o: &mut String, tables: &[(String, lcpi::Table)]) {
    let Some((_, first)) = tables.first() else {
        o.push_str("<p class=\"small\">No LCPI table.</p>\n");
        return;
    };
    let _ = writeln!(
        o,
        "<p class=\"small\">PerfExpert's local CPI per category (definitions: {}); a cell without a value says why on hover.</p>\n<table class=\"lcpi\">\n<tr><th>category</th>{}</tr>",
        escape(&first.source),
        tables
            .iter()
            .map(|(n, _)| format!("<th>{}</th>", escape(n)))
            .collect::<String>()
    );
    let cell = |v: &Result<f64, String>| match v {
        Ok(x) => format!("<td class=\"num\">{x:.4}</td>"),
        Err(e) => format!("<td class=\"num\" title=\"{}\">n/a</td>", escape(e)),
    };
    let _ = writeln!(
        o,
        "<tr><th>overall CPI</th>{}</tr>",
        tables
            .iter()
            .map(|(_, t)| cell(&t.overall_cpi))
            .collect::<String>()
    );
    for (c, label) in lcpi::CATEGORIES {
        let _ = writeln!(
            o,
            "<tr><th>{}</th>{}</tr>",
            escape(label),
            tables
                .iter()
                .map(|(_, t)| match t.rows.iter().find(|r| r.category == *c) {
                    Some(r) => cell(&r.value),
                    None => "<td>-</td>".into(),
                })
                .collect::<String>()
        );
    }
    o.push_str("</table>\n");
    let missing: Vec<String> = first
        .rows
        .iter()
        .filter_map(|r| r.value.as_ref().err().map(|e| format!("{}: {e}", r.label)))
        .collect();
    if !missing.is_empty() {
        o.push_str("<ul class=\"small\">\n");
        for m in missing {
            let _ = writeln!(o, "<li>{}</li>", escape(&m));
        }
        o.push_str("</ul>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn report_has_tables_and_escapes_the_command() {
        let mut meta = super::super::tests::sample_meta();
        meta.run.command = vec!["sh".into(), "-c".into(), "echo <b>&".into()];
        meta.notes = vec!["note <i>".into()];
        let s = super::super::summarize(&meta);
        let lc = super::super::plots::lcpi_tables(&meta, &[]);
        let html = render(&s, &meta, &[], &lc).unwrap();
        assert!(html.contains("sh -c echo &lt;b&gt;&amp;"), "{html}");
        assert!(!html.contains("<b>&"));
        assert!(html.contains("note &lt;i&gt;"));
        assert!(html.contains("<table class=\"events\">"));
        assert!(html.contains("<td>branch-misses</td>"));
        assert!(html.contains("<table class=\"rapl\">"));
        assert!(html.contains("<table class=\"lcpi\">"));
        assert!(html.ends_with("</html>\n"));
    }
}
