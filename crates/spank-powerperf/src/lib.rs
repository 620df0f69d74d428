//! `spank_powerperf`: powerperf's Slurm SPANK plugin (docs/cluster.md, "Slurm SPANK
//! plugin").
//!
//! plugstack.conf (dist/plugstack.conf.d/powerperf.conf):
//! `required /usr/lib/x86_64-linux-gnu/slurm/spank_powerperf.so socket=/run/powerperf/powerperfd.sock`
//!
//! Options of `srun`:
//! - `--powerperf-plan=PLAN[:WORKLOAD]`: on every node of the step, slurmstepd (root)
//!   connects to powerperfd and says hello on behalf of the job's user and job id
//!   (`init_post_opt`); the plan is read with the job user's credentials (`user_init`,
//!   where slurmstepd has dropped to them) and its setting is sent as powerperfd requests
//!   in that one session, once per step and node, before any task starts. The session is
//!   restored at step end (`exit`), and by powerperfd when slurmstepd dies or the
//!   connection breaks (scancel, a killed step, a crashed slurmstepd).
//! - `--powerperf-collect=DIR`: every task runs as `powerperf collect -o DIR/rank%r -- CMD`
//!   (`task_init`, as the user, just before the exec); `collect` takes the rank from
//!   `SLURM_PROCID` and samples node-wide sources on local rank 0 (`SLURM_LOCALID`) only.
//!
//! Plugin arguments (plugstack.conf): `socket=PATH` (powerperfd's socket, default
//! /run/powerperf/powerperfd.sock) and `powerperf=PATH` (the powerperf binary for
//! `--powerperf-collect`, default `powerperf` in the job's PATH).

use anyhow::{bail, Context as _, Result};
use powerperf_node::daemon::client::Client;
use powerperf_node::daemon::{OnBehalf, DEFAULT_SOCKET};
use slurm_spank::{Context, Plugin, SpankHandle, SpankOption};
use std::error::Error;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/plugin.rs"));

/// The option names (`srun --powerperf-plan`, `--powerperf-collect`).
pub const OPT_PLAN: &str = "powerperf-plan";
pub const OPT_COLLECT: &str = "powerperf-collect";
/// The largest plan file read, bytes (plans written by `powerperf plan` are a few KiB).
pub const MAX_PLAN_BYTES: u64 = 1 << 20;

/// The plugin's arguments in plugstack.conf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginArgs {
    /// powerperfd's socket.
    pub socket: PathBuf,
    /// The powerperf binary run by `--powerperf-collect` (`None`: `powerperf` in PATH).
    pub powerperf: Option<PathBuf>,
}

/// Parse the plugstack.conf arguments: `socket=PATH`, `powerperf=PATH`.
///
/// # Errors
/// An unknown argument, or an empty or relative path.
pub fn parse_plugin_args<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<PluginArgs> {
    let mut out = PluginArgs {
        socket: PathBuf::from(DEFAULT_SOCKET),
        powerperf: None,
    };
    for a in args {
        let (k, v) = a.split_once('=').with_context(|| {
            format!("plugstack.conf argument `{a}` is not KEY=VALUE (known: socket=PATH, powerperf=PATH)")
        })?;
        let p = PathBuf::from(v);
        if !p.is_absolute() {
            bail!("plugstack.conf argument {k}={v}: the path must be absolute");
        }
        match k {
            "socket" => out.socket = p,
            "powerperf" => out.powerperf = Some(p),
            _ => {
                bail!("unknown plugstack.conf argument `{a}` (known: socket=PATH, powerperf=PATH)")
            }
        }
    }
    Ok(out)
}

/// `--powerperf-plan=PLAN[:WORKLOAD]`: the plan path and the workload. The last `:`
/// separates WORKLOAD when what follows it has no `/`.
///
/// # Errors
/// An empty plan path or an empty WORKLOAD.
pub fn parse_plan_option(v: &OsStr) -> Result<(PathBuf, Option<String>)> {
    let bytes = v.as_bytes();
    let (path, workload) = match bytes.iter().rposition(|&b| b == b':') {
        Some(i) if !bytes[i + 1..].contains(&b'/') => {
            let w = std::str::from_utf8(&bytes[i + 1..])
                .ok()
                .filter(|w| !w.is_empty())
                .with_context(|| {
                    format!(
                        "--{OPT_PLAN}={}: the WORKLOAD after `:` is empty or not UTF-8",
                        v.to_string_lossy()
                    )
                })?;
            (&bytes[..i], Some(w.to_string()))
        }
        _ => (bytes, None),
    };
    if path.is_empty() {
        bail!("--{OPT_PLAN} needs a plan file: --{OPT_PLAN}=PLAN[:WORKLOAD]");
    }
    Ok((PathBuf::from(OsStr::from_bytes(path)), workload))
}

/// Read a plan file with this process's credentials: not through a symbolic link (the last
/// component), a regular file, at most [`MAX_PLAN_BYTES`].
///
/// # Errors
/// The file cannot be opened by this user, is a link, not a regular file, too large, or
/// not a plan.
pub fn read_plan(path: &Path) -> Result<powerperf_node::plan_file::Plan> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                anyhow::anyhow!(
                    "plan {}: a symbolic link; name the file itself",
                    path.display()
                )
            } else {
                anyhow::anyhow!("cannot read the plan {}: {e}", path.display())
            }
        })?;
    let md = f.metadata()?;
    if !md.is_file() {
        bail!("plan {}: not a regular file", path.display());
    }
    if md.len() > MAX_PLAN_BYTES {
        bail!(
            "plan {}: {} bytes, more than the {MAX_PLAN_BYTES} a plan may have",
            path.display(),
            md.len()
        );
    }
    let mut text = String::new();
    f.take(MAX_PLAN_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read the plan {}", path.display()))?;
    if text.len() as u64 > MAX_PLAN_BYTES {
        bail!(
            "plan {}: grew past {MAX_PLAN_BYTES} bytes while read",
            path.display()
        );
    }
    powerperf_node::plan_file::Plan::from_toml(&text)
        .map_err(|m| anyhow::anyhow!("plan {}: {m}", path.display()))
}

/// The plan's setting for `workload`, as `powerperf apply` chooses it, with the plugin's
/// option named in the error.
///
/// # Errors
/// As [`read_plan`] and `static_setting`.
pub fn plan_setting(
    path: &Path,
    workload: Option<&str>,
) -> Result<powerperf_node::static_setting::StaticSetting> {
    let plan = read_plan(path)?;
    powerperf_node::static_setting::static_setting(&plan, workload, path).map_err(|e| {
        anyhow::anyhow!(
            "{e:#} (with the plugin: --{OPT_PLAN}={}:WORKLOAD)",
            path.display()
        )
    })
}

/// The command a `--powerperf-collect=DIR` task runs instead of `argv`.
pub fn collect_argv(powerperf: &OsStr, dir: &OsStr, argv: &[&OsStr]) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec![powerperf.into(), "collect".into(), "-o".into()];
    let mut o = dir.to_os_string();
    o.push("/rank%r");
    out.push(o);
    out.push("--".into());
    out.extend(argv.iter().map(|a| a.to_os_string()));
    out
}

/// The plugin's state in one process (srun, or one slurmstepd).
#[derive(Default)]
pub struct SpankPowerperf {
    args: Option<PluginArgs>,
    /// The powerperfd session of this step on this node (slurmstepd only).
    client: Option<Client>,
    /// Why `--powerperf-plan` could not be applied in slurmstepd (logged when it happened):
    /// every task then fails in `task_init`, before its command runs. (Slurm 22.05's srun
    /// exits 0 when a step's launch fails in a plugin's `init_post_opt` or `user_init`; a
    /// task that fails gives srun a non-zero exit.)
    failed: Option<String>,
}

impl SpankPowerperf {
    fn args(&self) -> Result<&PluginArgs> {
        self.args
            .as_ref()
            .context("the plugin's arguments were not parsed (slurm_spank_init did not run)")
    }

    fn plan_option(spank: &SpankHandle) -> Result<Option<(PathBuf, Option<String>)>> {
        match spank.get_option_value_os(OPT_PLAN) {
            Some(v) => parse_plan_option(&v).map(Some),
            None => Ok(None),
        }
    }

    fn collect_option(spank: &SpankHandle) -> Result<Option<OsString>> {
        match spank.get_option_value_os(OPT_COLLECT) {
            Some(v) if v.is_empty() => {
                bail!("--{OPT_COLLECT} needs a directory: --{OPT_COLLECT}=DIR")
            }
            Some(v) => Ok(Some(v.into_owned())),
            None => Ok(None),
        }
    }

    /// Remember and log why the plan is not in place; the tasks fail in `task_init`.
    fn fail(&mut self, e: anyhow::Error) {
        let why = format!("{e:#}");
        slurm_spank::spank_log_error!("powerperf: {why}");
        self.failed = Some(why);
    }

    /// slurmstepd: the session on behalf of the job's user and job id.
    fn connect(&mut self, spank: &SpankHandle) -> Result<()> {
        let uid = spank.job_uid()?;
        let job = spank.job_id()?;
        let socket = self.args()?.socket.clone();
        let c = Client::connect_with(
            &socket,
            Some(OnBehalf {
                uid,
                job: Some(job.to_string()),
            }),
        )
        .with_context(|| format!("--{OPT_PLAN}: no powerperfd session for job {job}"))?;
        self.client = Some(c);
        Ok(())
    }

    /// slurmstepd, with the job user's effective uid: read the plan and set it.
    fn apply(
        &mut self,
        spank: &mut SpankHandle,
        path: &Path,
        workload: Option<&str>,
    ) -> Result<()> {
        let uid = spank.job_uid()?;
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid != uid {
            bail!("--{OPT_PLAN}: user_init runs with uid {euid}, not the job's uid {uid}: the plan is read only with the job user's credentials");
        }
        let setting = plan_setting(path, workload)?;
        let (reqs, notes) = setting.daemon_requests();
        let client = self
            .client
            .as_mut()
            .context("no powerperfd session (init_post_opt did not connect)")?;
        for n in setting.notes.iter().chain(&notes) {
            slurm_spank::spank_log_info!("powerperf: {n}");
        }
        for r in &reqs {
            let resp = client.request(r).with_context(|| {
                format!(
                    "--{OPT_PLAN}: the setting of `{}` from {} was refused; the step does not run",
                    setting.region,
                    path.display()
                )
            })?;
            for w in &resp.writes {
                slurm_spank::spank_log_info!("powerperf: session {:?}: {w}", client.session);
            }
        }
        for (k, v) in &setting.env {
            spank.setenv(k, v, true)?;
        }
        slurm_spank::spank_log_info!(
            "powerperf: `{}` from {} set through powerperfd (session {:?}) for job {}",
            setting.region,
            path.display(),
            client.session,
            spank.job_id()?
        );
        Ok(())
    }
}

unsafe impl Plugin for SpankPowerperf {
    fn init(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        let argv = spank.plugin_argv()?;
        self.args = Some(parse_plugin_args(argv)?);
        if matches!(spank.context()?, Context::Local | Context::Remote) {
            spank.register_option(
                SpankOption::new(OPT_PLAN)
                    .takes_value("PLAN[:WORKLOAD]")
                    .usage("Apply the plan's setting (powerperf plan) on every node of the step through powerperfd; restored at step end"),
            )?;
            spank.register_option(
                SpankOption::new(OPT_COLLECT)
                    .takes_value("DIR")
                    .usage("Run every task under `powerperf collect -o DIR/rank%r`"),
            )?;
        }
        Ok(())
    }

    fn init_post_opt(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        let plan = Self::plan_option(spank)?;
        Self::collect_option(spank)?;
        match (spank.context()?, plan) {
            // srun, as the user: a bad plan stops the step before it is launched
            (Context::Local, Some((path, w))) => {
                plan_setting(&path, w.as_deref())?;
            }
            (Context::Remote, Some(_)) => {
                if let Err(e) = self.connect(spank) {
                    self.fail(e);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn user_init(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        if self.failed.is_some() {
            return Ok(());
        }
        if let Some((path, w)) = Self::plan_option(spank)? {
            if let Err(e) = self.apply(spank, &path, w.as_deref()) {
                self.fail(e);
            }
        }
        Ok(())
    }

    fn task_init_privileged(&mut self, _spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        // A task is a fork of slurmstepd: close its copies of the session's descriptors
        // (they are close-on-exec anyway), so that only slurmstepd holds the session and
        // powerperfd restores as soon as slurmstepd ends, even before a task has exec'd.
        drop(self.client.take());
        Ok(())
    }

    fn task_init(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        use std::os::unix::process::CommandExt as _;
        if let Some(why) = &self.failed {
            return Err(format!("the task does not run: {why}").into());
        }
        let Some(dir) = Self::collect_option(spank)? else {
            return Ok(());
        };
        let powerperf = self
            .args()?
            .powerperf
            .clone()
            .map(PathBuf::into_os_string)
            .unwrap_or_else(|| "powerperf".into());
        let argv = spank.job_argv_os()?;
        if argv.is_empty() {
            return Err(format!("--{OPT_COLLECT}: the task has no command").into());
        }
        let cmd = collect_argv(&powerperf, &dir, &argv);
        let mut c = std::process::Command::new(&cmd[0]);
        c.args(&cmd[1..]).env_clear();
        for kv in spank.job_env_os()? {
            let b = kv.as_bytes();
            if let Some(i) = b.iter().position(|&x| x == b'=').filter(|&i| i > 0) {
                c.env(OsStr::from_bytes(&b[..i]), OsStr::from_bytes(&b[i + 1..]));
            }
        }
        // only returns on failure
        let e = c.exec();
        Err(format!(
            "--{OPT_COLLECT}: cannot run {} ({e}); name it with powerperf=PATH in plugstack.conf",
            powerperf.to_string_lossy()
        )
        .into())
    }

    fn exit(&mut self, _spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        if let Some(mut c) = self.client.take() {
            let r = c.restore().context(
                "the restore through powerperfd failed; powerperfd restores the session itself when slurmstepd closes it",
            )?;
            slurm_spank::spank_log_info!(
                "powerperf: session {:?} restored by powerperfd ({} write(s))",
                c.session,
                r.writes.len()
            );
        }
        Ok(())
    }

    fn report_error(&self, error: &dyn Error) {
        let mut report = error.to_string();
        let mut e = error;
        while let Some(s) = e.source() {
            report.push_str(&format!(": {s}"));
            e = s;
        }
        slurm_spank::spank_log_error!("powerperf: {report}");
    }

    fn setup(&self, _spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        // the crate's default subscriber logs every callback at debug level into slurmd's
        // log; this plugin logs through spank_log_* itself
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_arguments() {
        let a = parse_plugin_args(["socket=/run/x.sock", "powerperf=/usr/bin/powerperf"]).unwrap();
        assert_eq!(a.socket, PathBuf::from("/run/x.sock"));
        assert_eq!(a.powerperf, Some(PathBuf::from("/usr/bin/powerperf")));
        assert_eq!(
            parse_plugin_args([]).unwrap().socket,
            PathBuf::from(DEFAULT_SOCKET)
        );
        for bad in ["sock=/x", "socket", "socket=rel/x", "powerperf="] {
            assert!(parse_plugin_args([bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn plan_option() {
        let p = |s: &str| parse_plan_option(OsStr::new(s));
        assert_eq!(p("/p/plan.toml").unwrap(), ("/p/plan.toml".into(), None));
        assert_eq!(
            p("/p/plan.toml:dgemm").unwrap(),
            ("/p/plan.toml".into(), Some("dgemm".into()))
        );
        assert_eq!(
            p("/a:b/plan.toml").unwrap(),
            ("/a:b/plan.toml".into(), None)
        );
        assert!(p("/p/plan.toml:").is_err());
        assert!(p(":dgemm").is_err());
        assert!(p("").is_err());
    }

    #[test]
    fn collect_command() {
        let c = collect_argv(
            OsStr::new("/usr/bin/powerperf"),
            OsStr::new("/scratch/job"),
            &[OsStr::new("./app"), OsStr::new("-n")],
        );
        assert_eq!(
            c,
            [
                "/usr/bin/powerperf",
                "collect",
                "-o",
                "/scratch/job/rank%r",
                "--",
                "./app",
                "-n"
            ]
            .map(OsString::from)
        );
    }

    #[test]
    fn plans_are_read_without_links_and_with_a_bound() {
        let d = tempfile::tempdir().unwrap();
        let plan =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/plans/cpu-static.toml");
        let f = d.path().join("plan.toml");
        std::fs::copy(&plan, &f).unwrap();
        let s = plan_setting(&f, None).unwrap();
        assert_eq!(s.core_mhz, Some(1600.0));
        let l = d.path().join("link.toml");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        let e = read_plan(&l).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let big = d.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_PLAN_BYTES as usize + 1]).unwrap();
        let e = read_plan(&big).unwrap_err().to_string();
        assert!(e.contains("more than"), "{e}");
        let e = read_plan(d.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = plan_setting(&f, Some("nope")).unwrap_err().to_string();
        assert!(e.contains("--powerperf-plan=") && e.contains("fma"), "{e}");
    }
}
