//! PMUs described in sysfs (`<root>/sys/bus/event_source/devices/<pmu>/`): their perf type,
//! named events (`events/<name>` with `.scale` and `.unit`), format fields and `cpumask`
//! (PMUs with a cpumask count per CPU or package, not per task: uncore, `power`).
//! Layout: Linux `Documentation/ABI/testing/sysfs-bus-event_source-devices-{format,events}`.

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

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Read one PMU directory.
pub fn read_pmu(dir: &Path) -> Option<Pmu> {
    let name = dir.file_name()?.to_string_lossy().into_owned();
    let perf_type = read_trim(&dir.join("type"))?.parse().ok()?;
    let cpumask = read_trim(&dir.join("cpumask"))
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
                terms: read_trim(&ev_dir.join(n)).unwrap_or_default(),
                scale: read_trim(&ev_dir.join(format!("{n}.scale"))).and_then(|s| s.parse().ok()),
                unit: read_trim(&ev_dir.join(format!("{n}.unit"))),
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
}
