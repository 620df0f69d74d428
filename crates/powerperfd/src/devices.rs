//! The sysfs power devices (AMD and Intel GPUs, ACPI power meters, other hwmon sensors;
//! issue 43) under the daemon's `--sysfs-root`, found once at start by
//! [`powerperf_node::devices::discover_with`] (NVML and RAPL are read by the daemon's own
//! readers), for `read_power` ([`readings`]) and the metrics endpoint ([`DeviceMeters`]).
//!
//! The readers are the node crate's: every file is read with a size limit
//! (`powerperf_node::sysfs::read_small`). Every number is checked again here: a value that
//! is not finite or is negative is no value.

use powerperf_node::daemon::PowerReading;
use powerperf_node::devices::{
    usable, DiscoverOptions, EnergyFrom, Meter, Origin, PowerDevice, PowerFrom,
};
use std::path::Path;
use std::time::Instant;

/// The devices under `root` but RAPL's and NVML's; the problems found (files that exist but
/// cannot be read: path, error and fix) are logged.
pub(crate) fn open(root: &Path) -> Vec<Box<dyn PowerDevice>> {
    let d = powerperf_node::devices::discover_with(
        root,
        DiscoverOptions {
            nvml: false,
            probe_daemon: false,
        },
    );
    for p in &d.problems {
        tracing::warn!(problem = %p, "sysfs power devices");
    }
    let devices: Vec<Box<dyn PowerDevice>> = d
        .devices
        .into_iter()
        .filter(|x| !matches!(x.origin(), Origin::Rapl | Origin::Nvml))
        .collect();
    tracing::info!(devices = devices.len(), root = %root.display(), "sysfs power devices");
    devices
}

/// One [`PowerReading`] per device, read now: `origin` `amdgpu`, `xe`, `i915` or `hwmon`,
/// `name` the device's timeline stem, `source` its files; `power_w` (W) where the device
/// measures power, `energy_j` (J) its energy counter where it has one (a client takes the
/// difference of two reads; for an energy-only device power is that difference over the
/// time between them).
pub(crate) fn readings(devices: &mut [Box<dyn PowerDevice>]) -> Vec<PowerReading> {
    devices
        .iter_mut()
        .map(|d| {
            let r = d.read();
            PowerReading {
                name: d.stem().to_string(),
                origin: d.origin().as_str().to_string(),
                source: format!("{} ({})", d.source(), d.label()),
                energy_j: match d.energy_from() {
                    EnergyFrom::Counter => usable(r.energy_j),
                    EnergyFrom::PowerIntegral => None,
                },
                power_w: match d.power_from() {
                    PowerFrom::Measured => usable(r.power_w),
                    PowerFrom::EnergyRate => None,
                },
            }
        })
        .collect()
}

/// One device of the metrics sampler and what its metrics are computed from.
struct Metered {
    device: Box<dyn PowerDevice>,
    /// Its energy since powerperfd started ([`Meter`]'s rules, as collect's timeline).
    meter: Meter,
    /// The start of the current power window of an energy-only device: the meter's energy
    /// (J), when (ns) and its resets then.
    window: Option<(f64, u64, u64)>,
    power_w: Option<f64>,
    clock_hz: Option<f64>,
}

/// The metrics of the sysfs power devices: `powerperf_device_energy_joules_total` (a
/// counter: the device's energy since powerperfd started by [`Meter`]'s rules, the same as
/// collect's `<stem>_energy_j`: its energy counter's advance, a step back adding nothing; or,
/// for a device without a counter, the trapezoid-rule integral of its power between the
/// sampler's reads, at least every 5 s), `powerperf_device_power_watts` (the device's power
/// reading; for an energy-only device its counter's rate over the last window of at least
/// 1 s, none for a window with a step back) and `powerperf_device_clock_hertz` (amdgpu's
/// sclk), labelled by `origin`, `device` (the stem) and `label`.
pub struct DeviceMeters {
    meters: Vec<Metered>,
    /// The first sample's time: the meters' clock (ns) counts from it.
    origin: Option<Instant>,
}

impl DeviceMeters {
    /// Meters over `devices`; nothing is read until [`DeviceMeters::sample`].
    pub fn new(devices: Vec<Box<dyn PowerDevice>>) -> Self {
        DeviceMeters {
            meters: devices
                .into_iter()
                .map(|device| Metered {
                    meter: Meter::for_device(device.as_ref()),
                    device,
                    window: None,
                    power_w: None,
                    clock_hz: None,
                })
                .collect(),
            origin: None,
        }
    }

    /// How many devices there are.
    pub fn len(&self) -> usize {
        self.meters.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.meters.is_empty()
    }

    /// Read every device at `now`; returns each device's energy since the previous call, J (0
    /// where there is none), for the jobs' energy.
    pub fn sample(&mut self, now: Instant) -> Vec<f64> {
        let origin = *self.origin.get_or_insert(now);
        let ns =
            u64::try_from(now.saturating_duration_since(origin).as_nanos()).unwrap_or(u64::MAX);
        let window_ns = u64::try_from(crate::metrics::POWER_WINDOW.as_nanos()).unwrap_or(u64::MAX);
        let mut delta = Vec::with_capacity(self.meters.len());
        for m in &mut self.meters {
            let (r, interval) = m.meter.read(m.device.as_mut(), ns);
            match m.device.power_from() {
                PowerFrom::Measured => m.power_w = interval.power_w,
                PowerFrom::EnergyRate => {
                    let total = m.meter.energy_j().unwrap_or(0.0);
                    let resets = m.meter.resets();
                    match (m.window, usable(r.energy_j)) {
                        (_, None) => m.power_w = None,
                        (None, Some(_)) => m.window = Some((total, ns, resets)),
                        (Some((e0, t0, r0)), Some(_)) => {
                            if ns.saturating_sub(t0) >= window_ns {
                                let secs = (ns - t0) as f64 * 1e-9;
                                m.power_w = (resets == r0).then(|| (total - e0) / secs);
                                m.window = Some((total, ns, resets));
                            }
                        }
                    }
                }
            }
            m.clock_hz = usable(r.clock_mhz).map(|mhz| mhz * 1e6);
            delta.push(interval.energy_j.unwrap_or(0.0));
        }
        delta
    }

    /// Each device's energy since powerperfd started, J (`None` until an interval has
    /// energy): the value of `powerperf_device_energy_joules_total`, in device order.
    pub fn energy_j(&self) -> Vec<Option<f64>> {
        self.meters.iter().map(|m| m.meter.energy_j()).collect()
    }

    /// `powerperf_job_device_energy_joules_total`: each device's energy while a session
    /// of the job was open (`jobs`: job name and its energy per device, J).
    pub fn register_jobs<'a>(
        &self,
        reg: &mut prometheus_client::registry::Registry,
        jobs: impl Iterator<Item = (&'a String, &'a [f64])>,
    ) {
        use crate::metrics::{labels, F64Counter, Labels};
        use prometheus_client::metrics::family::Family;
        if self.meters.is_empty() {
            return;
        }
        let family = Family::<Labels, F64Counter>::default();
        for (job, energy) in jobs {
            for (m, j) in self.meters.iter().zip(energy) {
                let d = m.device.as_ref();
                family
                    .get_or_create(&labels(&[
                        ("job", job),
                        ("origin", d.origin().as_str()),
                        ("device", d.stem()),
                    ]))
                    .inc_by(*j);
            }
        }
        reg.register_with_unit(
            "job_device_energy",
            "Energy of each sysfs power device of the node while at least one session of the job was open (as powerperf_device_energy_joules_total)",
            prometheus_client::registry::Unit::Joules,
            family,
        );
    }

    /// Register the device metrics (none where there are no devices).
    pub fn register(&self, reg: &mut prometheus_client::registry::Registry) {
        use crate::metrics::{hertz, labels, watts, F64Counter, F64Gauge, Labels};
        use prometheus_client::metrics::family::Family;
        use prometheus_client::registry::Unit;
        if self.meters.is_empty() {
            return;
        }
        let energy = Family::<Labels, F64Counter>::default();
        let power = Family::<Labels, F64Gauge>::default();
        let clock = Family::<Labels, F64Gauge>::default();
        for m in &self.meters {
            let d = m.device.as_ref();
            let lab = labels(&[
                ("origin", d.origin().as_str()),
                ("device", d.stem()),
                ("label", d.label()),
            ]);
            if let Some(j) = m.meter.energy_j() {
                energy.get_or_create(&lab).inc_by(j);
            }
            if let Some(w) = m.power_w {
                power.get_or_create(&lab).set(w);
            }
            if let Some(h) = m.clock_hz {
                clock.get_or_create(&lab).set(h);
            }
        }
        reg.register_with_unit(
            "device_energy",
            "Energy of each sysfs power device (amdgpu, xe, i915, hwmon) since powerperfd started: its energy counter's advance, or for a device that gives only power (ACPI power meters) the trapezoid-rule integral of its power between the sampler's reads",
            Unit::Joules,
            energy,
        );
        reg.register_with_unit(
            "device_power",
            "Power of each sysfs power device: its reading (power1_average, power1_input), or for an energy-only device (xe, i915) its counter's rate over the last window of at least 1 s",
            watts(),
            power,
        );
        reg.register_with_unit(
            "device_clock",
            "Current clock of each sysfs power device that gives one with its power (amdgpu freq1_input, the sclk; xe gt0 act_freq and i915 gt_act_freq_mhz, the actual GT frequency)",
            hertz(),
            clock,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/sysfs")
            .join(name)
    }

    #[test]
    fn grace_power_meters_read_in_watts_with_their_files() {
        let mut devs = open(&fixture("grace-hopper"));
        let r = readings(&mut devs);
        let module = r.iter().find(|x| x.name == "power_meter0_module").unwrap();
        assert_eq!(module.origin, "hwmon");
        assert_eq!(module.power_w, Some(450.0));
        assert_eq!(
            module.energy_j, None,
            "no counter: the integral is the client's"
        );
        assert!(
            module.source.contains("device/power1_average"),
            "{module:?}"
        );
    }

    #[test]
    fn metrics_integrate_power_and_take_the_rate_of_a_counter() {
        let devs = open(&fixture("grace-hopper"));
        let mut m = DeviceMeters::new(devs);
        let t0 = Instant::now();
        m.sample(t0);
        m.sample(t0 + std::time::Duration::from_secs(2));
        let module = m
            .meters
            .iter()
            .find(|x| x.device.stem() == "power_meter0_module")
            .unwrap();
        assert_eq!(module.power_w, Some(450.0));
        assert!((module.meter.energy_j().unwrap() - 900.0).abs() < 1e-6);
    }

    #[test]
    fn a_counter_s_advance_goes_to_the_jobs_and_a_step_back_adds_nothing() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let src = fixture("xe");
        let copy = std::process::Command::new("cp")
            .arg("-r")
            .arg(&src)
            .arg(&root)
            .status()
            .unwrap();
        assert!(copy.success());
        let counter = root.join("sys/class/hwmon/hwmon2/energy1_input");
        let start: u64 = std::fs::read_to_string(&counter)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut m = DeviceMeters::new(open(&root));
        let t0 = Instant::now();
        m.sample(t0);
        std::fs::write(&counter, (start + 5_000_000).to_string()).unwrap();
        let d = m.sample(t0 + std::time::Duration::from_secs(2));
        assert_eq!(d, [5.0, 0.0], "xe0_card advanced 5 J, xe0_pkg did not");
        let card = &m.meters[0];
        assert_eq!(card.power_w, Some(2.5), "5 J over 2 s");
        // a counter that steps back (a driver reload) adds nothing
        std::fs::write(&counter, "1000").unwrap();
        let d = m.sample(t0 + std::time::Duration::from_secs(3));
        assert_eq!(d, [0.0, 0.0]);
        assert_eq!(
            m.meters[0].power_w, None,
            "a window with a step back has no rate (not 0 W)"
        );
        assert_eq!(m.meters[0].meter.resets(), 1);
        let mut reg = prometheus_client::registry::Registry::with_prefix("powerperf");
        let job = "42".to_string();
        m.register_jobs(&mut reg, [(&job, &[5.0, 0.0][..])].into_iter());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(
            text.contains(
                "powerperf_job_device_energy_joules_total{job=\"42\",origin=\"xe\",device=\"xe0_card\"} 5.0"
            ),
            "{text}"
        );
    }
}
