//! `powerperf devices`: every power, energy and control source on this node (RAPL, NVML,
//! amdgpu, xe, i915, ACPI power meters, other hwmon sensors), and whether this user can read
//! or set it, directly or through powerperfd where its policy grants it
//! (`powerperf_node::devices::discover`).

use powerperf_core::output::OutputFormat as Format;
use powerperf_node::devices::{discover_with, Access, DiscoverOptions, Quantity, SourceInfo};
use std::path::PathBuf;

/// Arguments of `powerperf devices`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  powerperf devices
  powerperf devices --format json | jq '.[] | select(.quantity == \"power\") | .stem'
  powerperf devices --sysfs-root tests/fixtures/sysfs/grace-hopper --no-nvml

read/set: yes (this user), daemon (through powerperfd, on $POWERPERF_DAEMON or its default
socket, whose policy grants you that reading or control), no (the reason and the fix follow
the table). See docs/devices.md.")]
pub struct DevicesArgs {
    /// Root of the sysfs tree (a fixture directory in tests).
    #[arg(long, default_value = "/", value_name = "DIR")]
    pub sysfs_root: PathBuf,
    /// Output format: `table` (`text`; then the problems found and the notes) or `json` (an
    /// array of sources, docs/devices.md gives the keys; problems and notes go to stderr).
    #[arg(long, default_value = "table")]
    pub format: Format,
    /// Do not load NVML (with a fixture root on a node with NVIDIA GPUs).
    #[arg(long)]
    pub no_nvml: bool,
}

fn access(a: &Access) -> &'static str {
    match a {
        Access::Yes => "yes",
        Access::Daemon => "daemon",
        Access::No(_) => "no",
    }
}

/// The text table: one row per source, columns padded to their widest cell.
fn table(rows: &[SourceInfo]) -> String {
    let head = [
        "origin", "name", "stem", "label", "quantity", "path", "read", "set",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|s| {
            [
                s.origin.as_str().to_string(),
                s.name.clone().unwrap_or_else(|| "-".into()),
                s.stem.clone().unwrap_or_else(|| "-".into()),
                s.label.clone(),
                serde_json::to_value(s.quantity)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                s.path.display().to_string(),
                access(&s.readable).into(),
                access(&s.settable).into(),
            ]
        })
        .collect();
    let mut width = head.map(|h| h.chars().count());
    for r in &cells {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |r: &[String]| {
        let padded: Vec<String> = r
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(&head.map(str::to_string));
    for r in &cells {
        out += &line(r);
    }
    out
}

/// Run `powerperf devices`.
///
/// # Errors
/// `--format csv|markdown`; a failed write to stdout. Sources that cannot be read are
/// listed, not errors.
pub fn run(args: DevicesArgs) -> anyhow::Result<i32> {
    args.format
        .check("devices", &[Format::Table, Format::Json])?;
    let d = discover_with(
        &args.sysfs_root,
        DiscoverOptions {
            nvml: !args.no_nvml,
            probe_daemon: true,
        },
    );
    if args.format == Format::Json {
        outln!("{}", serde_json::to_string_pretty(&d.listing)?);
        for p in &d.problems {
            eprintln!("problem: {p}");
        }
        for n in &d.notes {
            eprintln!("note: {n}");
        }
        return Ok(0);
    }
    if d.listing.is_empty() {
        let hw = args.sysfs_root.join("sys/class/hwmon");
        outln!(
            "no power, energy or control source found under {}. To check: `grep . {}/*/name` (hwmon devices and their drivers), `ls {}` (RAPL), `nvidia-smi` (NVML); a GPU's driver (amdgpu, xe, i915) must be loaded.",
            args.sysfs_root.display(),
            hw.display(),
            args.sysfs_root.join("sys/class/powercap").display()
        );
    } else {
        out!("{}", table(&d.listing));
    }
    for s in d.listing.iter().filter(|s| s.quantity == Quantity::Control) {
        if let Access::No(why) = &s.settable {
            outln!("cannot set {}: {why}", s.path.display());
        }
    }
    for p in &d.problems {
        outln!("problem: {p}");
    }
    for n in &d.notes {
        outln!("note: {n}");
    }
    Ok(0)
}
