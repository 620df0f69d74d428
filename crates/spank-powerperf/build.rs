//! The plugin's `plugin_version` is the Slurm it is built against: SLURM_VERSION_NUMBER of
//! `slurm/slurm_version.h` (Debian's libslurm-dev; `SLURM_INCLUDE_DIR` names another
//! include directory), written into `$OUT_DIR/plugin.rs` as the `SPANK_PLUGIN!` line.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let inc = std::env::var_os("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    let header = inc.join("slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let text = std::fs::read_to_string(&header).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e} (install libslurm-dev, or set SLURM_INCLUDE_DIR to Slurm's include directory)",
            header.display()
        )
    });
    let version = text
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some("SLURM_VERSION_NUMBER"))
                .then(|| w.next())
                .flatten()
        })
        .filter(|v| {
            v.strip_prefix("0x")
                .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .unwrap_or_else(|| panic!("no SLURM_VERSION_NUMBER 0x... in {}", header.display()));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("plugin.rs");
    std::fs::write(
        out,
        format!("slurm_spank::SPANK_PLUGIN!(b\"powerperf\", {version}, SpankPowerperf);\n"),
    )
    .unwrap();
}
