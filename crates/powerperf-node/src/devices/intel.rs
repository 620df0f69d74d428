//! Intel GPUs: the xe driver (`Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon`) and
//! i915 (`…/sysfs-driver-intel-i915-hwmon`). Their hwmon gives energy counters only
//! (`energyN_input`, µJ; xe: channel 1 `card`, channel 2 `pkg`): one device per channel,
//! power is Δenergy/Δt. Stems: `xe<k>_<label>` (`xe0_card`, `xe0_pkg`), `i915_<k>` for
//! i915's `energy1_input` (`i915_<k>_<label>` for any other channel), k being the card's rank
//! among the hwmon devices of that driver in hwmonN order.
//!
//! Controls: `powerN_max` (µW) on both; clocks through `device/tileT/gtG/freq0/{min,max}_freq`
//! (xe, MHz) or `device/drm/cardN/gt_{min,max}_freq_mhz` (i915).
//!
//! The GPU's clock (`<stem>_clock_mhz` of its first device, `xe<k>_card` and `i915_<k>`) is
//! the actual GT frequency, MHz, as PCODE resolved it:
//! - xe: `device/tile0/gt0/freq0/act_freq` (`xe_gt_freq.c`: "act_freq: The actual resolved
//!   frequency decided by PCODE"). gt0 only, not the mean over gts: gt0 is the root tile's
//!   primary GT, which runs render and compute; on Meteor Lake, Lunar Lake and Battlemage the
//!   other gt of tile 0 is the media GT, whose clock is not the compute clock and which reads
//!   0 while it sleeps, so a mean would mix both; a second tile's gt (Ponte Vecchio) is
//!   locked to the same clock as gt0 by `gpu.locked_clocks` (every gt is written).
//! - i915: `device/drm/cardN/gt_act_freq_mhz` of the card the controls use ([`i915_freq_dir`];
//!   `intel_gt_sysfs_pm.c`, `act_freq_mhz_show`: `intel_rps_read_actual_frequency`, CAGF).
//!
//! Both read 0 while the GT is in RC6 (`xe_guc_pc_get_act_freq`: "When in RC6, actual
//! frequency reported will be 0"); 0 is therefore no value (an empty cell), not a clock.

use super::hwmon::{channel_devices, stem_part, Channel, Clock, GpuOf};
use super::read::read_u64;
use super::{Ctx, GpuHwmon, Origin};
use std::path::{Path, PathBuf};

/// The `freq0` directories of an xe card's gts (`device/tileT/gtG/freq0` that have
/// `min_freq`), tiles and gts in number order: those the controls write, the first one's
/// `act_freq` the clock read.
pub(crate) fn xe_freq_dirs(device: &Path) -> Vec<PathBuf> {
    crate::sysfs::numbered_dirs(device, "tile")
        .iter()
        .flat_map(|t| crate::sysfs::numbered_dirs(t, "gt"))
        .map(|g| g.join("freq0"))
        .filter(|f| f.join("min_freq").is_file())
        .collect()
}

/// The `drm/cardN` directory of an i915 card that has `gt_min_freq_mhz` (the first, in N
/// order): the controls' and the clock's.
pub(crate) fn i915_freq_dir(device: &Path) -> Option<PathBuf> {
    crate::sysfs::numbered_dirs(&device.join("drm"), "card")
        .into_iter()
        .find(|c| c.join("gt_min_freq_mhz").is_file())
}

/// The actual-frequency file `file` as a clock where it reads.
fn actual_clock(file: PathBuf) -> Option<Clock> {
    read_u64(&file).is_ok().then_some(Clock::ActualMhz(file))
}

fn channel_part(ch: &Channel, label: Option<&str>) -> String {
    label
        .map(stem_part)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ch.prefix.clone())
}

fn power_max_controls(ctx: &mut Ctx, origin: Origin, name: &str, dir: &Path) {
    for n in 1..=8 {
        let p = dir.join(format!("power{n}_max"));
        if p.symlink_metadata().is_err() {
            continue;
        }
        let what = super::hwmon::channel_label(dir, &format!("power{n}"))
            .map(|l| format!("power{n}_max, W ({l})"))
            .unwrap_or_else(|| format!("power{n}_max, W"));
        // powerperfd's `gpu.power_limit` writes power1_max only (the card's limit; xe's
        // power2_max, the package's, is not controlled)
        let grant = (n == 1).then_some("gpu.power_limit");
        ctx.control_row(origin, name, &what, &p, grant);
    }
}

/// An xe card: GPU `index` of the sysfs GPUs, the `g.rank`-th xe card.
pub(crate) fn discover_xe(ctx: &mut Ctx, index: usize, g: &GpuHwmon) {
    let (k, dir) = (g.rank, g.dir.as_path());
    let clock = xe_freq_dirs(&dir.join("device"))
        .into_iter()
        .next()
        .and_then(|f| actual_clock(f.join("act_freq")));
    channel_devices(
        ctx,
        Origin::Xe,
        "xe",
        dir,
        &|ch, label| format!("xe{k}_{}", channel_part(ch, label)),
        &|ch, label| format!("Intel GPU {k} {}", label.unwrap_or(&ch.prefix)),
        Some(GpuOf { index, clock }),
    );
    power_max_controls(ctx, Origin::Xe, "xe", dir);
    for tile in crate::sysfs::numbered_dirs(&dir.join("device"), "tile") {
        for gt in crate::sysfs::numbered_dirs(&tile, "gt") {
            let freq = gt.join("freq0");
            let t = tile
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let g = gt
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            for f in ["min_freq", "max_freq"] {
                let p = freq.join(f);
                if p.symlink_metadata().is_ok() {
                    let what = format!("{t}/{g} {f}, MHz");
                    ctx.control_row(Origin::Xe, "xe", &what, &p, Some("gpu.locked_clocks"));
                }
            }
        }
    }
}

/// An i915 card: GPU `index` of the sysfs GPUs, the `g.rank`-th i915 card.
pub(crate) fn discover_i915(ctx: &mut Ctx, index: usize, g: &GpuHwmon) {
    let (k, dir) = (g.rank, g.dir.as_path());
    let clock =
        i915_freq_dir(&dir.join("device")).and_then(|c| actual_clock(c.join("gt_act_freq_mhz")));
    channel_devices(
        ctx,
        Origin::I915,
        "i915",
        dir,
        &|ch, label| {
            if ch.prefix == "energy1" {
                format!("i915_{k}")
            } else {
                format!("i915_{k}_{}", channel_part(ch, label))
            }
        },
        &|ch, label| format!("Intel GPU {k} {}", label.unwrap_or(&ch.prefix)),
        Some(GpuOf { index, clock }),
    );
    power_max_controls(ctx, Origin::I915, "i915", dir);
    // powerperfd's `gpu.locked_clocks` writes the first card that has gt_min_freq_mhz
    let mut controlled = false;
    for card in crate::sysfs::numbered_dirs(&dir.join("device/drm"), "card") {
        let grant =
            (!controlled && card.join("gt_min_freq_mhz").is_file()).then_some("gpu.locked_clocks");
        controlled |= grant.is_some();
        for f in ["gt_min_freq_mhz", "gt_max_freq_mhz"] {
            let p = card.join(f);
            if p.symlink_metadata().is_ok() {
                let c = card
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                let what = format!("{c} {f}, MHz");
                ctx.control_row(Origin::I915, "i915", &what, &p, grant);
            }
        }
    }
}
