//! Facts about the host for `run.toml`: host name, kernel, CPU model, and the CPU frequency
//! knobs from cpufreq sysfs (read under a root directory, `/` in production).

use crate::store::run::Knobs;
use std::path::Path;

/// CPU identity from `/proc/cpuinfo`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuId {
    pub model_name: String,
    pub vendor: Option<String>,
    pub family: Option<u32>,
    pub model: Option<u32>,
}

/// Parse the first processor block of `/proc/cpuinfo` text (x86 `vendor_id`, `cpu family`,
/// `model`, `model name`; ARM `CPU implementer`, `CPU part`).
pub fn parse_cpuinfo(text: &str) -> CpuId {
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
                id.vendor = Some(format!("arm-implementer-{v}"))
            }
            "cpu family" => id.family = v.parse().ok(),
            "model" => id.model = v.parse().ok(),
            "CPU part" if id.model.is_none() => {
                id.model = u32::from_str_radix(v.trim_start_matches("0x"), 16).ok()
            }
            _ => {}
        }
    }
    if id.model_name.is_empty() {
        id.model_name = "unknown".into();
    }
    id
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

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The CPU frequency knobs of CPU 0 from `<root>/sys/devices/system/cpu/cpu0/cpufreq`
/// (kHz in sysfs, MHz here), and threads from `OMP_NUM_THREADS`.
pub fn read_knobs(root: &Path) -> Knobs {
    let dir = root.join("sys/devices/system/cpu/cpu0/cpufreq");
    let khz = |f: &str| {
        read_trim(&dir.join(f))
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
        k.governor = read_trim(&dir.join("scaling_governor"));
        k.scaling_driver = read_trim(&dir.join("scaling_driver"));
    } else {
        k.cpufreq_note = Some(format!(
            "no cpufreq on this machine ({} is absent): the CPU frequency is not known",
            dir.display()
        ));
    }
    k
}

/// Number of CPUs this process may run on.
pub fn online_cpus() -> usize {
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
        assert_eq!(id.vendor.as_deref(), Some("arm-implementer-0x41"));
        assert_eq!(id.model, Some(0xc0f));
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
        let k = read_knobs(root.path());
        assert_eq!(k.core_freq_mhz, Some(2200.0));
        assert_eq!(k.governor.as_deref(), Some("userspace"));
    }
}
