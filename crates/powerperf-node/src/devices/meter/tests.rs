use super::*;
use crate::devices::{EnergyCounter, Origin};

const S: u64 = 1_000_000_000;

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

fn failed() -> PowerSample {
    PowerSample::default()
}

fn energy_only() -> Meter {
    Meter::new(PowerFrom::EnergyRate, EnergyFrom::Counter)
}

fn power_only() -> Meter {
    Meter::new(PowerFrom::Measured, EnergyFrom::PowerIntegral)
}

/// Feed `(ns, sample)` in order; the intervals as (power, energy).
fn feed(m: &mut Meter, seq: &[(u64, PowerSample)]) -> Vec<(Option<f64>, Option<f64>)> {
    seq.iter()
        .map(|(t, s)| {
            let i = m.add(s, *t);
            (i.power_w, i.energy_j)
        })
        .collect()
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

#[test]
fn an_energy_only_device_gives_its_advance_and_its_rate() {
    let mut m = energy_only();
    let got = feed(
        &mut m,
        &[
            (0, energy(100.0)),
            (S, energy(105.0)),
            (3 * S, energy(111.0)),
        ],
    );
    assert_eq!(got[0], (None, None), "the first reading is the baseline");
    assert_eq!(got[1], (Some(5.0), Some(5.0)));
    assert_eq!(got[2], (Some(3.0), Some(6.0)), "6 J over 2 s");
    assert_eq!(m.energy_j(), Some(11.0));
    assert_eq!(m.energy_steps(), 2);
    assert_eq!(m.sampled_power_w(), Some(4.0));
    assert_eq!((m.failed_reads(), m.resets()), (0, 0));
}

#[test]
fn a_power_only_device_integrates_by_the_trapezoid_rule() {
    let mut m = power_only();
    let got = feed(
        &mut m,
        &[(0, power(100.0)), (S / 2, power(200.0)), (S, power(200.0))],
    );
    assert_eq!(
        got[0],
        (Some(100.0), None),
        "power as read; no interval yet"
    );
    assert_eq!(got[1].0, Some(200.0));
    assert!(close(got[1].1, 75.0), "½·(100 + 200)·0.5 s: {got:?}");
    assert!(close(got[2].1, 100.0), "{got:?}");
    assert!(close(m.energy_j(), 175.0));
}

#[test]
fn a_counter_that_steps_back_adds_nothing_and_goes_on_from_the_new_value() {
    let mut m = energy_only();
    let got = feed(
        &mut m,
        &[
            (0, energy(10.0)),
            (S, energy(15.0)),
            (2 * S, energy(3.0)),
            (3 * S, energy(8.0)),
        ],
    );
    assert_eq!(got[1], (Some(5.0), Some(5.0)));
    assert_eq!(
        got[2],
        (None, None),
        "the reset's interval is empty, not 3 J, not 0"
    );
    assert_eq!(got[3], (Some(5.0), Some(5.0)), "counted from the new value");
    assert_eq!(m.energy_j(), Some(10.0));
    assert_eq!(m.resets(), 1);
}

/// A device whose raw counter steps back and whose own [`EnergyCounter`] keeps `energy_j`
/// monotonic (as hwmon, amdgpu and NVML devices do).
#[derive(Debug)]
struct Raw {
    raw: Vec<u64>,
    counter: EnergyCounter,
}

impl PowerDevice for Raw {
    fn stem(&self) -> &str {
        "raw0"
    }
    fn origin(&self) -> Origin {
        Origin::Hwmon
    }
    fn label(&self) -> &str {
        "raw"
    }
    fn source(&self) -> String {
        "a test counter".into()
    }
    fn power_from(&self) -> PowerFrom {
        PowerFrom::EnergyRate
    }
    fn energy_from(&self) -> EnergyFrom {
        EnergyFrom::Counter
    }
    fn read(&mut self) -> PowerSample {
        let raw = self.raw.remove(0);
        energy(self.counter.update(raw, 1.0))
    }
    fn counter_resets(&self) -> u64 {
        self.counter.resets()
    }
}

#[test]
fn a_step_back_the_device_undid_itself_is_still_an_empty_interval() {
    let mut dev = Raw {
        raw: vec![10, 15, 3, 8],
        counter: EnergyCounter::default(),
    };
    let mut m = Meter::for_device(&dev);
    let got: Vec<Interval> = (0..4).map(|k| m.read(&mut dev, k * S).1).collect();
    assert_eq!(got[1].energy_j, Some(5.0));
    assert_eq!(
        got[2],
        Interval::default(),
        "the device's energy_j stayed at 15 J, but the interval is unknown, not 0 W"
    );
    assert_eq!(got[3].energy_j, Some(5.0));
    assert_eq!(m.energy_j(), Some(10.0));
    assert_eq!((m.resets(), dev.counter_resets()), (1, 1));
}

#[test]
fn a_failed_read_is_no_value_and_the_next_good_reading_covers_the_gap() {
    let mut m = energy_only();
    let got = feed(
        &mut m,
        &[
            (0, energy(0.0)),
            (S, energy(5.0)),
            (2 * S, failed()),
            (3 * S, energy(15.0)),
        ],
    );
    assert_eq!(got[2], (None, None), "empty, not zero");
    assert_eq!(
        got[3],
        (Some(5.0), Some(10.0)),
        "10 J over the 2 s since 5 J"
    );
    assert_eq!(m.energy_j(), Some(15.0));
    assert_eq!(m.failed_reads(), 1);

    let mut m = power_only();
    let got = feed(
        &mut m,
        &[
            (0, power(100.0)),
            (S, power(200.0)),
            (2 * S, failed()),
            (3 * S, power(200.0)),
        ],
    );
    assert_eq!(got[2], (None, None));
    assert!(close(got[3].1, 400.0), "½·(200 + 200)·2 s: {got:?}");
    assert!(close(m.energy_j(), 550.0));
    assert_eq!(m.failed_reads(), 1);
}

#[test]
fn values_that_are_not_finite_or_are_negative_are_failed_reads() {
    let mut m = energy_only();
    let got = feed(
        &mut m,
        &[
            (0, energy(1.0)),
            (S, energy(f64::NAN)),
            (2 * S, energy(-4.0)),
            (3 * S, energy(f64::INFINITY)),
            (4 * S, energy(5.0)),
        ],
    );
    assert_eq!(&got[1..4], [(None, None); 3]);
    assert_eq!(got[4], (Some(1.0), Some(4.0)));
    assert_eq!(
        (m.failed_reads(), m.resets()),
        (3, 0),
        "no reset: -4 is no value"
    );
}

#[test]
fn no_time_between_two_readings_keeps_the_energy_and_gives_no_rate() {
    let mut m = energy_only();
    let got = feed(
        &mut m,
        &[(S, energy(0.0)), (S, energy(5.0)), (2 * S, energy(7.0))],
    );
    assert_eq!(
        got[1],
        (None, Some(5.0)),
        "the advance is kept; no rate over 0 s"
    );
    assert_eq!(got[2], (Some(2.0), Some(2.0)));
    assert_eq!(m.energy_j(), Some(7.0));

    let mut m = power_only();
    let got = feed(&mut m, &[(S, power(100.0)), (S, power(300.0))]);
    assert_eq!(got[1], (Some(300.0), Some(0.0)), "no time, no energy");
}

#[test]
fn time_that_goes_back_is_no_time() {
    let mut m = power_only();
    let got = feed(
        &mut m,
        &[
            (2 * S, power(100.0)),
            (S, power(100.0)),
            (3 * S, power(100.0)),
        ],
    );
    assert_eq!(got[1].1, Some(0.0));
    assert!(close(got[2].1, 100.0), "from 2 s, not from 1 s: {got:?}");
}

#[test]
fn a_device_with_power_and_a_counter_takes_energy_from_the_counter() {
    let mut m = Meter::new(PowerFrom::Measured, EnergyFrom::Counter);
    let s = |w, j| PowerSample {
        power_w: Some(w),
        energy_j: Some(j),
        clock_mhz: None,
    };
    let got = feed(&mut m, &[(0, s(90.0, 1000.0)), (S, s(95.0, 1092.0))]);
    assert_eq!(got[1], (Some(95.0), Some(92.0)));
    // power read but the counter failed: a failed read, the power is still given
    let got = feed(&mut m, &[(2 * S, power(97.0))]);
    assert_eq!(got[0], (Some(97.0), None));
    assert_eq!(m.failed_reads(), 1);
}

#[test]
fn restart_makes_the_last_reading_the_origin() {
    let mut m = energy_only();
    feed(&mut m, &[(0, energy(0.0)), (S, energy(50.0))]);
    m.restart();
    assert_eq!(m.energy_j(), None, "nothing since the origin yet");
    let got = feed(&mut m, &[(2 * S, energy(53.0))]);
    assert_eq!(
        got[0],
        (Some(3.0), Some(3.0)),
        "from the last reading, 50 J"
    );
    assert_eq!(m.energy_j(), Some(3.0));
}
