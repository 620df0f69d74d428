//! The power-device sampler of `collect`: every [`PowerDevice`] that
//! [`powerperf_node::devices::discover`] finds under `--sysfs-root` (amdgpu, xe, i915, ACPI
//! power meters, other hwmon sensors) sampled every `--interval` into the timeline
//! (docs/run-format.md), beside RAPL ([`super::energy`]) and NVML ([`super::nvml`]).
//!
//! Per device and sample (the interval that ends at this reading):
//! - `<stem>_power_w`, W: the device's reading ([`PowerFrom::Measured`]); or, for
//!   [`PowerFrom::EnergyRate`], Δenergy/Δt: the counter's advance since its last good reading
//!   divided by the time since then.
//! - `<stem>_energy_j`, J, the energy of the sample (additive, as `energy_<domain>_j` and
//!   `gpu<i>_energy_j`): the counter's advance since its last good reading
//!   ([`EnergyFrom::Counter`]); or, for [`EnergyFrom::PowerIntegral`], the trapezoid rule
//!   between the last good power reading (p₀ at t₀) and this one (p₁ at t₁):
//!   ½·(p₀ + p₁)·(t₁ − t₀) (the rule `gpu<i>-power-integral` uses; e.g. Press et al.,
//!   *Numerical Recipes*, 3rd ed., §4.1, "classical formulas for equally spaced abscissas").
//! - `<stem>_clock_mhz`, MHz, where the device reads a clock ([`PowerDevice::has_clock`]:
//!   amdgpu's sclk, xe's and i915's actual GT frequency) or its first reading gives one; a
//!   reading without a clock (an Intel GT asleep in RC6 reads 0 MHz) is an empty cell.
//!
//! A read that fails (or gives a value that is not finite or is negative) leaves an empty
//! cell, never a zero; the next good reading covers the time since the last good one, so
//! the sum of `<stem>_energy_j` is still the energy over the run. A counter that goes back
//! (a driver reload) restarts its origin: that sample's energy and power are empty.

use powerperf_format::run::{Backend, EventRecord, PowerDeviceRecord};
use powerperf_node::devices::{usable, EnergyFrom, Origin, PowerDevice, PowerFrom};
use powerperf_node::event_spec::EventStatus;

/// One device with the state its columns are computed from.
#[derive(Debug)]
struct Tracked {
    device: Box<dyn PowerDevice>,
    /// `<stem>_clock_mhz` is a column (the device has a clock, or its first reading gave one).
    clock: bool,
    /// The last good energy reading: (J, ns).
    last_energy: Option<(f64, u64)>,
    /// The last good power reading: (W, ns).
    last_power: Option<(f64, u64)>,
    /// Energy since the origin, J (the sum of the `<stem>_energy_j` column).
    energy_j: f64,
    /// Samples with an energy value.
    energy_samples: u64,
    /// Samples with a power value.
    power_samples: u64,
    /// The sum of the power values, W (for their mean).
    power_sum_w: f64,
    /// Samples whose read failed or gave an invalid value.
    failed_reads: u64,
}

impl Tracked {
    /// Energy was obtained: an integral of sampled power, or a counter that advanced.
    fn counted(&self) -> bool {
        self.energy_samples > 0
            && (self.device.energy_from() == EnergyFrom::PowerIntegral || self.energy_j > 0.0)
    }
}

/// Samples every [`PowerDevice`] into timeline columns.
#[derive(Debug, Default)]
pub struct DeviceSampler {
    devices: Vec<Tracked>,
    /// Notes for run.toml: how each device's power and energy are obtained, and devices
    /// left out.
    pub notes: Vec<String>,
}

impl DeviceSampler {
    /// No devices, with the reason (a note).
    pub fn none(reason: impl Into<String>) -> Self {
        DeviceSampler {
            devices: vec![],
            notes: vec![reason.into()],
        }
    }

    /// A sampler over `devices`, leaving out those of an origin in `skip` (RAPL and NVML,
    /// which [`super::energy::Energy`] and [`super::nvml::GpuSampler`] sample) and a second
    /// device with a stem already taken (said in a note). Each device is read once here:
    /// its clock column exists where it has a clock or this reading gives one.
    pub fn new(devices: Vec<Box<dyn PowerDevice>>, skip: &[Origin]) -> Self {
        let mut notes = Vec::new();
        let mut tracked: Vec<Tracked> = Vec::new();
        for mut device in devices {
            if skip.contains(&device.origin()) {
                continue;
            }
            let stem = device.stem().to_string();
            let stem_ok = !stem.is_empty()
                && stem
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !stem_ok || tracked.iter().any(|t| t.device.stem() == stem) {
                notes.push(format!(
                    "power device {stem:?} ({}) left out of the timeline: its column stem is {} (a stem is [a-z0-9_] and unique)",
                    device.source(),
                    if stem_ok { "taken by another device" } else { "not a column name" }
                ));
                continue;
            }
            // a clock column where the device reads a clock, even if this first reading
            // gives none (an xe or i915 GT asleep reads 0 MHz: an empty cell)
            let clock = usable(device.read().clock_mhz).is_some() || device.has_clock();
            notes.push(note(device.as_ref()));
            tracked.push(Tracked {
                device,
                clock,
                last_energy: None,
                last_power: None,
                energy_j: 0.0,
                energy_samples: 0,
                power_samples: 0,
                power_sum_w: 0.0,
                failed_reads: 0,
            });
        }
        DeviceSampler {
            devices: tracked,
            notes,
        }
    }

    /// Number of devices sampled.
    pub fn count(&self) -> usize {
        self.devices.len()
    }

    /// Timeline column names, in the order [`DeviceSampler::sample`] returns values.
    pub fn columns(&self) -> Vec<String> {
        let mut c = Vec::new();
        for t in &self.devices {
            let s = t.device.stem();
            c.push(format!("{s}_power_w"));
            c.push(format!("{s}_energy_j"));
            if t.clock {
                c.push(format!("{s}_clock_mhz"));
            }
        }
        c
    }

    /// Read every device now and make this the origin: the totals restart at zero and the
    /// next [`sample`](Self::sample) covers the time from `now_ns`.
    pub fn start(&mut self, now_ns: u64) {
        let _ = self.sample(now_ns);
        for t in &mut self.devices {
            t.energy_j = 0.0;
            t.energy_samples = 0;
            t.power_samples = 0;
            t.power_sum_w = 0.0;
            t.failed_reads = 0;
        }
    }

    /// Read every device at `now_ns` (a monotonic clock, ns). Values follow
    /// [`DeviceSampler::columns`]; empty where the device gave nothing (see the module
    /// documentation for how each column is computed).
    pub fn sample(&mut self, now_ns: u64) -> Vec<Option<f64>> {
        let mut out = Vec::with_capacity(self.devices.len() * 3);
        for t in &mut self.devices {
            let r = t.device.read();
            let energy_now = usable(r.energy_j);
            let power_now = usable(r.power_w);
            // The counter's advance since its last good reading, and over how long.
            let advance = match (t.last_energy, energy_now) {
                (Some((e0, t0)), Some(e1)) if e1 >= e0 && now_ns > t0 => {
                    Some((e1 - e0, (now_ns - t0) as f64 * 1e-9))
                }
                // The first reading, or a counter that went back: a new origin.
                _ => None,
            };
            if let Some(e) = energy_now {
                t.last_energy = Some((e, now_ns));
            }
            let power = match t.device.power_from() {
                PowerFrom::Measured => power_now,
                PowerFrom::EnergyRate => advance.map(|(de, dt)| de / dt),
            };
            let energy = match t.device.energy_from() {
                EnergyFrom::Counter => advance.map(|(de, _)| de),
                EnergyFrom::PowerIntegral => match (t.last_power, power_now) {
                    (Some((p0, t0)), Some(p1)) if now_ns > t0 => {
                        Some(0.5 * (p0 + p1) * (now_ns - t0) as f64 * 1e-9)
                    }
                    _ => None,
                },
            };
            if let Some(p) = power_now {
                t.last_power = Some((p, now_ns));
            }
            let wanted_energy = t.device.energy_from() == EnergyFrom::Counter
                || t.device.power_from() == PowerFrom::EnergyRate;
            if (wanted_energy && energy_now.is_none())
                || (t.device.power_from() == PowerFrom::Measured && power_now.is_none())
            {
                t.failed_reads += 1;
            }
            if let Some(e) = energy {
                t.energy_j += e;
                t.energy_samples += 1;
            }
            if let Some(p) = power {
                t.power_samples += 1;
                t.power_sum_w += p;
            }
            out.push(power);
            out.push(energy);
            if t.clock {
                out.push(usable(r.clock_mhz));
            }
        }
        out
    }

    /// The provisional event records (no totals) of run.toml, written before the run:
    /// a run whose powerperf is killed gets its totals from the journal under these names.
    pub fn provisional_records(&self) -> Vec<EventRecord> {
        self.devices
            .iter()
            .map(|t| EventRecord {
                name: format!("{}-energy", t.device.stem()),
                backend: Backend::Sysfs,
                status: EventStatus::Counted,
                reason: None,
                column: Some(format!("{}_energy_j", t.device.stem())),
                total: None,
                unit: Some("J".into()),
                scale: None,
                running_ratio: None,
            })
            .collect()
    }

    /// Event records for run.toml: per device `<stem>-energy`, J, counted with its column
    /// and total, or not supported with the reason where no sample had an energy value or
    /// its energy counter never advanced (as RAPL's and NVML's: not a zero energy; its
    /// column then leaves the timeline).
    pub fn records(&self, duration_ns: u64) -> Vec<EventRecord> {
        let secs = duration_ns as f64 * 1e-9;
        self.devices
            .iter()
            .map(|t| {
                let stem = t.device.stem();
                let counted = t.counted();
                let why = if t.energy_samples == 0 {
                    format!(
                        "gave no energy ({} of its reads failed or were invalid; check that it is readable)",
                        t.failed_reads
                    )
                } else {
                    "its energy counter did not advance".to_string()
                };
                EventRecord {
                    name: format!("{stem}-energy"),
                    backend: Backend::Sysfs,
                    status: if counted { EventStatus::Counted } else { EventStatus::NotSupported },
                    reason: (!counted).then(|| format!(
                        "{stem} ({}, {}) {why} over {secs:.3} s: reported as not supported, not as zero energy",
                        t.device.label(),
                        t.device.source()
                    )),
                    column: counted.then(|| format!("{stem}_energy_j")),
                    total: counted.then_some(t.energy_j),
                    unit: Some("J".into()),
                    scale: None,
                    running_ratio: None,
                }
            })
            .collect()
    }

    /// Notes at the end of the run: devices whose reads failed (empty cells) and devices whose
    /// energy counter stepped back ([`PowerDevice::counter_resets`]: a driver reload, a
    /// reset, a wrap; such an interval adds no energy).
    pub fn end_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for t in &self.devices {
            let (stem, source) = (t.device.stem(), t.device.source());
            if t.failed_reads > 0 {
                notes.push(format!(
                    "{stem}: {} reads failed or gave a value that is not finite and non-negative (empty cells, not zeros; the next good reading covers the gap): {source}",
                    t.failed_reads
                ));
            }
            let resets = t.device.counter_resets();
            if resets > 0 {
                notes.push(format!(
                    "{stem}: its energy counter stepped back {resets} times (a driver reload, a reset or a wrap): each such sample adds no energy, so its energy is a lower bound: {source}"
                ));
            }
        }
        notes
    }

    /// `[[power_devices]]` of run.toml: each device's origin, label, source and how its
    /// power and energy were obtained, with its energy and mean power over the run.
    pub fn device_records(&self, duration_ns: u64) -> Vec<PowerDeviceRecord> {
        let secs = duration_ns as f64 * 1e-9;
        self.devices
            .iter()
            .map(|t| {
                let d = t.device.as_ref();
                let energy = t.counted().then_some(t.energy_j);
                PowerDeviceRecord {
                    stem: d.stem().to_string(),
                    origin: d.origin().as_str().to_string(),
                    label: d.label().to_string(),
                    source: d.source(),
                    power_from: power_from_name(d.power_from()).to_string(),
                    energy_from: energy_from_name(d.energy_from()).to_string(),
                    energy_j: energy,
                    mean_power_w: energy.filter(|_| secs > 0.0).map(|e| e / secs),
                    sampled_power_w: (t.power_samples > 0)
                        .then(|| t.power_sum_w / t.power_samples as f64),
                    failed_reads: t.failed_reads,
                }
            })
            .collect()
    }
}

/// `measured` or `energy_rate`, as in run.toml.
fn power_from_name(p: PowerFrom) -> &'static str {
    match p {
        PowerFrom::Measured => "measured",
        PowerFrom::EnergyRate => "energy_rate",
    }
}

/// `counter` or `power_integral`, as in run.toml.
fn energy_from_name(e: EnergyFrom) -> &'static str {
    match e {
        EnergyFrom::Counter => "counter",
        EnergyFrom::PowerIntegral => "power_integral",
    }
}

/// The run's note on one device: where its power and energy come from, in which units.
fn note(d: &dyn PowerDevice) -> String {
    let (stem, origin, label, source) = (d.stem(), d.origin().as_str(), d.label(), d.source());
    let power = match d.power_from() {
        PowerFrom::Measured => "power (W) as read".to_string(),
        PowerFrom::EnergyRate => {
            "power (W) is Δenergy/Δt of its energy counter over each sample".to_string()
        }
    };
    let energy = match d.energy_from() {
        EnergyFrom::Counter => "energy (J) is its counter's advance over each sample".to_string(),
        EnergyFrom::PowerIntegral => format!(
            "energy of {stem} is the integral of sampled power (trapezoid rule between samples), not a counter"
        ),
    };
    format!("{stem} ({origin}, {label}): read from {source}; {power}; {energy}")
}

#[cfg(test)]
mod tests;
