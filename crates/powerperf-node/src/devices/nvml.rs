//! NVIDIA GPUs as [`PowerDevice`]s: one [`NvmlDevice`] per GPU of a
//! [`crate::nvml::GpuSource`] (NVML, or a fake in tests), stem `gpu<i>` as the timeline's
//! NVML columns have always been. Power is NVML's (instantaneous where the GPU has it),
//! energy NVML's total energy counter (mJ → J, kept monotonic by [`EnergyCounter`] across a
//! driver reload), clock the SM clock. `GpuSource` itself and everything that uses it stay
//! as they are.

use super::read::EnergyCounter;
use super::{
    Access, Ctx, EnergyFrom, Origin, PowerDevice, PowerFrom, PowerSample, Quantity, SourceInfo,
};
use crate::nvml::GpuSource;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// One GPU of a shared [`GpuSource`].
pub struct NvmlDevice {
    stem: String,
    label: String,
    index: u32,
    power_source: &'static str,
    gpus: Arc<Mutex<Box<dyn GpuSource>>>,
    counter: EnergyCounter,
}

impl std::fmt::Debug for NvmlDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlDevice")
            .field("stem", &self.stem)
            .field("label", &self.label)
            .field("index", &self.index)
            .finish()
    }
}

/// One [`NvmlDevice`] per GPU of `source` (`gpu0`, `gpu1`, …), sharing it.
pub fn nvml_devices(source: Box<dyn GpuSource>) -> Vec<Box<dyn PowerDevice>> {
    let n = source.count();
    let labels: Vec<(String, &'static str)> = (0..n)
        .map(|i| (source.name(i), source.power_source(i)))
        .collect();
    let gpus = Arc::new(Mutex::new(source));
    labels
        .into_iter()
        .enumerate()
        .map(|(i, (label, power_source))| {
            Box::new(NvmlDevice {
                stem: format!("gpu{i}"),
                label,
                index: i as u32,
                power_source,
                gpus: Arc::clone(&gpus),
                counter: EnergyCounter::default(),
            }) as Box<dyn PowerDevice>
        })
        .collect()
}

impl PowerDevice for NvmlDevice {
    fn stem(&self) -> &str {
        &self.stem
    }
    fn origin(&self) -> Origin {
        Origin::Nvml
    }
    fn label(&self) -> &str {
        &self.label
    }
    fn source(&self) -> String {
        format!(
            "NVML GPU {} ({}): power {}, energy nvmlDeviceGetTotalEnergyConsumption (mJ)",
            self.index, self.label, self.power_source
        )
    }
    fn power_from(&self) -> PowerFrom {
        PowerFrom::Measured
    }
    fn energy_from(&self) -> EnergyFrom {
        EnergyFrom::Counter
    }
    fn read(&mut self) -> PowerSample {
        let r = match self.gpus.lock() {
            Ok(mut g) => g.read(self.index),
            Err(_) => return PowerSample::default(),
        };
        PowerSample {
            power_w: r.power_w,
            energy_j: r.energy_mj.map(|mj| self.counter.update(mj, 1e-3)),
            clock_mhz: r.sm_clock_mhz,
        }
    }
    fn counter_resets(&self) -> u64 {
        self.counter.resets()
    }
}

/// NVML's GPUs as rows and devices: only what NVML reads now is listed (a GPU that gives
/// neither power nor energy is a note); NVML absent is one note, not a problem.
#[cfg(target_os = "linux")]
pub(crate) fn rows(ctx: &mut Ctx) {
    match crate::nvml::open_nvml() {
        Err(why) => ctx.out.notes.push(why),
        Ok(mut src) => {
            let mut readable = Vec::new();
            for i in 0..src.count() {
                let r = src.read(i);
                let stem = ctx.unique_stem(format!("gpu{i}"));
                let label = src.name(i);
                let path = PathBuf::from(format!("NVML GPU {i}"));
                for (ok, quantity) in [
                    (r.power_w.is_some(), Quantity::Power),
                    (r.energy_mj.is_some(), Quantity::Energy),
                ] {
                    if ok {
                        ctx.out.listing.push(SourceInfo {
                            origin: Origin::Nvml,
                            name: None,
                            label: label.clone(),
                            path: path.clone(),
                            quantity,
                            stem: Some(stem.clone()),
                            readable: Access::Yes,
                            settable: Access::No(super::NOT_A_CONTROL.into()),
                        });
                    }
                }
                readable.push(r.power_w.is_some() || r.energy_mj.is_some());
                if r.power_w.is_none() && r.energy_mj.is_none() {
                    ctx.out.notes.push(format!(
                        "NVML GPU {i} ({label}) gives neither power nor energy: not listed"
                    ));
                }
            }
            let devices = nvml_devices(src).into_iter().zip(readable);
            ctx.out
                .devices
                .extend(devices.filter_map(|(d, ok)| ok.then_some(d)));
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn rows(ctx: &mut Ctx) {
    ctx.out.notes.push("NVML not available: not Linux".into());
}
