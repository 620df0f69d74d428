use super::*;
use powerperf_node::devices::PowerSample;
use std::collections::VecDeque;

/// A device that gives the readings it is handed, in order (then nothing).
#[derive(Debug)]
struct Scripted {
    stem: &'static str,
    origin: Origin,
    power_from: PowerFrom,
    energy_from: EnergyFrom,
    readings: VecDeque<PowerSample>,
}

impl PowerDevice for Scripted {
    fn stem(&self) -> &str {
        self.stem
    }
    fn origin(&self) -> Origin {
        self.origin
    }
    fn label(&self) -> &str {
        "test sensor"
    }
    fn source(&self) -> String {
        format!("/sys/class/hwmon/{}", self.stem)
    }
    fn power_from(&self) -> PowerFrom {
        self.power_from
    }
    fn energy_from(&self) -> EnergyFrom {
        self.energy_from
    }
    fn read(&mut self) -> PowerSample {
        self.readings.pop_front().unwrap_or_default()
    }
}

fn energy(j: f64) -> PowerSample {
    PowerSample {
        energy_j: Some(j),
        ..Default::default()
    }
}

fn power(w: f64) -> PowerSample {
    PowerSample {
        power_w: Some(w),
        ..Default::default()
    }
}

fn energy_only(stem: &'static str, readings: Vec<PowerSample>) -> Box<dyn PowerDevice> {
    Box::new(Scripted {
        stem,
        origin: Origin::Xe,
        power_from: PowerFrom::EnergyRate,
        energy_from: EnergyFrom::Counter,
        readings: readings.into(),
    })
}

fn power_only(stem: &'static str, readings: Vec<PowerSample>) -> Box<dyn PowerDevice> {
    Box::new(Scripted {
        stem,
        origin: Origin::Hwmon,
        power_from: PowerFrom::Measured,
        energy_from: EnergyFrom::PowerIntegral,
        readings: readings.into(),
    })
}

const MS: u64 = 1_000_000;

#[test]
fn an_energy_counter_gives_its_advance_and_its_rate() {
    // Read once at new() (the clock probe), once at start(), then every 100 ms: the counter
    // advances 5 J per 100 ms, 50 W.
    let mut s = DeviceSampler::new(
        vec![energy_only(
            "card0",
            vec![energy(0.0), energy(100.0), energy(105.0), energy(110.0)],
        )],
        &[],
    );
    assert_eq!(s.columns(), ["card0_power_w", "card0_energy_j"]);
    s.start(0);
    let a = s.sample(100 * MS);
    assert!((a[0].unwrap() - 50.0).abs() < 1e-9, "{a:?}");
    assert!((a[1].unwrap() - 5.0).abs() < 1e-9, "{a:?}");
    let b = s.sample(200 * MS);
    assert!((b[0].unwrap() - 50.0).abs() < 1e-9, "{b:?}");
    let rec = &s.records(200 * MS)[0];
    assert_eq!(rec.name, "card0-energy");
    assert_eq!(rec.backend, Backend::Sysfs);
    assert_eq!(rec.unit.as_deref(), Some("J"));
    assert_eq!(rec.column.as_deref(), Some("card0_energy_j"));
    assert!((rec.total.unwrap() - 10.0).abs() < 1e-9);
    let d = &s.device_records(200 * MS)[0];
    assert_eq!(
        (d.power_from.as_str(), d.energy_from.as_str()),
        ("energy_rate", "counter")
    );
    assert!((d.mean_power_w.unwrap() - 50.0).abs() < 1e-9);
}

#[test]
fn power_alone_integrates_by_the_trapezoid_rule() {
    // 100 W then 200 W over 0.5 s: ½·(100 + 200)·0.5 = 75 J.
    let mut s = DeviceSampler::new(
        vec![power_only(
            "power_meter0_module",
            vec![power(100.0), power(100.0), power(200.0)],
        )],
        &[],
    );
    s.start(0);
    let a = s.sample(500 * MS);
    assert_eq!(a[0], Some(200.0), "power is the reading itself");
    assert!((a[1].unwrap() - 75.0).abs() < 1e-9, "{a:?}");
    assert!(
        s.notes.iter().any(|n| n
            .contains("energy of power_meter0_module is the integral of sampled power")
            && n.contains("not a counter")),
        "{:?}",
        s.notes
    );
    let d = &s.device_records(500 * MS)[0];
    assert_eq!(d.energy_from, "power_integral");
    assert!((d.energy_j.unwrap() - 75.0).abs() < 1e-9);
}

#[test]
fn a_failed_read_is_an_empty_cell_and_the_next_covers_the_gap() {
    // 10 J per 100 ms; the read at 200 ms fails; the one at 300 ms covers 200 ms.
    let mut s = DeviceSampler::new(
        vec![energy_only(
            "card0",
            vec![
                energy(0.0),
                energy(0.0),
                energy(10.0),
                PowerSample::default(),
                energy(30.0),
            ],
        )],
        &[],
    );
    s.start(0);
    s.sample(100 * MS);
    let failed = s.sample(200 * MS);
    assert_eq!(failed, [None, None], "empty, not zero");
    let after = s.sample(300 * MS);
    assert!((after[0].unwrap() - 100.0).abs() < 1e-9, "{after:?}");
    assert!((after[1].unwrap() - 20.0).abs() < 1e-9, "{after:?}");
    let d = &s.device_records(300 * MS)[0];
    assert_eq!(d.failed_reads, 1);
    assert!((d.energy_j.unwrap() - 30.0).abs() < 1e-9);
}

#[test]
fn invalid_values_are_empty_cells() {
    let mut s = DeviceSampler::new(
        vec![power_only(
            "hwmon0_power1",
            vec![power(5.0), power(5.0), power(f64::NAN), power(-1.0)],
        )],
        &[],
    );
    s.start(0);
    assert_eq!(s.sample(100 * MS)[0], None);
    assert_eq!(s.sample(200 * MS)[0], None);
}

#[test]
fn a_counter_that_goes_back_restarts_its_origin() {
    let mut s = DeviceSampler::new(
        vec![energy_only(
            "card0",
            vec![energy(500.0), energy(500.0), energy(2.0), energy(4.0)],
        )],
        &[],
    );
    s.start(0);
    assert_eq!(s.sample(100 * MS), [None, None], "no negative energy");
    let b = s.sample(200 * MS);
    assert!((b[1].unwrap() - 2.0).abs() < 1e-9, "{b:?}");
    assert!((b[0].unwrap() - 20.0).abs() < 1e-9, "{b:?}");
}

#[test]
fn a_device_that_never_gives_energy_is_not_supported_not_zero() {
    let mut s = DeviceSampler::new(vec![energy_only("card0", vec![])], &[]);
    s.start(0);
    s.sample(100 * MS);
    let rec = &s.records(100 * MS)[0];
    assert_eq!(rec.status, EventStatus::NotSupported);
    assert!(rec.total.is_none() && rec.column.is_none());
    assert!(rec
        .reason
        .as_deref()
        .unwrap()
        .contains("/sys/class/hwmon/card0"));
}

#[test]
fn origins_sampled_elsewhere_and_clashing_stems_are_left_out() {
    let clocked = Box::new(Scripted {
        stem: "amdgpu0",
        origin: Origin::Amdgpu,
        power_from: PowerFrom::Measured,
        energy_from: EnergyFrom::PowerIntegral,
        readings: vec![PowerSample {
            power_w: Some(90.0),
            energy_j: None,
            clock_mhz: Some(1700.0),
        }]
        .into(),
    });
    let nvml = Box::new(Scripted {
        stem: "gpu0",
        origin: Origin::Nvml,
        power_from: PowerFrom::Measured,
        energy_from: EnergyFrom::Counter,
        readings: VecDeque::new(),
    });
    let s = DeviceSampler::new(
        vec![
            clocked,
            nvml,
            energy_only("amdgpu0", vec![]),
            energy_only("Bad-Stem", vec![]),
        ],
        &[Origin::Rapl, Origin::Nvml],
    );
    assert_eq!(s.count(), 1);
    assert_eq!(
        s.columns(),
        ["amdgpu0_power_w", "amdgpu0_energy_j", "amdgpu0_clock_mhz"]
    );
    assert!(s
        .notes
        .iter()
        .any(|n| n.contains("taken by another device")));
    assert!(s.notes.iter().any(|n| n.contains("not a column name")));
}

#[test]
fn a_counter_that_never_advances_is_not_supported_not_zero() {
    let mut s = DeviceSampler::new(vec![energy_only("card0", vec![energy(7.0); 4])], &[]);
    s.start(0);
    let a = s.sample(100 * MS);
    assert_eq!(a, [Some(0.0), Some(0.0)], "the cells hold what was read");
    let rec = &s.records(100 * MS)[0];
    assert_eq!(rec.status, EventStatus::NotSupported);
    assert!(rec.reason.as_deref().unwrap().contains("did not advance"));
    assert!(s.device_records(100 * MS)[0].energy_j.is_none());
}

#[test]
fn failed_reads_are_said_at_the_end() {
    let mut s = DeviceSampler::new(
        vec![energy_only("card0", vec![energy(0.0), energy(0.0)])],
        &[],
    );
    s.start(0);
    s.sample(100 * MS);
    let notes = s.end_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].starts_with("card0: 1 reads failed"), "{notes:?}");
}

#[test]
fn regions_split_device_energy_but_not_power_or_clock() {
    use crate::collect::attribution::is_additive;
    assert!(is_additive("power_meter0_module_energy_j"));
    assert!(!is_additive("power_meter0_module_power_w"));
    assert!(!is_additive("amdgpu0_clock_mhz"));
}
