//! One integrator behind collect and powerperfd (`powerperf_node::devices::Meter`): the same
//! readings of the same devices, fed to collect's device sampler (the timeline's
//! `<stem>_energy_j`, run.toml's `<stem>-energy` total) and to powerperfd's device metrics
//! (`powerperf_job_device_energy_joules_total`'s increments and
//! `powerperf_device_energy_joules_total`), give the same joules per interval and in total,
//! and the joules worked out by hand from the module rules. The readings hold a failed read, a
//! value that is NaN, no time between two readings, a counter that steps back and one whose
//! device undoes its own step back.

use powerperf_core::collect::devices::DeviceSampler;
use powerperf_node::devices::{
    EnergyCounter, EnergyFrom, Origin, PowerDevice, PowerFrom, PowerSample,
};
use powerperfd::devices::DeviceMeters;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;
/// The readings' times: the fifth comes at the same time as the fourth.
const TIMES_NS: [u64; 7] = [
    0,
    100 * MS,
    200 * MS,
    300 * MS,
    300 * MS,
    400 * MS,
    500 * MS,
];

/// A device that gives, at every read, the reading of the step the test is at.
#[derive(Debug)]
struct Scripted {
    stem: &'static str,
    origin: Origin,
    power_from: PowerFrom,
    energy_from: EnergyFrom,
    power_w: Vec<Option<f64>>,
    /// Raw counter values, J; through `counter` (as hwmon and amdgpu devices do) where set.
    energy_j: Vec<Option<f64>>,
    counter: Option<EnergyCounter>,
    step: Arc<AtomicUsize>,
}

impl PowerDevice for Scripted {
    fn stem(&self) -> &str {
        self.stem
    }
    fn origin(&self) -> Origin {
        self.origin
    }
    fn label(&self) -> &str {
        "scripted"
    }
    fn source(&self) -> String {
        format!("a script ({})", self.stem)
    }
    fn power_from(&self) -> PowerFrom {
        self.power_from
    }
    fn energy_from(&self) -> EnergyFrom {
        self.energy_from
    }
    fn read(&mut self) -> PowerSample {
        let k = self.step.load(Ordering::SeqCst);
        let raw = self.energy_j.get(k).copied().flatten();
        let energy_j = match &mut self.counter {
            Some(c) => raw.map(|j| c.update(j as u64, 1.0)),
            None => raw,
        };
        PowerSample {
            power_w: self.power_w.get(k).copied().flatten(),
            energy_j,
            clock_mhz: None,
        }
    }
    fn counter_resets(&self) -> u64 {
        self.counter.as_ref().map_or(0, EnergyCounter::resets)
    }
}

/// Three devices: an energy-only counter that fails once, reads NaN never, steps back once;
/// a power-only meter that fails once; a GPU with power and a counter its device keeps
/// monotonic across a step back.
fn devices(step: &Arc<AtomicUsize>) -> Vec<Box<dyn PowerDevice>> {
    let none = vec![None; TIMES_NS.len()];
    vec![
        Box::new(Scripted {
            stem: "xe0_card",
            origin: Origin::Xe,
            power_from: PowerFrom::EnergyRate,
            energy_from: EnergyFrom::Counter,
            power_w: none.clone(),
            energy_j: vec![
                Some(100.0),
                Some(105.0),
                Some(f64::NAN),
                Some(115.0),
                Some(117.0),
                Some(3.0),
                Some(8.0),
            ],
            counter: None,
            step: Arc::clone(step),
        }),
        Box::new(Scripted {
            stem: "power_meter0_module",
            origin: Origin::Hwmon,
            power_from: PowerFrom::Measured,
            energy_from: EnergyFrom::PowerIntegral,
            power_w: vec![
                Some(100.0),
                Some(200.0),
                None,
                Some(200.0),
                Some(300.0),
                Some(300.0),
                Some(100.0),
            ],
            energy_j: none.clone(),
            counter: None,
            step: Arc::clone(step),
        }),
        Box::new(Scripted {
            stem: "amdgpu0",
            origin: Origin::Amdgpu,
            power_from: PowerFrom::Measured,
            energy_from: EnergyFrom::Counter,
            power_w: vec![Some(90.0); TIMES_NS.len()],
            energy_j: [1000.0, 1010.0, 1020.0, 5.0, 15.0, 25.0, 35.0]
                .map(Some)
                .to_vec(),
            counter: Some(EnergyCounter::default()),
            step: Arc::clone(step),
        }),
    ]
}

/// Joules per interval, by hand from the rules of `powerperf_node::devices::Meter`
/// (`None`: no value; the first reading opens the first interval).
fn expected() -> [[Option<f64>; 6]; 3] {
    [
        // 5; NaN: none; 10 over 200 ms; 2 in no time; step back: none; 5
        [Some(5.0), None, Some(10.0), Some(2.0), None, Some(5.0)],
        // ½·(100+200)·0.1; failed; ½·(200+200)·0.2; no time: 0; ½·(300+300)·0.1; ½·(300+100)·0.1
        [
            Some(15.0),
            None,
            Some(40.0),
            Some(0.0),
            Some(30.0),
            Some(20.0),
        ],
        // 10; 10; the device's counter stepped back: none; 10 in no time; 10; 10
        [
            Some(10.0),
            Some(10.0),
            None,
            Some(10.0),
            Some(10.0),
            Some(10.0),
        ],
    ]
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn collect_and_powerperfd_integrate_the_same_readings_into_the_same_joules() {
    // collect's path
    let step = Arc::new(AtomicUsize::new(0));
    let mut sampler = DeviceSampler::new(devices(&step), &[]);
    assert_eq!(sampler.count(), 3, "{:?}", sampler.notes);
    sampler.start(TIMES_NS[0]);
    let mut collect_cells: Vec<Vec<Option<f64>>> = vec![Vec::new(); 3];
    for (k, t) in TIMES_NS.iter().enumerate().skip(1) {
        step.store(k, Ordering::SeqCst);
        let row = sampler.sample(*t);
        for (d, cells) in collect_cells.iter_mut().enumerate() {
            cells.push(row[2 * d + 1]);
        }
    }
    let duration = TIMES_NS[6] - TIMES_NS[0];
    let records = sampler.device_records(duration);
    let totals = sampler.records(duration);

    // powerperfd's path
    let step = Arc::new(AtomicUsize::new(0));
    let mut meters = DeviceMeters::new(devices(&step));
    let t0 = Instant::now();
    let mut job_increments: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for (k, t) in TIMES_NS.iter().enumerate() {
        step.store(k, Ordering::SeqCst);
        let d = meters.sample(t0 + Duration::from_nanos(*t));
        if k > 0 {
            for (i, j) in d.into_iter().enumerate() {
                job_increments[i].push(j);
            }
        }
    }
    let daemon_totals = meters.energy_j();

    let want = expected();
    for d in 0..3 {
        let stem = &records[d].stem;
        for (i, w) in want[d].iter().enumerate() {
            let c = collect_cells[d][i];
            let j = job_increments[d][i];
            match w {
                Some(w) => assert!(
                    c.is_some_and(|c| close(c, *w)) && close(j, *w),
                    "{stem}, interval {i}: collect {c:?}, powerperfd {j}, by hand {w}"
                ),
                None => assert!(
                    c.is_none() && j == 0.0,
                    "{stem}, interval {i}: collect {c:?} (empty wanted), powerperfd {j} (0 wanted)"
                ),
            }
        }
        let by_hand: f64 = want[d].iter().flatten().sum();
        let run = records[d].energy_j.unwrap();
        let metric = daemon_totals[d].unwrap();
        let jobs: f64 = job_increments[d].iter().sum();
        assert!(
            close(run, by_hand) && close(metric, by_hand) && close(jobs, by_hand),
            "{stem}: run.toml {run} J, powerperf_device_energy_joules_total {metric} J, job {jobs} J, by hand {by_hand} J"
        );
        assert_eq!(
            totals[d].total,
            Some(run),
            "{stem}: the event record's total"
        );
    }
    assert_eq!(
        [
            records[0].failed_reads,
            records[1].failed_reads,
            records[2].failed_reads
        ],
        [1, 1, 0]
    );
    let notes = sampler.end_notes();
    for stem in ["xe0_card", "amdgpu0"] {
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with(&format!("{stem}: its energy counter stepped back 1 times"))),
            "{notes:?}"
        );
    }
}
