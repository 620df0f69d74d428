//! The data bundled with powerperf, embedded in the binary.
//!
//! `build.rs` compresses every file under the repository's `datasets/` (the import specs,
//! the public measurement sets, their licences and provenance, `datasets/README.md`) and the
//! cpufreq fixture tree `tests/fixtures/sysfs/cpufreq-userspace/` and the example plans
//! `examples/plans/` with DEFLATE (RFC 1951)
//! and embeds them. This module lists them, inflates them (flate2), and writes them out:
//!
//! - `powerperf import titanx-micro -o SET` imports a bundled set by name, with no
//!   repository around the binary ([`materialise_datasets`]: the specs and data in a fresh
//!   private temporary directory, removed afterwards);
//! - `powerperf datasets` lists the bundled sets, their sources and licences, and
//!   `powerperf datasets extract DIR` writes them out ([`extract`]);
//! - `powerperf quickstart` runs on them.
//!
//! The data keep their own licences (BSD-3-Clause, CC BY 4.0; `datasets/README.md`), not
//! powerperf's.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

/// One embedded file.
#[derive(Debug)]
pub struct BundledFile {
    /// Path relative to the repository root, `/`-separated (e.g.
    /// `datasets/titanx-dvfs/micro_140.csv`).
    pub path: &'static str,
    /// Size in bytes, uncompressed.
    pub size: usize,
    /// The DEFLATE stream.
    deflated: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/bundle.rs"));

/// Prefix of the bundled datasets (specs at `datasets/<name>.toml`).
pub const DATASETS: &str = "datasets/";
/// Prefix of the bundled cpufreq fixture tree (a `userspace`-governor machine, two CPUs).
pub const CPUFREQ_FIXTURE: &str = "tests/fixtures/sysfs/cpufreq-userspace/";
/// Prefix of the bundled example plans (docs/plan-format.md).
pub const EXAMPLE_PLANS: &str = "examples/plans/";

impl BundledFile {
    /// The file's bytes.
    ///
    /// # Errors
    /// A corrupt DEFLATE stream (not expected: it was written by build.rs).
    pub fn bytes(&self) -> Result<Vec<u8>> {
        let mut v = Vec::with_capacity(self.size);
        flate2::read::DeflateDecoder::new(self.deflated)
            .read_to_end(&mut v)
            .with_context(|| format!("cannot inflate the bundled file {}", self.path))?;
        Ok(v)
    }

    /// Size in bytes of the compressed stream in the binary.
    pub fn compressed_size(&self) -> usize {
        self.deflated.len()
    }
}

/// Every embedded file, sorted by path.
pub fn files() -> &'static [BundledFile] {
    FILES
}

/// The embedded file at `path` (relative to the repository root, `/`-separated).
pub fn file(path: &str) -> Option<&'static BundledFile> {
    FILES.iter().find(|f| f.path == path)
}

/// A bundled import spec and the files it reads.
#[derive(Debug, Clone, Serialize)]
pub struct BundledSet {
    /// The name `powerperf import NAME` takes: the spec's file stem (e.g. `titanx-micro`).
    pub name: String,
    /// The spec, relative to the repository root.
    pub spec: String,
    pub description: String,
    pub source: String,
    pub licence: String,
    /// The data files it reads, relative to the repository root.
    pub files: Vec<String>,
    /// Their total size in bytes, uncompressed and in the binary.
    pub bytes: usize,
    pub compressed_bytes: usize,
}

/// The bundled files a spec's relative file name (or glob) names.
fn matching(pattern: &str) -> Vec<&'static BundledFile> {
    let full = format!("{DATASETS}{pattern}");
    match glob::Pattern::new(&full) {
        Ok(p) => FILES.iter().filter(|f| p.matches(f.path)).collect(),
        Err(_) => FILES.iter().filter(|f| f.path == full).collect(),
    }
}

/// Every bundled import spec, by name.
///
/// # Errors
/// A bundled spec that is not TOML (not expected: the tests import every one).
pub fn sets() -> Result<Vec<BundledSet>> {
    let mut v = Vec::new();
    for f in FILES {
        let Some(stem) = f
            .path
            .strip_prefix(DATASETS)
            .and_then(|r| r.strip_suffix(".toml"))
            .filter(|r| !r.contains('/'))
        else {
            continue;
        };
        let text = String::from_utf8(f.bytes()?)
            .with_context(|| format!("bundled spec {} is not UTF-8", f.path))?;
        let t: toml::Table =
            toml::from_str(&text).with_context(|| format!("bundled spec {}", f.path))?;
        let s = |k: &str| t.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
        let mut patterns = vec![s("file")];
        if let Some(st) = t.get("static_features").and_then(|v| v.as_table()) {
            for k in ["file", "column_names_file"] {
                if let Some(p) = st.get(k).and_then(|v| v.as_str()) {
                    patterns.push(p.to_string());
                }
            }
        }
        let mut data: Vec<&BundledFile> = patterns.iter().flat_map(|p| matching(p)).collect();
        data.sort_by_key(|f| f.path);
        data.dedup_by_key(|f| f.path);
        v.push(BundledSet {
            name: stem.to_string(),
            spec: f.path.to_string(),
            description: s("description"),
            source: s("source"),
            licence: s("licence"),
            files: data.iter().map(|f| f.path.to_string()).collect(),
            bytes: data.iter().map(|f| f.size).sum(),
            compressed_bytes: data.iter().map(|f| f.compressed_size()).sum(),
        });
    }
    Ok(v)
}

/// The bundled set called `name` (the spec's file stem, with or without `.toml`).
///
/// # Errors
/// See [`sets`].
pub fn set(name: &str) -> Result<Option<BundledSet>> {
    let name = name.strip_suffix(".toml").unwrap_or(name);
    Ok(sets()?.into_iter().find(|s| s.name == name))
}

/// Write every bundled file whose path starts with `prefix` into `dest`, at its path below
/// the prefix; `dest` and the directories below it are created. Files are created new
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`): an existing file or link is an error naming it, and nothing
/// is overwritten. Returns the files written.
///
/// # Errors
/// I/O errors, with the path; a file that already exists.
pub fn extract(prefix: &str, dest: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for f in FILES.iter().filter(|f| f.path.starts_with(prefix)) {
        let rel = Path::new(&f.path[prefix.len()..]);
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            bail!("bundled path {} is not a plain relative path", f.path);
        }
        let to = dest.join(rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let mut out = create_new(&to)?;
        out.write_all(&f.bytes()?)
            .with_context(|| format!("cannot write {}", to.display()))?;
        written.push(to);
    }
    if written.is_empty() {
        bail!("no bundled file under {prefix}");
    }
    Ok(written)
}

/// Create `path` as a new file, never following a link at it (`safe_file::create_new`).
fn create_new(path: &Path) -> Result<std::fs::File> {
    powerperf_node::safe_file::create_new(path).with_context(|| {
        if path.symlink_metadata().is_ok() {
            format!(
                "{} already exists: extract into an empty directory (nothing was overwritten)",
                path.display()
            )
        } else {
            format!("cannot create {}", path.display())
        }
    })
}

/// The bundled `datasets/` tree (specs, data, licences) in a fresh private temporary
/// directory (mkdtemp, mode 0700, an unpredictable name under `$TMPDIR`), removed when the
/// returned guard is dropped. The spec of set `NAME` is `dir.path().join("NAME.toml")`.
///
/// # Errors
/// I/O errors creating or writing the directory.
pub fn materialise_datasets() -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("powerperf-bundled-")
        .tempdir()
        .context("cannot create a private temporary directory for the bundled datasets")?;
    extract(DATASETS, dir.path())?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_file_inflates_to_its_recorded_size() {
        assert!(!files().is_empty());
        for f in files() {
            let b = f.bytes().unwrap();
            assert_eq!(b.len(), f.size, "{}", f.path);
        }
    }

    #[test]
    fn the_embedded_files_are_the_repository_files() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        for f in files() {
            let on_disk = std::fs::read(root.join(f.path)).unwrap();
            assert_eq!(f.bytes().unwrap(), on_disk, "{}", f.path);
        }
    }

    #[test]
    fn every_bundled_spec_names_bundled_data_and_a_licence() {
        let sets = sets().unwrap();
        let names: Vec<&str> = sets.iter().map(|s| s.name.as_str()).collect();
        for want in [
            "titanx-micro",
            "v100-dcgm-sweep",
            "xu3-cbench",
            "xu3-parsec-joint",
            "multicore-xeon",
            "multicore-amd",
            "multicore-i7",
        ] {
            assert!(names.contains(&want), "{want} not in {names:?}");
        }
        for s in &sets {
            assert!(!s.files.is_empty(), "{}: no bundled data file", s.name);
            assert!(!s.licence.is_empty(), "{}: no licence", s.name);
            // A licence text beside the data, in the data's own directory.
            let dir = s.files[0].rsplit_once('/').unwrap().0;
            let top = dir.split('/').take(2).collect::<Vec<_>>().join("/");
            assert!(
                files()
                    .iter()
                    .any(|f| f.path.starts_with(&top) && f.path.contains("LICENSE")),
                "{}: no LICENSE file under {top}",
                s.name
            );
        }
        assert!(set("titanx-micro.toml").unwrap().is_some());
        assert!(set("no-such-set").unwrap().is_none());
    }

    #[test]
    fn extract_writes_new_files_and_never_overwrites() {
        let d = tempfile::tempdir().unwrap();
        let w = extract(CPUFREQ_FIXTURE, d.path()).unwrap();
        assert!(d
            .path()
            .join("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
            .is_file());
        let first = &w[0];
        std::fs::write(first, "mine").unwrap();
        let e = extract(CPUFREQ_FIXTURE, d.path()).unwrap_err();
        assert!(format!("{e:#}").contains("already exists"), "{e:#}");
        assert_eq!(std::fs::read_to_string(first).unwrap(), "mine");
    }
}
