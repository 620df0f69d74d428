//! The power-device sampler of `collect`: every [`PowerDevice`] that
//! [`powerperf_node::devices::discover`] finds under `--sysfs-root` (amdgpu, xe, i915, ACPI
//! power meters, other hwmon sensors) sampled every `--interval` into the timeline
//! (docs/run-format.md), beside RAPL ([`super::energy`]) and NVML ([`super::nvml`]).
//!
//! Per device and sample (the interval that ends at this reading), by the rules of the one
//! integrator [`Meter`] (powerperfd's metrics use it too; its documentation gives each rule
//! and its source):
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
//! the sum of `<stem>_energy_j` is still the energy over the run. A counter that steps back
//! (a driver reload, a reset; seen here or by the device's own counter) restarts its origin:
//! that sample's energy and power are empty, and the energy is a lower bound (a note says
//! so).

use powerperf_format::run::{Backend, EventRecord, PowerDeviceRecord};
use powerperf_node::devices::{usable, EnergyFrom, Meter, Origin, PowerDevice, PowerFrom};
use powerperf_node::event_spec::EventStatus;

/// One device with the state its columns are computed from.
#[derive(Debug)]
struct Tracked {
    device: Box<dyn PowerDevice>,
    /// `<stem>_clock_mhz` is a column (the device has a clock, or its first reading gave one).
    clock: bool,
    /// Its power and energy per sample, and its energy since the origin.
    meter: Meter,
}

impl Tracked {
    /// Energy was obtained: an integral of sampled power, or a counter that advanced.
    fn counted(&self) -> bool {
        self.meter
            .energy_j()
            .is_some_and(|e| self.device.energy_from() == EnergyFrom::PowerIntegral || e > 0.0)
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
            let meter = Meter::for_device(device.as_ref());
            tracked.push(Tracked {
                device,
                clock,
                meter,
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
            t.meter.restart();
        }
    }

    /// Read every device at `now_ns` (a monotonic clock, ns). Values follow
    /// [`DeviceSampler::columns`]; empty where the device gave nothing (see the module
    /// documentation for how each column is computed).
    pub fn sample(&mut self, now_ns: u64) -> Vec<Option<f64>> {
        let mut out = Vec::with_capacity(self.devices.len() * 3);
        for t in &mut self.devices {
            let (r, interval) = t.meter.read(t.device.as_mut(), now_ns);
            let (power, energy) = (interval.power_w, interval.energy_j);
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
                let why = if t.meter.energy_steps() == 0 {
                    format!(
                        "gave no energy ({} of its reads failed or were invalid; check that it is readable)",
                        t.meter.failed_reads()
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
                    total: t.meter.energy_j().filter(|_| counted),
                    unit: Some("J".into()),
                    scale: None,
                    running_ratio: None,
                }
            })
            .collect()
    }

    /// Notes at the end of the run: devices whose reads failed (empty cells) and devices whose
    /// energy counter stepped back during the run ([`Meter::resets`]: a driver reload, a
    /// reset, a wrap; such a sample is empty and adds no energy).
    pub fn end_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for t in &self.devices {
            let (stem, source) = (t.device.stem(), t.device.source());
            let failed = t.meter.failed_reads();
            if failed > 0 {
                notes.push(format!(
                    "{stem}: {failed} reads failed or gave a value that is not finite and non-negative (empty cells, not zeros; the next good reading covers the gap): {source}"
                ));
            }
            let resets = t.meter.resets();
            if resets > 0 {
                notes.push(format!(
                    "{stem}: its energy counter stepped back {resets} times (a driver reload, a reset or a wrap): each such sample is empty and adds no energy, so its energy is a lower bound: {source}"
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
                let energy = t.meter.energy_j().filter(|_| t.counted());
                PowerDeviceRecord {
                    stem: d.stem().to_string(),
                    origin: d.origin().as_str().to_string(),
                    label: d.label().to_string(),
                    source: d.source(),
                    power_from: power_from_name(d.power_from()).to_string(),
                    energy_from: energy_from_name(d.energy_from()).to_string(),
                    energy_j: energy,
                    mean_power_w: energy.filter(|_| secs > 0.0).map(|e| e / secs),
                    sampled_power_w: t.meter.sampled_power_w(),
                    failed_reads: t.meter.failed_reads(),
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
