//! JSON export: the [`Summary`] as one object.

use super::Summary;

pub(super) fn render(s: &Summary) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(s)? + "\n")
}
