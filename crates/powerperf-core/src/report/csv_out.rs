//! CSV export: one line per event (the [`Row`](super::Row) fields), through the csv crate.

use super::Summary;

pub(super) fn render(s: &Summary) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(vec![]);
    for r in &s.events {
        w.serialize(r)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}
