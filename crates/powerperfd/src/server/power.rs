//! GPU controls (`set_gpu_locked_clocks`, `set_gpu_mem_locked_clocks`,
//! `set_gpu_power_limit`: write controls `gpu.locked_clocks`, `gpu.mem_locked_clocks`,
//! `gpu.power_limit`) through `powerperf_node::gpu_control` (NVML, its setters
//! reached only through a grant of those controls, or the fake GPUs of `--fake-gpu DIR`,
//! then the AMD and Intel GPUs of `--sysfs-root`), and `read_power` (read signal `power`): the perf
//! `power` PMU's RAPL events, opened per session through `powerperf_node::perf_event` (the code
//! `powerperf collect` opens them with), and NVML's power and total energy through
//! `collect::nvml`.

use super::{Daemon, Hold, Inner, Saved};
use powerperf_node::daemon::{PowerReading, Response};
use powerperf_node::event_spec::{EventKind, EventSpec};
use powerperf_node::gpu_control::{GpuControl, GpuKnob};
use powerperf_node::perf_event::{self, OpenCounter, Opened, Target};
use powerperf_node::pmu::PowerEvent;
use std::path::Path;

/// The GPU controls: the fake GPUs of `fake` when given, else NVML, writable (the policy
/// is the gate: by default nobody may write); then the AMD and Intel GPUs of the sysfs tree
/// `root` (amdgpu, xe, i915: `powerperf_node::gpu_control::sysfs`), numbered after them
/// (`powerperf_node::gpu_control::node::NodeGpus`). Without sysfs GPUs the first alone, as
/// before. `None` with the reasons when there are none.
pub(super) fn open_gpu(
    fake: Option<&Path>,
    root: &Path,
) -> (Option<Box<dyn GpuControl>>, Option<String>) {
    match powerperf_node::gpu_control::node::open_node_gpus(fake, root, true) {
        Ok((g, notes)) => {
            for n in notes {
                tracing::info!(reason = %n, "GPU control");
            }
            (Some(g), None)
        }
        Err(e) => (None, Some(e.to_string())),
    }
}

/// A GPU setting asked for.
#[derive(Debug, Clone, Copy)]
pub(super) enum GpuAsk {
    /// `[min, max]` MHz.
    LockedClocks(f64, f64),
    /// W.
    PowerLimit(f64),
    /// Memory clock `[min, max]` MHz.
    MemLockedClocks(f64, f64),
}

impl GpuAsk {
    fn knob(self) -> GpuKnob {
        match self {
            GpuAsk::LockedClocks(..) => GpuKnob::LockedClocks,
            GpuAsk::PowerLimit(_) => GpuKnob::PowerLimit,
            GpuAsk::MemLockedClocks(..) => GpuKnob::MemLockedClocks,
        }
    }
    fn describe(self) -> String {
        match self {
            GpuAsk::LockedClocks(a, b) if a == b => format!("locked clocks {a} MHz"),
            GpuAsk::LockedClocks(a, b) => format!("locked clocks [{a}, {b}] MHz"),
            GpuAsk::PowerLimit(w) => format!("power limit {w} W"),
            GpuAsk::MemLockedClocks(a, b) if a == b => format!("memory locked clocks {a} MHz"),
            GpuAsk::MemLockedClocks(a, b) => format!("memory locked clocks [{a}, {b}] MHz"),
        }
    }
    /// The values the policy's range must hold.
    fn values(self) -> Vec<f64> {
        match self {
            GpuAsk::LockedClocks(a, b) | GpuAsk::MemLockedClocks(a, b) => vec![a, b],
            GpuAsk::PowerLimit(w) => vec![w],
        }
    }
}

/// The GPU setting a `set_gpu_*` request asks for; `None` for another request.
pub(super) fn gpu_ask(req: &powerperf_node::daemon::Request) -> Option<(u32, GpuAsk)> {
    match *req {
        powerperf_node::daemon::Request::SetGpuLockedClocks {
            gpu,
            min_mhz,
            max_mhz,
        } => Some((
            gpu,
            GpuAsk::LockedClocks(min_mhz, max_mhz.unwrap_or(min_mhz)),
        )),
        powerperf_node::daemon::Request::SetGpuMemLockedClocks {
            gpu,
            min_mhz,
            max_mhz,
        } => Some((
            gpu,
            GpuAsk::MemLockedClocks(min_mhz, max_mhz.unwrap_or(min_mhz)),
        )),
        powerperf_node::daemon::Request::SetGpuPowerLimit { gpu, watts } => {
            Some((gpu, GpuAsk::PowerLimit(watts)))
        }
        _ => None,
    }
}

/// The perf power PMU counters of one session.
pub(crate) struct PowerCounters {
    opened: Vec<(PowerEvent, OpenCounter)>,
    /// Why events did not open.
    failed: Vec<String>,
}

impl std::fmt::Debug for PowerCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PowerCounters")
            .field("opened", &self.opened.len())
            .field("failed", &self.failed)
            .finish()
    }
}

fn open_counters(events: &[PowerEvent], root: &Path) -> PowerCounters {
    let mut opened = Vec::new();
    let mut failed = Vec::new();
    for ev in events {
        let spec = EventSpec {
            name: format!("power/{}/", ev.event),
            kind: EventKind::Pmu {
                pmu: "power".into(),
                event: Some(ev.event.clone()),
                terms: vec![],
            },
            user_only: false,
            kernel_only: false,
            unit: None,
            group: None,
        };
        match perf_event::open_group(&[spec], &Target::Cpus(vec![ev.cpu]), root).pop() {
            Some(Opened::Counter(mut c)) => {
                c.sample();
                opened.push((ev.clone(), *c));
            }
            Some(Opened::Failed { reason, .. }) => {
                failed.push(format!("power/{}/ on CPU {}: {reason}", ev.event, ev.cpu))
            }
            None => failed.push(format!("power/{}/ on CPU {}: not opened", ev.event, ev.cpu)),
        }
    }
    PowerCounters { opened, failed }
}

impl Daemon {
    /// `check` of `req`: a `set_gpu_*` request is answered as [`Daemon::check_gpu_request`];
    /// another is refused.
    pub(super) fn check(
        &self,
        g: &Inner,
        id: u64,
        req: &powerperf_node::daemon::Request,
    ) -> Response {
        match gpu_ask(req) {
            Some((gpu, ask)) => self.check_gpu_request(g, id, gpu, ask),
            None => match g.sessions.get(&id) {
                Some(sess) => self.refuse(
                    sess,
                    id,
                    "`check` answers for set_gpu_locked_clocks, set_gpu_mem_locked_clocks and set_gpu_power_limit requests only".into(),
                ),
                None => Response::refused("no session"),
            },
        }
    }

    /// `check`: the answer `set_gpu` would give to `ask`, with nothing saved or written
    /// (the policy, the values, another session's hold, the device's own list or range).
    pub(super) fn check_gpu_request(&self, g: &Inner, id: u64, gpu: u32, ask: GpuAsk) -> Response {
        match self.check_gpu(g, id, gpu, ask) {
            Some(r) => r,
            None => {
                if g.gpu.as_ref().is_some_and(|gc| gc.describe_only()) {
                    let why = format!(
                        "GPU {gpu}: NVML is open read-only in this powerperfd, so {} would be refused; nothing was changed",
                        ask.describe()
                    );
                    return Response::refused(why);
                }
                Response {
                    ok: true,
                    session: Some(id),
                    info: vec![format!(
                        "GPU {gpu} {}: allowed (checked only; nothing was changed)",
                        ask.describe()
                    )],
                    ..Default::default()
                }
            }
        }
    }

    /// Every check of a GPU request before anything is saved or written. `Some`: the
    /// refusal.
    fn check_gpu(&self, g: &Inner, id: u64, gpu: u32, ask: GpuAsk) -> Option<Response> {
        let Some(sess) = g.sessions.get(&id) else {
            return Some(Response::refused("no session"));
        };
        let control = ask.knob().control();
        for v in ask.values() {
            if !(v.is_finite() && v > 0.0 && v <= 1e6) {
                return Some(self.refuse(
                    sess,
                    id,
                    format!(
                        "{} is not a number in (0, 1e6] ({})",
                        v,
                        crate::policy::range_unit(control)
                    ),
                ));
            }
        }
        // NVML takes whole MHz and whole mW (the sysfs GPUs whole MHz and µW, amdgpu's cap
        // whole W, checked by the device): a value that would be rounded is refused, so
        // the value written is the value the policy and the device checked (issue 38)
        let whole = match ask {
            GpuAsk::LockedClocks(a, b) | GpuAsk::MemLockedClocks(a, b) => {
                (a.fract() == 0.0 && b.fract() == 0.0).then_some(()).ok_or_else(|| {
                    format!("locked clocks [{a}, {b}] MHz: GPU clocks are set in whole MHz (NVML's unit, and the drivers' sysfs files'); ask for whole numbers (one of the GPU's supported graphics clocks)")
                })
            }
            GpuAsk::PowerLimit(w) => {
                let mw = w * 1e3;
                ((mw - mw.round()).abs() < 1e-6).then_some(()).ok_or_else(|| {
                    format!("power limit {w} W: GPU power limits are set in whole milliwatts (NVML's unit); ask for at most three decimals")
                })
            }
        };
        if let Err(why) = whole {
            return Some(self.refuse(sess, id, why));
        }
        if let GpuAsk::LockedClocks(a, b) | GpuAsk::MemLockedClocks(a, b) = ask {
            if a > b {
                return Some(self.refuse(
                    sess,
                    id,
                    format!("locked clocks [{a}, {b}] MHz: min_mhz is above max_mhz"),
                ));
            }
        }
        for v in ask.values() {
            if let Err(why) = self.opts.config.may_write(&sess.who, control, Some(v), &[]) {
                return Some(self.refuse(sess, id, why));
            }
        }
        let key = format!("GPU {gpu}");
        if let Some(h) = g.held_other.get(&key) {
            if h.session != id {
                let why = format!(
                    "{key} is held by session {} of uid {} (pid {}) at {}: two sessions may not set one GPU, so this request is refused (nothing was changed); wait until that session ends, or ask for another GPU",
                    h.session, h.uid, h.pid, h.setting
                );
                return Some(self.refuse(sess, id, why));
            }
        }
        let Some(gc) = g.gpu.as_ref() else {
            let why = format!(
                "no GPU control on this node: {}",
                self.no_gpu.as_deref().unwrap_or("?")
            );
            return Some(self.refuse(sess, id, why));
        };
        // the device's own check before anything is saved or written
        let checked = match ask {
            GpuAsk::LockedClocks(a, b) => gc.check_locked_clocks(gpu, a, b).map(|_| ()),
            GpuAsk::PowerLimit(w) => gc.check_power_limit(gpu, w),
            GpuAsk::MemLockedClocks(a, b) => gc.check_mem_locked_clocks(gpu, a, b).map(|_| ()),
        };
        if let Err(e) = checked {
            return Some(self.refuse(sess, id, e.to_string()));
        }
        None
    }

    pub(super) fn set_gpu(&self, g: &mut Inner, id: u64, gpu: u32, ask: GpuAsk) -> Response {
        if let Some(r) = self.check_gpu(g, id, gpu, ask) {
            return r;
        }
        let Some(sess) = g.sessions.get(&id) else {
            return Response::refused("no session");
        };
        let knob = ask.knob();
        let control = knob.control();
        let key = format!("GPU {gpu}");
        let Some(gc) = g.gpu.as_ref() else {
            return Response::refused("no GPU control");
        };
        if gc.describe_only() {
            // the real GPU in this build: nothing is saved, nothing changes; the answer
            // names the call a privileged build would make
            let (uid, pid) = (sess.who.uid, sess.peer_pid);
            let Some(gm) = g.gpu.as_mut() else {
                return Response::refused("no GPU control");
            };
            let why = match ask {
                GpuAsk::LockedClocks(a, b) => gm.set_locked_clocks(gpu, a, b),
                GpuAsk::PowerLimit(w) => gm.set_power_limit_w(gpu, w),
                GpuAsk::MemLockedClocks(a, b) => gm.set_mem_locked_clocks(gpu, a, b),
            }
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| "the GPU control describes only".into());
            tracing::warn!(uid, pid, session = id, gpu, reason = %why, "refused");
            return Response::refused(why);
        }
        let first = !sess
            .saves
            .iter()
            .any(|s| matches!(s, Saved::Gpu(x) if x.gpu == gpu && x.knob == knob));
        let (uid, pid, job) = (sess.who.uid, sess.peer_pid, sess.job.clone());
        if first {
            let saved = match gc.save(gpu, knob) {
                Ok(s) => s,
                Err(e) => {
                    return Response::refused(format!("cannot read the current setting: {e}"))
                }
            };
            if let Err(r) = g.save_first(id, (uid, pid, job.clone()), control, Saved::Gpu(saved)) {
                return Response::refused(r);
            }
        }
        let what = ask.describe();
        g.held_other.insert(
            key,
            Hold {
                session: id,
                uid,
                pid,
                setting: what.clone(),
            },
        );
        let Some(gc) = g.gpu.as_mut() else {
            return Response::refused("no GPU control");
        };
        let done = match ask {
            GpuAsk::LockedClocks(a, b) => gc.set_locked_clocks(gpu, a, b),
            GpuAsk::PowerLimit(w) => gc.set_power_limit_w(gpu, w),
            GpuAsk::MemLockedClocks(a, b) => gc.set_mem_locked_clocks(gpu, a, b),
        };
        match done {
            Ok(w) => {
                tracing::info!(session = id, uid, pid, control, gpu, value = %what, "set");
                let target = format!("gpu{gpu}");
                let applied = match ask {
                    GpuAsk::LockedClocks(a, b) | GpuAsk::MemLockedClocks(a, b) => {
                        crate::metrics::Applied::Hertz {
                            control,
                            target,
                            min: a * 1e6,
                            max: b * 1e6,
                        }
                    }
                    GpuAsk::PowerLimit(w) => crate::metrics::Applied::Watts {
                        control,
                        target,
                        watts: w,
                    },
                };
                self.note(crate::metrics::Event::Applied {
                    id,
                    what: vec![applied],
                });
                Response {
                    ok: true,
                    session: Some(id),
                    writes: vec![w],
                    ..Default::default()
                }
            }
            Err(e) => {
                tracing::warn!(session = id, uid, pid, gpu, error = %e, "a GPU setting was not made; the session restores what it changed when it ends");
                Response::refused(format!(
                    "{e}; what this session changed is restored when it ends"
                ))
            }
        }
    }

    pub(super) fn read_power(&self, g: &mut Inner, id: u64) -> Response {
        let Some(sess) = g.sessions.get(&id) else {
            return Response::refused("no session");
        };
        if let Err(why) = self.opts.config.may_read(&sess.who, "power") {
            return self.refuse(sess, id, why);
        }
        let mut readings = Vec::new();
        let mut notes = Vec::new();
        match &self.power_pmu {
            Err(why) => notes.push(format!("perf power PMU: {why}")),
            Ok(events) => {
                let root = self.opts.sysfs_root.clone();
                if let Some(sess) = g.sessions.get_mut(&id) {
                    let pc = sess
                        .power
                        .get_or_insert_with(|| open_counters(events, &root));
                    for f in &pc.failed {
                        notes.push(format!("perf power PMU: {f}"));
                    }
                    for (ev, c) in &mut pc.opened {
                        c.sample();
                        readings.push(PowerReading {
                            name: ev.domain.clone(),
                            origin: powerperf_node::daemon::ORIGIN_PERF.into(),
                            source: format!(
                                "perf power/{}/ on CPU {} ({} per count, {})",
                                ev.event, ev.cpu, ev.scale, ev.unit
                            ),
                            energy_j: c.total(),
                            power_w: None,
                        });
                    }
                }
            }
        }
        match g.nvml.as_mut() {
            None => notes.push(format!(
                "GPU readings: {}",
                self.no_nvml.as_deref().unwrap_or("not available")
            )),
            Some(src) => {
                for i in 0..src.count() {
                    let r = src.read(i);
                    readings.push(PowerReading {
                        name: format!("gpu-{i}"),
                        origin: powerperf_node::daemon::ORIGIN_NVML.into(),
                        source: if self.opts.fake_gpu.is_some() {
                            format!(
                                "{} (power: {}; energy: the file energy_mj)",
                                src.name(i),
                                src.power_source(i)
                            )
                        } else {
                            format!("NVML GPU {i} ({}; power: {}; energy: nvmlDeviceGetTotalEnergyConsumption)", src.name(i), src.power_source(i))
                        },
                        energy_j: r.energy_mj.map(|mj| mj as f64 * 1e-3),
                        power_w: r.power_w,
                    });
                }
            }
        }
        // The sysfs power devices (amdgpu, xe, i915, hwmon), found at start.
        if g.devices.is_empty() {
            notes.push(format!(
                "sysfs power devices (amdgpu, xe, i915, hwmon power or energy sensors): none under {}",
                self.opts.sysfs_root.display()
            ));
        }
        readings.extend(crate::devices::readings(&mut g.devices));
        let Some(sess) = g.sessions.get(&id) else {
            return Response::refused("no session");
        };
        if readings.is_empty() {
            return self.refuse(
                sess,
                id,
                format!("no power readings on this node: {}", notes.join("; ")),
            );
        }
        Response {
            ok: true,
            session: Some(id),
            power: readings,
            info: notes,
            ..Default::default()
        }
    }
}
