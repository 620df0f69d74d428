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
    o
}
