//! `powerperf report JOB` on a job directory another user filled (issue 38, finding 5;
//! docs/security.md): uid 65534 plants, through setpriv, a 6 GB sparse run.toml, a FIFO, a
//! symbolic link to /etc/shadow and a shard that repeats one event, among good shards; root
//! reports. Every bad file is named with why, the others are reported, the status is 1,
//! nothing hangs and memory stays small. Prints `skipped: …` when not root.

mod common;

use common::NOBODY;
use powerperf_format::run::RunMeta;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run `cmd` with stdout and stderr to files in `dir`; kill it after `limit`. Returns the
/// exit code (`None`: killed), stdout, stderr and the peak resident memory, KiB (wait4).
fn run_bounded(
    mut cmd: Command,
    dir: &Path,
    limit: Duration,
) -> (Option<i32>, String, String, i64) {
    let (o, e) = (dir.join("stdout"), dir.join("stderr"));
    cmd.stdout(Stdio::from(std::fs::File::create(&o).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&e).unwrap()))
        .stdin(Stdio::null());
    let child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let t = Instant::now();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut killed = false;
    loop {
        // SAFETY: wait4 on our own child, with valid pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            break;
        }
        if t.elapsed() > limit && !killed {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::mem::forget(child);
    let code = (!killed && libc::WIFEXITED(status)).then(|| libc::WEXITSTATUS(status));
    (
        code,
        std::fs::read_to_string(&o).unwrap_or_default(),
        std::fs::read_to_string(&e).unwrap_or_default(),
        ru.ru_maxrss,
    )
}

fn report(bin: &Path, args: &[&str], job: &Path) -> Command {
    let mut c = Command::new(bin);
    c.arg("report").args(args).arg(job);
    c
}

#[test]
fn report_of_a_hostile_job_directory_names_each_bad_file_and_reports_the_others() {
    if !common::root_with_setpriv("report of a hostile job directory") {
        return;
    }
    let dir = common::shared_tempdir();
    let bin = common::world_readable_bin(dir.path());
    // a real run, the template of the shards
    let root = dir.path().join("sysfs");
    common::copy_tree(
        &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs/rapl-wrap"),
        &root,
    );
    let template = dir.path().join("template");
    let o = Command::new(&bin)
        .args(["collect", "-q", "--nvml", "off", "--sysfs-root"])
        .arg(&root)
        .arg("-o")
        .arg(&template)
        .args(["--", "true"])
        .env_remove("OMPI_COMM_WORLD_LOCAL_RANK")
        .env_remove("SLURM_LOCALID")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = RunMeta::read(&template).unwrap();
    let job = common::dir_owned_by_nobody(dir.path(), "job");
    for r in 0..2u32 {
        let mut m = t.clone();
        m.run.rank = Some(r);
        let d = job.join(format!("rank{r}"));
        std::fs::create_dir_all(&d).unwrap();
        m.write(&d).unwrap();
    }
    // one shard repeats its first event 1000 times
    let mut m = t.clone();
    m.run.rank = Some(5);
    let e0 = m.events.iter().find(|e| e.total.is_some()).unwrap().clone();
    m.events.extend(std::iter::repeat_n(e0, 1000));
    let d = job.join("rank5");
    std::fs::create_dir_all(&d).unwrap();
    m.write(&d).unwrap();
    // uid 65534 plants the others
    common::sh_as_nobody(&format!(
        "cd {0} && mkdir rank2 rank3 rank4 && mkfifo rank2/run.toml \
         && ln -s /etc/shadow rank3/run.toml && truncate -s 6G rank4/run.toml",
        job.display()
    ));

    let (code, out, err, rss_kib) = run_bounded(
        report(&bin, &["--format", "json"], &job),
        dir.path(),
        Duration::from_secs(60),
    );
    println!("report of the job: exit {code:?}, peak RSS {rss_kib} KiB\n{err}");
    assert_eq!(code, Some(1), "{err}");
    assert!(rss_kib < 1 << 20, "peak RSS {rss_kib} KiB");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let shards: Vec<&str> = v["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        shards.len() == 2 && shards[0].ends_with("rank0") && shards[1].ends_with("rank1"),
        "{shards:?}"
    );
    // each event over the two good shards: two ranks, not 1002
    for e in v["events"].as_array().unwrap() {
        assert_eq!(e["ranks"], 2, "{e}");
    }
    let bad: Vec<(String, String)> = v["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["shard"].as_str().unwrap().to_string(),
                u["error"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (shard, why) in [
        ("rank2", "a FIFO"),
        ("rank3", "symbolic link"),
        ("rank4", "6442450944 bytes"),
        ("rank5", "listed 1001 times"),
    ] {
        let e = bad
            .iter()
            .find(|(s, _)| s.ends_with(shard))
            .unwrap_or_else(|| panic!("{shard} is not named: {bad:?}"));
        assert!(
            e.1.contains(why) && e.1.contains("run.toml"),
            "{shard}: {}",
            e.1
        );
        assert!(err.contains(shard), "{err}");
    }
    assert_eq!(bad.len(), 4, "{bad:?}");
    assert!(!err.contains("root:"), "{err}");

    // each bad shard reported alone: a clear error at once, no hang, little memory
    for (shard, why) in [
        ("rank2", "a FIFO"),
        ("rank3", "symbolic link"),
        ("rank4", "more than the"),
    ] {
        let (code, _, err, rss_kib) = run_bounded(
            report(&bin, &[], &job.join(shard)),
            dir.path(),
            Duration::from_secs(30),
        );
        assert!(code.is_some_and(|c| c != 0), "{shard}: {code:?} {err}");
        assert!(err.contains(why), "{shard}: {err}");
        assert!(rss_kib < 1 << 20, "{shard}: peak RSS {rss_kib} KiB");
    }
    // and as the user who planted them
    let mut c = common::as_nobody(&bin);
    c.arg("report").arg(job.join("rank2"));
    let (code, _, err, _) = run_bounded(c, dir.path(), Duration::from_secs(30));
    assert!(
        code.is_some_and(|c| c != 0) && err.contains("a FIFO"),
        "{code:?} {err}"
    );
    let _ = NOBODY;
}
