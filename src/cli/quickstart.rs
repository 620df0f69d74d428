//! `powerperf quickstart`: the whole pipeline on a bundled default input, through the same
//! subcommands a user runs (each step prints its command and what it printed).
//!
//! 1. collect a `microbench` workload on this machine at each thread count it has, make a
//!    training set of those runs, fit a thread-count model and predict the thread counts
//!    this machine has (more would be an extrapolation no run here can check: not printed);
//! 2. the public GPU frequency sweeps bundled in the binary (`store::bundled`; `--data DIR`
//!    or `POWERPERF_DATA_DIR` replaces their data files): import the Titan X and V100 sets by
//!    name, fit, evaluate with held-out error (knob holdout), predict, plan the Titan X with
//!    the risk guard (judged on the held-out clocks) and write a GPU plan whose NVML calls a
//!    dry run describes;
//! 3. the bundled XU3 (ARM Cortex-A15) set: fit, held-out error, plan a CPU frequency and
//!    apply it with `--dry-run` against the bundled cpufreq fixture tree
//!    (`tests/fixtures/sysfs/cpufreq-userspace`, written into the output directory), so the
//!    step runs on a machine without cpufreq.
//!
//! Where NVML finds GPUs, a read-only step (`1c`) shows each one's name, supported clocks,
//! power and energy, whether GPM metrics are available, and the `sweep` command that would
//! build a training set for it. GPU plans are only ever dry-run, against a fake GPU carrying
//! the clocks of the set they were made from (tests/fixtures/fake-gpu's format), so this
//! machine's GPUs are never read for the check nor changed.
//!
//! Everything it reads is inside the binary, so it runs from a fresh clone or an installed
//! binary alike. It never reports a measurement this machine cannot make: where a source is
//! missing (RAPL, hardware counters, cpufreq), the step says so.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Arguments of `powerperf quickstart`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  cargo run --release -- quickstart\n  powerperf quickstart --out /tmp/qs\n  powerperf quickstart --data ../shared/datasets      # other copies of the datasets' files"
)]
pub struct QuickstartArgs {
    /// Working directory for runs, sets, models and plans (recreated).
    #[arg(long, default_value = "powerperf-quickstart")]
    pub out: PathBuf,
    /// Read the datasets' files from this directory instead of the copies bundled in the
    /// binary (laid out as the repository's datasets/; sets POWERPERF_DATA_DIR for each step).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Skip the dataset steps (run only the steps this machine can do alone).
    #[arg(long, conflicts_with = "data")]
    pub no_data: bool,
    /// Work per collected run (1.0 ≈ 0.5 s of one core).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Repeats per thread count.
    #[arg(long, default_value_t = 2)]
    pub repeat: usize,
    /// Output format: table (the transcript on stdout; `text` also works) or json (the transcript on stderr, and
    /// on stdout one object with every step, command, exit status and output).
    #[arg(long, default_value = "table")]
    pub format: powerperf_core::output::OutputFormat,
}

/// In `--format json` the human transcript goes to stderr (stdout carries the JSON).
static JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A line of the transcript: stdout (a write error returns, as [`outln!`]), or stderr in
/// `--format json`.
macro_rules! out {
    ($($t:tt)*) => {
        if JSON.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!($($t)*)
        } else {
            outln!($($t)*)
        }
    };
}

#[path = "quickstart_gpu.rs"]
mod gpu;

/// One step of the transcript and one command run, for `--format json`.
use powerperf_core::output::commands::{QuickstartCommand as Ran, QuickstartStep as Step};

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
        self.pp_full(args, keep, 0, env)
    }

    /// [`Runner::pp`] showing the first `head` and the last `tail` lines of the output (a
    /// long table's summary is at its end).
    fn pp_ends(&self, args: &[&str], head: usize, tail: usize) -> Result<String> {
        self.pp_full(args, head, tail, &[])
    }

    fn pp_full(
        &self,
        args: &[&str],
        keep: usize,
        tail: usize,
        env: &[(&str, &str)],
    ) -> Result<String> {
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
        let tail = tail.min(lines.len().saturating_sub(keep));
        for l in lines.iter().take(keep) {
            out!("    {l}");
        }
        if lines.len() > keep + tail {
            out!("    … ({} more lines)", lines.len() - keep - tail);
        }
        for l in &lines[lines.len() - tail..] {
            out!("    {l}");
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

    fn step(&self, title: &str) -> Result<()> {
        let at_s = self.t0.elapsed().as_secs_f64();
        out!("\n== {title}  [{at_s:.1} s]");
        self.steps.borrow_mut().push(Step {
            title: title.to_string(),
            at_s,
            commands: vec![],
        });
        Ok(())
    }
}

/// Where the dataset steps read their data.
enum Data {
    /// `--no-data`: skipped.
    Skipped,
    /// The copies bundled in the binary.
    Bundled,
    /// `--data DIR` (or `POWERPERF_DATA_DIR`): that directory's files.
    Dir(PathBuf),
}

/// Write the bundled files under `prefix` into `dest` (a directory quickstart owns).
fn extract_bundled(prefix: &str, dest: &Path) -> Result<()> {
    powerperf_core::store::bundled::extract(prefix, dest).map(|_| ())
}

/// The held-out time MAPE (%) in `powerperf evaluate --format json` output.
fn time_mape_pct(evaluate_json: &str) -> Option<f64> {
    powerperf_core::output::evaluate::EvaluateOutput::from_json(evaluate_json)
        .ok()?
        .time
        .map(|t| t.mape_pct)
        .filter(|m| m.is_finite() && *m >= 0.0)
}

/// What every step needs.
struct Ctx<'a> {
    r: &'a Runner,
    /// The working directory (`--out`).
    out: &'a Path,
    /// The powerperf binary, which also runs the collected workloads (`microbench`).
    exe_s: String,
    /// The cpufreq fixture copy the dry runs check plans against.
    root: PathBuf,
}

impl Ctx<'_> {
    /// `OUT/name`, as a command argument.
    fn p(&self, name: &str) -> String {
        self.out.join(name).display().to_string()
    }

    /// `powerperf apply --dry-run` of `plan` on a short `microbench` kernel, against the
    /// cpufreq fixture copy when `sysfs`.
    fn apply_dry_run(&self, plan: &str, workload: &str, sysfs: bool) -> Result<String> {
        let root_s = self.root.display().to_string();
        let mut a = vec!["apply", "--plan", plan, "--workload", workload, "--dry-run"];
        if sysfs {
            a.extend(["--sysfs-root", &root_s]);
        }
        self.apply_dry_run_args(a)
    }

    /// [`Ctx::apply_dry_run`] of a GPU plan, checked against the fake GPU in `fake`.
    fn apply_dry_run_fake_gpu(&self, plan: &str, workload: &str, fake: &Path) -> Result<String> {
        let fake_s = fake.display().to_string();
        self.apply_dry_run_args(vec![
            "apply",
            "--plan",
            plan,
            "--workload",
            workload,
            "--dry-run",
            "--fake-gpu",
            &fake_s,
        ])
    }

    fn apply_dry_run_args<'a>(&'a self, mut a: Vec<&'a str>) -> Result<String> {
        a.extend([
            "--",
            &self.exe_s,
            "microbench",
            "kernel",
            "fma",
            "--threads",
            "1",
            "--scale",
            "0.1",
        ]);
        self.r.pp(&a, 20)
    }
}

/// Step 1: training runs on this machine at 1..=8 threads (at most its CPUs), `repeat`
/// each at work `scale`; a training set, and where there are two thread counts, a
/// thread-count model and its predictions.
fn step_threads(c: &Ctx, repeat: usize, scale: &str) -> Result<()> {
    let (r, exe_s) = (c.r, c.exe_s.as_str());
    let p = |name: &str| c.p(name);
    let ncpu = powerperf_core::collect::sysinfo::available_cpus().min(8);
    r.step(&format!(
        "1. collect a microbench workload (kernel `mixed`) at 1..{ncpu} threads, {} repeats each",
        repeat
    ))?;
    let mut runs = Vec::new();
    for t in 1..=ncpu {
        for k in 0..repeat {
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
                    exe_s,
                    "microbench",
                    "kernel",
                    "mixed",
                    "--scale",
                    scale,
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
        let measured: Vec<String> = (1..=ncpu).map(|t| t.to_string()).collect();
        let knob = format!("threads={}", measured.join(","));
        r.pp(
            &[
                "predict",
                "--model",
                &model,
                "--workload",
                "mixed",
                "--knob",
                &knob,
            ],
            12,
        )?;
        out!("    (predicted at the thread counts this machine has, where the runs above measure them; more than {ncpu} threads would be an extrapolation that no run here can check, so none is printed)");
        out!("    (energy is predicted only where the runs measured it: this machine has no RAPL unless `report` shows energy)");
    } else {
        out!("    this machine has one CPU: a thread-count model needs runs at two thread counts; skipped");
    }

    Ok(())
}

/// Step 1b: a core-frequency sweep (min, max) and an analytic model, where this machine's
/// cpufreq can be set (never on a VM without it).
fn step_freq_sweep(c: &Ctx, scale: &str) -> Result<()> {
    let (r, exe_s) = (c.r, c.exe_s.as_str());
    let p = |name: &str| c.p(name);
    let cpufreq = std::path::Path::new("/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq");
    let writable = std::fs::OpenOptions::new()
        .write(true)
        .open(cpufreq)
        .is_ok();
    if writable {
        r.step(
            "1b. sweep the core frequency (min, max) through cpufreq, settings restored afterwards",
        )?;
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
                exe_s,
                "microbench",
                "kernel",
                "mixed",
                "--scale",
                scale,
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

    Ok(())
}

/// Step 2: GPU frequency models from the public Titan X and V100 sweeps (`source` says
/// where their data comes from): import, fit, held-out error, predict, plan, and the GPU
/// plan applied in a dry run.
fn step_gpu(c: &Ctx, source: &str) -> Result<()> {
    let r = c.r;
    let p = |name: &str| c.p(name);
    r.step(&format!(
        "2. GPU clocks: import, fit, held-out error, predict and plan on the public Titan X and V100 sweeps ({source})"
    ))?;
    let tx = p("sets/titanx");
    r.pp(&["import", "titanx-micro", "-o", &tx], 6)?;
    let txm = p("models/titanx.json");
    // Leave-one-out over 4480 points takes minutes here: 10-fold cross-validation gives
    // the held-out error and the slowdown errors the plan's default guard needs.
    r.pp(&["fit", &tx, "--cv", "10", "-o", &txm], 14)?;
    out!("    held-out error: fit on 3 of the 16 core clocks, predict the other 13 (mean absolute percentage error, MAPE):");
    let ev = r.pp(
        &[
            "evaluate",
            &tx,
            "--protocol",
            "knob-holdout",
            "--train",
            "core_freq_mhz=595,861,1164",
            "--format",
            "json",
        ],
        24,
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
    out!("    the plan with the planner's risk guard (at most 1 workload in 20 expected above the bound), trained on 3 clocks and judged on the measured ones:");
    r.pp_ends(
        &[
            "plan",
            "--evaluate",
            &tx,
            "--train",
            "core_freq_mhz=595,861,1164",
            "--max-slowdown",
            "5%",
            "--slowdown-margin",
            "risk",
        ],
        5,
        3,
    )?;
    // The held-out error of the knob holdout must have been printed.
    time_mape_pct(&ev).context("evaluate printed no time error")?;
    out!("    a plan file for three kernels with the default guard (the risk budget, from the model's cross-validation errors); the set records that these clocks are the GPU's, so the plan says kind = \"gpu\":");
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
            "--objective",
            "energy",
            "--max-slowdown",
            "5%",
            "-o",
            &txp,
        ],
        14,
    )?;
    // The plan is the Titan X's: it is checked against a fake GPU with the Titan X's clocks
    // (those of the set), never against this machine's GPUs, which are neither read nor set.
    let (fake, graphics, memory) = gpu::fake_gpu_of_set(
        Path::new(&tx),
        "GeForce GTX Titan X (the clocks of the titanx-micro set)",
    )?;
    out!(
        "    the GPU plan applied in a dry run against a fake GPU carrying the Titan X's clocks (the set's {} SM clocks {}..{} MHz and memory clocks {:?} MHz, written to a private temporary directory): the NVML calls a privileged run on a Titan X would make; this machine's GPUs are neither read nor changed:",
        graphics.len(),
        graphics.iter().min().unwrap_or(&0),
        graphics.iter().max().unwrap_or(&0),
        memory
    );
    let before = gpu::snapshot(fake.path());
    c.apply_dry_run_fake_gpu(&txp, "DP", fake.path())?;
    let same = gpu::snapshot(fake.path()) == before;
    out!(
        "    the fake GPU's files after the dry run: {}",
        if same {
            "byte-identical (nothing was set)"
        } else {
            "CHANGED"
        }
    );
    anyhow::ensure!(same, "the dry run changed the fake GPU's files");
    drop(fake);
    let v = p("sets/v100");
    r.pp(&["import", "v100-dcgm-sweep", "-o", &v], 8)?;
    let vm = p("models/v100.json");
    r.pp(&["fit", &v, "--no-loo", "-o", &vm], 14)?;
    out!("    held-out error on the V100 (power: time is reliable for dgemm and stream only, see the import notes):");
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
    Ok(())
}

/// Step 3: a CPU plan from the XU3 set (`source` says where its data comes from), applied
/// with `--dry-run` against the cpufreq fixture copy, given the XU3's operating points.
fn step_xu3(c: &Ctx, source: &str) -> Result<()> {
    let r = c.r;
    let p = |name: &str| c.p(name);
    r.step(&format!("3. CPU clocks: the XU3 (Cortex-A15) set ({source}): fit, held-out error, plan, and apply with --dry-run to the cpufreq fixture"))?;
    // The plan is for the XU3's A15 (1000, 1500, 2000 MHz in the set): give the fixture copy
    // those operating points, so apply checks the plan against them.
    let cf = c.root.join("sys/devices/system/cpu");
    for cpu in std::fs::read_dir(&cf)?.flatten() {
        let d = cpu.path().join("cpufreq");
        if d.is_dir() {
            for (file, value) in [
                (
                    "scaling_available_frequencies",
                    "1000000 1500000 2000000 \n",
                ),
                ("cpuinfo_min_freq", "1000000\n"),
                ("scaling_min_freq", "1000000\n"),
                ("cpuinfo_max_freq", "2000000\n"),
                ("scaling_max_freq", "2000000\n"),
            ] {
                std::fs::write(d.join(file), value)?;
            }
        }
    }
    let x = p("sets/xu3");
    r.pp(&["import", "xu3-cbench", "-o", &x], 6)?;
    let xm = p("models/xu3.json");
    r.pp(&["fit", &x, "-o", &xm], 10)?;
    out!("    held-out error: fit on 1000 and 2000 MHz, predict 1500 MHz:");
    r.pp(
        &[
            "evaluate",
            &x,
            "--protocol",
            "knob-holdout",
            "--train",
            "core_freq_mhz=1000,2000",
        ],
        10,
    )?;
    out!("    the minimum-EDP plan for every program, trained on 1000 and 2000 MHz and judged on the measured 1500 MHz:");
    r.pp_ends(
        &[
            "plan",
            "--evaluate",
            &x,
            "--train",
            "core_freq_mhz=1000,2000",
            "--objective",
            "edp",
            "--max-slowdown",
            "none",
        ],
        4,
        3,
    )?;
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
    c.apply_dry_run(&xp, "automotive_bitcount", true)?;
    Ok(())
}

/// Run `powerperf quickstart`.
///
/// # Errors
/// A step that fails (its output is shown).
pub fn run(args: QuickstartArgs) -> Result<i32> {
    args.format.check(
        "quickstart",
        &powerperf_core::output::OutputFormat::TABLE_JSON,
    )?;
    let exe = std::env::current_exe().context("cannot find the powerperf binary")?;
    let data = if args.no_data {
        Data::Skipped
    } else if let Some(d) = args
        .data
        .clone()
        .or_else(|| std::env::var_os("POWERPERF_DATA_DIR").map(PathBuf::from))
    {
        Data::Dir(d)
    } else {
        Data::Bundled
    };
    let json = args.format == powerperf_core::output::OutputFormat::Json;
    JSON.store(json, std::sync::atomic::Ordering::Relaxed);
    let r = Runner {
        exe: exe.clone(),
        data: match &data {
            Data::Dir(d) => Some(d.clone()),
            _ => None,
        },
        t0: Instant::now(),
        steps: Default::default(),
    };
    let out = &args.out;
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("cannot clear {}", out.display()))?;
    }
    std::fs::create_dir_all(out)?;
    let c = Ctx {
        r: &r,
        out,
        exe_s: exe.display().to_string(),
        root: out.join("sysfs-cpufreq-userspace"),
    };

    // 1. Training runs on this machine.
    let scale = format!("{}", args.scale);
    step_threads(&c, args.repeat, &scale)?;
    // Frequency runs where this machine's cpufreq can be set (never on a VM without it).
    step_freq_sweep(&c, &scale)?;
    // This node's GPUs, read only, where NVML finds any.
    gpu::step_this_gpu(&c)?;

    // The cpufreq fixture (a machine with cpufreq, as files) and the example plans, from the
    // bundle: the dry runs below check plans against it.
    let root = &c.root;
    extract_bundled(powerperf_core::store::bundled::CPUFREQ_FIXTURE, root)?;

    // 2. GPU frequency models from public measurements.
    let source = match &data {
        Data::Skipped => None,
        Data::Bundled => Some("bundled in this binary (`powerperf datasets`)".to_string()),
        Data::Dir(d) => Some(format!("files from {}", d.display())),
    };
    let Some(source) = source else {
        r.step("2. GPU frequency datasets")?;
        out!("    skipped (--no-data)");
        r.step("3. apply the shipped example plan (hand-written) with --dry-run to the cpufreq fixture")?;
        let plans = out.join("examples");
        extract_bundled(powerperf_core::store::bundled::EXAMPLE_PLANS, &plans)?;
        c.apply_dry_run(
            &plans.join("cpu-static.toml").display().to_string(),
            "fma",
            true,
        )?;
        return finish(&r, out, root, None, json);
    };
    step_gpu(&c, &source)?;

    // 3. A CPU plan from the XU3 set, applied in dry-run against the cpufreq fixture.
    step_xu3(&c, &source)?;
    let shown = match &data {
        Data::Dir(d) => d.display().to_string(),
        _ => "bundled".to_string(),
    };
    finish(&r, out, root, Some(&shown), json)
}

/// The closing lines: the fixture checked unchanged, where everything is, and the JSON
/// (`data`: `bundled`, the `--data` directory, or null with `--no-data`).
fn finish(r: &Runner, out: &Path, root: &Path, data: Option<&str>, json: bool) -> Result<i32> {
    // The fixture must be as it was: dry-run writes nothing.
    let gov =
        std::fs::read_to_string(root.join("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"))
            .unwrap_or_default();
    out!(
        "    fixture governor after the dry run: {} (unchanged)",
        gov.trim()
    );
    r.step("done")?;
    out!("    everything is in {}", out.display());
    if json {
        let o = powerperf_core::output::commands::QuickstartOutput {
            out: out.to_path_buf(),
            data: data.map(str::to_string),
            seconds: r.t0.elapsed().as_secs_f64(),
            steps: r.steps.borrow().clone(),
        };
        outln!("{}", powerperf_core::output::json_sorted(&o)?);
    }
    Ok(0)
}
