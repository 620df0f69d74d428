//! Timeline rows from leader samples: the kernel reads the counter groups in the command's
//! own context and powerperf drains the ring buffers a few times a second
//! (`collect --sampler kernel`, docs/overhead.md).
//!
//! perf's leader sampling (`perf record -e '{cpu-clock,instructions}:S'`, perf-record(1)):
//! a hidden `cpu-clock` leader per group and CPU fires every interval of the command's CPU
//! time and writes one `PERF_RECORD_SAMPLE` with `PERF_SAMPLE_READ` and `PERF_FORMAT_GROUP`:
//! time_enabled, time_running and every member's count with its id (perf_event_open(2),
//! "read_format"). With `inherit` the kernel (6.12 and later) writes the counts of the
//! sampled thread's own copy of the group, so a thread's samples are cumulative for that
//! thread on that CPU, and the ids are the parent's (`primary_event_id`). The command's
//! total at time t is therefore the sum over (thread, CPU) of the latest sample at or
//! before t. Counts are not scaled for multiplexing: a copy bound to one CPU is "enabled
//! but not running" whenever its thread runs on another CPU, so time_enabled /
//! time_running cannot tell multiplexing apart (`--sampler auto` takes leader sampling
//! only for software events, which the kernel never multiplexes).
//!
//! A row holds what the samples up to its end show: work a thread did since its last
//! sample (less than one interval of its CPU time) appears in a later row, and the final
//! row is closed by one read(2) of every counter, so the run's totals are exact.

use perf_event::data::{self, RecordMetadata, Visitor};
use perf_event::Sampler;
use powerperf_node::perf_event::{parse_record, OpenCounter};
use std::collections::{HashMap, VecDeque};

/// One sample: CLOCK_MONOTONIC ns, (tid, cpu), scaled cumulative count per column.
struct Reading {
    time_ns: u64,
    key: (u32, u32),
    values: Vec<Option<f64>>,
}

/// The drained leader samples of a run and the running totals they give.
pub struct KernelTimeline {
    leaders: Vec<Sampler>,
    /// Member id → (column, the event's sysfs `.scale`).
    ids: HashMap<u64, (usize, f64)>,
    totals: Totals,
    /// Totals given out by the last [`deltas_at`](Self::deltas_at), per column.
    reported: Vec<f64>,
    pub samples: u64,
    /// Records the kernel dropped on full buffers (`PERF_RECORD_LOST`).
    pub lost: u64,
    pub unparsed: u64,
}

/// Running totals over (thread, CPU) keys from samples that arrive in batches.
struct Totals {
    columns: usize,
    /// Latest scaled cumulative counts per (tid, cpu).
    latest: HashMap<(u32, u32), Vec<Option<f64>>>,
    /// Received, not yet applied, in time order.
    pending: VecDeque<Reading>,
}

impl Totals {
    fn new(columns: usize) -> Self {
        Totals {
            columns,
            latest: HashMap::new(),
            pending: VecDeque::new(),
        }
    }

    /// Add a batch (any order). Each ring buffer gives its samples in time order, but one
    /// CPU's buffer may hold a sample older than another's pending ones: merged by time.
    fn add(&mut self, mut new: Vec<Reading>) {
        new.sort_by_key(|r| r.time_ns);
        if self
            .pending
            .back()
            .zip(new.first())
            .is_some_and(|(a, b)| b.time_ns < a.time_ns)
        {
            let mut all: Vec<Reading> = self.pending.drain(..).chain(new).collect();
            all.sort_by_key(|r| r.time_ns);
            self.pending = all.into();
        } else {
            self.pending.extend(new);
        }
    }

    /// The command's totals at `t_ns` (CLOCK_MONOTONIC) per column: the sum over threads
    /// and CPUs of their latest sample at or before `t_ns`. Before a thread's first sample
    /// its counts are 0 (enabled at exec); a column is `None` only where no sample carries it.
    fn at(&mut self, t_ns: u64) -> Vec<Option<f64>> {
        while self.pending.front().is_some_and(|r| r.time_ns <= t_ns) {
            let r = self.pending.pop_front().expect("checked");
            self.latest.insert(r.key, r.values);
        }
        let mut sums = vec![0.0; self.columns];
        let mut counted = vec![self.latest.is_empty(); self.columns];
        for vals in self.latest.values() {
            for ((s, c), v) in sums.iter_mut().zip(counted.iter_mut()).zip(vals) {
                if let Some(v) = v {
                    *s += v;
                    *c = true;
                }
            }
        }
        sums.into_iter()
            .zip(counted)
            .map(|(s, c)| c.then_some(s))
            .collect()
    }
}

enum Parsed {
    Sample(Option<(u64, u32, u32)>, Vec<(u64, u64)>),
    Lost(u64),
    Skip,
}

struct Parse;

impl<'a> Visitor<'a> for Parse {
    type Output = Parsed;

    fn visit_unimplemented(self, _: RecordMetadata) -> Parsed {
        Parsed::Skip
    }

    fn visit_sample(self, s: data::Sample<'a>, _: RecordMetadata) -> Parsed {
        let Some(g) = s.values() else {
            return Parsed::Skip;
        };
        let key = match (s.time(), s.tid(), s.cpu()) {
            (Some(t), Some(tid), Some(cpu)) => Some((t, tid, cpu)),
            _ => None,
        };
        let entries = g
            .entries()
            .filter_map(|e| Some((e.id()?, e.value())))
            .collect();
        Parsed::Sample(key, entries)
    }

    fn visit_lost(self, r: data::Lost, _: RecordMetadata) -> Parsed {
        Parsed::Lost(r.lost)
    }
}

impl KernelTimeline {
    /// The leaders opened by [`powerperf_node::perf_event::open_all_with`] and the counters (the
    /// timeline's first columns, in order) whose values their samples carry.
    pub fn new(leaders: Vec<Sampler>, counters: &[OpenCounter]) -> Self {
        let mut ids = HashMap::new();
        for (col, c) in counters.iter().enumerate() {
            for id in c.ids() {
                ids.insert(id, (col, c.scale));
            }
        }
        KernelTimeline {
            leaders,
            ids,
            totals: Totals::new(counters.len()),
            reported: vec![0.0; counters.len()],
            samples: 0,
            lost: 0,
            unparsed: 0,
        }
    }

    /// Number of ring buffers (groups × CPUs).
    pub fn buffers(&self) -> usize {
        self.leaders.len()
    }

    /// Move every record the kernel has written into the pending samples.
    pub fn drain(&mut self) {
        let mut new = Vec::new();
        for s in &mut self.leaders {
            let config = s.as_counter().config().clone();
            while let Some(rec) = s.next_record() {
                match parse_record(&rec, &config, Parse) {
                    Ok(Parsed::Sample(Some((time_ns, tid, cpu)), entries)) => {
                        // Not scaled by time_enabled / time_running: a per-CPU copy is
                        // also "not running" while its thread runs on another CPU.
                        let mut values = vec![None; self.totals.columns];
                        for (id, v) in entries {
                            if let Some(&(col, sc)) = self.ids.get(&id) {
                                values[col] = Some(v as f64 * sc);
                            }
                        }
                        new.push(Reading {
                            time_ns,
                            key: (tid, cpu),
                            values,
                        });
                    }
                    Ok(Parsed::Sample(None, ..)) => self.unparsed += 1,
                    Ok(Parsed::Lost(n)) => self.lost += n,
                    Ok(Parsed::Skip) => {}
                    Err(_) => self.unparsed += 1,
                }
            }
        }
        self.samples += new.len() as u64;
        self.totals.add(new);
    }

    /// The increase of each counter from the previous call to `t_ns`, and the counters told
    /// the totals given out, so that their final read(2) continues from there.
    pub fn deltas_at(&mut self, t_ns: u64, counters: &mut [OpenCounter]) -> Vec<Option<f64>> {
        let totals = self.totals.at(t_ns);
        totals
            .iter()
            .zip(self.reported.iter_mut())
            .zip(counters.iter_mut())
            .map(|((t, r), c)| {
                let t = (*t)?;
                let d = (t - *r).max(0.0);
                if t > *r {
                    *r = t;
                    c.set_reported(t);
                }
                Some(d)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(time_ns: u64, tid: u32, cpu: u32, values: &[Option<f64>]) -> Reading {
        Reading {
            time_ns,
            key: (tid, cpu),
            values: values.to_vec(),
        }
    }

    #[test]
    fn totals_sum_the_latest_sample_of_each_thread_and_cpu() {
        let mut t = Totals::new(2);
        // Nothing sampled yet: the counts start at 0 at exec.
        assert_eq!(t.at(5), vec![Some(0.0), Some(0.0)]);
        // CPU 1's buffer drained first, with a later sample than CPU 0's.
        t.add(vec![r(20, 11, 1, &[Some(7.0), Some(1.0)])]);
        t.add(vec![
            r(10, 10, 0, &[Some(3.0), Some(2.0)]),
            r(30, 10, 0, &[Some(9.0), Some(4.0)]),
        ]);
        assert_eq!(t.at(9), vec![Some(0.0), Some(0.0)]);
        assert_eq!(t.at(10), vec![Some(3.0), Some(2.0)]);
        // Thread 10 at 3 (t=10) + thread 11 at 7 (t=20).
        assert_eq!(t.at(25), vec![Some(10.0), Some(3.0)]);
        // Thread 10's later sample replaces its earlier one, it does not add to it.
        assert_eq!(t.at(30), vec![Some(16.0), Some(5.0)]);
        // The same thread on another CPU is another kernel counter: its counts add.
        t.add(vec![r(40, 10, 1, &[Some(1.0), Some(0.0)])]);
        assert_eq!(t.at(40), vec![Some(17.0), Some(5.0)]);
    }

    #[test]
    fn a_column_no_sample_carries_is_none_not_zero() {
        let mut t = Totals::new(2);
        t.add(vec![
            r(10, 1, 0, &[Some(5.0), None]),
            r(12, 2, 0, &[Some(1.0), None]),
        ]);
        assert_eq!(t.at(20), vec![Some(6.0), None]);
        // Once one thread's copy ran, the column has a value.
        t.add(vec![r(30, 2, 0, &[Some(2.0), Some(8.0)])]);
        assert_eq!(t.at(30), vec![Some(7.0), Some(8.0)]);
    }
}
