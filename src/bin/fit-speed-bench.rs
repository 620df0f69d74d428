//! Fit speed of supervised PCA (issue 6, item 6): the matrix-level fit
//! [`powerperf_core::models::regression::fit_spca_matrix`] on deterministic synthetic data, against
//! scikit-learn's equivalent pipeline (`scripts/fit_speed_sklearn.py`) on the same data.
//!
//! `cargo run --release --bin fit-speed-bench [-- ROWS [FEATURES [REPEATS]]]`
//! (defaults 1000000, 64, 3). Prints a table (rows, features, seconds, counters kept), the
//! time per phase, then, if `python3` can import scikit-learn, scipy and numpy, the
//! scikit-learn time and the ratio `sklearn / powerperf`. Times are the median of `REPEATS`
//! runs after one warm-up run, wall clock.
//!
//! Data: `x` is `(ROWS, FEATURES)`, row-major; column `j` is a mix of 8 latent normal
//! factors (columns with the same `j mod 8` share a dominant factor, so they correlate) plus
//! independent noise, shifted and scaled like counter rates; `y = 1 + 0.8·x3 − 0.5·x10 +
//! 0.3·x17 + 0.2·x29 + noise` (in the columns' standardised units). The generator is a
//! splitmix64 stream with a fixed seed, so every run sees the same data. `x` and `y` are
//! written as little-endian f64 `.npy` files (format version 1.0, header written here) in
//! `$FIT_SPEED_DIR` (default the system temporary directory) for the Python script.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use ndarray::{Array1, Array2};
use powerperf_core::models::regression::{fit_spca_matrix, SpcaParams};

struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1).
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller, one value per call).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

const LATENT: usize = 8;

fn synthetic(rows: usize, features: usize) -> (Array2<f64>, Array1<f64>) {
    let mut rng = SplitMix(0x5EED_0006);
    // Mixing weights: a dominant latent factor per column, small weights on the others.
    let mut w = vec![[0.0f64; LATENT]; features];
    let mut scale = vec![0.0; features];
    let mut shift = vec![0.0; features];
    for j in 0..features {
        for (l, wl) in w[j].iter_mut().enumerate() {
            *wl = if l == j % LATENT {
                1.0
            } else {
                0.15 * rng.normal()
            };
        }
        scale[j] = 10f64.powf(-3.0 + 3.0 * rng.unit());
        shift[j] = 5.0 * scale[j];
    }
    let mut x = Array2::<f64>::zeros((rows, features));
    let mut y = Array1::<f64>::zeros(rows);
    let mut f = [0.0f64; LATENT];
    let terms = [(3usize, 0.8), (10, -0.5), (17, 0.3), (29, 0.2)];
    for (i, mut row) in x.rows_mut().into_iter().enumerate() {
        for v in f.iter_mut() {
            *v = rng.normal();
        }
        for j in 0..features {
            let mix: f64 = w[j].iter().zip(&f).map(|(a, b)| a * b).sum();
            let z = mix + 0.5 * rng.normal();
            row[j] = shift[j] + scale[j] * z;
        }
        let mut t = 1.0 + 0.1 * rng.normal();
        for &(j, c) in &terms {
            if j < features {
                t += c * (row[j] - shift[j]) / scale[j];
            }
        }
        y[i] = t;
    }
    (x, y)
}

/// Writes a C-order little-endian f64 array as `.npy` (format 1.0).
fn write_npy(path: &Path, shape: &[usize], data: &[f64]) -> std::io::Result<()> {
    let shape_s = match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {shape_s}, }}");
    // Magic (6) + version (2) + header length (2) + header + '\n', padded to 64 bytes.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    f.write_all(b"\x93NUMPY\x01\x00")?;
    f.write_all(&(header.len() as u16).to_le_bytes())?;
    f.write_all(header.as_bytes())?;
    for v in data {
        f.write_all(&v.to_le_bytes())?;
    }
    f.flush()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn sklearn_available() -> bool {
    Command::new("python3")
        .args(["-c", "import sklearn, scipy, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: usize| -> anyhow::Result<usize> {
        Ok(match args.get(i) {
            Some(s) => s.replace('_', "").parse()?,
            None => d,
        })
    };
    let (rows, features, repeats) = (arg(0, 1_000_000)?, arg(1, 64)?, arg(2, 3)?.max(1));
    let params = SpcaParams::default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("generating {rows} × {features} synthetic rows …");
    let (x, y) = synthetic(rows, features);
    let names: Vec<String> = (0..features).map(|j| format!("c{j:02}")).collect();

    let mut times = Vec::new();
    let mut last = None;
    for r in 0..=repeats {
        let t = Instant::now();
        let f = fit_spca_matrix(x.view(), y.view(), &names, &params)?;
        let s = t.elapsed().as_secs_f64();
        if r > 0 {
            times.push(s);
        }
        last = Some(f);
    }
    let fit = last.expect("at least one run");
    let ours = median(times.clone());

    println!("supervised PCA fit (powerperf fit_spca_matrix), {cores} cores, median of {repeats} after 1 warm-up");
    println!(
        "{:>10} {:>8} {:>9}  counters kept",
        "rows", "features", "seconds"
    );
    println!(
        "{:>10} {:>8} {:>9.3}  {}",
        rows,
        features,
        ours,
        fit.features.join(", ")
    );
    println!(
        "runs (s): {}",
        times
            .iter()
            .map(|t| format!("{t:.3}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "phases of the last run (s): {}",
        fit.phase_seconds
            .iter()
            .map(|(p, s)| format!("{p} {s:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for st in &fit.steps {
        println!(
            "  step {:<70.70} kept {:>2}, dropped {:>2}",
            st.step,
            st.kept.len(),
            st.dropped.len()
        );
    }
    println!(
        "final: y = {:.4} {}",
        fit.intercept,
        fit.features
            .iter()
            .zip(&fit.coefficients)
            .map(|(f, c)| format!("{c:+.4}·z[{f}]"))
            .collect::<Vec<_>>()
            .join(" ")
    );

    if !sklearn_available() {
        println!("scikit-learn: skipped: scikit-learn not installed (pip install scikit-learn)");
        return Ok(());
    }
    let dir = std::env::var_os("FIT_SPEED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&dir)?;
    let (xp, yp) = (dir.join("fit_speed_x.npy"), dir.join("fit_speed_y.npy"));
    eprintln!("writing {} and {} …", xp.display(), yp.display());
    write_npy(
        &xp,
        &[rows, features],
        x.as_slice().expect("x is standard layout"),
    )?;
    write_npy(&yp, &[rows], y.as_slice().expect("y is contiguous"))?;
    drop(x);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fit_speed_sklearn.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&xp)
        .arg(&yp)
        .args(["--repeats", &repeats.to_string()])
        .args(["--rho-min", &params.rho_min.to_string()])
        .args(["--coef-min-frac", &params.coef_min_frac.to_string()])
        .args(["--variance-kept", &params.variance_kept.to_string()])
        .args(["--per-component", &params.per_component.to_string()])
        .args(["--max-features", &params.max_features.to_string()])
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        anyhow::bail!(
            "{} failed: {}\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The script's last line: `seconds=<median> kept=<c03,c10,…>`.
    let line = stdout.lines().last().unwrap_or_default();
    let get = |key: &str| {
        line.split_whitespace()
            .find_map(|t| t.strip_prefix(key))
            .unwrap_or_default()
            .to_string()
    };
    let theirs: f64 = get("seconds=").parse()?;
    let kept_py = get("kept=");
    print!("{stdout}");
    println!(
        "{:>10} {:>8} {:>9}  {:>9}  {:>13}  same counters",
        "rows", "features", "powerperf", "sklearn", "sklearn/ours"
    );
    println!(
        "{:>10} {:>8} {:>9.3}  {:>9.3}  {:>13.1}  {}",
        rows,
        features,
        ours,
        theirs,
        theirs / ours,
        if kept_py == fit.features.join(",") {
            "yes"
        } else {
            "no"
        }
    );
    Ok(())
}
