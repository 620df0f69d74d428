//! CPU cache sizes from sysfs (`<root>/devices/system/cpu/cpu0/cache/index*/{level,type,size}`),
//! as the Linux kernel documents them in `Documentation/ABI/testing/sysfs-devices-system-cpu`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::MicrobenchError;

/// One cache of CPU 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cache {
    /// 1, 2, 3, ...
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    pub size_bytes: u64,
}

fn read(path: &Path) -> Result<String, MicrobenchError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| MicrobenchError::Read {
            path: path.to_path_buf(),
            source,
        })
}

/// Parse a sysfs cache size such as `32K`, `1024K`, `105M` or `512` (bytes).
///
/// # Errors
/// [`MicrobenchError::BadSize`] naming `path` and the value.
pub fn parse_size(value: &str, path: &Path) -> Result<u64, MicrobenchError> {
    let v = value.trim();
    let (num, mult) = match v.chars().last() {
        Some('K') | Some('k') => (&v[..v.len() - 1], 1u64 << 10),
        Some('M') | Some('m') => (&v[..v.len() - 1], 1 << 20),
        Some('G') | Some('g') => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>()
        .map(|n| n * mult)
        .map_err(|_| MicrobenchError::BadSize {
            path: path.to_path_buf(),
            value: value.to_string(),
        })
}

/// The data and unified caches of CPU 0 under the sysfs root `root` (`/sys` on a live
/// system), sorted by level; instruction caches are left out.
///
/// # Errors
/// [`MicrobenchError::Read`] when the cache directory or a file in it cannot be read,
/// [`MicrobenchError::BadSize`] / [`MicrobenchError::BadLevel`] for malformed values,
/// [`MicrobenchError::NoCaches`] when none is found.
pub fn data_caches(root: &Path) -> Result<Vec<Cache>, MicrobenchError> {
    let dir: PathBuf = root.join("devices/system/cpu/cpu0/cache");
    let entries = std::fs::read_dir(&dir).map_err(|source| MicrobenchError::Read {
        path: dir.clone(),
        source,
    })?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with("index") {
            continue;
        }
        let kind = read(&p.join("type"))?;
        if kind == "Instruction" {
            continue;
        }
        let lp = p.join("level");
        let lv = read(&lp)?;
        let level = lv.parse().map_err(|_| MicrobenchError::BadLevel {
            path: lp,
            value: lv,
        })?;
        let sp = p.join("size");
        let size_bytes = parse_size(&read(&sp)?, &sp)?;
        out.push(Cache {
            level,
            kind,
            size_bytes,
        });
    }
    if out.is_empty() {
        return Err(MicrobenchError::NoCaches(dir));
    }
    out.sort_by_key(|c| (c.level, c.size_bytes));
    out.dedup_by_key(|c| c.level);
    Ok(out)
}
