//! Node energy: RAPL through the perf `power` PMU first, powercap sysfs second, and
//! "unavailable: why" last (perf's and the powercap driver's domain names unified:
//! `package-N`, `core-N`, `uncore-N`, `dram-N`, `psys`).

use powerperf_node::event_spec::{EventKind, EventSpec};
use powerperf_node::perf_event::{self, OpenCounter, Opened, Target};
use powerperf_node::pmu;
use powerperf_node::rapl::{self, RaplReader, UnreadableDomain};
use std::path::Path;

/// One energy domain being sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct Domain {
    /// `package-0`, `dram-0`, `psys`.
    pub name: String,
    /// Timeline column, `energy_package_0_j`.
    pub column: String,
    /// Where it is read (`perf power/energy-pkg/ on CPU 0`, or the powercap file).
    pub source: String,
}

enum Reader {
    Perf(Vec<OpenCounter>),
    Powercap(RaplReader),
    /// RAPL read by powerperfd (`energy_uj` is root-only here), docs/cluster.md.
    Daemon(powerperf_node::daemon::client::DaemonEnergy),
    /// The perf power PMU read by powerperfd (this user may not open it), docs/cluster.md.
    DaemonPower(powerperf_node::daemon::client::DaemonPower),
    None,
}

/// The energy domains of this node and their readers.
pub struct Energy {
    pub domains: Vec<Domain>,
    reader: Reader,
    /// Energy per domain since opening, J.
    pub totals_j: Vec<f64>,
    /// Domains that exist but could not be read.
    pub unreadable: Vec<UnreadableDomain>,
    /// What was tried and why it was not used.
    pub notes: Vec<String>,
}

impl Energy {
    /// No energy sources (e.g. not the first rank on this node).
    pub fn none(note: String) -> Self {
        Energy {
            domains: vec![],
            reader: Reader::None,
            totals_j: vec![],
            unreadable: vec![],
            notes: vec![note],
        }
    }

    /// Open the node's RAPL domains under `root`: the perf `power` PMU when it opens,
    /// otherwise powercap sysfs.
    pub fn open(root: &Path) -> Self {
        let mut notes = Vec::new();
        // the power PMU exists but this user may not open it (perf_event_paranoid)
        let mut pmu_denied = false;
        if let Some(p) = pmu::find(root, "power") {
            let mut counters = Vec::new();
            let mut domains = Vec::new();
            let cpus = p.cpumask.clone().unwrap_or_else(|| vec![0]);
            for ev in &p.events {
                let Some(dom) = pmu::rapl_domain(&ev.name) else {
                    continue;
                };
                for (socket, cpu) in cpus.iter().enumerate() {
                    if dom == "psys" && socket > 0 {
                        continue;
                    }
                    let spec = EventSpec {
                        name: format!("power/{}/", ev.name),
                        kind: EventKind::Pmu {
                            pmu: "power".into(),
                            event: Some(ev.name.clone()),
                            terms: vec![],
                        },
                        user_only: false,
                        kernel_only: false,
                        unit: None,
                        group: None,
                    };
                    match perf_event::open_group(&[spec], &Target::Cpus(vec![*cpu]), root).pop() {
                        Some(Opened::Counter(c)) => {
                            let name = if dom == "psys" {
                                "psys".to_string()
                            } else {
                                format!("{dom}-{socket}")
                            };
                            domains.push(Domain {
                                column: format!("energy_{}_j", name.replace('-', "_")),
                                name,
                                source: format!("perf power/{}/ on CPU {cpu}", ev.name),
                            });
                            counters.push(*c);
                        }
                        Some(Opened::Failed { reason, status, .. }) => {
                            pmu_denied |=
                                status == powerperf_node::event_spec::EventStatus::PermissionDenied;
                            notes.push(format!("RAPL through the perf power PMU: {reason}"))
                        }
                        None => {}
                    }
                }
            }
            if !counters.is_empty() {
                let n = counters.len();
                let mut e = Energy {
                    domains,
                    reader: Reader::Perf(counters),
                    totals_j: vec![0.0; n],
                    unreadable: vec![],
                    notes,
                };
                e.sample();
                e.totals_j = vec![0.0; n];
                return e;
            }
        }
        let d = rapl::discover(root);
        if let Some(r) = &d.absent_reason {
            notes.push(r.clone());
        }
        let domains = d
            .domains
            .iter()
            .map(|x| Domain {
                name: x.name.clone(),
                column: x.column.clone(),
                source: x.energy_path.display().to_string(),
            })
            .collect::<Vec<_>>();
        let n = domains.len();
        if n == 0 && d.unreadable.iter().any(|u| u.permission_denied) {
            if let Some(e) = Self::through_daemon(&mut notes) {
                return e;
            }
        }
        if n == 0 && pmu_denied {
            if let Some(e) = Self::through_daemon_power(&mut notes) {
                return e;
            }
        }
        let reader = if n > 0 {
            Reader::Powercap(RaplReader::new(d.domains))
        } else {
            Reader::None
        };
        Energy {
            domains,
            reader,
            totals_j: vec![0.0; n],
            unreadable: d.unreadable,
            notes,
        }
    }

    /// RAPL through powerperfd, when one is configured (`collect --daemon PATH`,
    /// `$POWERPERF_DAEMON`, or the default socket) and direct reads are denied. `None` (with
    /// a note saying why) when there is no daemon or it refuses.
    fn through_daemon(notes: &mut Vec<String>) -> Option<Self> {
        let sock = powerperf_node::daemon::client::socket_path(None)?;
        match powerperf_node::daemon::client::DaemonEnergy::open(&sock) {
            Ok(de) => {
                let domains: Vec<Domain> = de
                    .domains
                    .iter()
                    .map(|x| Domain {
                        name: x.name.clone(),
                        column: x.column.clone(),
                        source: format!("powerperfd at {} ({})", sock.display(), x.name),
                    })
                    .collect();
                notes.push(format!(
                    "RAPL energy read through powerperfd at {}: direct reads of energy_uj are denied to this user (root-only since Linux 5.10)",
                    sock.display()
                ));
                let n = domains.len();
                Some(Energy {
                    domains,
                    reader: Reader::Daemon(de),
                    totals_j: vec![0.0; n],
                    unreadable: vec![],
                    notes: std::mem::take(notes),
                })
            }
            Err(e) => {
                notes.push(format!("RAPL through powerperfd: {e:#}"));
                None
            }
        }
    }

    /// The perf power PMU through powerperfd (`read_power`), when one is configured and
    /// this user may not open the PMU. `None` (with a note saying why) when there is no
    /// daemon, it refuses, or it has no PMU readings.
    fn through_daemon_power(notes: &mut Vec<String>) -> Option<Self> {
        let sock = powerperf_node::daemon::client::socket_path(None)?;
        match powerperf_node::daemon::client::DaemonPower::open(&sock) {
            Ok(dp) => {
                let domains: Vec<Domain> = dp
                    .domains
                    .iter()
                    .map(|x| Domain {
                        name: x.name.clone(),
                        column: format!("energy_{}_j", x.name.replace('-', "_")),
                        source: format!("powerperfd at {} ({})", sock.display(), x.source),
                    })
                    .collect();
                notes.push(format!(
                    "RAPL energy read through powerperfd at {} from the perf power PMU: this user may not open it (kernel.perf_event_paranoid)",
                    sock.display()
                ));
                let n = domains.len();
                Some(Energy {
                    domains,
                    reader: Reader::DaemonPower(dp),
                    totals_j: vec![0.0; n],
                    unreadable: vec![],
                    notes: std::mem::take(notes),
                })
            }
            Err(e) => {
                notes.push(format!("RAPL (perf power PMU) through powerperfd: {e:#}"));
                None
            }
        }
    }

    /// Energy per domain since the previous call, J (`None` where a read failed).
    pub fn sample(&mut self) -> Vec<Option<f64>> {
        let v: Vec<Option<f64>> = match &mut self.reader {
            Reader::DaemonPower(r) => r.sample(),
            Reader::Perf(cs) => cs.iter_mut().map(|c| c.sample()).collect(),
            Reader::Powercap(r) => r.sample(),
            Reader::Daemon(r) => r.sample(),
            Reader::None => vec![],
        };
        for (t, x) in self.totals_j.iter_mut().zip(&v) {
            *t += x.unwrap_or(0.0);
        }
        v
    }

    /// Which backend the domains come from, for notes.
    pub fn backend_name(&self) -> &'static str {
        match self.reader {
            Reader::Perf(_) => "perf power PMU",
            Reader::Powercap(_) => "powercap sysfs",
            Reader::Daemon(_) | Reader::DaemonPower(_) => "powerperfd node service",
            Reader::None => "none",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn falls_back_to_powercap_when_the_power_pmu_cannot_open() {
        // The power-pmu fixture describes a PMU whose perf type (9) is not the running
        // kernel's power PMU unless this machine has one; either way the rapl-wrap fixture's
        // powercap domains are found when perf gives nothing.
        let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/sysfs/rapl-wrap");
        let e = Energy::open(&root);
        assert_eq!(e.backend_name(), "powercap sysfs");
        assert_eq!(e.domains.len(), 4);
        assert_eq!(e.domains[0].column, "energy_package_0_j");
    }

    #[test]
    fn nothing_at_all_is_explained() {
        let tmp = tempfile::tempdir().unwrap();
        let e = Energy::open(tmp.path());
        assert!(e.domains.is_empty());
        assert!(
            e.notes.iter().any(|n| n.contains("no RAPL")),
            "{:?}",
            e.notes
        );
    }
}
