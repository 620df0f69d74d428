//! `powerperf apply`: run a command under a plan's static setting, or (a job plan with
//! different settings per region) switch at the region boundaries the command's
//! powerperf-rt reports over the controller socket; restore every changed setting
//! afterwards. `powerperf apply --restore` replays a left-over record.

use anyhow::{Context, Result};
use powerperf_core::dvfs::apply::{self, ApplyRequest, RegionSettings, RunAs, SignalForwarder};
use powerperf_node::controller::{
    ControllerError, CpufreqController, FrequencyController, NvmlLockedClocks,
};
use powerperf_node::plan_file::{DeviceKind, Plan, Scope};
use std::path::{Path, PathBuf};

/// Arguments of `powerperf apply`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf apply --plan plan.toml -- ./my_program\n  powerperf apply --plan plan.toml --workload DP --dry-run -- ./dp_kernel\n  powerperf apply --plan examples/plans/cpu-static.toml --workload fma --dry-run --sysfs-root tests/fixtures/sysfs/cpufreq-userspace -- true\n  powerperf apply --restore        # replay a restore record (e.g. from a Slurm epilog)\n\nEvery changed setting is restored on exit, error, SIGINT/SIGTERM and a crash of the command; see docs/dvfs.md."
)]
pub struct ApplyArgs {
    /// The plan file written by `powerperf plan`.
    #[arg(long, value_name = "PLAN", required_unless_present = "restore")]
    pub plan: Option<PathBuf>,
    /// Print what would be written, change nothing, and run the command unchanged.
    #[arg(long)]
    pub dry_run: bool,
    /// Root of the sysfs tree (a fixture directory in tests): cpufreq, and as root the AMD
    /// and Intel GPUs (amdgpu, xe, i915) a GPU plan is set on, numbered after NVML's.
    #[arg(long, default_value = "/", value_name = "DIR")]
    pub sysfs_root: PathBuf,
    /// The plan region or workload whose setting to apply (needed when the plan has
    /// several with different settings).
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,
    /// Replay a restore record left by an apply that did not finish, then exit.
    #[arg(long, conflicts_with_all = ["plan", "dry_run", "workload"])]
    pub restore: bool,
    /// The restore record (default: powerperf-restore.toml in the state directory). Never
    /// followed through a symbolic link; created exclusively; read back only when it is
    /// this user's own file.
    #[arg(long, value_name = "PATH")]
    pub restore_file: Option<PathBuf>,
    /// The switch log (default: powerperf-switches.log in the state directory).
    #[arg(long, value_name = "PATH")]
    pub log: Option<PathBuf>,
    /// Directory for the restore record and the switch log (default: $POWERPERF_STATE_DIR,
    /// else /var/lib/powerperf for root, else $XDG_RUNTIME_DIR). It must be a directory of
    /// this user with mode 0700 (created when missing), not a symbolic link.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Run the command as the user who ran `sudo powerperf apply` (SUDO_UID, SUDO_GID, no
    /// supplementary groups) while powerperf keeps root to set and restore the frequencies.
    /// Without it the command runs with powerperf's credentials, as under perf and
    /// likwid-perfctr.
    #[arg(long, conflicts_with = "restore")]
    pub as_invoking_user: bool,
    /// Output format: table (`text` also works), or json (one object as the last line of stderr, as `perf stat
    /// -j` does: stdout belongs to the command) with the plan, the settings, the writes of a
    /// dry run, the environment given to the command and its exit status.
    #[arg(long, default_value = "table")]
    pub format: powerperf_core::output::OutputFormat,
    /// The socket of powerperfd, the node service (docs/cluster.md), through which a user
    /// who may not write cpufreq applies a static CPU setting or a job plan's region switches,
    /// and a user who is not root a plan's GPU settings (static, or the SM clock switched at
    /// region boundaries): the daemon checks its policy, sets, and restores when this apply
    /// ends or dies. Default when powerperf is not root:
    /// $POWERPERF_DAEMON, else /run/powerperf/powerperfd.sock when it exists.
    #[arg(long, value_name = "PATH", conflicts_with = "restore")]
    pub daemon: Option<PathBuf>,
    /// Use the fake GPUs under DIR (the files of `powerperfd --fake-gpu`,
    /// tests/fixtures/fake-gpu) for the plan's GPU knobs: the settings are written to its
    /// files and restored afterwards. Needs neither root nor powerperfd. With --dry-run the
    /// plan's clocks are checked against its files (`supported_graphics_clocks_mhz`,
    /// `supported_memory_clocks_mhz`) instead of NVML's and nothing is written (quickstart
    /// checks the bundled sets' plans against their own GPU's clocks this way).
    #[arg(long, value_name = "DIR", conflicts_with = "restore")]
    pub fake_gpu: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// What `apply --format json` reports.
#[derive(Debug, Default, serde::Serialize)]
struct Summary {
    plan: Option<PathBuf>,
    /// The plan region or workload applied (static plans).
    region: Option<String>,
    /// Its knob settings.
    setting: std::collections::BTreeMap<String, f64>,
    /// Per-region CPU core frequencies, MHz (job plans switched at region boundaries).
    region_settings: Vec<(String, f64)>,
    dry_run: bool,
    controller: Option<String>,
    /// The sysfs writes a dry run would make.
    writes: Vec<String>,
    env: Vec<(String, String)>,
    notes: Vec<String>,
    /// NVML reads on GPU 0 (a plan with GPU settings).
    gpu_reads: Vec<String>,
    /// The NVML set and reset calls a privileged run would make (never made).
    gpu_calls: Vec<String>,
    /// Settings replayed by `--restore`.
    restored: Vec<String>,
    log: Option<PathBuf>,
    exit_status: i32,
}

/// Run `powerperf apply`.
///
/// # Errors
/// A bad plan, missing cpufreq or privileges (with the fix), a left-over restore record, a
/// command that cannot start, or a failed restore.
pub fn run(args: ApplyArgs) -> Result<i32> {
    args.format
        .check("apply", &powerperf_core::output::OutputFormat::TABLE_JSON)?;
    let mut sum = Summary {
        plan: args.plan.clone(),
        dry_run: args.dry_run,
        ..Default::default()
    };
    let st = run_inner(&args, &mut sum).map_err(|e| {
        powerperf_core::dvfs::apply::daemon::hint_without_daemon(e, args.daemon.as_deref())
    })?;
    if args.format == powerperf_core::output::OutputFormat::Json {
        sum.exit_status = st;
        eprintln!("{}", serde_json::to_string(&sum)?);
    }
    Ok(st)
}

/// The restore record: `--restore-file`, else the state directory's.
fn restore_path(args: &ApplyArgs) -> Result<PathBuf> {
    match &args.restore_file {
        Some(p) => Ok(p.clone()),
        None => apply::default_restore_path(args.state_dir.as_deref()),
    }
}

/// The switch log: `--log`, else the state directory's.
fn log_path(args: &ApplyArgs) -> Result<PathBuf> {
    match &args.log {
        Some(p) => Ok(p.clone()),
        None => apply::default_log_path(args.state_dir.as_deref()),
    }
}

/// The user the command runs as: `--as-invoking-user` (SUDO_UID), else powerperf's own
/// credentials, with a note when that is root under sudo.
fn command_user(args: &ApplyArgs) -> Result<Option<RunAs>> {
    if args.as_invoking_user {
        let u = RunAs::invoking_user()?;
        eprintln!(
            "powerperf: the command runs as uid {} gid {}{} (--as-invoking-user), without supplementary groups",
            u.uid,
            u.gid,
            u.user.as_deref().map(|n| format!(" ({n})")).unwrap_or_default()
        );
        return Ok(Some(u));
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        if let Some(uid) = std::env::var("SUDO_UID").ok().filter(|u| u != "0") {
            eprintln!(
                "powerperf: the command runs as root (powerperf was started through sudo by uid {uid}); pass --as-invoking-user to run it as uid {uid}"
            );
        }
    }
    Ok(None)
}

/// `apply --restore`: put back what the restore record of an earlier apply saved.
fn run_restore(args: &ApplyArgs, sum: &mut Summary) -> Result<i32> {
    let restore_file = restore_path(args)?;
    let root = (args.sysfs_root != Path::new("/")).then_some(args.sysfs_root.as_path());
    let gpu_record = powerperf_core::dvfs::gpu_session::gpu_record_path(&restore_file);
    if let Some(calls) = powerperf_core::dvfs::gpu_session::replay_gpu_restore(&gpu_record)? {
        eprintln!(
            "powerperf: restored {} GPU setting(s) from {}",
            calls.len(),
            gpu_record.display()
        );
        for c in &calls {
            eprintln!("  {c}");
        }
        sum.restored.extend(calls);
        if std::fs::symlink_metadata(&restore_file).is_err() {
            return Ok(0);
        }
    }
    match apply::replay_restore(&restore_file, root)? {
        None => {
            eprintln!(
                "powerperf: nothing to restore: no record at {}",
                restore_file.display()
            );
            Ok(0)
        }
        Some(w) => {
            eprintln!(
                "powerperf: restored {} setting(s) from {}",
                w.len(),
                restore_file.display()
            );
            for x in &w {
                eprintln!("  {x}");
            }
            sum.restored.extend(w.iter().map(|x| x.to_string()));
            Ok(0)
        }
    }
}

/// A plan's GPU clocks: read what NVML reports, check the setting against the supported
/// clocks, and print the NVML calls a privileged run would make (this build calls none).
fn gpu_reads_and_calls(
    args: &ApplyArgs,
    plan: &Plan,
    gpu: (Option<f64>, Option<f64>),
    sum: &mut Summary,
) -> Result<()> {
    let knob = if gpu.0.is_some() {
        "core_freq_mhz"
    } else {
        "mem_freq_mhz"
    };
    let index = plan.device_of(knob).and_then(|d| d.index).unwrap_or(0);
    // Reads only (powerperf_node::nvml_clocks calls no setter); the setting is checked
    // against the supported clocks before the command runs.
    let (probe, source) = match &args.fake_gpu {
        Some(dir) => {
            let fake = powerperf_node::gpu_control::FakeGpu::open(dir)
                .with_context(|| format!("--fake-gpu {}", dir.display()))?;
            let p = fake
                .probe(index)
                .with_context(|| format!("--fake-gpu {}", dir.display()))?;
            (
                Ok(p),
                format!(
                    "reads on GPU {index} of the fake GPU in {} (no real GPU is read)",
                    dir.display()
                ),
            )
        }
        None => (
            powerperf_node::nvml_clocks::probe(index),
            format!("NVML reads on GPU {index}"),
        ),
    };
    if probe.is_err() && sysfs_gpu_check(args, index, gpu, sum)? {
        return Ok(());
    }
    match probe {
        Ok(p) => {
            plan.check_device(knob, &format!("gpu{}", p.device), "NVML")
                .map_err(anyhow::Error::msg)?;
            eprintln!("powerperf: {source}:");
            for l in p.lines() {
                eprintln!("  {l}");
            }
            sum.gpu_reads = p.lines();
            let calls = powerperf_node::nvml_clocks::check_plan(&p, gpu.0, gpu.1)
                .context("the plan's GPU setting was refused before the command ran")?;
            eprintln!(
                "powerperf: GPU clocks are not changed {}; a privileged run would call:",
                if args.dry_run {
                    "in a dry run"
                } else {
                    "by a powerperf that is not root (run it as root, or use --fake-gpu DIR)"
                }
            );
            for l in &calls.set {
                eprintln!("  {l}");
            }
            for l in &calls.reset {
                eprintln!("  at exit: {l}");
            }
            for n in &calls.notes {
                eprintln!("powerperf: {n}");
            }
            sum.gpu_calls = calls
                .set
                .iter()
                .cloned()
                .chain(calls.reset.iter().map(|l| format!("at exit: {l}")))
                .collect();
        }
        Err(why) if !args.dry_run => {
            // The controller of the plan's device is missing here (issue 20, item 4).
            anyhow::bail!(
                "the plan sets {knob} on `gpu{index}` (a GPU, through NVML), and NVML has no such GPU here: {why}; nothing was changed and the command did not run (fix: apply the plan on the node with that GPU, add --dry-run to print the NVML calls it would make, or plan again with --device cpu if the clocks are the CPU's)"
            );
        }
        Err(why) => {
            eprintln!("powerperf: {why}");
            eprintln!(
                "powerperf: GPU clocks are not changed in a dry run; unchecked, a privileged run would call:"
            );
            for l in (NvmlLockedClocks { device: index }).describe_set(gpu.0, gpu.1) {
                eprintln!("  {l}");
            }
            sum.gpu_calls = (NvmlLockedClocks { device: index }).describe_set(gpu.0, gpu.1);
        }
    }
    Ok(())
}

/// Where NVML has no GPU `index`: when it is an AMD or Intel GPU under `--sysfs-root`
/// (`powerperf_node::gpu_control::node::open_node_gpus`, read only), check the plan's clocks
/// against it (before the command runs) and say what a privileged run would write. `false`
/// when it is no such GPU.
///
/// # Errors
/// A clock the GPU refuses (its levels or range, named).
fn sysfs_gpu_check(
    args: &ApplyArgs,
    index: u32,
    gpu: (Option<f64>, Option<f64>),
    sum: &mut Summary,
) -> Result<bool> {
    use powerperf_node::gpu_control::node;
    let Ok((ctl, _)) = node::open_node_gpus(None, &args.sysfs_root, false) else {
        return Ok(false);
    };
    let Some(card) = node::sysfs_card(ctl.as_ref(), &args.sysfs_root, index) else {
        return Ok(false);
    };
    let gs = powerperf_node::gpu_control::GpuSetting {
        sm_clock_mhz: gpu.0,
        mem_clock_mhz: gpu.1,
        ..Default::default()
    };
    powerperf_core::dvfs::gpu_session::check_setting(ctl.as_ref(), index, &gs)
        .context("the plan's GPU setting was refused before the command ran")?;
    eprintln!(
        "powerperf: GPU {index} is {card}: {} checked against it; not set {}; a privileged run would write its sysfs files (docs/cluster.md, \"AMD and Intel GPUs\")",
        gs.describe(),
        if args.dry_run {
            "in a dry run"
        } else {
            "by a powerperf that is not root (run it as root, or through powerperfd)"
        }
    );
    sum.gpu_calls = vec![format!("{}: {} (sysfs)", card, gs.describe())];
    Ok(true)
}

fn run_inner(args: &ApplyArgs, sum: &mut Summary) -> Result<i32> {
    if args.restore {
        return run_restore(args, sum);
    }
    let plan_path = args.plan.clone().context("--plan PLAN is required")?;
    let plan = Plan::read(&plan_path)?;
    let run_as = command_user(args)?;
    if let Some(settings) = gpu_region_settings(&plan, args.workload.as_deref()) {
        // a user who may not set the GPU: the switches go through powerperfd's
        // gpu.locked_clocks grant where there is a daemon (docs/cluster.md)
        let daemon = (!args.dry_run && !sets_gpu_for_real(args))
            .then(|| powerperf_node::daemon::client::for_apply(args.daemon.as_deref()))
            .flatten();
        if sets_gpu_for_real(args) || daemon.is_some() {
            sum.region_settings = settings.clone();
            return run_gpu_regions(args, &plan, &plan_path, settings, run_as, daemon, sum);
        }
        eprintln!(
            "powerperf: the plan's GPU clocks differ per region; they are switched at region boundaries only as root, with --fake-gpu DIR, or through powerperfd (--daemon PATH), {}",
            if args.dry_run { "and not in a dry run" } else { "so this run leaves them unchanged" }
        );
    }
    if let Some(settings) = region_settings(&plan, args.workload.as_deref()) {
        sum.region_settings = settings.clone();
        return run_regions(args, &plan, &plan_path, settings, run_as, sum);
    }
    // the plan's setting sorted by controller: the same function the SPANK plugin uses
    let setting = powerperf_node::static_setting::static_setting(
        &plan,
        args.workload.as_deref(),
        &plan_path,
    )?;
    eprintln!(
        "powerperf: applying `{}` from {}: {}",
        setting.region,
        plan_path.display(),
        powerperf_core::dvfs::planner::format_knobs(&setting.knobs)
    );
    let core_mhz = setting.core_mhz;
    let gpu_setting = setting.gpu_setting();
    let (daemon_reqs, _) = setting.daemon_requests();
    let gpu = (
        setting.gpu_core_mhz.map(|(_, v)| v),
        setting.gpu_mem_mhz.map(|(_, v)| v),
    );
    let (env, notes) = (setting.env, setting.notes);
    sum.region = Some(setting.region);
    sum.setting = setting.knobs;
    for n in &notes {
        eprintln!("powerperf: {n}");
    }
    // a user who may not set the GPU (not root, no --fake-gpu): the whole setting, CPU and
    // GPU, through powerperfd where there is one (its gpu.* grants; docs/cluster.md)
    if gpu_setting.is_some() && !args.dry_run && !sets_gpu_for_real(args) {
        if let Some(sock) = powerperf_node::daemon::client::for_apply(args.daemon.as_deref()) {
            for (k, v) in &env {
                eprintln!("powerperf: {k}={v} for the command");
            }
            sum.env = env.clone();
            sum.notes = notes;
            let (st, what) = powerperf_core::dvfs::apply::daemon::apply_requests(
                &sock,
                &daemon_reqs,
                &args.command,
                &env,
                run_as.as_ref(),
            )?;
            sum.controller = Some(what);
            return Ok(st);
        }
    }
    // as root or on a fake GPU the plan's GPU setting is made for real (issue 39, item 5);
    // signals are caught from before the first write (the forwarder of run_static takes
    // over for the command)
    let early = SignalForwarder::install()?;
    let mut gpu_sess = None;
    match gpu_setting {
        Some((idx, gs)) if sets_gpu_for_real(args) => {
            gpu_sess = Some(begin_gpu(args, idx, &gs, sum)?);
        }
        Some((idx, gs)) => {
            if let Some(w) = gs.power_limit_w {
                eprintln!(
                    "powerperf: power_limit_w = {w} on GPU {idx} is not set {}; a privileged run would call nvmlDeviceSetPowerManagementLimit(device {idx}, limit {:.0} mW)",
                    if args.dry_run { "in a dry run" } else { "by a powerperf that is not root (run it as root, or use --fake-gpu DIR)" },
                    w * 1e3
                );
            }
            if gpu.0.is_some() || gpu.1.is_some() {
                gpu_reads_and_calls(args, &plan, gpu, sum)?;
            }
        }
        None => {}
    }
    let st = if early.caught() != 0 {
        eprintln!(
            "powerperf: caught signal {} before the command started; restoring",
            early.caught()
        );
        Ok(128 + early.caught())
    } else {
        run_static(args, &plan_path, core_mhz, env, notes, run_as, sum)
    };
    drop(early);
    if let Some(mut g) = gpu_sess {
        // the command has ended (or failed to start): put the GPU back either way
        let calls = g.restore()?;
        eprintln!("powerperf: original GPU settings restored:");
        for c in &calls {
            eprintln!("  {c}");
        }
    }
    st
}

/// Whether the plan's GPU setting is made for real: `--fake-gpu`, or root (NVML's
/// setters, through `NvmlGpu::nvml_set`); never in a dry run.
fn sets_gpu_for_real(args: &ApplyArgs) -> bool {
    // SAFETY: geteuid has no preconditions.
    !args.dry_run && (args.fake_gpu.is_some() || unsafe { libc::geteuid() } == 0)
}

/// Check the plan's GPU setting on GPU `idx` (before anything changes), save what it
/// overwrites in the GPU restore record, set it.
fn begin_gpu(
    args: &ApplyArgs,
    idx: u32,
    gs: &powerperf_node::gpu_control::GpuSetting,
    sum: &mut Summary,
) -> Result<powerperf_core::dvfs::gpu_session::GpuSession> {
    use powerperf_core::dvfs::gpu_session::{self as gsess, GpuSession};
    let ctl = gsess::open_control(args.fake_gpu.as_deref(), &args.sysfs_root).map_err(|e| {
        if args.fake_gpu.is_some() {
            return e.context("nothing was changed and the command did not run");
        }
        anyhow::anyhow!(
            "the plan sets {} on `gpu{idx}` (a GPU, through NVML or an amdgpu, xe or i915 GPU under --sysfs-root {}), and NVML has no such GPU here: {e:#}; nothing was changed and the command did not run (fix: apply the plan on the node with that GPU, add --dry-run to print the NVML calls it would make, or use --fake-gpu DIR)",
            gs.describe(),
            args.sysfs_root.display()
        )
    })?;
    gsess::check_setting(ctl.as_ref(), idx, gs).with_context(|| {
        format!(
            "the plan's GPU setting {} was refused before anything changed; the command did not run",
            gs.describe()
        )
    })?;
    eprintln!("powerperf: {}", ctl.describe());
    sum.controller = Some(ctl.describe());
    let restore = restore_path(args)?;
    let log = log_path(args)?;
    let mut g = GpuSession::begin(
        ctl,
        idx,
        &gs.knobs(),
        &gsess::gpu_record_path(&restore),
        Some(&log),
        gsess::GpuOrigin {
            fake_gpu: args.fake_gpu.as_deref(),
            sysfs_root: &args.sysfs_root,
        },
        &args.command,
    )?;
    let calls = g.set(gs)?;
    eprintln!("powerperf: GPU {idx} set to {}:", gs.describe());
    for c in &calls {
        eprintln!("  {c}");
    }
    sum.gpu_calls = calls;
    Ok(g)
}

/// The CPU part of a static plan, and the command: through powerperfd, the cpufreq
/// controller, or unchanged.
fn run_static(
    args: &ApplyArgs,
    plan_path: &Path,
    core_mhz: Option<f64>,
    env: Vec<(String, String)>,
    notes: Vec<String>,
    run_as: Option<RunAs>,
    sum: &mut Summary,
) -> Result<i32> {
    for (k, v) in &env {
        eprintln!("powerperf: {k}={v} for the command");
    }
    sum.env = env.clone();
    sum.notes = notes.clone();

    // a user who may not write cpufreq: through powerperfd (docs/cluster.md)
    if let (Some(f), false) = (core_mhz, args.dry_run) {
        if let Some(sock) = powerperf_node::daemon::client::for_apply(args.daemon.as_deref()) {
            let (st, what) = powerperf_core::dvfs::apply::daemon::apply_static(
                &sock,
                f,
                &args.command,
                &env,
                run_as.as_ref(),
            )?;
            sum.controller = Some(what);
            return Ok(st);
        }
    }

    let sig = SignalForwarder::install()?;
    let generic = |f: f64| {
        format!(
            "would set core_freq_mhz = {f} on every CPU: scaling_governor = userspace and scaling_setspeed = {} kHz (or scaling_min_freq = scaling_max_freq = {} kHz where the driver has no userspace governor), run the command, then put the original values back",
            powerperf_node::units::MegaHertz(f).to_khz(),
            powerperf_node::units::MegaHertz(f).to_khz()
        )
    };
    let ctl = match core_mhz {
        None => None,
        Some(f) => match CpufreqController::open(&args.sysfs_root) {
            Ok(c) => Some(c),
            Err(e @ ControllerError::NoCpufreq { .. }) => {
                if args.dry_run {
                    eprintln!("powerperf: dry-run: {e}");
                    eprintln!("powerperf: dry-run: {}", generic(f));
                    None
                } else {
                    return Err(anyhow::Error::new(e).context(format!(
                        "cannot apply the plan; with --dry-run powerperf {}",
                        generic(f)
                    )));
                }
            }
            Err(e) => return Err(e.into()),
        },
    };
    if args.dry_run {
        if let (Some(c), Some(f)) = (&ctl, core_mhz) {
            let writes = c.plan_set(f)?;
            sum.controller = Some(c.describe());
            sum.writes = writes.iter().map(|w| w.to_string()).collect();
            eprintln!("powerperf: dry-run: {}; would write:", c.describe());
            for w in &writes {
                eprintln!("  {w}");
            }
            if let Err(e) = c.check_access(&writes) {
                eprintln!("powerperf: dry-run: a real run would fail: {e}");
            }
            eprintln!("powerperf: dry-run: then run the command and restore those files");
        }
        if args.command.is_empty() {
            return Ok(0);
        }
        return apply::run_child_as(&args.command, &env, &sig, run_as.as_ref());
    }
    if args.command.is_empty() {
        anyhow::bail!(
            "no command given: write it after `--`, e.g. `powerperf apply --plan {} -- ./app`",
            plan_path.display()
        );
    }
    let (restore_file, log_file) = if ctl.is_some() {
        (restore_path(args)?, log_path(args)?)
    } else {
        // nothing is set: no record, no log
        (PathBuf::new(), PathBuf::new())
    };
    let req = ApplyRequest {
        core_freq_mhz: core_mhz,
        env,
        command: args.command.clone(),
        restore_file,
        log_file,
        sysfs_root: args.sysfs_root.clone(),
        run_as,
    };
    match ctl {
        Some(mut c) => {
            eprintln!("powerperf: {}", c.describe());
            sum.controller = Some(c.describe());
            sum.log = Some(req.log_file.clone());
            let st = apply::apply_with(&mut c as &mut dyn FrequencyController, &req, &sig)?;
            eprintln!(
                "powerperf: original settings restored; switches logged in {}",
                req.log_file.display()
            );
            Ok(st)
        }
        None => apply::run_child_as(&req.command, &req.env, &sig, req.run_as.as_ref()),
    }
}

/// Whether the CPU core frequency knob of `plan` is `knob` (a CPU device or no device).
fn is_cpu_core(plan: &Plan, knob: &str) -> bool {
    knob == "core_freq_mhz"
        && plan
            .device_of(knob)
            .is_none_or(|d| d.kind == DeviceKind::Cpu)
}

/// The per-region CPU settings of a job plan whose regions differ, `None` for a static
/// plan (a per-workload plan, `--workload` given, or one setting for every region).
fn region_settings(plan: &Plan, workload: Option<&str>) -> Option<Vec<(String, f64)>> {
    if workload.is_some() || plan.plan.scope != Scope::Job {
        return None;
    }
    let list: Vec<(String, f64)> = plan
        .regions
        .iter()
        .filter_map(|r| {
            r.setting
                .iter()
                .find(|(k, _)| is_cpu_core(plan, k))
                .map(|(_, v)| (r.name.clone(), *v))
        })
        .collect();
    let first = list.first()?.1;
    list.iter().any(|(_, v)| *v != first).then_some(list)
}

/// `powerperf apply` with region-triggered switching.
fn run_regions(
    args: &ApplyArgs,
    plan: &Plan,
    plan_path: &Path,
    list: Vec<(String, f64)>,
    run_as: Option<RunAs>,
    sum: &mut Summary,
) -> Result<i32> {
    // a user who may not write cpufreq: the switches go through powerperfd (docs/cluster.md)
    let daemon = if args.dry_run {
        None
    } else {
        powerperf_node::daemon::client::for_apply(args.daemon.as_deref())
    };
    let mut env = Vec::new();
    let threads: Vec<f64> = plan
        .regions
        .iter()
        .filter_map(|r| r.setting.get("threads").copied())
        .collect();
    if let Some(t) = threads.first() {
        if threads.iter().all(|x| x == t) {
            env.push((
                "OMP_NUM_THREADS".to_string(),
                format!("{}", t.round() as u64),
            ));
        } else {
            eprintln!("powerperf: the regions ask for different thread counts; the thread count cannot change inside a run, OMP_NUM_THREADS is left as it is");
        }
    }
    if plan.regions.iter().any(|r| {
        r.setting
            .keys()
            .any(|k| k != "threads" && !is_cpu_core(plan, k))
    }) {
        eprintln!("powerperf: only the CPU core frequency is switched per region; GPU and other knobs in the plan are left unchanged");
    }
    let ctl = match CpufreqController::open(&args.sysfs_root) {
        Ok(c) => Some(c),
        Err(e @ ControllerError::NoCpufreq { .. }) if args.dry_run => {
            eprintln!("powerperf: dry-run: {e}");
            None
        }
        // the daemon has its own sysfs tree: this process need not see one
        Err(_) if daemon.is_some() => None,
        Err(e) => return Err(e.into()),
    };
    let default_mhz = plan
        .device_of("core_freq_mhz")
        .and_then(|d| d.default.get("core_freq_mhz").copied())
        .or_else(|| ctl.as_ref().and_then(|c| c.range().ok()).map(|r| r.max_mhz))
        .context(if daemon.is_some() {
            "the plan has no default core_freq_mhz and the CPU range is unknown here: give the plan's [[device]] a default core_freq_mhz (the setting outside every region) to switch through powerperfd"
        } else {
            "the plan has no default core_freq_mhz and the CPU range is unknown (fix: give the plan's [[device]] a default core_freq_mhz, the setting outside every region, e.g. default = { core_freq_mhz = 2400.0 }, or run where the cpufreq files are readable)"
        })?;
    let settings = RegionSettings {
        regions: list.iter().cloned().collect(),
        default_mhz,
    };
    eprintln!(
        "powerperf: switching at region boundaries from {}: default {default_mhz} MHz; {}",
        plan_path.display(),
        list.iter()
            .map(|(n, v)| format!("{n} = {v} MHz"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let sig = SignalForwarder::install()?;
    if args.dry_run {
        if let Some(c) = &ctl {
            for (n, v) in std::iter::once(("(default)".to_string(), default_mhz)).chain(list) {
                match c.plan_set(v) {
                    Ok(w) => eprintln!(
                        "powerperf: dry-run: {n}: would write {}",
                        w.iter()
                            .map(|x| x.to_string())
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                    Err(e) => eprintln!("powerperf: dry-run: {n}: would be refused: {e}"),
                }
            }
        }
        eprintln!("powerperf: dry-run: the command runs without the controller socket");
        if args.command.is_empty() {
            return Ok(0);
        }
        return apply::run_child_as(&args.command, &env, &sig, run_as.as_ref());
    }
    if args.command.is_empty() {
        anyhow::bail!(
            "no command given: write it after `--`, e.g. `powerperf apply --plan {} -- ./app`",
            plan_path.display()
        );
    }
    if let Some(sock) = daemon {
        let req = ApplyRequest {
            core_freq_mhz: Some(default_mhz),
            env,
            command: args.command.clone(),
            // no restore record on the client side: the daemon's journal is the only one
            restore_file: PathBuf::new(),
            log_file: log_path(args)?,
            sysfs_root: args.sysfs_root.clone(),
            run_as,
        };
        sum.log = Some(req.log_file.clone());
        sum.env = req.env.clone();
        let (st, what) =
            powerperf_core::dvfs::apply::daemon::apply_regions(&sock, &req, &settings, &sig)?;
        sum.controller = Some(what);
        eprintln!("powerperf: switches logged in {}", req.log_file.display());
        return Ok(st);
    }
    let mut ctl = ctl.with_context(|| {
        format!(
            "no cpufreq controller under {} (fix: run where cpufreq exists, or add --dry-run to see the writes)",
            args.sysfs_root.display()
        )
    })?;
    let req = ApplyRequest {
        core_freq_mhz: Some(default_mhz),
        env,
        command: args.command.clone(),
        restore_file: restore_path(args)?,
        log_file: log_path(args)?,
        sysfs_root: args.sysfs_root.clone(),
        run_as,
    };
    eprintln!("powerperf: {}", ctl.describe());
    sum.controller = Some(ctl.describe());
    sum.log = Some(req.log_file.clone());
    sum.env = req.env.clone();
    let st = apply::apply_regions(
        &mut ctl as &mut dyn FrequencyController,
        &req,
        &settings,
        &sig,
    )?;
    eprintln!(
        "powerperf: original settings restored; switches logged in {}",
        req.log_file.display()
    );
    Ok(st)
}

/// The per-region GPU SM clocks of a job plan whose `core_freq_mhz` is a GPU's and differs
/// between regions; `None` otherwise.
fn gpu_region_settings(plan: &Plan, workload: Option<&str>) -> Option<Vec<(String, f64)>> {
    if workload.is_some()
        || plan.plan.scope != Scope::Job
        || plan.device_of("core_freq_mhz").map(|d| d.kind) != Some(DeviceKind::Gpu)
    {
        return None;
    }
    let list: Vec<(String, f64)> = plan
        .regions
        .iter()
        .filter_map(|r| r.setting.get("core_freq_mhz").map(|v| (r.name.clone(), *v)))
        .collect();
    let first = list.first()?.1;
    list.iter().any(|(_, v)| *v != first).then_some(list)
}

/// `powerperf apply` switching the GPU's SM clock at region boundaries (NVTX ranges and
/// powerperf-rt regions report them on the controller socket, as for CPU clocks): the
/// plan's default and every region's clock are checked before anything changes; the
/// default is locked (even when it is the maximum), each region's clock locked on entry,
/// the enclosing one on exit; the GPU is put back at the end. With `daemon` (a user who is
/// not root), every clock is checked by powerperfd (`check`: the user's gpu.locked_clocks
/// grant and the GPU's list) before anything changes, and each switch is a
/// `set_gpu_locked_clocks` in one daemon session, which the daemon restores.
fn run_gpu_regions(
    args: &ApplyArgs,
    plan: &Plan,
    plan_path: &Path,
    list: Vec<(String, f64)>,
    run_as: Option<RunAs>,
    daemon: Option<PathBuf>,
    sum: &mut Summary,
) -> Result<i32> {
    use powerperf_core::dvfs::gpu_session::{self as gsess, GpuSession};
    use powerperf_node::gpu_control::GpuKnob;
    use powerperf_node::gpu_control::GpuSetting;
    if args.command.is_empty() {
        anyhow::bail!(
            "no command given: write it after `--`, e.g. `powerperf apply --plan {} -- ./app`",
            plan_path.display()
        );
    }
    let dev = plan.device_of("core_freq_mhz");
    let idx = dev.and_then(|d| d.index).unwrap_or(0);
    let default_mhz = dev
        .and_then(|d| d.default.get("core_freq_mhz").copied())
        .context("the plan has no default core_freq_mhz for its GPU (fix: give the plan's [[device]] a default, the clock outside every region, e.g. default = { core_freq_mhz = 1980.0 })")?;
    if let Some(sock) = daemon {
        return gpu_regions_through_daemon(
            args,
            plan,
            plan_path,
            (idx, default_mhz, list),
            run_as,
            &sock,
            sum,
        );
    }
    let ctl = gsess::open_control(args.fake_gpu.as_deref(), &args.sysfs_root)
        .context("nothing was changed and the command did not run")?;
    for (name, mhz) in std::iter::once(("(default)".to_string(), default_mhz)).chain(list.clone()) {
        let s = GpuSetting {
            sm_clock_mhz: Some(mhz),
            ..Default::default()
        };
        gsess::check_setting(ctl.as_ref(), idx, &s).with_context(|| {
            format!("region `{name}`: refused before anything changed; the command did not run")
        })?;
    }
    let req = ApplyRequest {
        core_freq_mhz: Some(default_mhz),
        env: plan_threads_env(plan),
        command: args.command.clone(),
        restore_file: restore_path(args)?,
        log_file: log_path(args)?,
        sysfs_root: args.sysfs_root.clone(),
        run_as,
    };
    eprintln!(
        "powerperf: switching GPU {idx}'s SM clock at region boundaries from {}: default {default_mhz} MHz; {}",
        plan_path.display(),
        list.iter()
            .map(|(n, v)| format!("{n} = {v} MHz"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!("powerperf: {}", ctl.describe());
    sum.controller = Some(ctl.describe());
    sum.log = Some(req.log_file.clone());
    sum.env = req.env.clone();
    let sig = SignalForwarder::install()?;
    let mut g = GpuSession::begin(
        ctl,
        idx,
        &[GpuKnob::LockedClocks],
        &gsess::gpu_record_path(&req.restore_file),
        Some(&req.log_file),
        gsess::GpuOrigin {
            fake_gpu: args.fake_gpu.as_deref(),
            sysfs_root: &args.sysfs_root,
        },
        &req.command,
    )?;
    g.set(&GpuSetting {
        sm_clock_mhz: Some(default_mhz),
        ..Default::default()
    })?;
    let settings = RegionSettings {
        regions: list.into_iter().collect(),
        default_mhz,
    };
    let sock = apply::control_socket(&req)?;
    let st = apply::switch_at_regions(&mut g, sock, &req, &settings, &sig)?;
    eprintln!(
        "powerperf: original GPU settings restored; switches logged in {}",
        req.log_file.display()
    );
    Ok(st)
}

/// `OMP_NUM_THREADS` from the first region's `threads`, for a run that switches the GPU.
fn plan_threads_env(plan: &Plan) -> Vec<(String, String)> {
    plan.regions
        .iter()
        .find_map(|r| r.setting.get("threads").copied())
        .map(|t| {
            vec![(
                "OMP_NUM_THREADS".to_string(),
                format!("{}", t.round() as u64),
            )]
        })
        .unwrap_or_default()
}

/// [`run_gpu_regions`] for a user through powerperfd at `sock`: `gpu` is (index, default
/// clock, per-region clocks).
fn gpu_regions_through_daemon(
    args: &ApplyArgs,
    plan: &Plan,
    plan_path: &Path,
    gpu: (u32, f64, Vec<(String, f64)>),
    run_as: Option<RunAs>,
    sock: &Path,
    sum: &mut Summary,
) -> Result<i32> {
    use powerperf_core::dvfs::apply::daemon_gpu::DaemonGpuSession;
    use powerperf_node::gpu_control::GpuSetting;
    let (idx, default_mhz, list) = gpu;
    let req = ApplyRequest {
        core_freq_mhz: Some(default_mhz),
        env: plan_threads_env(plan),
        command: args.command.clone(),
        // no restore record on the client side: the daemon's journal is the only one
        restore_file: PathBuf::new(),
        log_file: log_path(args)?,
        sysfs_root: args.sysfs_root.clone(),
        run_as,
    };
    let mut d = DaemonGpuSession::connect(sock, idx, Some(&req.log_file))
        .context("nothing was changed and the command did not run")?;
    for (name, mhz) in std::iter::once(("(default)".to_string(), default_mhz)).chain(list.clone()) {
        let s = GpuSetting {
            sm_clock_mhz: Some(mhz),
            ..Default::default()
        };
        d.check(&s).with_context(|| {
            format!(
                "region `{name}`: GPU {idx} SM clock {mhz} MHz refused by {} before anything changed; the command did not run",
                d.describe()
            )
        })?;
    }
    eprintln!(
        "powerperf: switching GPU {idx}'s SM clock at region boundaries from {} through {}: default {default_mhz} MHz; {}",
        plan_path.display(),
        d.describe(),
        list.iter()
            .map(|(n, v)| format!("{n} = {v} MHz"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    sum.controller = Some(d.describe().to_string());
    sum.log = Some(req.log_file.clone());
    sum.env = req.env.clone();
    let sig = SignalForwarder::install()?;
    powerperf_core::dvfs::apply::Switcher::set(&mut d, default_mhz)
        .context("the plan's default GPU clock was not set; the command did not run")?;
    let settings = RegionSettings {
        regions: list.into_iter().collect(),
        default_mhz,
    };
    let csock = apply::control_socket(&req)?;
    let st = apply::switch_at_regions(&mut d, csock, &req, &settings, &sig)?;
    eprintln!("powerperf: switches logged in {}", req.log_file.display());
    Ok(st)
}
