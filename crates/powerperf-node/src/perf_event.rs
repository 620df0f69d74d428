//! CPU counters through `perf_event_open(2)` (perf-event2).
//!
//! Targets, as perf stat has them: a command started by powerperf (counted with `inherit`,
//! enabled at its `exec` by `enable_on_exec`), the threads of a running process (`-p PID`),
//! or CPUs (`-a`, `-C LIST`). PMUs that count per CPU or package (a sysfs `cpumask`: uncore,
//! `power`) are always opened on their cpumask CPUs. Groups `{a,b}` are scheduled together.
//!
//! Multiplexed counters are scaled by time_enabled / time_running (perf_event_open(2),
//! "read_format"); a counter that never ran has no value ("not counted"), never zero.

use crate::event_spec::EventStatus;
use crate::event_spec::{EventKind, EventSpec};
use crate::pmu;
use perf_event::events::{Dynamic, DynamicBuilder, Hardware, Raw, Software};
use perf_event::{Builder, Clock, Counter, ReadFormat, SampleFlag, Sampler};
use std::path::Path;

/// What to count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A child that has not called exec yet (inherit + enable_on_exec).
    Child(i32),
    /// The given threads of a running process (inherit for their new threads).
    Tasks(Vec<i32>),
    /// All tasks on these CPUs.
    Cpus(Vec<usize>),
}

/// A logical counter (one per requested event): one kernel counter per task or CPU, summed.
pub struct OpenCounter {
    pub spec: EventSpec,
    counters: Vec<Counter>,
    /// sysfs `.scale` of a PMU event (1 otherwise).
    pub scale: f64,
    last_scaled: f64,
    /// Sums of the last raw readings over the kernel counters: (count, time_enabled ns,
    /// time_running ns). Scaling is done per kernel counter.
    pub last_raw: (u64, u64, u64),
    total_scaled: Option<f64>,
    /// True when the kernel was excluded after a permission error (perf's `:u` fallback).
    pub fell_back_to_user: bool,
    /// This is a group leader opened with PERF_FORMAT_GROUP: [`sample_all`] reads the
    /// following counters of its group through it.
    pub reads_group: bool,
    /// The task (tid) or CPU of each kernel counter, in the order of `counters`.
    pub slot_ids: Vec<i32>,
    /// A command's counter opened once per CPU (leader sampling): each kernel counter is
    /// "enabled but not running" whenever the command runs on another CPU, so
    /// time_enabled / time_running says nothing about multiplexing and counts are not
    /// scaled (a multiplexed group is undercounted; docs/overhead.md).
    pub per_cpu_task: bool,
    /// Scaled total of each kernel counter as of the last sample (`None`: never ran).
    pub slot_totals: Vec<Option<f64>>,
}

/// Outcome of opening one event.
pub enum Opened {
    Counter(Box<OpenCounter>),
    Failed {
        spec: EventSpec,
        status: EventStatus,
        reason: String,
    },
}

fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The fix to print when perf_event_open is denied.
pub fn permission_fix() -> String {
    let p = paranoid()
        .map(|p| p.to_string())
        .unwrap_or_else(|| "unknown".into());
    format!(
        "kernel.perf_event_paranoid is {p}: lower it with `sudo sysctl kernel.perf_event_paranoid=1` (0 or -1 for system-wide and uncore events), or run as root / with CAP_PERFMON"
    )
}

/// A resolved event: the attr's event, its sysfs scale/unit, and the CPUs of a PMU that
/// counts per CPU (cpumask).
struct Resolved {
    kind: ResolvedKind,
    scale: f64,
    unit: Option<String>,
    cpumask: Option<Vec<usize>>,
}

enum ResolvedKind {
    Hardware(u64),
    Software(u64),
    Raw(u64),
    Dynamic(Dynamic),
}

type OpenError = (EventStatus, String);

fn resolve(spec: &EventSpec, root: &Path) -> Result<Resolved, OpenError> {
    let plain = |kind| {
        Ok(Resolved {
            kind,
            scale: 1.0,
            unit: spec.unit.clone(),
            cpumask: None,
        })
    };
    let ns = |why: String| (EventStatus::NotSupported, why);
    match &spec.kind {
        EventKind::Hardware(c) => plain(ResolvedKind::Hardware(*c)),
        EventKind::Software(c) => plain(ResolvedKind::Software(*c)),
        EventKind::Raw(c) => plain(ResolvedKind::Raw(*c)),
        EventKind::Pmu {
            pmu: name,
            event,
            terms,
        } => {
            let dir = pmu::devices_dir(root).join(name);
            let info = pmu::read_pmu(&dir).ok_or_else(|| {
                ns(format!(
                    "no PMU `{name}` on this machine ({} is absent); `powerperf events list` shows the PMUs there are",
                    dir.display()
                ))
            })?;
            let mut b = DynamicBuilder::new(&dir).map_err(|e| {
                ns(format!(
                    "PMU `{name}`: cannot read its sysfs description: {e}"
                ))
            })?;
            let (mut scale, mut unit) = (1.0, None);
            if let Some(ev) = event {
                let pe = info.events.iter().find(|e| &e.name == ev).ok_or_else(|| {
                    let known: Vec<_> = info.events.iter().map(|e| e.name.as_str()).collect();
                    ns(format!(
                        "PMU `{name}` has no event `{ev}` (it has: {})",
                        known.join(", ")
                    ))
                })?;
                b.event(ev).map_err(|e| ns(format!("{}: {e}", spec.name)))?;
                scale = pe.scale.unwrap_or(1.0);
                unit = pe.unit.clone();
            }
            for (k, v) in terms {
                b.field(k, *v)
                    .map_err(|e| ns(format!("{}: term `{k}`: {e}", spec.name)))?;
            }
            let d = b.build().map_err(|e| ns(format!("{}: {e}", spec.name)))?;
            Ok(Resolved {
                kind: ResolvedKind::Dynamic(d),
                scale,
                unit,
                cpumask: info.cpumask,
            })
        }
    }
}

fn builder<'a>(r: &Resolved) -> Builder<'a> {
    match &r.kind {
        ResolvedKind::Hardware(c) => Builder::new(Hardware::from(*c)),
        ResolvedKind::Software(c) => Builder::new(Software::from(*c)),
        ResolvedKind::Raw(c) => Builder::new(Raw::new(*c)),
        ResolvedKind::Dynamic(d) => Builder::new(*d),
    }
}

/// One kernel counter per slot (task or CPU) of the target.
#[derive(Clone, Copy)]
enum Slot {
    Pid {
        pid: i32,
        on_exec: bool,
    },
    Cpu(usize),
    /// A command's tasks on one CPU (inherit, enabled at exec): leader sampling needs a
    /// ring buffer, and the kernel refuses to mmap an inherited per-task event on cpu -1.
    PidOnCpu {
        pid: i32,
        cpu: usize,
    },
}

/// Leader sampling, perf's `{cpu-clock,…}:S`: every group gets a hidden `cpu-clock` leader
/// that samples every `period_ns` of the command's CPU time and writes the whole group's
/// counts into its ring buffer (`PERF_SAMPLE_READ` with `PERF_FORMAT_GROUP`, per thread
/// with `inherit` since Linux 6.12). The kernel reads the counters in the command's own
/// context; powerperf only drains the buffers ([`super::leader_sampling`]).
pub struct LeaderSampling {
    /// The command (paused before exec).
    pub pid: i32,
    pub cpus: Vec<usize>,
    pub period_ns: u64,
    /// Ring buffer bytes per leader (a power of two of pages).
    pub ring_bytes: usize,
    /// The leaders opened so far, one per group and CPU.
    pub leaders: Vec<Sampler>,
    /// The first error that makes leader sampling impossible (the caller falls back to
    /// reading the counters from a thread).
    pub failed: Option<String>,
}

impl LeaderSampling {
    fn open_leader(&mut self, cpu: usize, exclude_kernel: bool) -> std::io::Result<Counter> {
        Builder::new(Software::CPU_CLOCK)
            .observe_pid(self.pid)
            .one_cpu(cpu)
            .inherit(true)
            .enable_on_exec(true)
            .enabled(false)
            .sample_period(self.period_ns)
            // TID: the kernel takes PERF_SAMPLE_READ with inherit only per thread.
            .sample(SampleFlag::TID | SampleFlag::TIME | SampleFlag::CPU | SampleFlag::READ)
            .read_format(
                ReadFormat::GROUP
                    | ReadFormat::ID
                    | ReadFormat::TOTAL_TIME_ENABLED
                    | ReadFormat::TOTAL_TIME_RUNNING,
            )
            .clockid(Clock::MONOTONIC)
            .exclude_kernel(exclude_kernel)
            .exclude_hv(true)
            .build()
    }
}

fn slots(target: &Target, cpumask: &Option<Vec<usize>>, ls: Option<&LeaderSampling>) -> Vec<Slot> {
    if let (Some(ls), None) = (ls, cpumask) {
        return ls
            .cpus
            .iter()
            .map(|&cpu| Slot::PidOnCpu { pid: ls.pid, cpu })
            .collect();
    }
    if let Some(mask) = cpumask {
        // A per-CPU/package PMU: its cpumask CPUs, narrowed to the target's CPUs if it has some.
        return mask
            .iter()
            .filter(|c| match target {
                Target::Cpus(list) => list.contains(c),
                _ => true,
            })
            .map(|c| Slot::Cpu(*c))
            .collect();
    }
    match target {
        Target::Child(pid) => vec![Slot::Pid {
            pid: *pid,
            on_exec: true,
        }],
        Target::Tasks(tids) => tids
            .iter()
            .map(|t| Slot::Pid {
                pid: *t,
                on_exec: false,
            })
            .collect(),
        Target::Cpus(cpus) => cpus.iter().map(|c| Slot::Cpu(*c)).collect(),
    }
}

fn open_one(
    r: &Resolved,
    spec: &EventSpec,
    slot: Slot,
    leader: Option<&mut Counter>,
    exclude_kernel: bool,
    group_read: bool,
) -> std::io::Result<Counter> {
    let mut b = builder(r);
    if group_read {
        // PERF_FORMAT_GROUP: one read(2) of the leader returns every member's count with
        // the group's time_enabled/time_running (perf_event_open(2), "read_format").
        b.read_format(
            ReadFormat::GROUP | ReadFormat::TOTAL_TIME_ENABLED | ReadFormat::TOTAL_TIME_RUNNING,
        );
    }
    match slot {
        Slot::Pid { pid, on_exec } => {
            b.observe_pid(pid)
                .any_cpu()
                .inherit(true)
                .enable_on_exec(on_exec)
                .enabled(!on_exec);
        }
        Slot::Cpu(c) => {
            b.any_pid().one_cpu(c).enabled(true);
        }
        Slot::PidOnCpu { pid, cpu } => {
            // A member of a sampled group: the group's clock, and the leader's
            // inherit + PERF_SAMPLE_READ pairing (the kernel checks both).
            b.observe_pid(pid)
                .one_cpu(cpu)
                .inherit(true)
                .enable_on_exec(true)
                .enabled(false)
                .clockid(Clock::MONOTONIC)
                .sample(SampleFlag::TID | SampleFlag::READ);
        }
    }
    if r.cpumask.is_some() && !spec.user_only && !spec.kernel_only {
        // Per-CPU/package PMUs (uncore, power) reject the exclude_* filters with EINVAL
        // (e.g. arch/x86/events/rapl.c, rapl_pmu_event_init).
        b.exclude_kernel(false).exclude_hv(false);
    } else {
        b.exclude_kernel(exclude_kernel || spec.user_only)
            .exclude_user(spec.kernel_only)
            .exclude_hv(true);
    }
    match leader {
        Some(l) => b.build_with_group(l),
        None => b.build(),
    }
}

fn classify(spec: &EventSpec, e: &std::io::Error) -> OpenError {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => (
            EventStatus::PermissionDenied,
            format!(
                "perf_event_open for `{}`: {e}. {}",
                spec.name,
                permission_fix()
            ),
        ),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) | Some(libc::EINVAL) => (
            EventStatus::NotSupported,
            format!(
                "perf_event_open for `{}`: {e}: this machine's PMU does not offer it{}",
                spec.name,
                if matches!(spec.kind, EventKind::Software(_)) {
                    ""
                } else {
                    " (no hardware counters: a virtual machine without a virtual PMU, or an event of another CPU model)"
                }
            ),
        ),
        _ => (
            EventStatus::NotSupported,
            format!("perf_event_open for `{}`: {e}", spec.name),
        ),
    }
}

fn is_denied(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// Open the events of one group (or a single event) on every slot of `target`. The first
/// event is the group leader; a failed leader fails the whole group. Kernel counting is
/// tried first, as `perf stat` does for root; on a permission error the group is reopened
/// for user space only (perf's `:u`).
pub fn open_group(specs: &[EventSpec], target: &Target, root: &Path) -> Vec<Opened> {
    let fail = |s: &EventSpec, (status, reason): OpenError| Opened::Failed {
        spec: s.clone(),
        status,
        reason,
    };
    let resolved: Vec<Result<Resolved, OpenError>> =
        specs.iter().map(|s| resolve(s, root)).collect();
    let mut errors: Vec<Option<OpenError>> =
        resolved.iter().map(|r| r.as_ref().err().cloned()).collect();
    let lead = match &resolved[0] {
        Ok(l) => l,
        Err((st, why)) => {
            return specs
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    fail(
                        s,
                        errors[i].clone().unwrap_or((
                            *st,
                            format!(
                                "its group leader `{}` could not be opened: {why}",
                                specs[0].name
                            ),
                        )),
                    )
                })
                .collect();
        }
    };
    let mut out: Vec<Option<OpenCounter>> = (0..specs.len()).map(|_| None).collect();
    let mut fell_back = false;
    // A group of several events is read with one read(2) of its leader where the kernel
    // takes PERF_FORMAT_GROUP for the target; otherwise each counter is read on its own.
    let mut group_read = specs.len() > 1;
    for slot in slots(target, &lead.cpumask, None) {
        let mut open_leader = |fell_back: bool| {
            let first = open_one(lead, &specs[0], slot, None, fell_back, group_read);
            match first {
                Err(e) if group_read && e.raw_os_error() == Some(libc::EINVAL) => {
                    group_read = false;
                    open_one(lead, &specs[0], slot, None, fell_back, false)
                }
                other => other,
            }
        };
        let mut leader = match open_leader(fell_back) {
            Err(e) if is_denied(&e) && !specs[0].user_only && !fell_back => {
                fell_back = true;
                open_leader(true)
            }
            other => other,
        };
        let leader_counter = match leader.as_mut() {
            Ok(l) => l,
            Err(e) => {
                let (st, why) = classify(&specs[0], e);
                return specs
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        fail(
                            s,
                            if i == 0 {
                                (st, why.clone())
                            } else {
                                (st, format!("its group leader could not be opened: {why}"))
                            },
                        )
                    })
                    .collect();
            }
        };
        let mut members = Vec::new();
        for i in 1..specs.len() {
            let Ok(r) = &resolved[i] else {
                members.push(None);
                continue;
            };
            if errors[i].is_some() {
                members.push(None);
                continue;
            }
            match open_one(
                r,
                &specs[i],
                slot,
                Some(&mut *leader_counter),
                fell_back,
                false,
            ) {
                Ok(c) => members.push(Some(c)),
                Err(e) => {
                    errors[i] = Some(classify(&specs[i], &e));
                    members.push(None);
                }
            }
        }
        let all = std::iter::once(leader.ok()).chain(members);
        for (i, c) in all.enumerate() {
            let (Some(c), Ok(r)) = (c, &resolved[i]) else {
                continue;
            };
            let oc = out[i].get_or_insert_with(|| OpenCounter::new(&specs[i], r, fell_back));
            oc.counters.push(c);
            oc.slot_ids.push(match slot {
                Slot::Pid { pid, .. } => pid,
                Slot::Cpu(c) | Slot::PidOnCpu { cpu: c, .. } => c as i32,
            });
            oc.slot_totals.push(None);
        }
    }
    // Group reads only where every slot's leader took PERF_FORMAT_GROUP; a leader fd
    // opened with it still reads correctly on its own (perf-event2's read_full).
    let members_open = out.iter().skip(1).any(|m| m.is_some());
    if let Some(l) = out[0].as_mut() {
        l.reads_group = group_read && members_open;
    }
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| match (out[i].take(), errors[i].clone()) {
            (_, Some(err)) => fail(s, err),
            (Some(c), None) => Opened::Counter(Box::new(c)),
            (None, None) => fail(
                s,
                (
                    EventStatus::NotSupported,
                    "no task or CPU to open it on".into(),
                ),
            ),
        })
        .collect()
}

/// Open one group (or single event) under a hidden sampling leader on every CPU of `ls`:
/// the user's events are all members, read on their own at the end, and sampled together
/// by the leader during the run. A failure that rules leader sampling out is left in
/// `ls.failed` (the caller reopens everything for thread sampling).
fn open_group_sampled(specs: &[EventSpec], root: &Path, ls: &mut LeaderSampling) -> Vec<Opened> {
    let resolved: Vec<Result<Resolved, OpenError>> =
        specs.iter().map(|s| resolve(s, root)).collect();
    if let Some((s, _)) = specs
        .iter()
        .zip(&resolved)
        .find(|(_, r)| matches!(r, Ok(r) if r.cpumask.is_some()))
    {
        ls.failed = Some(format!(
            "`{}` counts per CPU or package (a PMU with a cpumask), not in the command's context",
            s.name
        ));
        return vec![];
    }
    let mut errors: Vec<Option<OpenError>> =
        resolved.iter().map(|r| r.as_ref().err().cloned()).collect();
    let mut out: Vec<Option<OpenCounter>> = (0..specs.len()).map(|_| None).collect();
    let mut fell_back = false;
    for slot in slots(&Target::Child(ls.pid), &None, Some(ls)) {
        let Slot::PidOnCpu { cpu, .. } = slot else {
            continue;
        };
        let mut leader = match ls.open_leader(cpu, false) {
            Err(e) if is_denied(&e) => {
                fell_back = true;
                ls.open_leader(cpu, true)
            }
            other => other,
        };
        let leader_counter = match leader.as_mut() {
            Ok(l) => l,
            Err(e) => {
                ls.failed = Some(format!(
                    "the sampling leader (cpu-clock with PERF_SAMPLE_READ and inherit, Linux 6.12 or later) could not be opened on CPU {cpu}: {e}"
                ));
                return vec![];
            }
        };
        for i in 0..specs.len() {
            let (Ok(r), None) = (&resolved[i], &errors[i]) else {
                continue;
            };
            match open_one(
                r,
                &specs[i],
                slot,
                Some(&mut *leader_counter),
                fell_back,
                false,
            ) {
                Ok(c) => {
                    let oc = out[i].get_or_insert_with(|| OpenCounter {
                        per_cpu_task: true,
                        ..OpenCounter::new(&specs[i], r, fell_back)
                    });
                    oc.counters.push(c);
                    oc.slot_ids.push(cpu as i32);
                    oc.slot_totals.push(None);
                }
                Err(e) => errors[i] = Some(classify(&specs[i], &e)),
            }
        }
        let Ok(leader) = leader else { continue };
        match leader.sampled(ls.ring_bytes) {
            Ok(s) => ls.leaders.push(s),
            Err(e) => {
                ls.failed = Some(format!(
                    "no {} KiB ring buffer for the sampling leader on CPU {cpu}: {e} (the locked-memory limit, kernel.perf_event_mlock_kb)",
                    ls.ring_bytes / 1024
                ));
                return vec![];
            }
        }
    }
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| match (out[i].take(), errors[i].clone()) {
            (_, Some((status, reason))) => Opened::Failed {
                spec: s.clone(),
                status,
                reason,
            },
            (Some(c), None) => Opened::Counter(Box::new(c)),
            (None, None) => Opened::Failed {
                spec: s.clone(),
                status: EventStatus::NotSupported,
                reason: "no CPU to open it on".into(),
            },
        })
        .collect()
}

/// Open every event of `specs` (groups together) on `target`.
pub fn open_all(specs: &[EventSpec], target: &Target, root: &Path) -> Vec<Opened> {
    open_all_with(specs, target, root, None)
}

/// [`open_all`], with leader sampling when `ls` is given (a command target only): every
/// user group gets its own sampling leader, and the ungrouped events share one. On a
/// failure `ls.failed` says why and nothing is returned.
pub fn open_all_with(
    specs: &[EventSpec],
    target: &Target,
    root: &Path,
    ls: Option<&mut LeaderSampling>,
) -> Vec<Opened> {
    if let Some(ls) = ls {
        let ungrouped: Vec<EventSpec> = specs
            .iter()
            .filter(|s| s.group.is_none())
            .cloned()
            .collect();
        let mut out = Vec::new();
        if !ungrouped.is_empty() {
            out.extend(open_group_sampled(&ungrouped, root, ls));
        }
        let mut i = 0;
        while i < specs.len() && ls.failed.is_none() {
            let Some(g) = specs[i].group else {
                i += 1;
                continue;
            };
            let mut j = i + 1;
            while j < specs.len() && specs[j].group == Some(g) {
                j += 1;
            }
            out.extend(open_group_sampled(&specs[i..j], root, ls));
            i = j;
        }
        if ls.failed.is_some() {
            ls.leaders.clear();
            return vec![];
        }
        // In the order asked for.
        out.sort_by_key(|o| {
            let name = match o {
                Opened::Counter(c) => &c.spec.name,
                Opened::Failed { spec, .. } => &spec.name,
            };
            specs.iter().position(|s| &s.name == name)
        });
        return out;
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < specs.len() {
        let mut j = i + 1;
        if let Some(g) = specs[i].group {
            while j < specs.len() && specs[j].group == Some(g) {
                j += 1;
            }
        }
        out.extend(open_group(&specs[i..j], target, root));
        i = j;
    }
    out
}

/// Scale a raw count for multiplexing: `count · enabled / running` (perf_event_open(2)).
/// `None` when the counter never ran while enabled.
pub fn scale(count: u64, enabled: u64, running: u64) -> Option<f64> {
    if running == 0 {
        if enabled == 0 && count == 0 {
            Some(0.0)
        } else {
            None
        }
    } else if running >= enabled {
        Some(count as f64)
    } else {
        Some(count as f64 * enabled as f64 / running as f64)
    }
}

impl OpenCounter {
    fn new(spec: &EventSpec, r: &Resolved, fell_back: bool) -> Self {
        OpenCounter {
            spec: EventSpec {
                unit: r.unit.clone().or_else(|| spec.unit.clone()),
                ..spec.clone()
            },
            counters: vec![],
            scale: r.scale,
            last_scaled: 0.0,
            last_raw: (0, 0, 0),
            total_scaled: None,
            fell_back_to_user: fell_back,
            reads_group: false,
            slot_ids: vec![],
            slot_totals: vec![],
            per_cpu_task: false,
        }
    }

    /// The kernel's ids of this counter's kernel counters (`PERF_FORMAT_ID`), which
    /// leader samples carry with each member's value.
    pub fn ids(&self) -> Vec<u64> {
        self.counters.iter().map(|c| c.id()).collect()
    }

    /// Take `total` (scaled, in the event's unit) as already reported: the next
    /// [`sample`](Self::sample) gives the increase past it. For timelines built from
    /// leader samples, whose last row the final read continues.
    pub fn set_reported(&mut self, total: f64) {
        self.last_scaled = total;
    }

    /// Read every kernel counter; returns the scaled increase since the previous read (in
    /// the event's unit: sysfs `.scale` applied).
    pub fn sample(&mut self) -> Option<f64> {
        let readings: Vec<Option<(u64, u64, u64)>> = self
            .counters
            .iter_mut()
            .map(|c| {
                c.read_count_and_time()
                    .ok()
                    .map(|r| (r.count, r.time_enabled, r.time_running))
            })
            .collect();
        self.update(&readings)
    }

    /// Take one reading per kernel counter (count, time_enabled ns, time_running ns; `None`
    /// where the read failed); returns the scaled increase since the previous update.
    fn update(&mut self, readings: &[Option<(u64, u64, u64)>]) -> Option<f64> {
        let mut raw = (0u64, 0u64, 0u64);
        let mut total = 0.0;
        let mut any = false;
        for (k, &(count, enabled, running)) in readings
            .iter()
            .enumerate()
            .filter_map(|(k, r)| Some((k, r.as_ref()?)))
        {
            let enabled = if self.per_cpu_task { running } else { enabled };
            raw.0 += count;
            raw.1 += enabled;
            raw.2 += running;
            let v = scale(count, enabled, running);
            if let Some(t) = self.slot_totals.get_mut(k) {
                *t = v.map(|v| v * self.scale);
            }
            if let Some(v) = v {
                total += v;
                any = true;
            }
        }
        self.last_raw = raw;
        if !any {
            self.total_scaled = None;
            return None;
        }
        let now = total * self.scale;
        self.total_scaled = Some(now);
        let d = (now - self.last_scaled).max(0.0);
        self.last_scaled = now;
        Some(d)
    }

    /// Scaled total so far (as of the last [`sample`](Self::sample)).
    pub fn total(&self) -> Option<f64> {
        self.total_scaled
    }

    /// time_running / time_enabled over the run.
    pub fn running_ratio(&self) -> Option<f64> {
        let (_, e, r) = self.last_raw;
        (e > 0).then(|| r as f64 / e as f64)
    }

    /// Whether the counter was scheduled only part of the time.
    pub fn multiplexed(&self) -> bool {
        let (_, e, r) = self.last_raw;
        r < e
    }

    /// Number of kernel counters (tasks or CPUs) behind this event.
    pub fn fds(&self) -> usize {
        self.counters.len()
    }
}

/// Sample every counter: the scaled increase of each since the previous sample, in order.
/// A group whose leader was opened with PERF_FORMAT_GROUP is read with one `read(2)` per
/// task or CPU, so its members' values come from the same instant; other counters are
/// read one by one.
pub fn sample_all(counters: &mut [OpenCounter]) -> Vec<Option<f64>> {
    let mut out = Vec::with_capacity(counters.len());
    let mut i = 0;
    while i < counters.len() {
        if !counters[i].reads_group {
            out.push(counters[i].sample());
            i += 1;
            continue;
        }
        let g = counters[i].spec.group;
        let mut j = i + 1;
        while j < counters.len() && counters[j].spec.group == g && g.is_some() {
            j += 1;
        }
        let data: Vec<Option<perf_event::GroupData>> = counters[i]
            .counters
            .iter_mut()
            .map(|c| c.read_group().ok())
            .collect();
        // Per counter of the group, per slot: its entry in the leader's reading.
        let readings: Vec<Vec<Option<(u64, u64, u64)>>> = counters[i..j]
            .iter()
            .map(|m| {
                m.counters
                    .iter()
                    .enumerate()
                    .map(|(slot, c)| {
                        let d = data.get(slot)?.as_ref()?;
                        let e = d.get(c)?;
                        Some((
                            e.value(),
                            d.time_enabled()?.as_nanos() as u64,
                            d.time_running()?.as_nanos() as u64,
                        ))
                    })
                    .collect()
            })
            .collect();
        for (c, r) in counters[i..j].iter_mut().zip(&readings) {
            out.push(c.update(r));
        }
        i = j;
    }
    out
}

/// Threads of a running process, from `/proc/PID/task`.
///
/// # Errors
/// No such process.
///
/// A listing of `/proc/PID/task` can skip a live thread while other threads of the process
/// exit (the directory is read by position, and an exit shifts the entries behind it), so
/// the directory is read until two listings in a row agree (at most 8 times), and the union
/// of the listings is returned: a thread that exited in between fails to open like any
/// thread that exits before its counters are opened.
pub fn threads_of(pid: i32) -> std::io::Result<Vec<i32>> {
    let list = || -> std::io::Result<std::collections::BTreeSet<i32>> {
        Ok(std::fs::read_dir(format!("/proc/{pid}/task"))?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect())
    };
    let mut all = list()?;
    let mut last = all.clone();
    for _ in 0..7 {
        let now = list()?;
        let stable = now == last;
        all.extend(now.iter().copied());
        if stable {
            break;
        }
        last = now;
    }
    Ok(all.into_iter().collect())
}

/// Parse one ring-buffer record with `visitor`. perf-event2's [`perf_event::Record`] hands
/// the record body and its header fields apart, and the parser wants them together; the
/// samplers (`leader_sampling`, `pc_sampler`) share this.
pub fn parse_record<V, O>(
    rec: &perf_event::Record<'_>,
    config: &perf_event::data::parse::ParseConfig<perf_event::data::endian::Native>,
    visitor: V,
) -> perf_event::data::parse::ParseResult<O>
where
    V: for<'p> perf_event::data::Visitor<'p, Output = O>,
{
    let bytes = rec.to_contiguous();
    let header = perf_event_open_sys::bindings::perf_event_header {
        type_: rec.ty(),
        misc: rec.misc(),
        size: (bytes.len()
            + std::mem::size_of::<perf_event_open_sys::bindings::perf_event_header>())
            as u16,
    };
    perf_event::data::parse::Parser::new(&*bytes, config.clone())
        .parse_record_with_header(visitor, header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_for_multiplexing() {
        assert_eq!(scale(100, 10, 10), Some(100.0));
        assert_eq!(scale(100, 10, 5), Some(200.0));
        assert_eq!(scale(0, 10, 0), None);
        assert_eq!(scale(0, 0, 0), Some(0.0));
    }

    #[test]
    fn a_software_group_counts_this_process() {
        // Both of the `software` PMU: Linux 6.18 does not count a page-faults member in a
        // group led by task-clock or cpu-clock (PMUs of their own).
        let specs = crate::event_spec::parse_list(Some("{page-faults,minor-faults}")).unwrap();
        // This test's own thread, which does the work below (the harness runs tests on
        // threads of their own; other tests fork children from the main process meanwhile).
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        assert!(threads_of(std::process::id() as i32).unwrap().contains(&me));
        let opened = open_all(&specs, &Target::Tasks(vec![me]), Path::new("/"));
        let mut counters: Vec<OpenCounter> = opened
            .into_iter()
            .map(|o| match o {
                Opened::Counter(c) => *c,
                Opened::Failed { reason, .. } => panic!("{reason}"),
            })
            .collect();
        // Linux reads a group with inherit through PERF_FORMAT_GROUP (summing the
        // children's counts); where a kernel refuses it, each counter is read alone.
        if !counters[0].reads_group {
            println!("note: this kernel refused PERF_FORMAT_GROUP; counters read one by one");
        }
        assert!(!counters[1].reads_group);
        // Work that takes CPU time and touches fresh pages. A reading may come back empty
        // when the kernel has not yet scheduled the group on this thread (time_running = 0,
        // as perf prints `<not counted>`); the group must count within a few rounds of work.
        let mut readings = Vec::new();
        for round in 0..5u64 {
            let v: Vec<u64> = (0..2_000_000u64).map(|i| (i + round) * 7 % 251).collect();
            std::hint::black_box(v.iter().sum::<u64>());
            let values = sample_all(&mut counters);
            let r: Vec<_> = values
                .into_iter()
                .zip(counters.iter().map(|c| c.last_raw))
                .collect();
            let counted = r.iter().all(|(v, _)| v.is_some());
            readings.push(r);
            if counted {
                break;
            }
        }
        let last = readings.last().unwrap();
        assert!(
            last.iter().all(|(v, _)| v.is_some()),
            "(value, (count, time_enabled, time_running)) per round: {readings:?}"
        );
        assert!(counters[0].total().unwrap() > 0.0, "{readings:?}");
        // Read together, at the same instant: page faults = minor faults + the few major
        // faults (a page of the test binary read from disk).
        let (pf, minor) = (counters[0].total().unwrap(), counters[1].total().unwrap());
        assert!(pf >= minor && pf - minor <= 10.0, "{readings:?}");
    }

    #[test]
    fn unknown_pmu_and_event_are_explained() {
        let specs =
            crate::event_spec::parse_list(Some("nopmu/foo/,power/energy-nothing/")).unwrap();
        let root = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/sysfs/power-pmu");
        let opened = open_all(&specs, &Target::Child(1), &root);
        let reasons: Vec<String> = opened
            .into_iter()
            .map(|o| match o {
                Opened::Failed { reason, status, .. } => {
                    assert_eq!(status, EventStatus::NotSupported);
                    reason
                }
                Opened::Counter(_) => panic!("must fail"),
            })
            .collect();
        assert!(reasons[0].contains("no PMU `nopmu`"), "{}", reasons[0]);
        assert!(
            reasons[1].contains("has no event `energy-nothing`")
                && reasons[1].contains("energy-pkg"),
            "{}",
            reasons[1]
        );
    }
}
