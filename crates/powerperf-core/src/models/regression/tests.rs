use super::spca::{ols_gram, sketch, spearman_columns, ZGram};
use super::*;
use powerperf_format::set::CounterKind;

/// Synthetic set: time ratio = 1 + a_w·u where a_w = 0.8·mem_frac (a rate), so the
/// time ratio is linear in the column `mem_frac·u(core_freq_mhz)`... written as
/// t(f) = t0·(1 + (1 - m)·(f0/f - 1)): compute share 1 - m scales with the clock.
fn synthetic(n_workloads: usize) -> (SetMeta, Vec<Point>) {
    let mut meta = SetMeta::default();
    meta.counters.insert("mem_frac".into(), CounterKind::Rate);
    meta.counters.insert("noise".into(), CounterKind::Rate);
    let mut pts = Vec::new();
    for i in 0..n_workloads {
        let m = (i as f64 + 0.5) / n_workloads as f64;
        let noise = ((i * 7919) % 13) as f64 / 13.0;
        for f in [500.0, 750.0, 1000.0] {
            let t = 10.0 * (1.0 + (1.0 - m) * (1000.0 / f - 1.0));
            let p = 100.0 * (1.0 + 0.5 * ((f / 1000.0f64).powi(3) - 1.0));
            pts.push(Point {
                workload: format!("w{i}"),
                knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
                time_s: Some(t),
                power_w: Some(p),
                energy_j: Some(t * p),
                counters: [("mem_frac".to_string(), m), ("noise".to_string(), noise)]
                    .into_iter()
                    .collect(),
                ..Point::default()
            });
        }
    }
    (meta, pts)
}

#[test]
fn linear_recovers_known_ratio_exactly() {
    let (meta, pts) = synthetic(12);
    let m = fit(&meta, &pts, &RegressionParams::default(), false).unwrap();
    let k: Knobs = [("core_freq_mhz".to_string(), 600.0)].into_iter().collect();
    let pr = m.predict("w3", &k).unwrap();
    let mf = 3.5 / 12.0;
    let want = 10.0 * (1.0 + (1.0 - mf) * (1000.0 / 600.0 - 1.0));
    assert!(
        (pr.time_s.unwrap() / want - 1.0).abs() < 1e-9,
        "{:?} {want}",
        pr.time_s
    );
    let wp = 100.0 * (1.0 + 0.5 * (0.6f64.powi(3) - 1.0));
    assert!((pr.power_w.unwrap() / wp - 1.0).abs() < 1e-9);
}

#[test]
fn spca_keeps_the_informative_column_and_records_why() {
    let (meta, pts) = synthetic(20);
    let m = fit(&meta, &pts, &RegressionParams::default(), true).unwrap();
    let t = m.targets.iter().find(|t| t.target == "time_s").unwrap();
    assert!(
        t.features.iter().any(|f| f.starts_with("mem_frac·u(")),
        "{:?}",
        t.features
    );
    assert!(t.steps.len() >= 3);
    let k: Knobs = [("core_freq_mhz".to_string(), 600.0)].into_iter().collect();
    let pr = m.predict("w5", &k).unwrap();
    let mf = 5.5 / 20.0;
    let want = 10.0 * (1.0 + (1.0 - mf) * (1000.0 / 600.0 - 1.0));
    assert!(
        (pr.time_s.unwrap() / want - 1.0).abs() < 1e-6,
        "{:?} {want}",
        pr.time_s
    );
    assert!(m.explain().contains("Spearman"));
}

/// Deterministic pseudo-random numbers in [0, 1) (no dependency).
fn lcg(seed: &mut u64) -> f64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*seed >> 11) as f64 / (1u64 << 53) as f64
}

#[test]
fn ranks_match_statrs_spearman_with_ties_and_signed_zeros() {
    let mut seed = 7;
    let n = 500;
    let mut x = Array2::<f64>::zeros((n, 4));
    let mut y = Array1::<f64>::zeros(n);
    for i in 0..n {
        let u = lcg(&mut seed);
        x[[i, 0]] = u * 1e3 - 500.0;
        x[[i, 1]] = (u * 7.0).floor() - 3.0; // many ties, negative values
        x[[i, 2]] = if i % 3 == 0 { -0.0 } else { 0.0 } + (i % 5) as f64 * 1e-300;
        x[[i, 3]] = lcg(&mut seed) * 1e-9 - 2e-9 * u;
        y[i] = u + 0.3 * lcg(&mut seed);
    }
    let got = spearman_columns(x.view(), y.view(), &[0, 1, 2, 3]);
    assert_eq!(got.len(), 4);
    for (j, &g) in got.iter().enumerate() {
        let want = super::super::features::spearman(&x.column(j).to_vec(), &y.to_vec());
        match (g, want) {
            (Some(a), Some(b)) => assert!((a - b).abs() < 1e-12, "column {j}: {a} vs {b}"),
            (a, b) => assert_eq!(a, b, "column {j}"),
        }
    }
    // A constant column: ρ undefined.
    let c = Array2::<f64>::from_elem((n, 1), 2.0);
    assert_eq!(spearman_columns(c.view(), y.view(), &[0]), vec![None]);
}

#[test]
fn sketch_gives_the_same_least_squares_and_pca_as_the_rows() {
    let mut seed = 11;
    let n = 300;
    let mut x = Array2::<f64>::zeros((n, 3));
    let mut y = Array1::<f64>::zeros(n);
    for i in 0..n {
        let a = lcg(&mut seed);
        let b = lcg(&mut seed);
        x[[i, 0]] = a;
        x[[i, 1]] = a + 0.5 * b;
        x[[i, 2]] = lcg(&mut seed);
        y[i] = 2.0 + 3.0 * a - b + 0.1 * lcg(&mut seed);
    }
    let m = moments(x.view(), y.view());
    let (cols, means, stds, _) = prepare_columns(&m, &["a".into(), "b".into(), "c".into()]);
    assert_eq!(cols, vec![0, 1, 2]);
    let zg = ZGram::new(&m, &cols, &stds);
    let z = standardised(&x, &cols, &means, &stds);
    let (c1, i1) = ols(&z, &y, "t").unwrap();
    let (c2, i2) = ols_gram(&zg, &[0, 1, 2], "t").unwrap();
    assert!((i1 - i2).abs() < 1e-10, "{i1} {i2}");
    for (a, b) in c1.iter().zip(&c2) {
        assert!((a - b).abs() < 1e-9, "{c1:?} {c2:?}");
    }
    let rows = linfa_reduction::Pca::params(3)
        .fit(&DatasetBase::new(z.clone(), ()))
        .unwrap();
    let sk = sketch(&zg.sub(&[0, 1, 2], false), &[0.0; 3]);
    let sk = linfa_reduction::Pca::params(3)
        .fit(&DatasetBase::new(sk, ()))
        .unwrap();
    for (a, b) in rows.singular_values().iter().zip(sk.singular_values()) {
        assert!((a / b - 1.0).abs() < 1e-6, "{a} {b}");
    }
}

#[test]
fn spca_matrix_recovers_a_known_model_and_drops_noise() {
    let mut seed = 3;
    let n = 4000;
    let k = 10;
    let mut x = Array2::<f64>::zeros((n, k));
    let mut y = Array1::<f64>::zeros(n);
    for i in 0..n {
        for j in 0..k {
            x[[i, j]] = lcg(&mut seed) * (j + 1) as f64;
        }
        x[[i, 9]] = 2.0 * x[[i, 1]] - x[[i, 2]]; // collinear: dropped at step 0
        y[i] = 5.0 + 3.0 * x[[i, 1]] - 1.2 * x[[i, 4]];
    }
    let names: Vec<String> = (0..k).map(|j| format!("c{j}")).collect();
    let f = fit_spca_matrix(x.view(), y.view(), &names, &SpcaParams::default()).unwrap();
    assert_eq!(f.rows, n);
    assert!(f.steps[0]
        .dropped
        .iter()
        .any(|d| d.feature == "c9" && d.reason.contains("collinear")));
    let mut feats = f.features.clone();
    feats.sort();
    assert_eq!(feats, vec!["c1".to_string(), "c4".to_string()], "{f:?}");
    // Exact fit: coefficients per standard deviation equal slope × sd.
    for (i, name) in f.features.iter().enumerate() {
        let slope = if name == "c1" { 3.0 } else { -1.2 };
        assert!(
            (f.coefficients[i] / (slope * f.stds[i]) - 1.0).abs() < 1e-9,
            "{f:?}"
        );
    }
    let pred_at_means = 5.0 + 3.0 * f.means[f.features.iter().position(|c| c == "c1").unwrap()]
        - 1.2 * f.means[f.features.iter().position(|c| c == "c4").unwrap()];
    assert!((f.intercept - pred_at_means).abs() < 1e-9);
}

#[test]
fn spca_matrix_reports_bad_input() {
    let x = Array2::<f64>::zeros((3, 2));
    let names = vec!["a".to_string(), "b".to_string()];
    let y = Array1::from(vec![1.0, 2.0]);
    let e = fit_spca_matrix(x.view(), y.view(), &names, &SpcaParams::default());
    assert!(e.unwrap_err().to_string().contains("shapes disagree"));
    let y = Array1::from(vec![1.0, f64::NAN, 2.0]);
    let e = fit_spca_matrix(x.view(), y.view(), &names, &SpcaParams::default());
    assert!(e.unwrap_err().to_string().contains("not finite at row 1"));
}

#[test]
fn unknown_workload_is_an_error() {
    let (meta, pts) = synthetic(6);
    let m = fit(&meta, &pts, &RegressionParams::default(), false).unwrap();
    let k: Knobs = [("core_freq_mhz".to_string(), 600.0)].into_iter().collect();
    assert!(m
        .predict("nope", &k)
        .unwrap_err()
        .to_string()
        .contains("w0"));
}

/// Issue 21: spca panicked in linfa-linalg's eigenvalue sort ("NaN values in array", reached
/// through linfa-reduction's truncated SVD) on two external GPU grids; the exact trigger was
/// not reproduced on the bundled data. The PCA step no longer sorts through linfa (it runs
/// `eigh` on the correlation matrix and sorts with `total_cmp`) and refuses a non-finite
/// matrix with its cause. Near-collinear columns (1 − R² about 1e-11, above step 0's 1e-12
/// cut), constant and NaN columns, a column too large to square (its standard deviation
/// overflows) and sets of three to forty rows give a fit or an error naming spca, never a
/// panic.
#[test]
fn spca_matrix_survives_rank_deficient_constant_and_nan_columns() {
    let mut seed = 5;
    for n in [3usize, 4, 6, 40] {
        let k = 6;
        let mut x = Array2::<f64>::zeros((n, k));
        let mut y = Array1::<f64>::zeros(n);
        for i in 0..n {
            let a = lcg(&mut seed);
            let b = lcg(&mut seed);
            x[[i, 0]] = a;
            x[[i, 1]] = a + 3e-6 * lcg(&mut seed); // nearly collinear with column 0
            x[[i, 2]] = 7.0; // constant
            x[[i, 3]] = if i == 1 { f64::NAN } else { b }; // NaN in one row
            x[[i, 4]] = b;
            x[[i, 5]] = a - b + 1e-6 * lcg(&mut seed);
            y[i] = 1.0 + a + 0.5 * b;
        }
        let names: Vec<String> = (0..k).map(|j| format!("c{j}")).collect();
        let p = SpcaParams {
            rho_min: 0.0,
            coef_min_frac: 0.0,
            ..SpcaParams::default()
        };
        // A column whose squares overflow: an error naming it, not a panic.
        let mut huge = x.clone();
        for i in 0..n {
            huge[[i, 4]] = 1e160 * (1.0 + lcg(&mut seed));
        }
        if let Err(e) = fit_spca_matrix(huge.view(), y.view(), &names, &p) {
            assert!(e.to_string().contains("spca"), "{e}");
        }
        match fit_spca_matrix(x.view(), y.view(), &names, &p) {
            Ok(f) => {
                assert!(f.coefficients.iter().all(|c| c.is_finite()), "{f:?}");
                assert!(f.steps[0]
                    .dropped
                    .iter()
                    .any(|d| d.feature == "c2" && d.reason.contains("no variance")));
                assert!(f.steps[0]
                    .dropped
                    .iter()
                    .any(|d| d.feature == "c3" && d.reason.contains("not finite")));
            }
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("spca"), "n = {n}: {e}");
            }
        }
    }
}
