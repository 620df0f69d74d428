//! Phases "spawn", "launch" and "sample": the command's environment and its fork (paused
//! before exec, with PDEATHSIG: [`launcher`]), then the signals forwarded, the command let
//! go and the sampler thread started, then the wait for the end of the measurement.

use super::super::launcher::{self, Exit, Paused};
use super::super::pc_sampler::{Collected, OpenedInfo, Reader};
use super::super::Mode;
use super::sampler::{Sampler, SamplerThread};
use super::sources::{FailedEvent, Sources};
use super::Session;
use anyhow::{Context, Result};
use powerperf_rt::now_ns;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The measurement under way: the command let go, the sampler thread sampling.
pub(super) struct Running {
    /// The command's pid and whether its exec succeeded.
    exec_result: Option<(i32, std::io::Result<()>)>,
    /// Set by a signal when there is no command to forward it to.
    stop: Arc<AtomicBool>,
    signals: signal_hook::iterator::Handle,
    forwarder: JoinHandle<()>,
    sampler: SamplerThread,
    comms: Vec<(i32, String)>,
    failed: Vec<FailedEvent>,
    pc: Option<(Reader, OpenedInfo)>,
    origin_ns: u64,
}

/// The measurement over: every source stopped and read.
pub(super) struct Sampled {
    pub(super) exec_result: Option<(i32, std::io::Result<()>)>,
    /// How the command ended (`None`: no command).
    pub(super) exit: Option<std::io::Result<Exit>>,
    pub(super) sampler: Sampler,
    pub(super) comms: Vec<(i32, String)>,
    pub(super) failed: Vec<FailedEvent>,
    pub(super) pc: Option<(OpenedInfo, Collected)>,
    /// t = 0 of the timeline, CLOCK_MONOTONIC ns.
    pub(super) origin_ns: u64,
}

impl Session<'_> {
    /// Fork the command (if any), stopped before exec, in its environment: `POWERPERF_*`,
    /// the region library, NVTX and CUDA injection.
    ///
    /// # Errors
    /// No CUDA injection library for `--gpu`, or a failed fork.
    pub(super) fn spawn_paused(&mut self) -> Result<Option<Paused>> {
        let env = self.command_env()?;
        let cfg = self.cfg;
        if cfg.command.is_empty() {
            return Ok(None);
        }
        let paused = launcher::spawn_paused(&cfg.command, &env)
            .with_context(|| format!("cannot start `{}`", cfg.command.join(" ")))?;
        tracing::debug!(pid = paused.pid, command = ?cfg.command, "collect: command forked, paused before exec");
        Ok(Some(paused))
    }

    /// The command's environment: the configuration's, the run directory, the runtime
    /// libraries, and the GPU PC sampling settings.
    fn command_env(&mut self) -> Result<Vec<(String, String)>> {
        let cfg = self.cfg;
        let mut env = cfg.env.clone();
        env.push(("POWERPERF_RUN_DIR".into(), cfg.out.display().to_string()));
        // With --gpu one library does everything in the process (regions, NVTX, CUDA
        // injection): two copies of the runtime would keep two region stacks.
        if self.gpu_pc {
            env.push(("POWERPERF_CUPTI_PC_SAMPLING".into(), "1".into()));
            if let Some(p) = cfg.gpu_pc_period {
                env.push(("POWERPERF_CUPTI_PC_PERIOD".into(), p.to_string()));
            }
            if cfg.gpu_pc_serialized {
                env.push(("POWERPERF_CUPTI_PC_MODE".into(), "serialized".into()));
            }
        }
        let rt_lib = if cfg.gpu || self.gpu_pc {
            let lib = super::super::rt_cuda_library().context(
                "collect --gpu needs libpowerperf_rt_cuda.so: build it (`cargo build --release` builds it next to powerperf, from rt/cuda) or name it with POWERPERF_RT_CUDA_LIB",
            )?;
            let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
            match self.their_var("CUDA_INJECTION64_PATH") {
                None => env.push(("CUDA_INJECTION64_PATH".into(), lib.display().to_string())),
                Some(t) => self.meta.notes.push(format!(
                    "GPU activity is not recorded: CUDA_INJECTION64_PATH is already set to {t} (CUDA loads one injection library; CUPTI allows one subscriber per process)"
                )),
            }
            Some(lib)
        } else {
            super::super::rt_library()
        };
        if let Some(lib) = rt_lib {
            // For programs that load the region library by path (the Python ctypes module).
            let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
            env.push(("POWERPERF_RT_LIB".into(), lib.display().to_string()));
            // NVTX ranges (nvtxRangePush/Pop, torch.cuda.nvtx) become regions: NVTX dlopens
            // the library named here and calls its InitializeInjectionNvtx2 (rt/README.md).
            match (cfg.nvtx, self.their_var("NVTX_INJECTION64_PATH")) {
                (true, None) => {
                    env.push(("NVTX_INJECTION64_PATH".into(), lib.display().to_string()))
                }
                (true, Some(t)) => self.meta.notes.push(format!(
                    "NVTX ranges are not recorded as regions: NVTX_INJECTION64_PATH is already set to {t} (NVTX loads one tool per process)"
                )),
                (false, _) => {}
            }
        }
        Ok(env)
    }

    /// A variable the command would get from powerperf's environment or the configuration.
    fn their_var(&self, name: &str) -> Option<String> {
        std::env::var_os(name)
            .map(|v| v.to_string_lossy().into_owned())
            .or_else(|| {
                self.cfg
                    .env
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            })
    }

    /// Forward signals, take the run's origin, let the command go and start sampling.
    ///
    /// # Errors
    /// Signal handlers that cannot be installed.
    pub(super) fn launch(&mut self, sources: Sources) -> Result<Running> {
        let Sources {
            paused,
            comms,
            failed,
            mut sampler,
            pc,
        } = sources;
        // Signals: forwarded to a command we started; otherwise they end the measurement.
        let stop = Arc::new(AtomicBool::new(false));
        let child_pid = paused.as_ref().map(|p| p.pid);
        let mut signals = signal_hook::iterator::Signals::new([
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
        ])
        .context("installing signal handlers")?;
        let sig_handle = signals.handle();
        let stop2 = stop.clone();
        let forwarder = std::thread::spawn(move || {
            for sig in signals.forever() {
                match child_pid {
                    // SAFETY: plain kill(2) on the child's pid.
                    Some(pid) => unsafe {
                        libc::kill(pid, sig);
                    },
                    None => stop2.store(true, Ordering::SeqCst),
                }
            }
        });

        // The run's origin (t = 0 of the timeline, the start of `duration_ns`) is taken just
        // before the command is let go, after the sources' first readings, so that the
        // command's wall-clock time does not include powerperf's own start-up.
        let origin = now_ns();
        self.meta.run.start_monotonic_ns = origin;
        sampler.origin_ns = origin;
        sampler.last_ns = origin;
        let exec_result = paused.map(|p| (p.pid, p.go()));
        let sampler = SamplerThread::spawn(sampler, self.cfg.interval);
        tracing::debug!(
            pid = ?exec_result.as_ref().map(|(pid, _)| *pid),
            exec_ok = ?exec_result.as_ref().map(|(_, r)| r.is_ok()),
            interval = ?self.cfg.interval,
            "collect: launched, sampling"
        );
        Ok(Running {
            exec_result,
            stop,
            signals: sig_handle,
            forwarder,
            sampler,
            comms,
            failed,
            pc,
            origin_ns: origin,
        })
    }

    /// Wait for the end of the measurement (the command's exit, the attached process's
    /// end, or a signal), then stop every source.
    ///
    /// # Errors
    /// The sampler thread panicked.
    pub(super) fn sample(&mut self, running: Running) -> Result<Sampled> {
        let Running {
            exec_result,
            stop,
            signals,
            forwarder,
            sampler,
            comms,
            failed,
            pc,
            origin_ns,
        } = running;
        let exit = match (&exec_result, &self.cfg.mode) {
            (Some((pid, _)), _) => Some(launcher::wait(*pid)),
            (None, Mode::Attach(pid)) => {
                while pid_alive(*pid) && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                None
            }
            (None, _) => {
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                None
            }
        };
        let end = now_ns();
        let pc = pc.map(|(reader, info)| (info, reader.finish()));
        let sampler = sampler.stop()?;
        signals.close();
        let _ = forwarder.join();

        self.meta.run.duration_ns = end - origin_ns;
        self.meta.run.self_cpu_ns = self_cpu_ns();
        self.meta.run.samples = sampler.timeline.rows();
        tracing::debug!(
            samples = self.meta.run.samples,
            duration_ns = self.meta.run.duration_ns,
            pc_samples = ?pc.as_ref().map(|(_, c)| c.samples),
            "collect: sampling stopped"
        );
        Ok(Sampled {
            exec_result,
            exit,
            sampler,
            comms,
            failed,
            pc,
            origin_ns,
        })
    }
}

/// CPU time of this process so far (user + system), ns.
fn self_cpu_ns() -> Option<u64> {
    // SAFETY: `rusage` is plain C data (integers and timevals): all zeros is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given, a local `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    Some(ns(ru.ru_utime) + ns(ru.ru_stime))
}

/// Whether `pid` still runs: it exists and is not a zombie (an exited process whose
/// parent has not reaped it yet still answers kill(pid, 0)).
fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name (proc(5)).
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}
