//! [`Meter`]: the one integrator of a [`PowerDevice`]'s readings into power and energy per
//! interval and energy since an origin. `collect`'s device sampler (the timeline columns
//! `<stem>_power_w` and `<stem>_energy_j`) and powerperfd (`read_power`'s devices, the
//! metrics `powerperf_device_energy_joules_total` and `powerperf_job_device_energy_joules_total`)
//! both use it, so the same readings give the same joules in a run and on the endpoint.
//!
//! # Rules
//! Each [`Meter::add`] closes the interval from the previous reading to this one (t₀ → t₁, a
//! monotonic clock in ns). Every value first passes [`usable`] (finite and non-negative, else
//! no value).
//!
//! 1. **First reading**: the baseline; the interval gives no power from a counter and no
//!    energy (there is no interval yet).
//! 2. **Energy from a counter** ([`EnergyFrom::Counter`]): the counter's advance since its
//!    last good reading, e₁ − e₀, J. This is the energy of the interval whatever Δt is (a
//!    Δt of 0 does not drop the advance; the energy is in the counter, not in the clock).
//! 3. **Energy from power** ([`EnergyFrom::PowerIntegral`]): the trapezoid rule between the
//!    last good power reading (p₀ at t₀) and this one (p₁ at t₁), ½·(p₀ + p₁)·(t₁ − t₀)
//!    (Press et al., *Numerical Recipes*, 3rd ed., §4.1, "classical formulas for equally
//!    spaced abscissas"; NVML's `gpu<i>-power-integral` in collect uses the same rule). Δt = 0
//!    gives 0 J.
//! 4. **Power from a counter** ([`PowerFrom::EnergyRate`]): (e₁ − e₀)/(t₁ − t₀) over the same
//!    interval as rule 2; none where Δt = 0 (no rate over no time).
//! 5. **Power measured** ([`PowerFrom::Measured`]): the reading itself.
//! 6. **A failed read** (no usable value where the device should give one) gives no value for
//!    that interval, never a zero, and keeps the last good baseline: the next good reading
//!    covers the whole gap (rules 2–4 run from the last good reading), so nothing is lost.
//!    [`Meter::failed_reads`] counts such reads.
//! 7. **A counter that steps back** (e₁ < e₀; or the device says its own counter stepped back,
//!    [`PowerDevice::counter_resets`] grew during this read) gives no energy and no power for
//!    that interval, and the counter goes on from the new value. A reset is never counted as
//!    energy: the energy of that one interval is lost, so the total is a lower bound, and
//!    [`Meter::resets`] says how many intervals were lost.
//! 8. **Time that goes back** (t₁ < t₀, a caller's bug; the clocks used are monotonic) is
//!    taken as t₀: Δt = 0 (rules 2–4).
//!
//! Sources of the reset rule: the counters read here publish no range (hwmon's `energyN_input`
//! has no `max_energy_range_uj`, `Documentation/hwmon/sysfs-interface.rst`; NVML's
//! `nvmlDeviceGetTotalEnergyConsumption` counts "since the driver was last reloaded"; amdgpu's
//! `energy_accumulator` is 64 bits), so a step back is a reload or a reset, not a wrap whose
//! size is known. Where the size is known, one wrap is undone: Linux's perf RAPL PMU
//! (`arch/x86/events/rapl.c`, `rapl_event_update`, the delta of a 32-bit counter) and powercap
//! (`max_energy_range_uj`, `Documentation/power/powercap/powercap.rst`) do that, and so does
//! powerperf's RAPL reader ([`crate::units::delta_uj`]). Prometheus'
//! `rate()` instead counts the new value as the energy since a restart at zero; a device whose
//! counter restarts elsewhere (or is reset by a firmware) would then add an arbitrary amount,
//! so the interval is dropped instead.
//!
//! The devices of this crate already keep their counters monotonic
//! ([`super::EnergyCounter`]) and count the steps back; rule 7 reads that count, and still
//! checks e₁ ≥ e₀ against another implementation of [`PowerDevice`].

use super::{usable, EnergyFrom, PowerDevice, PowerFrom, PowerSample};

/// One interval's values: power (W) and energy (J) over the interval that ends at a reading.
/// `None` where there is no value (module rules 1, 4, 6, 7).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Interval {
    /// Power over the interval, W.
    pub power_w: Option<f64>,
    /// Energy of the interval, J.
    pub energy_j: Option<f64>,
}

/// The integrator of one device's readings (the module's rules): the last good counter and
/// power readings with their times, the energy since the origin and the counts the run's
/// notes need.
#[derive(Debug, Clone)]
pub struct Meter {
    power_from: PowerFrom,
    energy_from: EnergyFrom,
    /// The last good energy counter reading: (J, ns).
    last_energy: Option<(f64, u64)>,
    /// The last good power reading: (W, ns).
    last_power: Option<(f64, u64)>,
    /// The latest time seen, ns (rule 8).
    last_ns: Option<u64>,
    /// The device's [`PowerDevice::counter_resets`] at the previous [`Meter::read`].
    device_resets: Option<u64>,
    /// Energy since the origin, J.
    energy_j: f64,
    energy_steps: u64,
    power_steps: u64,
    power_sum_w: f64,
    failed_reads: u64,
    resets: u64,
}

impl Meter {
    /// A meter for a device whose power and energy are obtained as `power_from` and
    /// `energy_from` say.
    pub fn new(power_from: PowerFrom, energy_from: EnergyFrom) -> Self {
        Meter {
            power_from,
            energy_from,
            last_energy: None,
            last_power: None,
            last_ns: None,
            device_resets: None,
            energy_j: 0.0,
            energy_steps: 0,
            power_steps: 0,
            power_sum_w: 0.0,
            failed_reads: 0,
            resets: 0,
        }
    }

    /// A meter for `device` ([`PowerDevice::power_from`], [`PowerDevice::energy_from`]).
    pub fn for_device(device: &dyn PowerDevice) -> Self {
        Meter::new(device.power_from(), device.energy_from())
    }

    /// Read `device` at `now_ns` (a monotonic clock, ns) and [`add`](Self::add) its reading;
    /// where the device's own [`PowerDevice::counter_resets`] grew during this read, the
    /// interval is a reset (rule 7). Returns the reading (for its clock) and the interval.
    pub fn read(&mut self, device: &mut dyn PowerDevice, now_ns: u64) -> (PowerSample, Interval) {
        let sample = device.read();
        let resets = device.counter_resets();
        let stepped_back = self.device_resets.is_some_and(|r| resets > r);
        self.device_resets = Some(resets);
        (sample, self.add_with(&sample, now_ns, stepped_back))
    }

    /// Close the interval that ends at `sample`, read at `now_ns` (a monotonic clock, ns),
    /// by the module's rules.
    pub fn add(&mut self, sample: &PowerSample, now_ns: u64) -> Interval {
        self.add_with(sample, now_ns, false)
    }

    fn add_with(&mut self, sample: &PowerSample, now_ns: u64, stepped_back: bool) -> Interval {
        let now = self.last_ns.map_or(now_ns, |l| l.max(now_ns));
        self.last_ns = Some(now);
        let energy_now = usable(sample.energy_j);
        let power_now = usable(sample.power_w);
        let secs = |t0: u64| (now - t0) as f64 * 1e-9;
        // The counter's advance since its last good reading, and over how long (s).
        let mut advance = None;
        if let Some(e1) = energy_now {
            match self.last_energy {
                Some((e0, _)) if e1 < e0 || stepped_back => self.resets += 1,
                Some((e0, t0)) => advance = Some((e1 - e0, secs(t0))),
                None => {}
            }
            self.last_energy = Some((e1, now));
        }
        let power = match self.power_from {
            PowerFrom::Measured => power_now,
            PowerFrom::EnergyRate => advance.filter(|(_, dt)| *dt > 0.0).map(|(de, dt)| de / dt),
        };
        let energy = match self.energy_from {
            EnergyFrom::Counter => advance.map(|(de, _)| de),
            EnergyFrom::PowerIntegral => match (self.last_power, power_now) {
                (Some((p0, t0)), Some(p1)) => Some(0.5 * (p0 + p1) * secs(t0)),
                _ => None,
            },
        };
        if let Some(p) = power_now {
            self.last_power = Some((p, now));
        }
        let wants_energy =
            self.energy_from == EnergyFrom::Counter || self.power_from == PowerFrom::EnergyRate;
        if (wants_energy && energy_now.is_none())
            || (self.power_from == PowerFrom::Measured && power_now.is_none())
        {
            self.failed_reads += 1;
        }
        if let Some(e) = energy {
            self.energy_j += e;
            self.energy_steps += 1;
        }
        if let Some(p) = power {
            self.power_steps += 1;
            self.power_sum_w += p;
        }
        Interval {
            power_w: power,
            energy_j: energy,
        }
    }

    /// Make the last reading the origin: the energy, the means and the counts restart at
    /// zero; the baselines stay, so the next interval runs from the last reading.
    pub fn restart(&mut self) {
        self.energy_j = 0.0;
        self.energy_steps = 0;
        self.power_steps = 0;
        self.power_sum_w = 0.0;
        self.failed_reads = 0;
        self.resets = 0;
    }

    /// Energy since the origin, J: the sum of the intervals' energy; `None` until an interval
    /// has energy.
    pub fn energy_j(&self) -> Option<f64> {
        (self.energy_steps > 0).then_some(self.energy_j)
    }

    /// How many intervals since the origin have energy.
    pub fn energy_steps(&self) -> u64 {
        self.energy_steps
    }

    /// The mean of the intervals' power since the origin, W; `None` where none has power.
    pub fn sampled_power_w(&self) -> Option<f64> {
        (self.power_steps > 0).then(|| self.power_sum_w / self.power_steps as f64)
    }

    /// Reads since the origin that failed or gave no usable value where the device should
    /// give one (rule 6).
    pub fn failed_reads(&self) -> u64 {
        self.failed_reads
    }

    /// Intervals since the origin lost to a counter that stepped back (rule 7).
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// How power is obtained.
    pub fn power_from(&self) -> PowerFrom {
        self.power_from
    }

    /// How energy is obtained.
    pub fn energy_from(&self) -> EnergyFrom {
        self.energy_from
    }
}

#[cfg(test)]
mod tests;
