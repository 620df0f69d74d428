//! Intel GPUs: the xe driver (`Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon`) and
//! i915 (`…/sysfs-driver-intel-i915-hwmon`). Their hwmon gives energy counters only
//! (`energyN_input`, µJ; xe: channel 1 `card`, channel 2 `pkg`): one device per channel,
//! power is Δenergy/Δt. Stems: `xe<k>_<label>` (`xe0_card`, `xe0_pkg`), `i915_<k>` for
//! i915's `energy1_input` (`i915_<k>_<label>` for any other channel), k being the card's rank
//! among the hwmon devices of that driver in hwmonN order.
//!
//! Controls: `powerN_max` (µW) on both; clocks through `device/tileT/gtG/freq0/{min,max}_freq`
//! (xe, MHz) or `device/drm/cardN/gt_{min,max}_freq_mhz` (i915).

use super::hwmon::{channel_devices, stem_part, Channel};
use super::{Ctx, Origin};
use std::path::Path;

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

/// The k-th xe card's hwmon directory `dir`.
pub(crate) fn discover_xe(ctx: &mut Ctx, k: usize, dir: &Path) {
    channel_devices(
        ctx,
        Origin::Xe,
        "xe",
        dir,
        &|ch, label| format!("xe{k}_{}", channel_part(ch, label)),
        &|ch, label| format!("Intel GPU {k} {}", label.unwrap_or(&ch.prefix)),
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

/// The k-th i915 card's hwmon directory `dir`.
pub(crate) fn discover_i915(ctx: &mut Ctx, k: usize, dir: &Path) {
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
