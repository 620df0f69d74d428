//! The Slurm SPANK plugin (crates/spank-powerperf, docs/cluster.md) in a real single-node
//! Slurm (Debian's slurmctld, slurmd, munge; issue 23): the test, as root, starts munged,
//! slurmctld and slurmd with a private configuration, socket, ports and state directory,
//! and powerperfd on a copy of the cpufreq fixture tree (tests/common/daemon.rs); then, as
//! `nobody`, runs `srun -n 2 --powerperf-plan=…` (the setting is in place inside the step and
//! restored after it, after `scancel`, and after slurmstepd is killed), a refused plan (srun
//! fails with the daemon's reason), `srun -n 2 --powerperf-collect=DIR`, and
//! `srun -n 2 powerperf collect -o DIR/rank%r` without the plugin's options. Prints
//! `skipped: …` when not root or when a Slurm or munge program is missing.
//!
//! The plugin's added step-launch time: `cargo test --test slurm_spank -- --ignored
//! --nocapture launch_time` (docs/cluster.md has the numbers).

mod common;

use common::daemon::{World, CPUFREQ};
use common::NOBODY;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const GRANT: &str = r#"
[[grant]]
name = "slurm-users"
users = ["nobody"]
read = ["energy"]
write = ["cpu.core_freq"]
[grant.ranges]
"cpu.core_freq" = [1200, 2000]
"#;

const PROGRAMS: [&str; 7] = [
    "munged",
    "slurmctld",
    "slurmd",
    "srun",
    "sinfo",
    "scancel",
    "squeue",
];

/// The plugin built by this test's `cargo test` (a dev-dependency of the powerperf
/// package): target/<profile>/deps, or target/<profile> after `cargo build`.
fn plugin_src() -> Option<PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent()?.to_path_buf();
    let profile = deps.parent()?.to_path_buf();
    [profile, deps]
        .into_iter()
        .map(|d| d.join("libspank_powerperf.so"))
        .find(|p| p.is_file())
}

fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

fn short_hostname() -> String {
    let o = Command::new("hostname").arg("-s").output().unwrap();
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// munged, slurmctld and slurmd of one test, killed on drop (also when the test fails).
struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
    plugstack: PathBuf,
    children: Vec<(String, Child)>,
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for (_, c) in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Slurm {
    /// Start everything in `dir` (a 0755 directory of the test's [`World`]), with the
    /// plugin (copied into `dir`) configured for powerperfd's `socket`.
    fn start(dir: &Path, plugin: &Path, socket: &Path, powerperf: &Path) -> Slurm {
        use std::os::unix::fs::PermissionsExt;
        let host = short_hostname();
        for d in ["state", "spool", "log", "munge"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let so = dir.join("spank_powerperf.so");
        std::fs::copy(plugin, &so).unwrap();
        std::fs::set_permissions(&so, std::fs::Permissions::from_mode(0o755)).unwrap();
        // munged runs as munge with its own socket (0755 directory owned by munge)
        let munge = dir.join("munge");
        let out = Command::new("chown")
            .args(["munge:munge"])
            .arg(&munge)
            .output()
            .unwrap();
        assert!(out.status.success(), "chown munge: {out:?}");
        let msock = munge.join("munge.sock");
        let plugstack = dir.join("plugstack.conf");
        let mut s = Slurm {
            dir: dir.to_path_buf(),
            conf: dir.join("slurm.conf"),
            plugstack: plugstack.clone(),
            children: Vec::new(),
        };
        s.set_plugstack(Some(&format!(
            "required {} socket={} powerperf={}",
            so.display(),
            socket.display(),
            powerperf.display()
        )));
        let log = |name: &str| std::fs::File::create(dir.join("log").join(name)).unwrap();
        let m = Command::new("setpriv")
            .args([
                "--reuid=munge",
                "--regid=munge",
                "--init-groups",
                "munged",
                "-F",
            ])
            .arg(format!("--socket={}", msock.display()))
            .arg("--key-file=/etc/munge/munge.key")
            .arg(format!("--log-file={}", munge.join("munged.log").display()))
            .arg(format!("--pid-file={}", munge.join("munged.pid").display()))
            .arg(format!(
                "--seed-file={}",
                munge.join("munged.seed").display()
            ))
            .stdout(Stdio::null())
            .stderr(log("munged.out"))
            .spawn()
            .unwrap();
        s.children.push(("munged".into(), m));
        s.wait_until("munged's socket", Duration::from_secs(10), || {
            msock.exists()
        });
        let conf = format!(
            "ClusterName=powerperf\nSlurmctldHost={host}\nSlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nAuthInfo=socket={msock}\nCredType=cred/munge\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
             SlurmctldPort={p1}\nSlurmdPort={p2}\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nMpiDefault=none\n\
             ReturnToService=2\nPlugStackConfig={ps}\nSlurmdDebug=verbose\n\
             KillWait=2\nInactiveLimit=0\n\
             NodeName={host} CPUs=2 State=UNKNOWN\n\
             PartitionName=pp Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
            msock = msock.display(),
            d = dir.display(),
            p1 = common::free_port(),
            p2 = common::free_port(),
            ps = plugstack.display(),
        );
        std::fs::write(&s.conf, conf).unwrap();
        for (name, prog) in [("slurmctld", "slurmctld"), ("slurmd", "slurmd")] {
            let c = Command::new(prog)
                .arg("-D")
                .arg("-f")
                .arg(&s.conf)
                .stdout(Stdio::null())
                .stderr(log(&format!("{name}.out")))
                .spawn()
                .unwrap();
            s.children.push((name.into(), c));
        }
        let t = Instant::now();
        loop {
            let o = s.client("sinfo").args(["-h", "-o", "%t"]).output().unwrap();
            let st = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if st == "idle" {
                break;
            }
            for (name, c) in s.children.iter_mut() {
                if let Some(st) = c.try_wait().unwrap() {
                    panic!("{name} exited ({st}): {}", s_logs(dir));
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(40),
                "the node is not idle (sinfo: {st:?}): {}",
                s_logs(dir)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        s
    }

    /// plugstack.conf with `line` (or empty); srun and slurmstepd read it at every step.
    fn set_plugstack(&mut self, line: Option<&str>) {
        std::fs::write(
            &self.plugstack,
            line.map(|l| format!("{l}\n")).unwrap_or_default(),
        )
        .unwrap();
    }

    /// A Slurm client command as root.
    fn client(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        self.slurm_env(&mut c);
        c
    }

    /// A Slurm client command as `nobody`, from the test's directory.
    fn as_nobody(&self, prog: &str) -> Command {
        let mut c = common::as_nobody(prog);
        self.slurm_env(&mut c);
        c.env_remove(powerperf_node::daemon::ENV_DAEMON)
            .current_dir(&self.dir);
        c
    }

    /// This test's Slurm only: SLURM_CONF, and none of the SLURM_* variables of a job
    /// the tests may run in (srun would join that job's allocation).
    fn slurm_env(&self, c: &mut Command) {
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("SLURM_") {
                c.env_remove(k);
            }
        }
        c.env("SLURM_CONF", &self.conf);
    }

    fn wait_until(&self, what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(
                t.elapsed() < limit,
                "timed out waiting for {what}: {}",
                s_logs(&self.dir)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// No job left in the queue.
    fn wait_idle(&self) {
        self.wait_until("an empty queue", Duration::from_secs(30), || {
            let o = self.client("squeue").arg("-h").output().unwrap();
            o.stdout.is_empty()
        });
    }
}

/// A command started in its own process group (srun forks a second srun), killed with
/// everything in the group on drop, also when the test fails.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        common::daemon::kill_group(&mut self.0);
    }
}

fn s_logs(dir: &Path) -> String {
    let mut s = String::new();
    for f in ["slurmctld.out", "slurmd.out", "slurmd.log", "munged.out"] {
        let t = std::fs::read_to_string(dir.join("log").join(f)).unwrap_or_default();
        let tail: Vec<&str> = t.lines().rev().take(15).collect();
        s.push_str(&format!("\n--- {f}:\n"));
        for l in tail.into_iter().rev() {
            s.push_str(l);
            s.push('\n');
        }
    }
    s
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every cpufreq file of both CPUs, for before/after comparisons, but scaling_setspeed: a
/// restore puts the governor back and leaves scaling_setspeed (which the kernel shows as
/// `<unsupported>` under any governor but userspace) as it was (tests/daemon.rs).
fn cpufreq_snapshot(w: &World) -> Vec<(PathBuf, String)> {
    let mut v = Vec::new();
    for cpu in [0, 1] {
        let d = w.root.join(format!("{CPUFREQ}/cpu{cpu}/cpufreq"));
        let mut files: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files
            .into_iter()
            .filter(|f| !f.ends_with("scaling_setspeed"))
        {
            let t = std::fs::read_to_string(&f).unwrap();
            v.push((f, t));
        }
    }
    v
}

/// The world: powerperfd on the fixture tree and a running Slurm; `None` (after printing
/// `skipped: …`) when this cannot run here.
fn setup(test: &str) -> Option<(World, Slurm)> {
    if let Some(p) = PROGRAMS.iter().find(|p| which(p).is_none()) {
        println!("skipped: {test}: `{p}` is not installed (Debian: apt-get install slurmctld slurmd slurm-client munge)");
        return None;
    }
    if !Path::new("/etc/munge/munge.key").exists() {
        println!("skipped: {test}: /etc/munge/munge.key is missing (the munge package creates it; `mungekey -c` makes one)");
        return None;
    }
    let Some(plugin) = plugin_src() else {
        println!("skipped: {test}: libspank_powerperf.so was not built (cargo test builds it: crates/spank-powerperf is a dev-dependency)");
        return None;
    };
    let mut w = World::new(test, GRANT)?;
    w.start();
    let slurm = Slurm::start(w.dir.path(), &plugin, &w.socket, &w.bin);
    Some((w, slurm))
}

/// A job script run by each task: the cpufreq files it sees, one `name=value` per line.
fn show_cpufreq(w: &World) -> String {
    let d = w.root.join(CPUFREQ);
    format!(
        "echo rank=$SLURM_PROCID gov0=$(cat {d}/cpu0/cpufreq/scaling_governor) set0=$(cat {d}/cpu0/cpufreq/scaling_setspeed) gov1=$(cat {d}/cpu1/cpufreq/scaling_governor) set1=$(cat {d}/cpu1/cpufreq/scaling_setspeed) omp=$OMP_NUM_THREADS",
        d = d.display()
    )
}

/// Bad `--powerperf-plan` arguments (a setting the daemon refuses, an unknown workload, a
/// missing file, none): srun fails with the reason, the command does not run, and the
/// CPUs are as `restored` wants them.
fn srun_refuses_bad_plans(w: &World, slurm: &Slurm, plan: &Path, restored: &dyn Fn() -> bool) {
    let refused = w.plan(1400.0);
    let bad = [
        (format!("{}", refused.display()), "1400 MHz is outside"),
        (
            format!("{}:nope", plan.display()),
            "no region or workload `nope`",
        ),
        (
            format!("{}/missing.toml", w.dir.path().display()),
            "cannot read the plan",
        ),
        (String::new(), "needs a plan file"),
    ];
    for (arg, why) in bad {
        let o = slurm
            .as_nobody("srun")
            .args(["-n", "2"])
            .arg(format!("--powerperf-plan={arg}"))
            .args(["echo", "the-command-ran"])
            .output()
            .unwrap();
        let t = text(&o);
        assert!(!o.status.success(), "{arg}: {t}");
        assert!(t.contains(why), "{arg}: no `{why}` in {t}");
        assert!(!t.contains("the-command-ran"), "{arg}: {t}");
        slurm.wait_idle();
        assert!(restored(), "{arg}");
    }
}

#[test]
fn srun_with_the_plugin_applies_restores_and_collects() {
    let Some((w, mut slurm)) = setup("srun with the powerperf SPANK plugin") else {
        return;
    };
    let before = cpufreq_snapshot(&w);
    let restored = || cpufreq_snapshot(&w) == before;

    // --powerperf-plan: in place in both tasks, restored after the step
    let plan = w.plan(1600.0);
    let o = slurm
        .as_nobody("srun")
        .args(["-n", "2"])
        .arg(format!("--powerperf-plan={}", plan.display()))
        .args(["sh", "-c", &show_cpufreq(&w)])
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}{}", s_logs(&slurm.dir));
    for r in [0, 1] {
        assert!(
            out.contains(&format!(
                "rank={r} gov0=userspace set0=1600000 gov1=userspace set1=1600000"
            )),
            "rank {r} did not see 1600 MHz: {out}"
        );
    }
    slurm.wait_idle();
    w.wait_for("the restore after the step", restored);
    let log = w.log_text();
    assert!(
        log.contains("as_uid=65534") && log.contains("job=\""),
        "the daemon did not act on behalf of the job's user and job id: {log}"
    );

    // PLAN:WORKLOAD, relative to the step's working directory; `threads` in the tasks'
    // environment
    let threads = w.dir.path().join("plan-threads.toml");
    let t = std::fs::read_to_string(w.plan(2000.0)).unwrap();
    let t = t.replace(
        "core_freq_mhz = 2000.0",
        "core_freq_mhz = 2000.0\nthreads = 3.0",
    );
    std::fs::write(&threads, t).unwrap();
    let o = slurm
        .as_nobody("srun")
        .args(["-n", "2", "--powerperf-plan=plan-threads.toml:fma"])
        .args(["sh", "-c", &show_cpufreq(&w)])
        .output()
        .unwrap();
    assert!(
        o.status.success()
            && text(&o).contains("gov0=userspace set0=2000000 gov1=userspace set1=2000000 omp=3"),
        "{}",
        text(&o)
    );
    slurm.wait_idle();
    w.wait_for("the restore after the step", restored);

    // bad input: srun fails with the reason, the command does not run, nothing changes
    srun_refuses_bad_plans(&w, &slurm, &plan, &restored);

    // --powerperf-collect=DIR: a shard per rank, node-wide sources on local rank 0 only
    let shards = common::dir_owned_by_nobody(w.dir.path(), "shards");
    let job = shards.join("plugin");
    let o = slurm
        .as_nobody("srun")
        .args(["-n", "2"])
        .arg(format!("--powerperf-collect={}", job.display()))
        .args(["sh", "-c", "echo rank $SLURM_PROCID"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    check_shards(&job);
    slurm.wait_idle();

    // srun without the plugin's options: `powerperf collect -o DIR/rank%r` in each task
    let job = shards.join("srun");
    let o = slurm
        .as_nobody("srun")
        .args(["-n", "2"])
        .arg(&w.bin)
        .args(["collect", "-q", "-o"])
        .arg(format!("{}/rank%r", job.display()))
        .args(["--", "sh", "-c", "echo rank $SLURM_PROCID"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    check_shards(&job);
    slurm.wait_idle();

    // a plugstack.conf argument the plugin does not know: every step fails, saying why
    let line = std::fs::read_to_string(&slurm.plugstack).unwrap();
    slurm.set_plugstack(Some(&format!("{} sockett=/x", line.trim())));
    let o = slurm
        .as_nobody("srun")
        .args(["-n", "1", "true"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("unknown plugstack.conf argument `sockett=/x`"),
        "{}",
        text(&o)
    );
    slurm.set_plugstack(Some(line.trim()));
    slurm.wait_idle();

    // scancel of a running step: restored
    let mut srun = Group(
        slurm
            .as_nobody("srun")
            .args(["-n", "2"])
            .arg(format!("--powerperf-plan={}", plan.display()))
            .args(["sleep", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let gov = || w.read(0, "scaling_governor");
    w.wait_for("the plan in place", || gov() == "userspace");
    let o = slurm
        .as_nobody("scancel")
        .args(["-u", "nobody"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    w.wait_for("the restore after scancel", restored);
    let _ = srun.0.wait();
    drop(srun);
    slurm.wait_idle();

    // slurmstepd killed (SIGKILL, no exit callback): powerperfd restores when its session's
    // connection closes
    let srun = Group(
        slurm
            .as_nobody("srun")
            .args(["-n", "2"])
            .arg(format!("--powerperf-plan={}", plan.display()))
            .arg("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ >> {}/tasks.pid; exec sleep 60",
                shards.display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let pidfile = shards.join("tasks.pid");
    w.wait_for("both tasks running", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|t| t.lines().count() == 2)
    });
    assert_eq!(gov(), "userspace");
    let log = w.log_text();
    let stepd: i32 = log
        .lines()
        .rev()
        .find(|l| l.contains("control=\"cpu.core_freq\"") && l.contains(" set "))
        .and_then(|l| l.split(" pid=").nth(1))
        .and_then(|p| p.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no session pid in the daemon's log: {log}"));
    let comm = std::fs::read_to_string(format!("/proc/{stepd}/comm")).unwrap_or_default();
    assert!(comm.starts_with("slurmstepd"), "pid {stepd} is {comm:?}");
    // SAFETY: kill(2) of the slurmstepd this test's step started.
    let rc = unsafe { libc::kill(stepd, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill {stepd}: {}", std::io::Error::last_os_error());
    // dead: gone, or a zombie (this machine's pid 1 may not reap it)
    w.wait_for("slurmstepd's death", || {
        std::fs::read_to_string(format!("/proc/{stepd}/stat")).map_or(true, |st| {
            st.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    });
    let t = Instant::now();
    while !restored() && t.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if !restored() {
        let ss = Command::new("ss").arg("-xp").output().unwrap();
        let ps = Command::new("ps")
            .args(["-eo", "pid,ppid,stat,args"])
            .output()
            .unwrap();
        panic!(
            "not restored after slurmstepd {stepd} was killed:\n{}\n{}\n{}",
            String::from_utf8_lossy(&ss.stdout),
            String::from_utf8_lossy(&ps.stdout),
            w.log_text()
        );
    }
    // the orphaned tasks and the step: ended by this test
    let pids = std::fs::read_to_string(&pidfile).unwrap_or_default();
    for p in pids
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: kill(2) of a task this test's step started.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    drop(srun);
    assert!(restored());
    drop(slurm);
}

fn check_shards(job: &Path) {
    for r in [0u32, 1] {
        let meta = powerperf_format::run::RunMeta::read(&job.join(format!("rank{r}")))
            .unwrap_or_else(|e| panic!("{}/rank{r}: {e}", job.display()));
        assert_eq!(meta.run.rank, Some(r));
        let second = meta
            .notes
            .iter()
            .any(|n| n.contains("first rank on each node"));
        assert_eq!(second, r == 1, "rank {r}: {:?}", meta.notes);
    }
}

/// The plugin's added step-launch time: the median wall time of `srun -n 2 true` (as
/// `nobody`, N = 20 each) with an empty plugstack.conf, with the plugin configured but
/// not asked for, and with `--powerperf-plan` (daemon session, plan read, one
/// `set_core_freq`, restore).
#[test]
#[ignore = "a measurement: cargo test --test slurm_spank -- --ignored --nocapture launch_time"]
fn launch_time() {
    let Some((w, mut slurm)) = setup("launch_time") else {
        return;
    };
    let n = 20;
    let plan = w.plan(1600.0);
    let line = std::fs::read_to_string(&slurm.plugstack).unwrap();
    let mut rows = Vec::new();
    for (name, plug, opt) in [
        ("no plugin in plugstack.conf", false, false),
        ("plugin, no option", true, false),
        ("plugin, --powerperf-plan", true, true),
    ] {
        slurm.set_plugstack(plug.then_some(line.trim()));
        let mut t = Vec::new();
        for _ in 0..n + 1 {
            let mut c = slurm.as_nobody("srun");
            c.args(["-n", "2"]);
            if opt {
                c.arg(format!("--powerperf-plan={}", plan.display()));
            }
            c.arg("true");
            let s = Instant::now();
            let o = c.output().unwrap();
            t.push(s.elapsed().as_secs_f64() * 1e3);
            assert!(o.status.success(), "{}", text(&o));
            slurm.wait_idle();
        }
        t.remove(0); // the first step of each kind warms the page cache
        t.sort_by(f64::total_cmp);
        rows.push((name, t[n / 2], t[0], t[n - 1]));
    }
    println!("srun -n 2 true, N = {n} (ms): median, min, max");
    for (name, med, min, max) in &rows {
        println!("  {name:<30} {med:8.1} {min:8.1} {max:8.1}");
    }
    println!(
        "added by the plugin: {:.1} ms (loaded), {:.1} ms (--powerperf-plan)",
        rows[1].1 - rows[0].1,
        rows[2].1 - rows[0].1
    );
    let _ = NOBODY;
}
