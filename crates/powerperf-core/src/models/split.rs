//! Which points train in a knob split (issue 21, item 2): `evaluate --train K=A,B,…`
//! (repeated for several knobs: their cross product) or `--train-points FILE` (any subset of
//! the settings, a CSV whose header names knobs and whose rows are the training settings).

use super::features::knob_key;
use super::Knobs;
use powerperf_format::set::Point;
use std::path::Path;

/// The training points of a split; every other point is held out.
#[derive(Debug, Clone, PartialEq)]
pub enum TrainSplit {
    /// Points whose value of every named knob is in that knob's list (one knob: knob
    /// holdout; several: the cross product of the lists, any value of the knobs not named).
    Grid(Vec<(String, Vec<f64>)>),
    /// Points whose values of the named knobs equal one of the rows (a joint split), read
    /// from `source`.
    Settings {
        source: String,
        knobs: Vec<String>,
        rows: Vec<Vec<f64>>,
    },
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

impl TrainSplit {
    /// Whether `p` trains.
    pub fn is_train(&self, p: &Point) -> bool {
        match self {
            TrainSplit::Grid(lists) => lists.iter().all(|(k, vals)| {
                p.knobs
                    .get(k)
                    .is_some_and(|v| vals.iter().any(|t| same(*t, *v)))
            }),
            TrainSplit::Settings { knobs, rows, .. } => rows.iter().any(|row| {
                knobs
                    .iter()
                    .zip(row)
                    .all(|(k, t)| p.knobs.get(k).is_some_and(|v| same(*t, *v)))
            }),
        }
    }

    /// The knobs the split names.
    pub fn knobs(&self) -> Vec<String> {
        match self {
            TrainSplit::Grid(l) => l.iter().map(|(k, _)| k.clone()).collect(),
            TrainSplit::Settings { knobs, .. } => knobs.clone(),
        }
    }

    /// The protocol in words (one knob: as before issue 21).
    pub fn describe(&self) -> String {
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            TrainSplit::Grid(l) if l.len() == 1 => format!(
                "knob holdout: train on {} = {}, predict the rest",
                l[0].0,
                list(&l[0].1)
            ),
            TrainSplit::Grid(l) => format!(
                "knob holdout: train on {}, predict the rest",
                l.iter()
                    .map(|(k, v)| format!("{k} = {}", list(v)))
                    .collect::<Vec<_>>()
                    .join(" × ")
            ),
            TrainSplit::Settings {
                source,
                knobs,
                rows,
            } => {
                let shown: Vec<String> = rows.iter().take(8).map(|r| list(r)).collect();
                format!(
                    "joint split: train on the {} settings of {source} ({}: {}{}), predict the rest",
                    rows.len(),
                    knobs.join(","),
                    shown.join("; "),
                    if rows.len() > 8 { "; …" } else { "" }
                )
            }
        }
    }

    /// Check every named knob and value against the set's points.
    ///
    /// # Errors
    /// A knob the set does not have, or a value (row) with no point, naming `flag`.
    pub fn check(&self, points: &[Point], set_knobs: &[String], flag: &str) -> anyhow::Result<()> {
        for k in self.knobs() {
            if !points.iter().any(|p| p.knobs.contains_key(&k)) {
                anyhow::bail!(
                    "{flag} names knob `{k}`, which the set does not have; its knobs: {}",
                    set_knobs.join(", ")
                );
            }
        }
        match self {
            TrainSplit::Grid(lists) => {
                for (k, vals) in lists {
                    let mut known: Vec<f64> = points
                        .iter()
                        .filter_map(|p| p.knobs.get(k).copied())
                        .collect();
                    known.sort_by(f64::total_cmp);
                    known.dedup();
                    for v in vals {
                        if !known.iter().any(|x| same(*x, *v)) {
                            anyhow::bail!("{flag} {k}={v}: the set has no point at that value; its values: {known:?}");
                        }
                    }
                }
            }
            TrainSplit::Settings {
                knobs,
                rows,
                source,
            } => {
                for row in rows {
                    let hit = points.iter().any(|p| {
                        knobs
                            .iter()
                            .zip(row)
                            .all(|(k, t)| p.knobs.get(k).is_some_and(|v| same(*t, *v)))
                    });
                    if !hit {
                        let k: Knobs = knobs.iter().cloned().zip(row.iter().copied()).collect();
                        anyhow::bail!(
                            "{flag} {source}: the set has no point at {} (fix: list settings the set has)",
                            knob_key(&k)
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// Read `--train-points FILE`: a CSV (csv crate) whose header names knobs and whose
    /// rows are training settings, e.g. `threads,core_freq_mhz` then `1,1000`, `1,1400`.
    ///
    /// # Errors
    /// An unreadable file, an empty header or knob name, no rows, a row of another length,
    /// a value that is not a number; each names the file and line.
    pub fn read_settings(path: &Path) -> anyhow::Result<TrainSplit> {
        let shown = path.display().to_string();
        let mut rd = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .flexible(true)
            .from_path(path)
            .map_err(|e| anyhow::anyhow!("--train-points {shown}: {e}"))?;
        let knobs: Vec<String> = rd
            .headers()
            .map_err(|e| anyhow::anyhow!("--train-points {shown}: {e}"))?
            .iter()
            .map(String::from)
            .collect();
        if knobs.is_empty() || knobs.iter().any(|k| k.is_empty()) {
            anyhow::bail!(
                "--train-points {shown}: the header must name knobs, e.g. `threads,core_freq_mhz`"
            );
        }
        let mut rows = Vec::new();
        for (i, rec) in rd.records().enumerate() {
            let rec = rec.map_err(|e| anyhow::anyhow!("--train-points {shown}: {e}"))?;
            let line = i + 2;
            if rec.len() != knobs.len() {
                anyhow::bail!(
                    "--train-points {shown}, line {line}: {} value(s) for the {} knobs of the header ({})",
                    rec.len(),
                    knobs.len(),
                    knobs.join(",")
                );
            }
            let row = rec
                .iter()
                .zip(&knobs)
                .map(|(v, k)| {
                    v.parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite())
                        .ok_or_else(|| {
                            anyhow::anyhow!(
                                "--train-points {shown}, line {line}: {k} = `{v}` is not a number"
                            )
                        })
                })
                .collect::<anyhow::Result<Vec<f64>>>()?;
            rows.push(row);
        }
        if rows.is_empty() {
            anyhow::bail!("--train-points {shown}: no settings after the header (one row per training setting, e.g. `1,1000`)");
        }
        Ok(TrainSplit::Settings {
            source: shown,
            knobs,
            rows,
        })
    }
}

/// `evaluate --protocol workload-holdout`'s baseline without `--baseline`: the maximum
/// value of every knob of the set (knobs without a value are left out).
pub fn max_setting(set: &powerperf_format::set::TrainingSet) -> Knobs {
    let mut base = Knobs::new();
    for k in &set.meta.knobs {
        if let Some(v) = set.knob_values(k).last() {
            base.insert(k.clone(), *v);
        }
    }
    base
}

/// `evaluate --protocol knob-holdout`'s training values without `--train`: the first knob
/// of the set with two or more values; its lowest, middle and highest value when it has more
/// than three, its lowest and highest when it has three (the middle one is predicted); with
/// two values, both (every point trains: the caller's error says so). `None` when no knob
/// varies.
pub fn default_train(set: &powerperf_format::set::TrainingSet) -> Option<(String, Vec<f64>)> {
    let (knob, vals) = set
        .meta
        .knobs
        .iter()
        .map(|k| (k.clone(), set.knob_values(k)))
        .find(|(_, v)| v.len() >= 2)?;
    let n = vals.len();
    let v = if n > 3 {
        vec![vals[0], vals[n / 2], vals[n - 1]]
    } else {
        vec![vals[0], vals[n - 1]]
    };
    Some((knob, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(n: f64, f: f64) -> Point {
        Point {
            workload: "a".into(),
            knobs: [("threads".to_string(), n), ("core_freq_mhz".to_string(), f)]
                .into_iter()
                .collect(),
            ..Point::default()
        }
    }

    #[test]
    fn grid_is_the_cross_product_and_settings_are_rows() {
        let g = TrainSplit::Grid(vec![
            ("threads".into(), vec![1.0]),
            ("core_freq_mhz".into(), vec![1000.0, 1400.0]),
        ]);
        assert!(g.is_train(&pt(1.0, 1400.0)));
        assert!(!g.is_train(&pt(2.0, 1400.0)));
        assert!(!g.is_train(&pt(1.0, 1800.0)));
        let dir = std::env::temp_dir().join(format!("pp-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("train.csv");
        std::fs::write(
            &f,
            "threads,core_freq_mhz\n1,1000\n1,1400\n1,1800\n2,1000\n",
        )
        .unwrap();
        let s = TrainSplit::read_settings(&f).unwrap();
        assert!(s.is_train(&pt(2.0, 1000.0)));
        assert!(!s.is_train(&pt(2.0, 1400.0)));
        assert!(s
            .describe()
            .starts_with("joint split: train on the 4 settings"));
        std::fs::write(&f, "threads,core_freq_mhz\n1,abc\n").unwrap();
        let e = TrainSplit::read_settings(&f).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("`abc`"), "{e}");
        std::fs::write(&f, "threads,core_freq_mhz\n1\n").unwrap();
        let e = TrainSplit::read_settings(&f).unwrap_err().to_string();
        assert!(e.contains("1 value(s) for the 2 knobs"), "{e}");
        std::fs::write(&f, "threads\n").unwrap();
        assert!(TrainSplit::read_settings(&f).is_err());
        let pts = vec![pt(1.0, 1000.0)];
        let e = s
            .check(&pts, &[], "--train-points")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no point at"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
