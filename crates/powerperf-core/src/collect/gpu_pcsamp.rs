//! GPU PC sampling (`collect --pc-sampling gpu`): the PC samples of the CUPTI recordings
//! (`RUN/gpu_activity/<pid>.bin`, decoded by `powerperf_rt::cupti`) turned into the rows of
//! `gpu_pc_samples.parquet` and `gpu_pc_sampling.parquet`. The tables, their stall-reason
//! mapping and HPCToolkit's metrics over them are the run format's
//! ([`powerperf_format::gpu_pcsamp`], re-exported here).

pub use powerperf_format::gpu_pcsamp::*;

/// Turn the decoded files' PC samples into rows and summaries. `region_of(pid,
/// correlation_id)` gives the region of a launch; `clock_mhz(device)` the mean measured SM
/// clock, if any.
pub fn rows(
    files: &[powerperf_rt::cupti::CuptiFile],
    region_of: &dyn Fn(u32, u32) -> Option<String>,
    clock_mhz: &dyn Fn(u32) -> Option<f64>,
) -> (Vec<PcRow>, Vec<PcSummary>) {
    let mut rows = Vec::new();
    let mut sums = Vec::new();
    for f in files {
        for s in &f.pc_samples {
            rows.push(PcRow {
                device: format!("gpu{}", s.device_id),
                function: s.function.clone(),
                file: s.file.clone(),
                line: s.line,
                pc: s.pc_offset,
                stall_reason: s.stall_reason.clone(),
                samples: s.samples,
                region: if s.correlation_id != 0 {
                    region_of(f.pid, s.correlation_id)
                } else {
                    None
                },
            });
        }
        for c in &f.pc_configs {
            let dev = f.devices.iter().find(|d| d.id == c.device_id);
            let (clock, source) = match clock_mhz(c.device_id) {
                Some(m) => (m, "nvml"),
                None => (
                    dev.map(|d| f64::from(d.core_clock_khz) / 1e3)
                        .unwrap_or(0.0),
                    "device",
                ),
            };
            sums.push(PcSummary {
                device: format!("gpu{}", c.device_id),
                pid: f.pid,
                context: c.context_id,
                mode: c.mode.to_string(),
                period_cycles: c.period_cycles,
                total_samples: c.total_samples,
                dropped_samples: c.dropped_samples,
                non_user_samples: c.non_user_samples,
                hardware_buffer_full: c.hardware_buffer_full,
                sm_count: dev.map(|d| d.sm_count).unwrap_or(0),
                clock_mhz: clock,
                clock_source: source.into(),
            });
        }
    }
    (rows, sums)
}

#[cfg(test)]
mod tests {
    /// GPU PC sampling (`collect --pc-sampling gpu`) from `fixture_pcsamp.bin`
    /// (`scripts/gpu/stall_kernels.cu` on an H100, README in the fixture directory): the PC
    /// samples table, the summary, and HPCToolkit's metrics in the report.
    #[test]
    fn pc_sampling_fixture_becomes_tables_and_hpctoolkit_stalls() {
        use crate::collect::{gpu_activity, gpu_pcsamp};
        use std::path::Path;
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("gpu_activity");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::copy(
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
                .join("rt/tests/fixtures/cupti/fixture_pcsamp.bin"),
            sub.join("459.bin"),
        )
        .unwrap();
        // A measured clock of 1980 MHz while kernels ran (the H100's, from NVML).
        let notes = gpu_activity::write_gpu_activity(dir.path(), 0, &|dev, kernels| {
            assert_eq!(dev, 0);
            assert!(!kernels.is_empty());
            Some(1980.0)
        })
        .unwrap()
        .unwrap();
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("GPU PC sampling (CUPTI)")),
            "{notes:?}"
        );
        let (rows, sums) = gpu_pcsamp::read(dir.path()).unwrap().unwrap();
        assert!(rows
            .iter()
            .all(|r| r.device == "gpu0" && r.samples > 0 && r.region.is_none()));
        assert!(rows.iter().any(|r| r.line == Some(25)));
        assert_eq!(sums.len(), 1);
        assert_eq!(sums[0].period_cycles, 4096);
        assert_eq!((sums[0].sm_count, sums[0].clock_mhz), (132, 1980.0));
        let s = crate::report::gpu::load(dir.path()).unwrap().unwrap();
        let p = s.pc_sampling.as_ref().unwrap();
        let dom = |k: &str| {
            p.kernels
                .iter()
                .find(|x| x.name.contains(k))
                .and_then(|x| x.dominant.clone())
                .unwrap()
        };
        assert_eq!(dom("chase"), "GINST:STL_GMEM");
        assert_eq!(dom("barrier"), "GINST:STL_SYNC");
        assert_eq!(dom("fma_chain"), "GINST:STL_IDEP");
        // TOT counts each sample once (latency samples are inside their base reason), so it
        // cannot exceed CUPTI's own total.
        assert!(p.gsamp["GSAMP:TOT"] <= sums[0].total_samples as f64);
        let util = p.gsamp["GSAMP:UTIL"];
        assert!(util > 0.0 && util < 150.0, "{util}");
        let text = crate::report::gpu::render_text(&s, 1.0);
        println!("{text}");
        assert!(
            text.contains("GSAMP:TOT") && text.contains("stall_kernels.cu:25"),
            "{text}"
        );
    }
}
