use super::*;

/// Two GPUs: gpu0 offers GPM with fixed values (the FP64 metric failing), gpu1 does not.
struct Fake {
    reads: u32,
}

impl GpmSource for Fake {
    fn count(&self) -> u32 {
        2
    }
    fn support(&self, i: u32) -> Result<(), String> {
        if i == 0 {
            Ok(())
        } else {
            Err("gpu1 does not support GPM (nvmlGpmQueryDeviceSupport: isSupportedDevice = 0; GPM needs Hopper or newer)".into())
        }
    }
    fn read(&mut self, i: u32) -> Option<Vec<Result<f64, String>>> {
        assert_eq!(i, 0, "a GPU without GPM is never sampled");
        self.reads += 1;
        (self.reads > 1).then(|| {
            METRICS
                .iter()
                .map(|m| match m.name {
                    "fp64_active" => Err("Not Supported".to_string()),
                    "dram_active" => Ok(73.0),
                    "pcie_tx_bytes" => Ok(2.0),
                    "sm_occupancy" => Ok(f64::NAN),
                    _ => Ok(50.0),
                })
                .collect()
        })
    }
}

#[test]
fn percent_becomes_a_fraction_and_mib_bytes_and_each_metric_has_a_record() {
    let mut s = GpmSampler::new(Box::new(Fake { reads: 0 }));
    let cols = s.columns();
    assert_eq!(cols.len(), METRICS.len(), "only gpu0 offers GPM");
    assert_eq!(cols[0], "gpu0_gr_engine_active");
    let t0 = std::time::Instant::now();
    let first = s.sample_at(t0);
    assert!(
        first.iter().all(Option::is_none),
        "the first sample sets the origin"
    );
    // within MIN_WINDOW: no GPM sample is taken, the row has nulls
    let early = s.sample_at(t0 + MIN_WINDOW / 2);
    assert_eq!(early.len(), cols.len());
    assert!(early.iter().all(Option::is_none));
    let v = s.sample_at(t0 + MIN_WINDOW);
    assert_eq!(
        s.cost_us().unwrap().1,
        2,
        "two GPM samples taken, not three"
    );
    let at = |n: &str| v[cols.iter().position(|c| c == &format!("gpu0_{n}")).unwrap()];
    assert_eq!(at("dram_active"), Some(0.73));
    assert_eq!(at("pcie_tx_bytes"), Some(2.0 * 1_048_576.0));
    assert_eq!(at("fp64_active"), None);
    assert_eq!(at("sm_occupancy"), None, "NaN is no value");
    let recs = s.records(false);
    assert_eq!(recs.len(), 2 * METRICS.len());
    let rec = |n: &str| recs.iter().find(|r| r.name == n).unwrap();
    assert_eq!(rec("gpu0-dram_active").status, EventStatus::Counted);
    assert_eq!(
        rec("gpu0-dram_active").column.as_deref(),
        Some("gpu0_dram_active")
    );
    assert_eq!(rec("gpu0-dram_active").unit.as_deref(), Some("fraction"));
    let fp64 = rec("gpu0-fp64_active");
    assert_eq!(fp64.status, EventStatus::NotSupported);
    assert!(fp64
        .reason
        .as_deref()
        .unwrap()
        .contains("NVML_GPM_METRIC_FP64_UTIL"));
    let g1 = rec("gpu1-sm_active");
    assert_eq!(g1.status, EventStatus::NotSupported);
    assert!(g1.reason.as_deref().unwrap().contains("Hopper"), "{g1:?}");
}

#[test]
fn no_gpm_is_reported_only_when_asked_for() {
    let s = GpmSampler::none("NVML not available for GPM: libnvidia-ml.so.1 not found");
    assert!(s.columns().is_empty());
    assert!(s.records(false).is_empty());
    let r = s.records(true);
    assert_eq!(r[0].status, EventStatus::NotSupported);
    assert!(r[0].reason.as_deref().unwrap().contains("not available"));
}

#[test]
fn gpm_columns_are_recognised_by_name() {
    assert!(is_gpm_column("gpu0_sm_active"));
    assert!(is_gpm_column("gpu12_nvlink_rx_bytes"));
    assert!(!is_gpm_column("gpu0_power_w"));
    assert!(!is_gpm_column("gpu_sm_active"));
    assert!(!is_gpm_column("sm_active"));
    assert_eq!(convert(Unit::Fraction, -1.0), None);
    assert_eq!(convert(Unit::Fraction, 100.0), Some(1.0));
}

/// Issue 39: a run too short for one GPM span on a GPU that has GPM says `<no sample>` with
/// the reason, not `<not supported>`; a GPU without GPM still says not supported.
#[test]
fn a_short_run_on_a_gpm_gpu_has_no_sample_not_unsupported_metrics() {
    let mut s = GpmSampler::new(Box::new(Fake { reads: 0 }));
    let t0 = std::time::Instant::now();
    // the origin and one row inside MIN_WINDOW: no span long enough
    s.sample_at(t0);
    s.sample_at(t0 + MIN_WINDOW / 2);
    let recs = s.records(false);
    let rec = |n: &str| recs.iter().find(|r| r.name == n).unwrap();
    let dram = rec("gpu0-dram_active");
    assert_eq!(dram.status, EventStatus::NoSample);
    assert_eq!(dram.status.perf_marker(), "<no sample>");
    let why = dram.reason.as_deref().unwrap();
    assert!(
        why.starts_with("no sample: gpu0 has GPM") && why.contains("at least 200 ms"),
        "{why}"
    );
    assert!(!dram.status.has_value());
    // gpu1 has no GPM: not supported, with the reason
    let g1 = rec("gpu1-dram_active");
    assert_eq!(g1.status, EventStatus::NotSupported);
    assert!(g1.reason.as_deref().unwrap().contains("Hopper"), "{g1:?}");
    // the report prints the marker
    let row = crate::report::Row {
        event: dram.name.clone(),
        backend: "nvml".into(),
        status: "no_sample".into(),
        value: None,
        unit: None,
        rate: None,
        rate_unit: None,
        reason: dram.reason.clone(),
    };
    assert_eq!(crate::report::display_value(&row), "<no sample>");
}

/// A GPU with GPM whose every span fails for another reason than "not supported" (as
/// nvmlGpmMetricsGet does for two samples inside one update of GPM's counters): `<no
/// sample>` with NVML's error, not `<not supported>`.
#[test]
fn a_gpm_gpu_whose_spans_all_fail_has_no_sample_with_nvmls_error() {
    struct Idle;
    impl GpmSource for Idle {
        fn count(&self) -> u32 {
            1
        }
        fn support(&self, _: u32) -> Result<(), String> {
            Ok(())
        }
        fn read(&mut self, _: u32) -> Option<Vec<Result<f64, String>>> {
            Some(
                METRICS
                    .iter()
                    .map(|m| match m.name {
                        "fp64_active" => Err(
                            "the requested operation is not available on the target device"
                                .to_string(),
                        ),
                        _ => Err("a supplied argument was invalid".to_string()),
                    })
                    .collect(),
            )
        }
    }
    let mut s = GpmSampler::new(Box::new(Idle));
    let t0 = std::time::Instant::now();
    for k in 0..5 {
        s.sample_at(t0 + MIN_WINDOW * k);
    }
    let recs = s.records(false);
    let rec = |n: &str| recs.iter().find(|r| r.name == n).unwrap();
    let dram = rec("gpu0-dram_active");
    assert_eq!(dram.status, EventStatus::NoSample);
    let why = dram.reason.as_deref().unwrap();
    assert!(
        why.starts_with("no sample: gpu0 has GPM")
            && why.contains("a supplied argument was invalid"),
        "{why}"
    );
    let fp64 = rec("gpu0-fp64_active");
    assert_eq!(fp64.status, EventStatus::NotSupported, "{fp64:?}");
}

/// One GPU whose DRAM activity is 20 % over the first span and 80 % over the second.
struct Changing {
    reads: u32,
}

impl GpmSource for Changing {
    fn count(&self) -> u32 {
        1
    }
    fn support(&self, _: u32) -> Result<(), String> {
        Ok(())
    }
    fn read(&mut self, _: u32) -> Option<Vec<Result<f64, String>>> {
        self.reads += 1;
        let dram = match self.reads {
            1 => return None,
            2 => 20.0,
            _ => 80.0,
        };
        Some(
            METRICS
                .iter()
                .map(|m| Ok(if m.name == "dram_active" { dram } else { 0.0 }))
                .collect(),
        )
    }
}

/// A counted GPM metric's record carries its time-weighted mean over the run as `total`, so
/// the perf-stat-like summary prints a value (quickstart's step 1 on the H200 printed
/// `<not supported>` for counted metrics, which had no total), and the report prints it as a
/// fraction.
#[test]
fn a_counted_metric_records_its_time_weighted_mean_and_the_report_prints_it() {
    let mut s = GpmSampler::new(Box::new(Changing { reads: 0 }));
    let t0 = std::time::Instant::now();
    s.sample_at(t0);
    s.sample_at(t0 + MIN_WINDOW); // 0.2 over 200 ms
    s.sample_at(t0 + 4 * MIN_WINDOW); // 0.8 over 600 ms
    let recs = s.records(false);
    let dram = recs.iter().find(|r| r.name == "gpu0-dram_active").unwrap();
    assert_eq!(dram.status, EventStatus::Counted);
    let mean = dram.total.unwrap();
    assert!(
        (mean - (0.2 * 0.2 + 0.8 * 0.6) / 0.8).abs() < 1e-12,
        "{mean}"
    );
    let row = crate::report::Row {
        event: dram.name.clone(),
        backend: "nvml".into(),
        status: "counted".into(),
        value: dram.total,
        unit: dram.unit.clone(),
        rate: None,
        rate_unit: None,
        reason: None,
    };
    assert_eq!(crate::report::display_value(&row), "0.650 fraction");
    let pcie = recs
        .iter()
        .find(|r| r.name == "gpu0-pcie_tx_bytes")
        .unwrap();
    assert_eq!(pcie.total, Some(0.0));
    assert_eq!(
        crate::report::perf_value(3.5e9, pcie.unit.as_deref()),
        ("3,500,000,000".to_string(), "B/s")
    );
}
