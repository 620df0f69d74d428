//! The data side of an import: finding the data files (`--file`, `$POWERPERF_DATA_DIR`, the
//! spec's own directory, `shared/datasets` above), reading them as tables (polars' CSV
//! reader), and turning rows, timelines and static-feature files into points.

use super::*;

pub(super) fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Expand `pattern` (a path or a glob) to the existing files it names, sorted.
pub(super) fn expand(pattern: &Path) -> Vec<PathBuf> {
    let s = pattern.to_string_lossy();
    if has_glob(&s) {
        let mut v: Vec<PathBuf> = glob::glob(&s)
            .map(|g| g.filter_map(|p| p.ok()).filter(|p| p.is_file()).collect())
            .unwrap_or_default();
        v.sort();
        v
    } else if pattern.is_file() {
        vec![pattern.to_path_buf()]
    } else {
        Vec::new()
    }
}

/// Directories searched for a relative data file name, in order:
/// 1. `$POWERPERF_DATA_DIR`,
/// 2. `spec_dir`, the directory of the spec being imported: the bundled copy, for the specs
///    in the repository's `datasets/` (`datasets/README.md`),
/// 3. `../shared/datasets` relative to the current directory, then `shared/datasets` in each
///    further ancestor of it (`../../shared/datasets`, … — a git worktree under
///    `REPO/../wt/NAME` finds the same data),
/// 4. the same relative to the repository the binary was built from (the nearest ancestor of
///    the executable holding a `Cargo.toml`, then the source directory recorded at build
///    time, `CARGO_MANIFEST_DIR`).
///
/// Only directories that exist are returned, without duplicates.
pub fn data_search_dirs(spec_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(repo) = exe
            .ancestors()
            .skip(1)
            .find(|a| a.join("Cargo.toml").is_file())
        {
            roots.push(repo.to_path_buf());
        }
    }
    roots.push(PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")));
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os(DATA_DIR_ENV) {
        dirs.push(PathBuf::from(d));
    }
    if let Some(d) = spec_dir.filter(|d| d.is_dir()) {
        let d = d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    for root in roots {
        for a in root.ancestors().skip(1) {
            let d = a.join("shared/datasets");
            if d.is_dir() {
                let d = d.canonicalize().unwrap_or(d);
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
        }
    }
    dirs
}

/// Resolve a data file name (or glob) from a spec to existing files.
///
/// An absolute name is used as it is. A relative name is tried, in order, in `near` (when
/// given: only its base name, in that directory), then under each of [`data_search_dirs`]
/// (`spec` is the spec file being imported: its directory holds the bundled copy); the first
/// place with at least one match wins.
///
/// # Errors
/// [`ImportError::NotFound`] listing every place tried.
pub fn resolve_data_file(
    name: &str,
    near: Option<&Path>,
    spec: Option<&Path>,
) -> Result<Vec<PathBuf>> {
    let p = Path::new(name);
    let mut tried = Vec::new();
    let mut candidates = Vec::new();
    if p.is_absolute() {
        candidates.push(p.to_path_buf());
    } else {
        if let (Some(dir), Some(base)) = (near, p.file_name()) {
            candidates.push(dir.join(base));
        }
        candidates.extend(
            data_search_dirs(spec.and_then(Path::parent))
                .into_iter()
                .map(|d| d.join(p)),
        );
    }
    for c in candidates {
        let found = expand(&c);
        if !found.is_empty() {
            tracing::info!(name, at = %c.display(), files = found.len(), "data file found");
            return Ok(found);
        }
        tracing::debug!(name, at = %c.display(), "no data file here");
        tried.push(c.display().to_string());
    }
    if tried.is_empty() {
        tried.push(format!("no data directory (${DATA_DIR_ENV} unset, no shared/datasets above the current directory or the binary)"));
    }
    Err(ImportError::NotFound {
        name: name.to_string(),
        tried: tried.join(", "),
    }
    .into())
}

/// A table read from one file, with what is needed for error messages.
pub(super) struct Table {
    pub(super) df: DataFrame,
    pub(super) file: PathBuf,
    /// Line number of the first data row (1-based).
    pub(super) first_line: usize,
}

impl Table {
    fn have(&self) -> String {
        self.df
            .get_column_names()
            .iter()
            .map(|s| s.as_str())
            .filter(|s| !s.is_empty())
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn column(&self, name: &str, role: &str) -> Result<&Column> {
        self.df.column(name).map_err(|_| {
            ImportError::MissingColumn {
                file: self.file.clone(),
                column: name.to_string(),
                role: role.to_string(),
                have: self.have(),
            }
            .into()
        })
    }

    /// Values of a column as quantities of `dim`, in its base unit. Numeric columns are
    /// scaled by `unit`; string columns are parsed with [`parse_quantity`].
    fn quantities(
        &self,
        name: &str,
        role: &str,
        dim: Dimension,
        unit: &str,
    ) -> Result<Vec<Option<f64>>> {
        let col = self.column(name, role)?;
        let factor = dim.factor(unit).map_err(anyhow::Error::msg)?;
        match col.dtype() {
            DataType::String => {
                let ca = col.str()?;
                ca.iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        None => Ok(None),
                        Some(s) if s.trim().is_empty() => Ok(None),
                        Some(s) => parse_quantity(s, dim, unit)
                            .and_then(|x| check_value(dim, role, x).map(|_| x))
                            .map(Some)
                            .map_err(|why| {
                                ImportError::BadValue {
                                    file: self.file.clone(),
                                    line: self.first_line + i,
                                    column: name.to_string(),
                                    value: s.to_string(),
                                    why,
                                }
                                .into()
                            }),
                    })
                    .collect()
            }
            DataType::Null => Ok(vec![None; col.len()]),
            dt if dt.is_primitive_numeric() || dt.is_bool() => {
                let c = col.cast(&DataType::Float64)?;
                c.f64()?
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        None => Ok(None),
                        Some(raw) => check_value(dim, role, raw * factor)
                            .map(|_| Some(raw * factor))
                            .map_err(|why| {
                                ImportError::BadValue {
                                    file: self.file.clone(),
                                    line: self.first_line + i,
                                    column: name.to_string(),
                                    value: show_number(raw),
                                    why,
                                }
                                .into()
                            }),
                    })
                    .collect()
            }
            dt => Err(anyhow::anyhow!(
                "{}: column `{name}` ({role}) has type {dt}, not numbers",
                self.file.display()
            )),
        }
    }

    /// Values of a column as text (numbers are formatted).
    fn strings(&self, name: &str, role: &str) -> Result<Vec<Option<String>>> {
        let col = self.column(name, role)?.cast(&DataType::String)?;
        Ok(col.str()?.iter().map(|v| v.map(str::to_string)).collect())
    }
}

pub(super) fn separator_byte(fmt: &FormatSpec, spec: &Path) -> Result<u8> {
    let s = fmt.separator.as_deref().unwrap_or(",");
    let s = if s == "\\t" { "\t" } else { s };
    if s.len() != 1 {
        return Err(ImportError::Spec {
            spec: spec.to_path_buf(),
            why: format!("separator = {s:?} must be one byte"),
        }
        .into());
    }
    Ok(s.as_bytes()[0])
}

/// Read one delimited file with polars' CSV reader as `fmt` says.
pub(super) fn read_table(
    path: &Path,
    fmt: &FormatSpec,
    spec: &Path,
    names_near: Option<&Path>,
) -> Result<Table> {
    let sep = separator_byte(fmt, spec)?;
    let skip = fmt.skip_lines.unwrap_or(0);
    let has_header = fmt.has_header.unwrap_or(true);
    let mut names: Option<Vec<String>> = fmt.column_names.clone();
    if let Some(f) = &fmt.column_names_file {
        let file = resolve_data_file(f, names_near, Some(spec))?.remove(0);
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let mut v = names.unwrap_or_default();
        v.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        );
        names = Some(v);
    }
    // With names given, a header line is skipped rather than parsed.
    let (polars_header, skip_lines) = match &names {
        Some(_) => (false, skip + usize::from(has_header)),
        None => (has_header, skip),
    };
    let comment = fmt.comment_prefix.clone();
    let opts = CsvReadOptions::default()
        .with_has_header(polars_header)
        .with_skip_lines(skip_lines)
        .with_infer_schema_length(None)
        .map_parse_options(move |o| {
            o.with_separator(sep)
                .with_comment_prefix(comment.as_deref())
        });
    let mut df = opts
        .try_into_reader_with_file_path(Some(path.to_path_buf()))
        .and_then(|r| r.finish())
        .with_context(|| {
            format!(
                "cannot read {} as a table separated by {:?}",
                path.display(),
                sep as char
            )
        })?;
    if let Some(names) = names {
        let width = df.width();
        if names.len() < width {
            // Trailing fields without a name (e.g. a trailing separator) must be empty.
            for c in &df.columns()[names.len()..] {
                if c.null_count() != c.len() {
                    return Err(anyhow::anyhow!(
                        "{}: rows have {width} fields but the spec names {} columns (column_names + column_names_file); name them all",
                        path.display(),
                        names.len()
                    ));
                }
            }
        } else if names.len() > width {
            return Err(anyhow::anyhow!(
                "{}: the spec names {} columns but rows have {width} fields",
                path.display(),
                names.len()
            ));
        }
        let mut all: Vec<String> = names;
        all.extend((all.len()..width).map(|i| format!("_unnamed_{i}")));
        df.set_column_names(&all)
            .with_context(|| format!("{}: column names", path.display()))?;
    } else if let Some(prefix) = &fmt.header_prefix {
        if let Some(first) = df.get_column_names().first().map(|s| s.to_string()) {
            if let Some(stripped) = first.strip_prefix(prefix.as_str()) {
                df.rename(&first, stripped.into())?;
            }
        }
    }
    Ok(Table {
        df,
        file: path.to_path_buf(),
        first_line: skip_lines + usize::from(polars_header) + 1,
    })
}

pub(super) fn workload_from_name(file: &Path, pattern: &str) -> Result<String> {
    let base = file
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let (pre, post) = pattern.split_once("{workload}").unwrap_or((pattern, ""));
    base.strip_prefix(pre)
        .and_then(|r| r.strip_suffix(post))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .ok_or_else(|| {
            ImportError::WorkloadFromFile {
                file: base.clone(),
                pattern: pattern.to_string(),
            }
            .into()
        })
}

/// Per-row values read from one table, before rows become points.
pub(super) struct Rows {
    pub(super) workload: Vec<String>,
    pub(super) repeat: Vec<Option<i64>>,
    pub(super) knobs: Vec<(String, Vec<Option<f64>>)>,
    pub(super) counters: Vec<(String, Vec<Option<f64>>)>,
}

/// The cells of column `col` as text; an empty cell is an error naming its line (`why`).
fn non_empty(t: &Table, col: &str, role: &str, why: &str) -> Result<Vec<String>> {
    t.strings(col, role)?
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            w.filter(|s| !s.trim().is_empty()).ok_or_else(|| {
                anyhow::Error::from(ImportError::BadValue {
                    file: t.file.clone(),
                    line: t.first_line + i,
                    column: col.to_string(),
                    value: String::new(),
                    why: format!("is empty; {why}"),
                })
            })
        })
        .collect()
}

pub(super) fn read_rows(spec: &ImportSpec, t: &Table) -> Result<Rows> {
    let n = t.df.height();
    let mut workload = match (&spec.workload, &spec.workload_from_file) {
        (Some(col), _) => non_empty(t, col, "workload id", "every row needs a workload id")?,
        (None, Some(p)) => vec![workload_from_name(&t.file, p)?; n],
        (None, None) => unreachable!("checked by ImportSpec::check"),
    };
    for col in &spec.workload_columns {
        let part = non_empty(
            t,
            col,
            "workload id part",
            "it is part of the workload id (workload_columns)",
        )?;
        for (w, v) in workload.iter_mut().zip(part) {
            *w = format!("{w}:{}", v.trim());
        }
    }
    let repeat = match &spec.repeat {
        Some(col) => t
            .quantities(col, "repeat", Dimension::Count, "")?
            .into_iter()
            .map(|v| v.map(|x| x as i64))
            .collect(),
        None => vec![None; n],
    };
    let mut knobs = Vec::new();
    for k in &spec.knobs {
        let dim = Dimension::of_knob(&k.name);
        let unit = k
            .unit
            .clone()
            .unwrap_or_else(|| dim.base_unit().to_string());
        let vals = t.quantities(&k.column, &format!("knob {}", k.name), dim, &unit)?;
        if let Some(i) = vals.iter().position(Option::is_none) {
            return Err(ImportError::BadValue {
                file: t.file.clone(),
                line: t.first_line + i,
                column: k.column.clone(),
                value: String::new(),
                why: format!("is empty; every row needs a value of knob {}", k.name),
            }
            .into());
        }
        knobs.push((k.name.clone(), vals));
    }
    let mut counters = Vec::new();
    for c in &spec.counters {
        let name = c.name.clone().unwrap_or_else(|| c.column.clone());
        counters.push((
            name,
            t.quantities(&c.column, "counter", Dimension::Count, "")?,
        ));
    }
    Ok(Rows {
        workload,
        repeat,
        knobs,
        counters,
    })
}

pub(super) fn target_values(
    spec: &ImportSpec,
    t: &Table,
    name: &str,
    dim: Dimension,
) -> Result<Option<Vec<Option<f64>>>> {
    match spec.target_spec(name) {
        Some(TargetSpec {
            column: Some(col),
            unit,
            ..
        }) => Ok(Some(t.quantities(
            col,
            name,
            dim,
            unit.as_deref().unwrap_or(dim.base_unit()),
        )?)),
        _ => Ok(None),
    }
}

pub(super) fn points_from_rows(spec: &ImportSpec, t: &Table) -> Result<Vec<Point>> {
    let rows = read_rows(spec, t)?;
    let time = target_values(spec, t, "time", Dimension::Time)?;
    let power = target_values(spec, t, "power", Dimension::Power)?;
    let energy = target_values(spec, t, "energy", Dimension::Energy)?;
    let derived = |name: &str| {
        spec.target_spec(name)
            .and_then(|s| s.derive.clone())
            .is_some()
    };
    let at = |v: &Option<Vec<Option<f64>>>, i: usize| v.as_ref().and_then(|v| v[i]);
    let mut points = Vec::with_capacity(rows.workload.len());
    for i in 0..rows.workload.len() {
        let (mut ti, mut pi, mut ei) = (at(&time, i), at(&power, i), at(&energy, i));
        if derived("energy") {
            ei = ti.zip(pi).map(|(t, p)| t * p);
        }
        if derived("power") {
            pi = ei.zip(ti).map(|(e, t)| e / t);
        }
        if derived("time") {
            ti = ei.zip(pi).map(|(e, p)| e / p);
        }
        points.push(Point {
            workload: rows.workload[i].clone(),
            knobs: rows
                .knobs
                .iter()
                .map(|(k, v)| (k.clone(), v[i].unwrap_or(f64::NAN)))
                .collect(),
            repeat: rows.repeat[i],
            time_s: ti,
            power_w: pi,
            energy_j: ei,
            counters: rows
                .counters
                .iter()
                .filter_map(|(k, v)| v[i].map(|x| (k.clone(), x)))
                .collect(),
            static_features: BTreeMap::new(),
        });
    }
    Ok(points)
}

pub(super) fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

pub(super) fn points_from_timeline(
    spec: &ImportSpec,
    t: &Table,
    notes: &mut Vec<String>,
    first_point: usize,
) -> Result<(Vec<Point>, Vec<SampleGroup>)> {
    let tl = spec
        .timeline
        .as_ref()
        .expect("checked: timeline layout has [timeline]");
    let rows = read_rows(spec, t)?;
    let ts_unit = tl.timestamp_unit.as_deref().unwrap_or("ns");
    let ts_factor = Dimension::Time
        .factor(ts_unit)
        .map_err(anyhow::Error::msg)?;
    // Integer timestamps stay integers until differenced (ns since the epoch exceed f64's
    // 53-bit mantissa).
    let ts_col = t.column(&tl.timestamp, "timeline timestamp")?;
    let ts: Vec<Option<f64>> = if ts_col.dtype().is_integer() {
        let c = ts_col.cast(&DataType::Int64)?;
        let v: Vec<Option<i64>> = c.i64()?.iter().collect();
        let base = v.iter().flatten().min().copied().unwrap_or(0);
        v.into_iter()
            .map(|x| x.map(|x| (x - base) as f64 * ts_factor))
            .collect()
    } else {
        t.quantities(
            &tl.timestamp,
            "timeline timestamp",
            Dimension::Time,
            ts_unit,
        )?
    };
    let power = t.quantities(
        &tl.power,
        "timeline power",
        Dimension::Power,
        tl.power_unit.as_deref().unwrap_or("W"),
    )?;
    for (what, col, v) in [
        ("timestamp", &tl.timestamp, &ts),
        ("power", &tl.power, &power),
    ] {
        if let Some(i) = v.iter().position(Option::is_none) {
            return Err(ImportError::BadValue {
                file: t.file.clone(),
                line: t.first_line + i,
                column: col.clone(),
                value: String::new(),
                why: format!("is empty; every sample needs a {what}"),
            }
            .into());
        }
    }
    // Group rows by (workload, knob values, repeat), in first-seen order.
    type Key = (String, Vec<u64>, Option<i64>);
    let mut order: Vec<Key> = Vec::new();
    let mut groups: HashMap<Key, Vec<usize>> = HashMap::new();
    for i in 0..rows.workload.len() {
        let key: Key = (
            rows.workload[i].clone(),
            rows.knobs
                .iter()
                .map(|(_, v)| v[i].unwrap_or(f64::NAN).to_bits())
                .collect(),
            rows.repeat[i],
        );
        let g = groups.entry(key.clone()).or_default();
        if g.is_empty() {
            order.push(key);
        }
        g.push(i);
    }
    for idx in groups.values_mut() {
        idx.sort_by(|&a, &b| ts[a].unwrap().total_cmp(&ts[b].unwrap()));
    }
    let period = match tl.sample_period_s {
        Some(p) => p,
        None => {
            let mut diffs: Vec<f64> = groups
                .values()
                .flat_map(|idx| {
                    idx.windows(2)
                        .map(|w| ts[w[1]].unwrap() - ts[w[0]].unwrap())
                })
                .filter(|d| *d > 0.0)
                .collect();
            let p = median(&mut diffs).ok_or_else(|| {
                spec.err("no group has two samples, so the sample period is unknown; set [timeline] sample_period_s")
            })?;
            notes.push(format!(
                "{}: sample period {p:.6} s (median interval between samples)",
                t.file.display()
            ));
            p
        }
    };
    let mut points = Vec::with_capacity(order.len());
    let mut samples = Vec::with_capacity(order.len());
    let source_column = |name: &str| {
        spec.counters
            .iter()
            .find(|c| c.name.as_deref().unwrap_or(&c.column) == name)
            .map_or_else(|| name.to_string(), |c| c.column.clone())
    };
    for key in order {
        let idx = &groups[&key];
        let first = idx[0];
        let mut energy = 0.0;
        let mut prev: Option<f64> = None;
        let mut g = SampleGroup {
            point: first_point + points.len(),
            t_ns: Vec::with_capacity(idx.len()),
            dur_ns: Vec::with_capacity(idx.len()),
            power_w: Vec::with_capacity(idx.len()),
            counters: rows
                .counters
                .iter()
                .map(|(name, v)| (source_column(name), idx.iter().map(|&i| v[i]).collect()))
                .collect(),
        };
        let t0 = ts[first].unwrap();
        for &i in idx {
            let ti = ts[i].unwrap();
            let dt = prev.map_or(period, |p| ti - p);
            energy += power[i].unwrap() * dt;
            prev = Some(ti);
            g.t_ns.push(((ti - t0 + period) * 1e9).round() as u64);
            g.dur_ns.push((dt * 1e9).round() as u64);
            g.power_w.push(power[i].unwrap());
        }
        samples.push(g);
        let time = ts[*idx.last().unwrap()].unwrap() - ts[first].unwrap() + period;
        let mut counters = BTreeMap::new();
        for (name, v) in &rows.counters {
            let vals: Vec<f64> = idx.iter().filter_map(|&i| v[i]).collect();
            if !vals.is_empty() {
                counters.insert(name.clone(), vals.iter().sum());
            }
        }
        points.push(Point {
            workload: key.0.clone(),
            knobs: rows
                .knobs
                .iter()
                .map(|(k, v)| (k.clone(), v[first].unwrap_or(f64::NAN)))
                .collect(),
            repeat: key.2,
            time_s: Some(time),
            power_w: Some(energy / time),
            energy_j: Some(energy),
            counters,
            static_features: BTreeMap::new(),
        });
    }
    Ok((points, samples))
}

pub(super) fn feature_name(prefix: &str, name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c == '.' || c == '-' || c == ' ' {
                '_'
            } else {
                c
            }
        })
        .collect();
    format!("{prefix}{clean}")
}

/// Static feature values by workload id, then by feature name.
pub(super) type StaticFeatures = HashMap<String, BTreeMap<String, f64>>;

/// Static features per workload id, aggregated over the rows with the same key.
pub(super) fn read_static(
    spec: &ImportSpec,
    s: &StaticSpec,
    near: Option<&Path>,
) -> Result<(Vec<String>, StaticFeatures, PathBuf)> {
    let file = resolve_data_file(&s.file, near, Some(&spec.path))?.remove(0);
    let t = read_table(&file, &s.format, &spec.path, file.parent())?;
    let keys = t.strings(&s.key, "static_features key")?;
    let mut keep = vec![true; keys.len()];
    for (col, want) in &s.filter {
        for (k, v) in keep
            .iter_mut()
            .zip(t.strings(col, "static_features where")?)
        {
            *k &= v.as_deref() == Some(want.as_str());
        }
    }
    let feature_cols: Vec<String> = match &s.features {
        Some(f) => f.clone(),
        None => {
            t.df.columns()
                .iter()
                .filter(|c| c.dtype().is_primitive_numeric())
                .map(|c| c.name().to_string())
                .filter(|n| *n != s.key && !s.filter.contains_key(n) && !n.starts_with("_unnamed_"))
                .collect()
        }
    };
    let prefix = s.prefix.clone().unwrap_or_default();
    let names: Vec<String> = feature_cols
        .iter()
        .map(|c| feature_name(&prefix, c))
        .collect();
    let mut seen = std::collections::HashSet::new();
    for n in &names {
        if !seen.insert(n) {
            return Err(spec.err(format!(
                "[static_features]: two columns become the feature name `{n}`"
            )));
        }
    }
    let mut values = Vec::new();
    for c in &feature_cols {
        values.push(t.quantities(c, "static feature", Dimension::Count, "")?);
    }
    let aggregate = s.aggregate.as_deref().unwrap_or("sum");
    let mut acc: HashMap<String, (usize, Vec<f64>)> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        let (Some(key), true) = (key, keep[i]) else {
            continue;
        };
        let e = acc
            .entry(key.clone())
            .or_insert_with(|| (0, vec![0.0; names.len()]));
        for (j, v) in values.iter().enumerate() {
            let x = v[i].unwrap_or(0.0);
            match aggregate {
                "first" if e.0 > 0 => {}
                "first" => e.1[j] = x,
                _ => e.1[j] += x,
            }
        }
        e.0 += 1;
    }
    let map = acc
        .into_iter()
        .map(|(k, (n, v))| {
            let v = if aggregate == "mean" {
                v.into_iter().map(|x| x / n as f64).collect()
            } else {
                v
            };
            (k, names.iter().cloned().zip(v).collect())
        })
        .collect();
    Ok((names, map, file))
}
