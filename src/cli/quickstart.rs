//! `powerperf quickstart`: the whole pipeline on a bundled default input, through the same
//! subcommands a user runs (each step prints its command and what it printed).
//!
//! 1. collect a `microbench` workload on this machine at each thread count it has, make a
//!    training set of those runs, fit a thread-count model and predict more threads;
//! 2. where the public datasets are found (`--data`, `POWERPERF_DATA_DIR`,
//!    `../shared/datasets`): import the Titan X and V100 frequency sweeps, fit (leave-one-out
//!    error printed), predict and plan;
//! 3. plan a CPU frequency from the XU3 (ARM) set and apply it with `--dry-run` against the
//!    cpufreq fixture tree shipped in `tests/fixtures/sysfs/cpufreq-userspace`, so the step
//!    runs on a machine without cpufreq.
//!
//! It never reports a measurement this machine cannot make: where a source is missing
//! (RAPL, hardware counters, cpufreq), the step says so.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Arguments of `powerperf quickstart`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  cargo run --release -- quickstart\n  powerperf quickstart --out /tmp/qs --data ../shared/datasets"
)]
pub struct QuickstartArgs {
    /// Working directory for runs, sets, models and plans (recreated).
    #[arg(long, default_value = "powerperf-quickstart")]
    pub out: PathBuf,
    /// Directory holding the public datasets (else POWERPERF_DATA_DIR, else ../shared/datasets).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Do not look for the public datasets (run only the steps this machine can do alone).
    #[arg(long, conflicts_with = "data")]
    pub no_data: bool,
    /// Work per collected run (1.0 ≈ 0.5 s of one core).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Repeats per thread count.
    #[arg(long, default_value_t = 2)]
    pub repeat: usize,
    /// Output format: text (the transcript on stdout) or json (the transcript on stderr, and
    /// on stdout one object with every step, command, exit status and output).
    #[arg(long, value_enum, default_value = "text")]
    pub format: super::import::TextOrJson,
}

/// In `--format json` the human transcript goes to stderr (stdout carries the JSON).
static JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `println!` for the transcript: stdout, or stderr in `--format json`.
macro_rules! out {
    ($($t:tt)*) => {
        if JSON.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!($($t)*)
        } else {
            println!($($t)*)
        }
    };
}

/// One step of the transcript, for `--format json`.
#[derive(Debug, Default, serde::Serialize)]
struct Step {
    title: String,
    /// Seconds since the start when the step began.
    at_s: f64,
    commands: Vec<Ran>,
}

/// One `powerperf` command run by quickstart.
#[derive(Debug, serde::Serialize)]
struct Ran {
    args: Vec<String>,
    env: Vec<(String, String)>,
    exit_status: Option<i32>,
    stdout: String,
    stderr: String,
}

/// The repository this binary was built from (for the shipped specs and fixtures), or the
/// current directory.
fn repo_dir() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if built.join("datasets").is_dir() {
        built
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
    }
}

fn find_data(arg: &Option<PathBuf>) -> Option<PathBuf> {
    let mut c: Vec<PathBuf> = Vec::new();
    c.extend(arg.clone());
    c.extend(std::env::var_os("POWERPERF_DATA_DIR").map(PathBuf::from));
    c.push(PathBuf::from("../shared/datasets"));
    c.push(repo_dir().join("../shared/datasets"));
    c.into_iter().find(|d| {
        d.join("titanx-dvfs/micro_140.csv").is_file()
            || d.join("v100-dcgm-sweep/spec_21apps.csv").is_file()
    })
}

struct Runner {
    exe: PathBuf,
    data: Option<PathBuf>,
    t0: Instant,
    steps: std::cell::RefCell<Vec<Step>>,
}

impl Runner {
    /// Run `powerperf ARGS`, print the command and at most `keep` lines of its output
    /// (stdout, then stderr), and return its stdout.
    fn pp(&self, args: &[&str], keep: usize) -> Result<String> {
        self.pp_env(args, keep, &[])
    }

    /// [`Runner::pp`] with extra environment variables (shown before the command).
    fn pp_env(&self, args: &[&str], keep: usize, env: &[(&str, &str)]) -> Result<String> {
        let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        out!("$ {}powerperf {}", shown.concat(), args.join(" "));
        let mut cmd = Command::new(&self.exe);
        cmd.args(args).envs(env.iter().copied());
        if let Some(d) = &self.data {
            cmd.env("POWERPERF_DATA_DIR", d);
        }
        let out = cmd
            .output()
            .with_context(|| format!("cannot run {}", self.exe.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let lines: Vec<&str> = stdout
            .lines()
            .chain(stderr.lines())
            .filter(|l| !l.trim().is_empty())
            .collect();
        if let Some(step) = self.steps.borrow_mut().last_mut() {
            step.commands.push(Ran {
                args: args.iter().map(|a| a.to_string()).collect(),
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                exit_status: out.status.code(),
                stdout: stdout.clone(),
                stderr: stderr.clone(),
            });
        }
        for l in lines.iter().take(keep) {
            out!("    {l}");
        }
        if lines.len() > keep {
            out!("    … ({} more lines)", lines.len() - keep);
        }
        if !out.status.success() {
            anyhow::bail!(
                "`powerperf {}` failed ({}):\n{stderr}",
                args.join(" "),
                out.status
            );
        }
        Ok(stdout)
    }

    fn step(&self, title: &str) {
        let at_s = self.t0.elapsed().as_secs_f64();
        out!("\n== {title}  [{at_s:.1} s]");
        self.steps.borrow_mut().push(Step {
            title: title.to_string(),
            at_s,
            commands: vec![],
        });
    }
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}

/// Run `powerperf quickstart`.
///
/// # Errors
/// A step that fails (its output is shown).
pub fn run(args: QuickstartArgs) -> Result<i32> {
    let exe = std::env::current_exe().context("cannot find the powerperf binary")?;
    let data = if args.no_data {
        None
    } else {
        find_data(&args.data)
    };
    let json = args.format == super::import::TextOrJson::Json;
    JSON.store(json, std::sync::atomic::Ordering::Relaxed);
    let r = Runner {
        exe: exe.clone(),
        data: data.clone(),
        t0: Instant::now(),
        steps: Default::default(),
    };
    let out = &args.out;
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("cannot clear {}", out.display()))?;
    }
    std::fs::create_dir_all(out)?;
    let p = |name: &str| out.join(name).display().to_string();
    let repo = repo_dir();
    let exe_s = exe.display().to_string();

    // 1. Training runs on this machine.
    let ncpu = crate::collect::sysinfo::online_cpus().min(8);
    r.step(&format!(
        "1. collect a microbench workload (kernel `mixed`) at 1..{ncpu} threads, {} repeats each",
        args.repeat
    ));
    let scale = format!("{}", args.scale);
    let mut runs = Vec::new();
    for t in 1..=ncpu {
        for k in 0..args.repeat {
            let run = p(&format!("runs/mixed-t{t}-r{k}"));
            let threads = t.to_string();
            let keep = if t == 1 && k == 0 { 30 } else { 0 };
            // OMP_NUM_THREADS sets the kernel's threads and is recorded as the run's
            // `threads` knob, as for any OpenMP program.
            r.pp_env(
                &[
                    "collect",
                    "-o",
                    &run,
                    "--workload",
                    "mixed",
                    "--",
                    &exe_s,
                    "microbench",
                    "kernel",
                    "mixed",
                    "--scale",
                    &scale,
                ],
                keep,
                &[("OMP_NUM_THREADS", &threads)],
            )?;
            runs.push(run);
        }
    }
    let set = p("sets/mixed-threads");
    let mut import_args = vec!["import"];
    import_args.extend(runs.iter().map(String::as_str));
    import_args.extend(["-o", &set]);
    r.pp(&import_args, 6)?;
    if ncpu >= 2 {
        let model = p("models/mixed-threads.json");
        r.pp(&["fit", &set, "--model", "threads", "-o", &model], 12)?;
        r.pp(
            &[
                "predict",
                "--model",
                &model,
                "--workload",
                "mixed",
                "--knob",
                "threads=1,2,4,8,16",
            ],
            12,
        )?;
        out!("    (energy is predicted only where the runs measured it: this machine has no RAPL unless `report` shows energy)");
    } else {
        out!("    this machine has one CPU: a thread-count model needs runs at two thread counts; skipped");
    }

    // Frequency runs where this machine's cpufreq can be set (never on a VM without it).
    let cpufreq = std::path::Path::new("/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq");
    let writable = std::fs::OpenOptions::new()
        .write(true)
        .open(cpufreq)
        .is_ok();
    if writable {
        r.step(
            "1b. sweep the core frequency (min, max) through cpufreq, settings restored afterwards",
        );
        let fset = p("sets/mixed-freq");
        r.pp(
            &[
                "sweep",
                "-o",
                &fset,
                "--freq",
                "min,max",
                "--threads",
                "1",
                "--repeat",
                "1",
                "--",
                &exe_s,
                "microbench",
                "kernel",
                "mixed",
                "--scale",
                &scale,
            ],
            12,
        )?;
        r.pp(
            &[
                "fit",
                &fset,
                "--model",
                "analytic",
                "-o",
                &p("models/mixed-freq.json"),
            ],
            12,
        )?;
    } else {
        out!(
            "    no writable cpufreq here ({} {}): the frequency sweep (`powerperf sweep`) is skipped",
            cpufreq.display(),
            if cpufreq.exists() { "is not writable by this user" } else { "is absent" }
        );
    }

    // 2. Frequency models from public measurements.
    let specs = repo.join("datasets");
    match &data {
        None => {
            r.step("2. frequency datasets");
            out!("    not found (--data DIR, POWERPERF_DATA_DIR, or ../shared/datasets): skipped; the specs in datasets/ name the public files");
        }
        Some(d) => {
            r.step(&format!(
                "2. import, fit, predict and plan on the public GPU frequency sweeps in {}",
                d.display()
            ));
            let tx = p("sets/titanx");
            r.pp(
                &[
                    "import",
                    &specs.join("titanx-micro.toml").display().to_string(),
                    "-o",
                    &tx,
                ],
                6,
            )?;
            let txm = p("models/titanx.json");
            // Leave-one-out over 4480 points takes minutes here: the held-out error comes
            // from `evaluate` (knob holdout, the protocol of docs/models.md) instead.
            r.pp(&["fit", &tx, "--no-loo", "-o", &txm], 14)?;
            r.pp(
                &[
                    "evaluate",
                    &tx,
                    "--protocol",
                    "knob-holdout",
                    "--train",
                    "core_freq_mhz=595,861,1164",
                ],
                14,
            )?;
            r.pp(
                &[
                    "predict",
                    "--model",
                    &txm,
                    "--workload",
                    "DP",
                    "--knob",
                    "core_freq_mhz=595,861,1164",
                ],
                10,
            )?;
            let txp = p("plans/titanx.toml");
            r.pp(
                &[
                    "plan",
                    "--model",
                    &txm,
                    "--workload",
                    "DP",
                    "--workload",
                    "SP",
                    "--workload",
                    "DRAM",
                    "--device",
                    "gpu",
                    "--objective",
                    "energy",
                    "--max-slowdown",
                    "5%",
                    "-o",
                    &txp,
                ],
                14,
            )?;
            let v = p("sets/v100");
            r.pp(
                &[
                    "import",
                    &specs.join("v100-dcgm-sweep.toml").display().to_string(),
                    "-o",
                    &v,
                ],
                6,
            )?;
            let vm = p("models/v100.json");
            r.pp(&["fit", &v, "--no-loo", "-o", &vm], 14)?;
            r.pp(
                &[
                    "evaluate",
                    &v,
                    "--protocol",
                    "knob-holdout",
                    "--train",
                    "core_freq_mhz=510,945,1380",
                ],
                14,
            )?;
            r.pp(
                &[
                    "predict",
                    "--model",
                    &vm,
                    "--workload",
                    "dgemm",
                    "--knob",
                    "core_freq_mhz=510,945,1380",
                ],
                10,
            )?;
        }
    }

    // 3. A CPU plan applied in dry-run against the shipped cpufreq fixture.
    let fixture = repo.join("tests/fixtures/sysfs/cpufreq-userspace");
    let root = out.join("sysfs-cpufreq-userspace");
    copy_tree(&fixture, &root)?;
    let root_s = root.display().to_string();
    // A plan applied with --dry-run to the fixture copy, the command a short microbench.
    let apply_dry_run = |plan: &str, workload: &str| {
        r.pp(
            &[
                "apply",
                "--plan",
                plan,
                "--workload",
                workload,
                "--dry-run",
                "--sysfs-root",
                &root_s,
                "--",
                &exe_s,
                "microbench",
                "kernel",
                "fma",
                "--threads",
                "1",
                "--scale",
                "0.1",
            ],
            20,
        )
    };
    match data
        .as_ref()
        .filter(|d| d.join("xu3-pmu-power/cbench_timeline.tsv").is_file())
    {
        Some(_) => {
            r.step("3. plan a CPU frequency from the XU3 (Cortex-A15) set and apply it with --dry-run to the cpufreq fixture");
            // The plan is for the XU3's A15 (1000, 1500, 2000 MHz in the set): give the
            // fixture copy those operating points, so apply checks the plan against them.
            let cf = root.join("sys/devices/system/cpu");
            for cpu in std::fs::read_dir(&cf)?.flatten() {
                let d = cpu.path().join("cpufreq");
                if d.is_dir() {
                    std::fs::write(
                        d.join("scaling_available_frequencies"),
                        "1000000 1500000 2000000 \n",
                    )?;
                    std::fs::write(d.join("cpuinfo_min_freq"), "1000000\n")?;
                    std::fs::write(d.join("scaling_min_freq"), "1000000\n")?;
                    std::fs::write(d.join("cpuinfo_max_freq"), "2000000\n")?;
                    std::fs::write(d.join("scaling_max_freq"), "2000000\n")?;
                }
            }
            let x = p("sets/xu3");
            r.pp(
                &[
                    "import",
                    &specs.join("xu3-cbench.toml").display().to_string(),
                    "-o",
                    &x,
                ],
                6,
            )?;
            let xm = p("models/xu3.json");
            r.pp(&["fit", &x, "-o", &xm], 10)?;
            out!("    (the cpufreq fixture copy offers the XU3 A15's 1000, 1500 and 2000 MHz)");
            let xp = p("plans/xu3.toml");
            r.pp(
                &[
                    "plan",
                    "--model",
                    &xm,
                    "--workload",
                    "automotive_bitcount",
                    "--objective",
                    "edp",
                    "--max-slowdown",
                    "none",
                    "-o",
                    &xp,
                ],
                12,
            )?;
            apply_dry_run(&xp, "automotive_bitcount")?;
        }
        None => {
            r.step("3. apply the shipped example plan (hand-written, no frequency dataset found) with --dry-run to the cpufreq fixture");
            let plan = repo
                .join("examples/plans/cpu-static.toml")
                .display()
                .to_string();
            apply_dry_run(&plan, "fma")?;
        }
    }
    // The fixture must be as it was: dry-run writes nothing.
    let gov =
        std::fs::read_to_string(root.join("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"))
            .unwrap_or_default();
    out!(
        "    fixture governor after the dry run: {} (unchanged)",
        gov.trim()
    );
    r.step("done");
    out!("    everything is in {}", out.display());
    if json {
        let o = serde_json::json!({
            "out": out,
            "data": data,
            "seconds": r.t0.elapsed().as_secs_f64(),
            "steps": r.steps.borrow().as_slice(),
        });
        println!("{}", serde_json::to_string_pretty(&o)?);
    }
    Ok(0)
}
