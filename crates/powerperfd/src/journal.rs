//! The daemon's journal: the only restore record for its clients. Before a session's first
//! change of a CPU, the values it will change are appended (one JSON line, `save`); when the
//! session's settings are put back, `end` is appended. After a crash the next start replays,
//! in reverse order, every `save` without its `end` before it accepts a client.
//!
//! The file, `powerperfd-journal.jsonl` in the state directory (root's, 0700), is created
//! `O_CREAT|O_EXCL|O_NOFOLLOW` mode 0600 and read back only through `O_NOFOLLOW` as root's
//! own regular file with one link, at most [`MAX_JOURNAL_BYTES`]; every saved setting is
//! validated against the sysfs tree (`CpufreqController::validate`) before anything is
//! written. A journal of another boot is set aside: frequencies do not survive a reboot.
//!
//! The journal is compacted (issue 38): when an `end` leaves no session open and the file
//! has grown past [`QUIET_COMPACT_BYTES`], or past [`COMPACT_BYTES`] (twice its last compacted size when that is larger), it
//! is rewritten atomically with only the header and the open saves (a new 0600 file of an
//! unpredictable name, `O_CREAT|O_EXCL|O_NOFOLLOW`, synced, renamed over the journal). A
//! journal is read back line by line, keeping only the saves without their `end`: a file
//! of any size whose sessions all ended never stops the next start.

use anyhow::{Context, Result};
use powerperf_node::controller::{CpufreqController, FrequencyController, Snapshot};
use powerperf_node::gpu_control::{GpuControl, GpuSaved};
use powerperf_node::state;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// File name of the journal in the state directory.
pub const JOURNAL_NAME: &str = "powerperfd-journal.jsonl";
/// The most the open saves of a journal read back may hold, and the longest line (a save
/// is a few hundred bytes per CPU). Ended sessions do not count: a journal is read line by
/// line.
pub const MAX_JOURNAL_BYTES: u64 = 16 << 20;
/// The size past which an `end` that leaves no session open compacts the journal (a few
/// set/restore cycles: not one rewrite per cycle).
pub const QUIET_COMPACT_BYTES: u64 = 4 << 10;
/// The size past which an `end` compacts the journal even while sessions are open (or
/// twice the size of the last compaction, when that is larger).
pub const COMPACT_BYTES: u64 = 16 << 10;

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Entry {
    /// The first line: which daemon, boot and sysfs root.
    Header {
        pid: u32,
        boot_id: Option<String>,
        sysfs_root: PathBuf,
    },
    /// The values a session is about to change (its control, the CPUs), before it changes
    /// them.
    Save {
        session: u64,
        uid: u32,
        pid: i32,
        #[serde(default)]
        job: Option<String>,
        control: String,
        /// Saved sysfs values (cpufreq, uncore); empty for a GPU control.
        #[serde(default)]
        snapshot: Snapshot,
        /// A GPU control's saved state (`gpu.locked_clocks`, `gpu.power_limit`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpu: Option<GpuSaved>,
    },
    /// The session's settings were put back.
    End { session: u64 },
}

/// The open journal.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    /// The header line (the first line of every compacted copy).
    header: Vec<u8>,
    /// The lines of the saves without their `end` yet, in order, by session.
    open: Vec<(u64, Vec<u8>)>,
    /// The file's length.
    len: u64,
    /// The length after the last compaction (or creation).
    compacted_len: u64,
}

/// What a recovery did.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Sessions whose settings were put back.
    pub sessions: Vec<u64>,
    /// The writes done (`path: old -> new`).
    pub writes: Vec<String>,
    /// Why nothing was restored, when so (another boot, no journal).
    pub note: Option<String>,
}

/// The journal's path in `state_dir`.
pub fn path_in(state_dir: &Path) -> PathBuf {
    state_dir.join(JOURNAL_NAME)
}

/// Parse a journal's text: the entries, or the first bad line.
///
/// # Errors
/// A line that is not an entry (its number and the parser's reason).
pub fn parse(text: &str, path: &Path) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        // a line cut by a crash in the middle of a write can only be the last one
        match serde_json::from_str::<Entry>(line) {
            Ok(e) => out.push(e),
            Err(e) if i + 1 == text.lines().count() && !text.ends_with('\n') => {
                tracing::warn!(journal = %path.display(), line = i + 1, error = %e, "ignoring a last line cut short");
            }
            Err(e) => anyhow::bail!(
                "{} line {}: not a journal entry: {e}",
                path.display(),
                i + 1
            ),
        }
    }
    Ok(out)
}

/// The saves to undo, latest first: every `save` whose session has no `end` after it
/// (the sysfs values, and a GPU control's saved state where it has one).
pub fn pending(entries: &[Entry]) -> Vec<(u64, Snapshot, Option<GpuSaved>)> {
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if let Entry::Save {
            session,
            snapshot,
            gpu,
            ..
        } = e
        {
            let ended = entries[i + 1..]
                .iter()
                .any(|x| matches!(x, Entry::End { session: s } if s == session));
            if !ended {
                out.push((*session, snapshot.clone(), gpu.clone()));
            }
        }
    }
    out.reverse();
    out
}

/// Read a journal line by line (each at most [`MAX_JOURNAL_BYTES`]): its first entry when
/// it is the header, and the saves to undo, latest first (as [`pending`]). Only the open
/// saves are kept, so a journal of any length whose sessions ended reads in little memory.
///
/// # Errors
/// A line that is not an entry (a last line cut by a crash is ignored), a line or open saves
/// over [`MAX_JOURNAL_BYTES`], read errors; each names the file.
#[allow(clippy::type_complexity)]
pub fn scan(
    mut r: impl std::io::BufRead,
    path: &Path,
) -> Result<(Option<Entry>, Vec<(u64, Snapshot, Option<GpuSaved>)>)> {
    use std::io::{BufRead as _, Read as _};
    let mut header = None;
    let mut open: Vec<(u64, usize, Snapshot, Option<GpuSaved>)> = Vec::new();
    let mut open_bytes = 0usize;
    let mut buf = Vec::new();
    let max = MAX_JOURNAL_BYTES as usize;
    for n in 1.. {
        buf.clear();
        (&mut r)
            .take(MAX_JOURNAL_BYTES + 1)
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("cannot read the journal {}", path.display()))?;
        if buf.is_empty() {
            break;
        }
        let complete = buf.last() == Some(&b'\n');
        if !complete && buf.len() > max {
            anyhow::bail!(
                "{} line {n}: longer than {MAX_JOURNAL_BYTES} bytes; inspect it, put back what it saved by hand, and move it away",
                path.display()
            );
        }
        let text = String::from_utf8_lossy(&buf);
        if text.trim().is_empty() {
            continue;
        }
        let e = match serde_json::from_str::<Entry>(&text) {
            Ok(e) => e,
            // a line cut by a crash in the middle of a write can only be the last one
            Err(e) if !complete => {
                tracing::warn!(journal = %path.display(), line = n, error = %e, "ignoring a last line cut short");
                break;
            }
            Err(e) => anyhow::bail!("{} line {n}: not a journal entry: {e}", path.display()),
        };
        match e {
            Entry::Save {
                session,
                snapshot,
                gpu,
                ..
            } => {
                open_bytes += buf.len();
                if open_bytes > max {
                    anyhow::bail!(
                        "the journal {} holds more than {MAX_JOURNAL_BYTES} bytes of saves without their end; inspect it, put back what it saved by hand, and move it away",
                        path.display()
                    );
                }
                open.push((session, buf.len(), snapshot, gpu));
            }
            Entry::End { session } => open.retain(|(s, len, ..)| {
                if *s == session {
                    open_bytes -= len;
                }
                *s != session
            }),
            h @ Entry::Header { .. } => {
                if n == 1 {
                    header = Some(h);
                }
            }
        }
    }
    let mut todo: Vec<_> = open.into_iter().map(|(s, _, x, g)| (s, x, g)).collect();
    todo.reverse();
    Ok((header, todo))
}

/// Replay the journal left in `state_dir` (if any) through `ctl`, then remove it. A journal
/// of another boot is removed without writing.
///
/// # Errors
/// The journal cannot be read safely (a link, another owner, open saves over
/// [`MAX_JOURNAL_BYTES`]), a line or a saved
/// setting fails validation (nothing is written then, and the journal is kept), or a
/// write fails (the journal is kept).
pub fn recover(
    state_dir: &Path,
    ctl: Option<&CpufreqController>,
    mut gpu: Option<&mut (dyn GpuControl + 'static)>,
) -> Result<Recovery> {
    let path = path_in(state_dir);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(Recovery {
            note: Some("no journal: nothing to restore".into()),
            ..Default::default()
        });
    }
    let f = state::open_own_read(&path, "powerperfd journal")?;
    let (header, todo) = scan(std::io::BufReader::new(f), &path)?;
    let boot = state::boot_id();
    if let Some(Entry::Header { boot_id, .. }) = &header {
        if boot_id.is_some() && boot.is_some() && *boot_id != boot {
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
            return Ok(Recovery {
                note: Some(format!(
                    "the journal {} is of another boot ({}): CPU frequencies were reset by the reboot; removed",
                    path.display(),
                    boot_id.as_deref().unwrap_or("?")
                )),
                ..Default::default()
            });
        }
    }
    let mut rec = Recovery::default();
    if !todo.is_empty() {
        let no_ctl = || {
            format!(
                "the journal {} has settings to put back but there is no cpufreq under the sysfs root; start powerperfd with the --sysfs-root it used, or move the journal away",
                path.display()
            )
        };
        let no_gpu = || {
            format!(
                "the journal {} has GPU settings to put back but there is no GPU control; start powerperfd with the --fake-gpu it used (or on the node with the GPUs), or move the journal away",
                path.display()
            )
        };
        let failed = |s: &u64| {
            format!(
                "the journal {} (session {s}) fails validation; nothing was written. Inspect it, put the settings back by hand, and move it away",
                path.display()
            )
        };
        // everything is validated before the first write
        for (s, snap, g) in &todo {
            if !snap.files.is_empty() {
                ctl.with_context(no_ctl)?
                    .validate(snap)
                    .with_context(|| failed(s))?;
            }
            if let Some(g) = g {
                gpu.as_deref()
                    .with_context(no_gpu)?
                    .validate(g)
                    .with_context(|| failed(s))?;
            }
        }
        let mut c = ctl.cloned();
        for (s, snap, g) in &todo {
            let kept = || {
                format!(
                    "restoring session {s} from the journal {} failed; it is kept",
                    path.display()
                )
            };
            if let Some(c) = c.as_mut().filter(|_| !snap.files.is_empty()) {
                let w = c.restore(snap).with_context(kept)?;
                rec.writes.extend(w.iter().map(|x| x.to_string()));
            }
            if let (Some(g), Some(gc)) = (g, gpu.as_deref_mut()) {
                rec.writes.push(gc.restore(g).with_context(kept)?);
            }
            if !rec.sessions.contains(s) {
                rec.sessions.push(*s);
            }
        }
    }
    std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    Ok(rec)
}

impl Journal {
    /// Create a new journal in `state_dir` (none may be there: [`recover`] first).
    ///
    /// # Errors
    /// Something is at the path, or it cannot be created.
    pub fn create(state_dir: &Path, sysfs_root: &Path) -> Result<Self> {
        let path = path_in(state_dir);
        let file = state::create_new(&path).with_context(|| {
            format!(
                "cannot create the journal {} (O_EXCL|O_NOFOLLOW): remove what is at that path",
                path.display()
            )
        })?;
        let header = line_of(&Entry::Header {
            pid: std::process::id(),
            boot_id: state::boot_id(),
            sysfs_root: sysfs_root.to_path_buf(),
        })?;
        let mut j = Journal {
            file,
            path,
            header: header.clone(),
            open: Vec::new(),
            len: 0,
            compacted_len: 0,
        };
        j.write_line(&header)?;
        j.compacted_len = j.len;
        Ok(j)
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journal's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the journal holds nothing (never: it has its header).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sessions with saves not ended.
    pub fn open_sessions(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.open.iter().map(|(s, _)| *s).collect();
        v.dedup();
        v
    }

    fn write_line(&mut self, line: &[u8]) -> Result<()> {
        self.file
            .write_all(line)
            .with_context(|| format!("cannot append to the journal {}", self.path.display()))?;
        self.len += line.len() as u64;
        Ok(())
    }

    /// Append one entry (one `write(2)` of one line). After an `end` that leaves no session
    /// open, or past [`COMPACT_BYTES`], the journal is compacted ([`Journal::compact`]);
    /// a compaction that fails is logged and the journal kept as it is.
    ///
    /// # Errors
    /// The write failed.
    pub fn append(&mut self, e: &Entry) -> Result<()> {
        let line = line_of(e)?;
        self.write_line(&line)?;
        match e {
            Entry::Save { session, .. } => self.open.push((*session, line)),
            Entry::End { session } => {
                self.open.retain(|(s, _)| s != session);
                let limit = COMPACT_BYTES.max(2 * self.compacted_len);
                if (self.open.is_empty() && self.len > QUIET_COMPACT_BYTES) || self.len >= limit {
                    if let Err(err) = self.compact() {
                        tracing::warn!(journal = %self.path.display(), error = %format!("{err:#}"), "cannot compact the journal; it is kept as it is");
                    }
                }
            }
            Entry::Header { .. } => {}
        }
        Ok(())
    }

    /// Rewrite the journal with only its header and the open saves: a new file of an
    /// unpredictable name in the state directory (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600),
    /// written, synced, then renamed over the journal (atomic: a crash leaves the old
    /// journal or the new one).
    ///
    /// # Errors
    /// The new file cannot be created, written or renamed (it is removed then).
    pub fn compact(&mut self) -> Result<()> {
        let dir = self
            .path
            .parent()
            .context("the journal has no directory")?
            .to_path_buf();
        let mut text = self.header.clone();
        for (_, l) in &self.open {
            text.extend_from_slice(l);
        }
        let mut last = None;
        for _ in 0..16 {
            let tmp = dir.join(format!(
                ".{JOURNAL_NAME}.{:016x}.tmp",
                powerperf_node::safe_file::random_u64()
            ));
            let mut f = match state::create_new(&tmp) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    last = Some(e);
                    continue;
                }
                Err(e) => {
                    return Err(
                        anyhow::Error::new(e).context(format!("cannot create {}", tmp.display()))
                    )
                }
            };
            let r = f
                .write_all(&text)
                .and_then(|()| f.sync_data())
                .and_then(|()| std::fs::rename(&tmp, &self.path));
            if let Err(e) = r {
                let _ = std::fs::remove_file(&tmp);
                return Err(anyhow::Error::new(e).context(format!(
                    "cannot compact the journal {}",
                    self.path.display()
                )));
            }
            self.file = f;
            self.len = text.len() as u64;
            self.compacted_len = self.len;
            return Ok(());
        }
        Err(anyhow::anyhow!(
            "no temporary file could be created in {}: {last:?}",
            dir.display()
        ))
    }
}

/// One entry as its journal line.
fn line_of(e: &Entry) -> Result<Vec<u8>> {
    let mut line = serde_json::to_vec(e)?;
    line.push(b'\n');
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use powerperf_node::controller::SavedFile;

    fn snap(v: &str) -> Snapshot {
        Snapshot {
            files: vec![SavedFile {
                path: "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor".into(),
                value: v.into(),
            }],
        }
    }

    #[test]
    fn pending_saves_are_the_unended_ones_latest_first() {
        let save = |session, v: &str| Entry::Save {
            session,
            uid: 1,
            pid: 2,
            job: None,
            control: "cpu.core_freq".into(),
            snapshot: snap(v),
            gpu: None,
        };
        let e = vec![
            save(1, "a"),
            save(2, "b"),
            Entry::End { session: 1 },
            save(3, "c"),
            save(2, "d"),
        ];
        let p = pending(&e);
        let got: Vec<(u64, &str)> = p
            .iter()
            .map(|(s, x, _)| (*s, x.files[0].value.as_str()))
            .collect();
        assert_eq!(got, [(2, "d"), (3, "c"), (2, "b")]);
    }

    #[test]
    fn bad_lines_are_refused_and_a_cut_last_line_is_ignored() {
        let p = Path::new("j");
        let ok = "{\"kind\":\"end\",\"session\":1}\n{\"kind\":\"end\",\"ses";
        assert_eq!(parse(ok, p).unwrap().len(), 1);
        let bad = "{\"kind\":\"rm\",\"path\":\"/etc\"}\n{\"kind\":\"end\",\"session\":1}\n";
        assert!(parse(bad, p).unwrap_err().to_string().contains("line 1"));
    }

    fn copy_tree(src: &Path, dst: &Path) {
        std::fs::create_dir_all(dst).unwrap();
        for e in std::fs::read_dir(src).unwrap().flatten() {
            let to = dst.join(e.file_name());
            if e.path().is_dir() {
                copy_tree(&e.path(), &to);
            } else {
                std::fs::copy(e.path(), &to).unwrap();
            }
        }
    }

    /// A journal left by a killed daemon is replayed latest first; one whose saved setting
    /// fails validation stops the start with nothing written, and is kept.
    #[test]
    fn recovery_replays_valid_saves_and_refuses_a_forged_one() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        copy_tree(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures/sysfs/cpufreq-userspace"),
            &root,
        );
        let state = d.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        let ctl = CpufreqController::open(&root).unwrap();
        let gov = root.join("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
        let save = |session, path: &str, value: &str| Entry::Save {
            session,
            uid: 65534,
            pid: 1,
            job: None,
            control: "cpu.core_freq".into(),
            snapshot: Snapshot {
                files: vec![SavedFile {
                    path: path.into(),
                    value: value.into(),
                }],
            },
            gpu: None,
        };
        let g0 = "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor";
        // a forged entry: nothing is written, the journal stays
        let mut j = Journal::create(&state, &root).unwrap();
        j.append(&save(1, g0, "powersave")).unwrap();
        j.append(&save(
            2,
            "sys/devices/system/cpu/cpu0/cpufreq/../../../../../../etc/x/scaling_governor",
            "performance",
        ))
        .unwrap();
        drop(j);
        let e = format!("{:#}", recover(&state, Some(&ctl), None).unwrap_err());
        assert!(
            e.contains("fails validation") && e.contains("session 2"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&gov).unwrap().trim(), "schedutil");
        assert!(path_in(&state).exists());
        std::fs::remove_file(path_in(&state)).unwrap();
        // valid: session 1 ended, session 3's two saves replayed latest first
        let mut j = Journal::create(&state, &root).unwrap();
        j.append(&save(1, g0, "ondemand")).unwrap();
        j.append(&Entry::End { session: 1 }).unwrap();
        j.append(&save(3, g0, "powersave")).unwrap();
        j.append(&save(3, g0, "performance")).unwrap();
        drop(j);
        let r = recover(&state, Some(&ctl), None).unwrap();
        assert_eq!(r.sessions, [3]);
        // the earliest save (the value before the session's first change) is written last
        assert_eq!(std::fs::read_to_string(&gov).unwrap().trim(), "powersave");
        assert!(!path_in(&state).exists());
    }

    #[test]
    fn a_journal_planted_as_a_link_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("elsewhere");
        std::fs::write(&target, "{\"kind\":\"end\",\"session\":1}\n").unwrap();
        std::os::unix::fs::symlink(&target, path_in(d.path())).unwrap();
        let e = recover(d.path(), None, None).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        // and create never follows it either
        assert!(Journal::create(d.path(), Path::new("/")).is_err());
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "{\"kind\":\"end\",\"session\":1}\n"
        );
    }

    fn private_dir() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    fn save_of(session: u64, value: &str) -> Entry {
        Entry::Save {
            session,
            uid: 65534,
            pid: 1,
            job: None,
            control: "cpu.core_freq".into(),
            snapshot: snap(value),
            gpu: None,
        }
    }

    /// Issue 38: the journal is rewritten with only the open saves; what it says to undo
    /// is the same before and after.
    #[test]
    fn the_journal_is_compacted_keeping_the_open_saves() {
        let d = private_dir();
        let mut j = Journal::create(d.path(), Path::new("/")).unwrap();
        let header = j.len();
        // one session held through 1000 others that set and restored
        j.append(&save_of(1, "powersave")).unwrap();
        for s in 2..1002 {
            j.append(&save_of(s, "ondemand")).unwrap();
            j.append(&Entry::End { session: s }).unwrap();
        }
        let len = std::fs::metadata(j.path()).unwrap().len();
        assert_eq!(len, j.len());
        assert!(len < 2 * COMPACT_BYTES, "{len}");
        let text = std::fs::read_to_string(j.path()).unwrap();
        let (h, todo) = scan(text.as_bytes(), j.path()).unwrap();
        assert!(matches!(h, Some(Entry::Header { .. })));
        assert_eq!(todo.len(), 1);
        assert_eq!(todo[0].0, 1);
        assert_eq!(j.open_sessions(), [1]);
        // the last session ends: the journal is its header again
        j.append(&Entry::End { session: 1 }).unwrap();
        j.compact().unwrap();
        assert_eq!(j.len(), header);
        assert_eq!(std::fs::metadata(j.path()).unwrap().len(), header);
        // 0600, root's own regular file, no temporary left behind
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::symlink_metadata(j.path()).unwrap();
        assert!(m.is_file() && m.permissions().mode() & 0o777 == 0o600);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    /// A journal of ended sessions far larger than MAX_JOURNAL_BYTES is read in little
    /// memory and restores nothing; open saves beyond the limit are refused.
    #[test]
    fn a_long_journal_of_ended_sessions_is_scanned_and_open_saves_are_bounded() {
        let mut text = String::new();
        let line = |e: &Entry| serde_json::to_string(e).unwrap() + "\n";
        let mut s = 0;
        while text.len() < (MAX_JOURNAL_BYTES + (1 << 20)) as usize {
            s += 1;
            text.push_str(&line(&save_of(s, "ondemand")));
            text.push_str(&line(&Entry::End { session: s }));
        }
        let (_, todo) = scan(text.as_bytes(), Path::new("j")).unwrap();
        assert!(todo.is_empty());
        let mut open = String::new();
        let mut s = 0;
        while open.len() <= MAX_JOURNAL_BYTES as usize {
            s += 1;
            open.push_str(&line(&save_of(s, "ondemand")));
        }
        let e = scan(open.as_bytes(), Path::new("j"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("saves without their end"), "{e}");
    }

    /// Issue 38 (Low): replay runs the checks a live request gets: a frequency not in
    /// scaling_available_frequencies, an uncore value off the 100 MHz step, a GPU power
    /// limit below the GPU's range are refused, and nothing is written.
    #[test]
    fn replay_refuses_what_a_live_request_would_refuse() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        copy_tree(&fixtures.join("sysfs/cpufreq-userspace"), &root);
        copy_tree(&fixtures.join("sysfs/intel-uncore"), &root);
        copy_tree(&fixtures.join("fake-gpu"), &d.path().join("gpu"));
        let ctl = CpufreqController::open(&root).unwrap();
        let mut gpu = powerperf_node::gpu_control::FakeGpu::open(&d.path().join("gpu")).unwrap();
        let state = private_dir();
        let cpu0 = "sys/devices/system/cpu/cpu0/cpufreq";
        let unc = "sys/devices/system/cpu/intel_uncore_frequency/package_00_die_00";
        let cases: Vec<(Snapshot, Option<GpuSaved>, &str)> = vec![
            (
                Snapshot {
                    files: vec![SavedFile {
                        path: format!("{cpu0}/scaling_max_freq"),
                        value: "1200400".into(),
                    }],
                },
                None,
                "scaling_available_frequencies",
            ),
            (
                Snapshot {
                    files: vec![SavedFile {
                        path: format!("{unc}/max_freq_khz"),
                        value: "1850000".into(),
                    }],
                },
                None,
                "100 MHz step",
            ),
            (
                Snapshot::default(),
                Some(GpuSaved {
                    gpu: 0,
                    knob: powerperf_node::gpu_control::GpuKnob::PowerLimit,
                    power_limit_w: Some(10.0),
                    sysfs: None,
                }),
                "power limit range",
            ),
        ];
        for (snapshot, g, want) in cases {
            let mut j = Journal::create(state.path(), &root).unwrap();
            j.append(&Entry::Save {
                session: 1,
                uid: 65534,
                pid: 1,
                job: None,
                control: "x".into(),
                snapshot,
                gpu: g,
            })
            .unwrap();
            drop(j);
            let e = format!(
                "{:#}",
                recover(
                    state.path(),
                    Some(&ctl),
                    Some(&mut gpu as &mut (dyn GpuControl + 'static))
                )
                .unwrap_err()
            );
            assert!(
                e.contains("fails validation") && e.contains(want),
                "{want}: {e}"
            );
            std::fs::remove_file(path_in(state.path())).unwrap();
        }
        let max = std::fs::read_to_string(root.join(cpu0).join("scaling_max_freq")).unwrap();
        assert_eq!(max.trim(), "2400000");
        let p = std::fs::read_to_string(d.path().join("gpu/gpu0/power_limit_w")).unwrap();
        assert_eq!(p.trim(), "700");
    }
}
