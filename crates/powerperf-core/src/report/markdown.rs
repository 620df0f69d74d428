//! Markdown export: a table of events, then the run's ending and duration.

use super::{display_value, ending_line, Summary};
use std::fmt::Write;

pub(super) fn render(s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### `{}`\n", s.command);
    let _ = writeln!(o, "| event | value | rate | status |\n|---|---|---|---|");
    for r in &s.events {
        let rate = match (&r.rate, &r.rate_unit) {
            (Some(x), Some(u)) => format!("{x:.3} {u}"),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "| {} | {} | {rate} | {} |",
            r.event,
            display_value(r),
            r.status
        );
    }
    let _ = writeln!(
        o,
        "\n{:.6} s elapsed; command {}.",
        s.duration_s,
        ending_line(s)
    );
    if let Some(g) = &s.gpu_activity {
        let _ = writeln!(o, "\n```\n{}```", super::gpu::render_text(g, s.duration_s));
    }
    if let Some(p) = &s.pc_samples {
        let _ = writeln!(o, "\n```\n{}```", super::pc::render_text(p));
    }
    if !s.regions.is_empty() {
        let _ = writeln!(o, "\n| pid | tid | region | calls | incl s | min s | max s | energy J |\n|---|---|---|---|---|---|---|---|");
        for r in &s.regions {
            let e = super::regions::energy_j(r)
                .map(|e| format!("{e:.3}"))
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "| {} | {} | `{}` | {} | {:.6} | {:.6} | {:.6} | {e} |",
                r.pid,
                r.tid,
                r.path,
                r.calls,
                r.incl_ns as f64 * 1e-9,
                r.min_ns as f64 * 1e-9,
                r.max_ns as f64 * 1e-9
            );
        }
    }
    o
}
