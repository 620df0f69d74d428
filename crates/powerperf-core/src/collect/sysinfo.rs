//! Facts about the host for `run.toml`: host name, kernel, CPU model, and the CPU frequency
//! knobs from cpufreq sysfs (read under a root directory, `/` in production).

use powerperf_format::run::Knobs;
use powerperf_node::sysfs::read_trim;
use std::path::Path;

/// CPU identity from `/proc/cpuinfo`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuId {
    pub model_name: String,
    pub vendor: Option<String>,
    pub family: Option<u32>,
    pub model: Option<u32>,
}

/// Parse the first processor block of `/proc/cpuinfo` text: the one cpuinfo parser.
///
/// x86: `vendor_id`, `cpu family`, `model`, `model name`. Arm (the kernel's
/// `arch/arm64/kernel/cpuinfo.c` fields): the vendor is `ARM` for `CPU implementer` 0x41
/// (Arm Ltd), else the implementer code in hex (e.g. `0x51`); the family is `CPU
/// architecture` and the model `CPU part`. These are the (vendor, family, model) keys the
/// machine-constants files use (`machine-constants/README.md`), so a run collected on Arm
/// finds its constants as this machine does.
pub fn parse_cpuinfo(text: &str) -> CpuId {
    let num = |s: &str| -> Option<u32> {
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(h) => u32::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        }
    };
    let mut id = CpuId::default();
    for line in text.lines() {
        if line.trim().is_empty() && !id.model_name.is_empty() {
            break;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "model name" | "Processor" if id.model_name.is_empty() => id.model_name = v.to_string(),
            "vendor_id" => id.vendor = Some(v.to_string()),
            "CPU implementer" if id.vendor.is_none() => {
                id.vendor = num(v).map(|i| match i {
                    0x41 => "ARM".to_string(),
                    other => format!("{other:#x}"),
                });
            }
            "cpu family" => id.family = num(v),
            "CPU architecture" if id.family.is_none() => id.family = num(v),
            "model" => id.model = num(v),
            "CPU part" if id.model.is_none() => id.model = num(v),
            _ => {}
        }
    }
    if id.model_name.is_empty() {
        id.model_name = "unknown".into();
    }
    id
}

impl CpuId {
    /// (vendor, family, model), the key of the machine-constants files, when all three are
    /// known.
    #[must_use]
    pub fn constants_key(&self) -> Option<(String, u32, u32)> {
        Some((self.vendor.clone()?, self.family?, self.model?))
    }
}

/// This machine's CPU identity.
pub fn cpu_id() -> CpuId {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| parse_cpuinfo(&t))
        .unwrap_or_default()
}

/// Host name and kernel release from `uname(2)`.
pub fn host_and_kernel() -> (String, String) {
    // SAFETY: uname fills a zeroed struct; the fields are NUL-terminated C strings.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return ("unknown".into(), "unknown".into());
        }
        let s = |f: &[libc::c_char]| {
            std::ffi::CStr::from_ptr(f.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        (
            s(&u.nodename),
            format!("{} {}", s(&u.sysname), s(&u.release)),
        )
    }
}

/// The CPU frequency knobs of CPU 0 from `<root>/sys/devices/system/cpu/cpu0/cpufreq`
/// (kHz in sysfs, MHz here), and threads from `OMP_NUM_THREADS`.
pub fn read_knobs(root: &Path) -> Knobs {
    let dir = root.join("sys/devices/system/cpu/cpu0/cpufreq");
    let khz = |f: &str| {
        read_trim(&dir.join(f))
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map(|k| k as f64 / 1000.0)
    };
    let mut k = Knobs {
        threads: std::env::var("OMP_NUM_THREADS")
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        ..Knobs::default()
    };
    if dir.is_dir() {
        k.core_freq_mhz = khz("scaling_cur_freq");
        k.core_freq_min_mhz = khz("scaling_min_freq");
        k.core_freq_max_mhz = khz("scaling_max_freq");
        k.governor = read_trim(&dir.join("scaling_governor")).ok();
        k.scaling_driver = read_trim(&dir.join("scaling_driver")).ok();
        k.energy_performance_preference =
            read_trim(&dir.join("energy_performance_preference")).ok();
        let cpus = root.join("sys/devices/system/cpu");
        let freqs: Vec<f64> = std::fs::read_dir(&cpus)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| {
                        e.file_name().to_str().is_some_and(|n| {
                            n.starts_with("cpu")
                                && n[3..].chars().all(|c| c.is_ascii_digit())
                                && n.len() > 3
                        })
                    })
                    .filter_map(|e| {
                        read_trim(&e.path().join("cpufreq/scaling_cur_freq"))
                            .ok()?
                            .parse::<f64>()
                            .ok()
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !freqs.is_empty() {
            k.effective_freq_mhz = Some(freqs.iter().sum::<f64>() / freqs.len() as f64 / 1000.0);
        }
    } else {
        k.cpufreq_note = Some(format!(
            "no cpufreq on this machine ({} is absent): the CPU frequency is not known",
            dir.display()
        ));
    }
    let no_turbo = read_trim(&root.join("sys/devices/system/cpu/intel_pstate/no_turbo")).ok();
    let boost = read_trim(&root.join("sys/devices/system/cpu/cpufreq/boost")).ok();
    k.turbo = match (no_turbo.as_deref(), boost.as_deref()) {
        (Some(v), _) => Some(v == "0"),
        (None, Some(v)) => Some(v == "1"),
        _ => None,
    };
    k.rapl_power_limits_w = rapl_power_limits(root);
    k
}

/// RAPL power limits from powercap (`constraint_N_name`, `constraint_N_power_limit_uw`),
/// keyed `<zone name>.<constraint name>`, watts.
pub fn rapl_power_limits(root: &Path) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(root.join("sys/class/powercap")) else {
        return out;
    };
    for z in rd.filter_map(|e| e.ok()).map(|e| e.path()) {
        let Some(zone) = read_trim(&z.join("name")).ok() else {
            continue;
        };
        for n in 0..4 {
            let (Some(name), Some(uw)) = (
                read_trim(&z.join(format!("constraint_{n}_name"))).ok(),
                read_trim(&z.join(format!("constraint_{n}_power_limit_uw")))
                    .ok()
                    .and_then(|s| s.parse::<f64>().ok()),
            ) else {
                continue;
            };
            out.insert(format!("{zone}.{name}"), uw * 1e-6);
        }
    }
    out
}

/// Number of CPUs this process may run on (`std::thread::available_parallelism`: its
/// affinity mask and cgroup quota, not every online CPU; that list is
/// [`super::pc_sampler::online_cpu_list`]).
pub fn available_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_x86_cpuinfo() {
        let t = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n\nprocessor\t: 1\n";
        let id = parse_cpuinfo(t);
        assert_eq!(id.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(id.family, Some(6));
        assert_eq!(id.model, Some(143));
        assert_eq!(id.model_name, "Intel(R) Xeon(R) Platinum 8480+");
    }

    #[test]
    fn parses_arm_cpuinfo() {
        let t = "processor\t: 0\nBogoMIPS\t: 48.00\nCPU implementer\t: 0x41\nCPU part\t: 0xc0f\n";
        let id = parse_cpuinfo(t);
        assert_eq!(id.vendor.as_deref(), Some("ARM"));
        assert_eq!(id.model, Some(0xc0f));
        // No `CPU architecture` line: the constants key is incomplete.
        assert_eq!(id.constants_key(), None);
        let t = "processor\t: 0\nCPU implementer\t: 0x41\nCPU architecture: 7\nCPU part\t: 0xc0f\n";
        assert_eq!(
            parse_cpuinfo(t).constants_key(),
            Some(("ARM".into(), 7, 0xc0f))
        );
        let t = "CPU implementer\t: 0x51\nCPU architecture: 8\nCPU part\t: 0x802\n";
        assert_eq!(
            parse_cpuinfo(t).constants_key(),
            Some(("0x51".into(), 8, 0x802))
        );
    }

    #[test]
    fn knobs_from_fixture_and_missing_cpufreq() {
        let root = tempfile::tempdir().unwrap();
        let k = read_knobs(root.path());
        assert!(k.core_freq_mhz.is_none());
        assert!(k.cpufreq_note.as_deref().unwrap().contains("no cpufreq"));
        let d = root.path().join("sys/devices/system/cpu/cpu0/cpufreq");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("scaling_cur_freq"), "2200000\n").unwrap();
        std::fs::write(d.join("scaling_governor"), "userspace\n").unwrap();
        std::fs::write(
            d.join("energy_performance_preference"),
            "balance_performance\n",
        )
        .unwrap();
        let p = root.path().join("sys/devices/system/cpu/intel_pstate");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("no_turbo"), "0\n").unwrap();
        let z = root.path().join("sys/class/powercap/intel-rapl:0");
        std::fs::create_dir_all(&z).unwrap();
        std::fs::write(z.join("name"), "package-0\n").unwrap();
        std::fs::write(z.join("constraint_0_name"), "long_term\n").unwrap();
        std::fs::write(z.join("constraint_0_power_limit_uw"), "165000000\n").unwrap();
        let k = read_knobs(root.path());
        assert_eq!(k.core_freq_mhz, Some(2200.0));
        assert_eq!(k.effective_freq_mhz, Some(2200.0));
        assert_eq!(k.governor.as_deref(), Some("userspace"));
        assert_eq!(k.turbo, Some(true));
        assert_eq!(
            k.energy_performance_preference.as_deref(),
            Some("balance_performance")
        );
        assert_eq!(k.rapl_power_limits_w["package-0.long_term"], 165.0);
    }
}
