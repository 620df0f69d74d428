//! PMUs described in sysfs (`<root>/sys/bus/event_source/devices/<pmu>/`): their perf type,
//! named events (`events/<name>` with `.scale` and `.unit`), format fields and `cpumask`
//! (PMUs with a cpumask count per CPU or package, not per task: uncore, `power`).
//! Layout: Linux `Documentation/ABI/testing/sysfs-bus-event_source-devices-{format,events}`.

use crate::sysfs::read_trim;
use std::path::{Path, PathBuf};

/// A named event of a sysfs PMU.
#[derive(Debug, Clone, PartialEq)]
pub struct PmuEvent {
    pub pmu: String,
    pub name: String,
    /// The event's terms as sysfs gives them (`event=0x05`).
    pub terms: String,
    pub scale: Option<f64>,
    pub unit: Option<String>,
}

/// A PMU found in sysfs.
#[derive(Debug, Clone, PartialEq)]
pub struct Pmu {
    pub name: String,
    pub dir: PathBuf,
    pub perf_type: u32,
    /// CPUs to open its events on, when it counts per CPU/package rather than per task.
    pub cpumask: Option<Vec<usize>>,
    pub events: Vec<PmuEvent>,
}

/// The sysfs directory holding PMUs under `root`.
pub fn devices_dir(root: &Path) -> PathBuf {
    root.join("sys/bus/event_source/devices")
}

/// Parse a CPU list such as `0-3,8,10-11`.
///
/// # Errors
/// The text that is not a CPU list.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("`{text}` is not a CPU list (expected e.g. 0-3,8)");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if b < a {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().map_err(|_| bad())?),
        }
    }
    Ok(out)
}

/// Read one PMU directory.
pub fn read_pmu(dir: &Path) -> Option<Pmu> {
    let name = dir.file_name()?.to_string_lossy().into_owned();
    let perf_type = read_trim(&dir.join("type")).ok()?.parse().ok()?;
    let cpumask = read_trim(&dir.join("cpumask"))
        .ok()
        .and_then(|t| parse_cpu_list(&t).ok())
        .filter(|c| !c.is_empty());
    let mut events = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir.join("events")) {
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for n in names.iter().filter(|n| !n.contains('.')) {
            let ev_dir = dir.join("events");
            events.push(PmuEvent {
                pmu: name.clone(),
                name: n.clone(),
                terms: read_trim(&ev_dir.join(n)).ok().unwrap_or_default(),
                scale: read_trim(&ev_dir.join(format!("{n}.scale")))
                    .ok()
                    .and_then(|s| s.parse().ok()),
                unit: read_trim(&ev_dir.join(format!("{n}.unit"))).ok(),
            });
        }
    }
    Some(Pmu {
        name,
        dir: dir.to_path_buf(),
        perf_type,
        cpumask,
        events,
    })
}

/// Every PMU under `root`, sorted by name.
pub fn list(root: &Path) -> Vec<Pmu> {
    let Ok(rd) = std::fs::read_dir(devices_dir(root)) else {
        return vec![];
    };
    let mut v: Vec<Pmu> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| read_pmu(&e.path()))
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// One PMU by name.
pub fn find(root: &Path, name: &str) -> Option<Pmu> {
    read_pmu(&devices_dir(root).join(name))
}

/// RAPL domain name of a perf `power` PMU event (`energy-pkg` -> `package`), following the
/// powercap names (`cores` -> `core`, `ram` -> `dram`, `gpu` -> `uncore`).
pub fn rapl_domain(event: &str) -> Option<&'static str> {
    Some(match event.strip_prefix("energy-")? {
        "pkg" => "package",
        "cores" => "core",
        "ram" => "dram",
        "gpu" => "uncore",
        "psys" => "psys",
        _ => return None,
    })
}

/// One RAPL event of the perf `power` PMU on one package: what to open and how to read it.
#[derive(Debug, Clone, PartialEq)]
pub struct PowerEvent {
    /// `energy-pkg`.
    pub event: String,
    /// `package-0`, `dram-1`, `psys`.
    pub domain: String,
    /// The CPU to open it on (the PMU's `cpumask`, one CPU per package).
    pub cpu: usize,
    /// `events/<event>.scale`: Joules per count.
    pub scale: f64,
    /// `events/<event>.unit`: `Joules`.
    pub unit: String,
}

/// The RAPL events of the perf `power` PMU under `root`, one per event and package (the
/// `cpumask` CPUs; `psys` once), each with its `.scale` and `.unit` (Linux
/// `arch/x86/events/rapl.c`: `energy-{cores,pkg,ram,gpu,psys}`, unit `Joules`, scale
/// 2^-32 J on Intel).
///
/// # Errors
/// What is missing, with the fix: no `power` PMU, no `cpumask`, no RAPL events, an event
/// without a positive finite `.scale` or whose `.unit` is not `Joules`.
pub fn power_events(root: &Path) -> Result<Vec<PowerEvent>, String> {
    let dir = devices_dir(root).join("power");
    let Some(p) = read_pmu(&dir) else {
        return Err(format!(
            "no perf power PMU: {} does not exist or has no `type` (RAPL through perf needs the kernel's rapl perf driver on an Intel CPU since Sandy Bridge or an AMD CPU since Zen; most virtual machines have none); RAPL energy may still be read through powercap (`read_energy`)",
            dir.display()
        ));
    };
    let cpus = p.cpumask.clone().ok_or_else(|| {
        format!(
            "the perf power PMU has no readable cpumask ({}): cannot tell which CPU counts each package",
            dir.join("cpumask").display()
        )
    })?;
    let mut out = Vec::new();
    for ev in &p.events {
        let Some(dom) = rapl_domain(&ev.name) else {
            continue;
        };
        let scale = ev.scale.filter(|s| s.is_finite() && *s > 0.0).ok_or_else(|| {
            format!(
                "the perf power PMU event {} has no positive `.scale` ({}): its counts cannot be turned into Joules",
                ev.name,
                dir.join(format!("events/{}.scale", ev.name)).display()
            )
        })?;
        let unit = ev.unit.clone().unwrap_or_default();
        if unit != "Joules" {
            return Err(format!(
                "the perf power PMU event {} has the unit `{unit}` in {}, not `Joules`",
                ev.name,
                dir.join(format!("events/{}.unit", ev.name)).display()
            ));
        }
        for (socket, cpu) in cpus.iter().enumerate() {
            if dom == "psys" && socket > 0 {
                continue;
            }
            out.push(PowerEvent {
                event: ev.name.clone(),
                domain: if dom == "psys" {
                    "psys".into()
                } else {
                    format!("{dom}-{socket}")
                },
                cpu: *cpu,
                scale,
                unit: unit.clone(),
            });
        }
    }
    if out.is_empty() {
        return Err(format!(
            "the perf power PMU at {} lists no RAPL event (energy-pkg, energy-cores, energy-ram, energy-gpu, energy-psys)",
            dir.display()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("0\n").unwrap(), vec![0]);
        assert!(parse_cpu_list("3-1").is_err());
    }

    #[test]
    fn reads_the_power_pmu_fixture() {
        let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/sysfs/power-pmu");
        let p = find(&root, "power").unwrap();
        assert_eq!(p.perf_type, 9);
        assert_eq!(p.cpumask, Some(vec![0]));
        let names: Vec<_> = p.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["energy-pkg", "energy-psys", "energy-ram"]);
        assert_eq!(p.events[0].scale, Some(2.3283064365386962890625e-10));
        assert_eq!(p.events[0].unit.as_deref(), Some("Joules"));
        assert_eq!(p.events[0].terms, "event=0x02");
        assert_eq!(rapl_domain("energy-ram"), Some("dram"));
    }

    #[test]
    fn power_events_of_the_fixture_pmu_and_what_is_missing() {
        let root =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sysfs/power-pmu");
        let ev = power_events(&root).unwrap();
        let got: Vec<(&str, &str, usize)> = ev
            .iter()
            .map(|e| (e.event.as_str(), e.domain.as_str(), e.cpu))
            .collect();
        assert_eq!(
            got,
            [
                ("energy-pkg", "package-0", 0),
                ("energy-psys", "psys", 0),
                ("energy-ram", "dram-0", 0)
            ]
        );
        assert!(ev
            .iter()
            .all(|e| e.unit == "Joules" && (e.scale - 2f64.powi(-32)).abs() < 1e-20));
        // missing PMU, bad scale, bad unit: named
        let d = tempfile::tempdir().unwrap();
        let e = power_events(d.path()).unwrap_err();
        assert!(
            e.contains("no perf power PMU") && e.contains("read_energy"),
            "{e}"
        );
        fn copy(from: &Path, to: &Path) {
            std::fs::create_dir_all(to).unwrap();
            for e in std::fs::read_dir(from).unwrap().flatten() {
                if e.path().is_dir() {
                    copy(&e.path(), &to.join(e.file_name()));
                } else {
                    std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
                }
            }
        }
        copy(&root, d.path());
        let evd = devices_dir(d.path()).join("power/events");
        std::fs::write(evd.join("energy-pkg.unit"), "Watts\n").unwrap();
        assert!(power_events(d.path()).unwrap_err().contains("`Watts`"));
        std::fs::write(evd.join("energy-pkg.unit"), "Joules\n").unwrap();
        std::fs::write(evd.join("energy-pkg.scale"), "0\n").unwrap();
        assert!(power_events(d.path()).unwrap_err().contains(".scale"));
    }
}
