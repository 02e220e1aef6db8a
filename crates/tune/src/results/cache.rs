//! The results cache: a JSON-lines file with one line per finished choice, appended as each
//! finishes, so that a run that is interrupted (Ctrl-C, a kill, a lost node) or simply run again
//! skips what it already measured.
//!
//! Each line carries the choice's key (see `fingerprint.rs`), the run's header (manifest hash,
//! device, shard, …) and the result, so a cache file is also a results file: `tunebox report` and
//! `tunebox merge` read it. Lines are written with one `write` on a file opened for appending;
//! a line cut short by a kill is skipped when read.
//!
//! A cache that cannot be written (a full or read-only file system) never stops a run: its
//! lines are still read, each result that cannot be written is counted
//! ([`ResultsCache::not_cached`], reported in [`CacheInfo`] and by the CLI's exit status), and a
//! write that fails half-way is taken back, so that a full disk never leaves a cut line.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tunebox_pool::Status;

use crate::results::{CacheInfo, ChoiceResult, ResultJson, RunHeader, ShardInfo};

/// One line of the cache.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CacheLine {
    /// The hash of everything that determines the measurement.
    pub key: String,
    #[serde(flatten)]
    pub header: RunHeader,
    /// The per-choice timeout the result was measured with.
    pub timeout_s: f64,
    /// When the choice finished (seconds since the Unix epoch).
    pub finished_at: u64,
    pub result: ResultJson,
    /// The files a C choice's compile read (and its reference's), as they were: a lookup
    /// reuses the line only while they are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deps: Option<Deps>,
    /// Whether the result's windows are all it gets: `false` for the line written after
    /// screening while rounds are to follow, and for one whose rounds a stop cut short (a
    /// later run gives it the rest); `true` once its rounds are done (or none follow). Absent
    /// in lines of an older tunebox: see [`CacheLine::windows_complete`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows_complete: Option<bool>,
}

/// The files the compiler read for a C choice (every header, however it was found: beside the
/// source, through `-I`, named by a param's define, system headers), from its dependency list,
/// with a hash of their paths and contents when the choice was measured. The key cannot hold
/// them (they are known only after compiling), so a lookup checks them instead, without
/// compiling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Deps {
    /// Absolute paths, in the compiler's order.
    pub files: Vec<String>,
    /// blake3 of the paths and contents (32 hex digits).
    pub hash: String,
}

impl Deps {
    /// `files` (made absolute against the working directory) as they are now; `None` when one
    /// cannot be read.
    pub(crate) fn of(files: &[PathBuf]) -> Option<Deps> {
        let mut absolute: Vec<String> = Vec::with_capacity(files.len());
        for file in files {
            let path = std::path::absolute(file).unwrap_or_else(|_| file.clone());
            let path = path.display().to_string();
            if !absolute.contains(&path) {
                absolute.push(path);
            }
        }
        let digests: Option<Vec<blake3::Hash>> =
            absolute.iter().map(|f| digest(Path::new(f))).collect();
        Some(Deps {
            hash: deps_hash(&absolute, &digests?),
            files: absolute,
        })
    }
}

/// blake3 of a regular file's contents; `None` when it is not one or cannot be read.
fn digest(path: &Path) -> Option<blake3::Hash> {
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut hasher = blake3::Hasher::new();
    hasher
        .update_reader(File::open(path).ok()?)
        .ok()
        .map(|h| h.finalize())
}

fn deps_hash(files: &[String], digests: &[blake3::Hash]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(b"tunebox results deps v1");
    h.update(&(files.len() as u64).to_le_bytes());
    for (file, digest) in files.iter().zip(digests) {
        h.update(&(file.len() as u64).to_le_bytes());
        h.update(file.as_bytes());
        h.update(digest.as_bytes());
    }
    h.finalize().to_hex()[..32].to_owned()
}

/// Checks recorded [`Deps`] against the files as they are now, hashing each file at most once
/// per run (a family's choices read the same headers).
#[derive(Debug, Default)]
pub(crate) struct DepsCheck {
    digests: Mutex<HashMap<String, Option<blake3::Hash>>>,
}

impl DepsCheck {
    /// Whether every file of `deps` still has the contents it had.
    pub(crate) fn current(&self, deps: &Deps) -> bool {
        let mut memo = self.digests.lock().unwrap_or_else(|e| e.into_inner());
        let digests: Option<Vec<blake3::Hash>> = deps
            .files
            .iter()
            .map(|f| {
                *memo
                    .entry(f.clone())
                    .or_insert_with(|| digest(Path::new(f)))
            })
            .collect();
        digests.is_some_and(|d| deps_hash(&deps.files, &d) == deps.hash)
    }
}

impl CacheLine {
    pub(crate) fn new(
        key: String,
        header: &RunHeader,
        timeout: Duration,
        result: &ChoiceResult,
        deps: Option<Deps>,
    ) -> CacheLine {
        let mut result = ResultJson::from_result(result, None);
        result.cached = false;
        CacheLine {
            key,
            header: header.clone(),
            timeout_s: timeout.as_secs_f64(),
            finished_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            result,
            deps,
            windows_complete: None,
        }
    }

    /// The same line, saying whether its windows are complete (see the field).
    pub(crate) fn with_windows_complete(mut self, complete: bool) -> CacheLine {
        self.windows_complete = Some(complete);
        self
    }

    /// Whether this line's windows are all its choice gets in a run of `windows` windows per
    /// choice. A line of an older tunebox does not say: one measured `ok` in a single window
    /// where rounds follow is taken as cut short (its rounds may have been interrupted).
    pub(crate) fn windows_complete(&self, windows: usize) -> bool {
        self.windows_complete.unwrap_or_else(|| {
            let measured = self
                .result
                .windows
                .as_ref()
                .map_or(0, |w| w.medians_ms.len());
            windows <= 1 || self.result.status != Status::Ok.as_str() || measured != 1
        })
    }

    /// Whether this line answers for a run whose timeout is `timeout`: always, except a timeout
    /// measured with a shorter limit (the choice may finish within a longer one).
    fn usable(&self, timeout: Duration) -> bool {
        self.result.status != Status::Timeout.as_str()
            || self.timeout_s + 1e-9 >= timeout.as_secs_f64()
    }
}

/// An open results cache: a JSON-lines file of finished choices, by key, appended as each
/// finishes ([`crate::lookup_cached`] reads it; `tunebox report` and `tunebox merge` read the
/// file).
#[derive(Debug)]
pub struct ResultsCache {
    path: PathBuf,
    /// The last usable line of each key.
    entries: HashMap<String, CacheLine>,
    /// Keys whose line came from another file (`others` of [`ResultsCache::open`]).
    borrowed: std::collections::HashSet<String>,
    /// The file, open for appending; `None` when it cannot be written (`unwritable` says why).
    file: Option<File>,
    /// Why the file cannot be opened for appending (read-only file system, no permission, …).
    unwritable: Option<String>,
    /// The file ends in a line cut short (by a kill): the next line written starts with a
    /// newline of its own, so that it is read.
    cut: bool,
    /// Lines that could not be read.
    unreadable: Unreadable,
    /// Results of this run that could not be written.
    not_cached: usize,
    /// Why the first of them could not, with the fix.
    not_cached_reason: Option<String>,
}

/// The lines of a cache file that could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Unreadable {
    /// The last line, unterminated and unreadable: cut short while it was written.
    pub cut_last: bool,
    /// Other lines that are not results tunebox can read.
    pub other: usize,
}

impl Unreadable {
    pub(crate) fn total(self) -> usize {
        self.other + usize::from(self.cut_last)
    }
}

/// What happened when `path` could not be written (`error`), and the fix, in words.
fn write_failure(path: &Path, error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    let what = match error.kind() {
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => {
            "its file system is full (or over quota); free space there, or give --cache a path \
             on another file system"
        }
        ErrorKind::ReadOnlyFilesystem => {
            "its file system is read-only; give --cache a writable path, or run with --no-cache"
        }
        ErrorKind::PermissionDenied => {
            "it may not be written (permissions); give --cache a writable path, or run with \
             --no-cache"
        }
        _ => "give --cache another path, or run with --no-cache",
    };
    format!(
        "cannot write the results cache {} ({error}): {what}",
        path.display()
    )
}

/// Appends `text` to `file` in one `write`; when the write fails part-way, cuts the file back
/// to its length before (truncating needs no free space), and says whether that failed too
/// (the file may then end in a cut line).
fn append_text(file: &mut File, text: &[u8]) -> Result<(), (std::io::Error, bool)> {
    let before = file.metadata().map(|m| m.len()).ok();
    file.write_all(text).map_err(|e| {
        let taken_back = before.is_some_and(|len| file.set_len(len).is_ok());
        (e, !taken_back)
    })
}

impl ResultsCache {
    /// Opens (creating it if needed) the cache at `path` for appending, and reads its lines
    /// unless `fresh`; then, unless `fresh`, the lines of `others` (caches of the same manifest
    /// written by other runs, such as shards), which are only read.
    ///
    /// A file that cannot be created or opened for appending (a read-only or full file system,
    /// no permission) is only read, and [`ResultsCache::notes`] says that results will not be
    /// kept; nothing is written when the file is opened (a line cut short by a kill is ended by
    /// the next line written).
    ///
    /// # Errors
    ///
    /// `path` is a directory, or holds something other than a results cache (never appended
    /// to).
    pub(crate) fn open(path: &Path, others: &[PathBuf], fresh: bool) -> Result<ResultsCache> {
        anyhow::ensure!(
            !path.is_dir(),
            "the results cache {} is a directory; give --cache a file's path, or run with \
             --no-cache",
            path.display()
        );
        let (mut file, unwritable) = match OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
        {
            Ok(file) => (Some(file), None),
            Err(e) => (None, Some(write_failure(path, &e))),
        };
        let text = read_text(path, file.as_mut());
        // Never append to a file that is something else (a JSON report given as --cache).
        anyhow::ensure!(
            text.trim().is_empty() || text.trim_start().starts_with("{\"key\""),
            "{} is not a results cache (its lines are not tunebox's); give --cache a new path, \
             or run with --no-cache",
            path.display()
        );
        let (lines, unreadable) = parse_lines(&text);
        let mut entries = HashMap::new();
        let mut borrowed = std::collections::HashSet::new();
        if !fresh {
            // Other runs' lines first, so that this file's own win for a key both have.
            for other in others {
                let Ok(text) = std::fs::read_to_string(other) else {
                    continue;
                };
                if text.trim_start().starts_with("{\"key\"") {
                    for line in parse_lines(&text).0 {
                        borrowed.insert(line.key.clone());
                        entries.insert(line.key.clone(), line);
                    }
                }
            }
            for line in lines {
                borrowed.remove(&line.key);
                entries.insert(line.key.clone(), line);
            }
        }
        Ok(ResultsCache {
            path: path.to_owned(),
            entries,
            borrowed,
            file,
            unwritable,
            cut: !text.is_empty() && !text.ends_with('\n'),
            unreadable: if fresh {
                Unreadable::default()
            } else {
                unreadable
            },
            not_cached: 0,
            not_cached_reason: None,
        })
    }

    /// Opens (creating it if needed) the results cache at `path`, and reads what it holds
    /// unless `fresh` (new results are still appended).
    ///
    /// # Errors
    ///
    /// [`crate::TuneError::Run`]: the file cannot be created, read or opened for appending, or is
    /// not a results cache.
    pub fn load(path: &Path, fresh: bool) -> crate::Result<ResultsCache> {
        ResultsCache::open(path, &[], fresh).map_err(crate::TuneError::run)
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// How many distinct choices it holds (none when opened `fresh`).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What the user should know about the file as it was opened: lines it could not read
    /// (and why they are there). That it cannot be written is [`ResultsCache::unwritable`].
    pub(crate) fn notes(&self) -> Vec<String> {
        let path = self.path.display();
        let mut notes = Vec::new();
        if self.unreadable.cut_last {
            notes.push(format!(
                "the last line of the results cache {path} was cut short while it was written \
                 (the run writing it was killed, or its disk was full): it was ignored, and its \
                 choice measured again"
            ));
        }
        if self.unreadable.other > 0 {
            notes.push(format!(
                "{} lines of the results cache {path} are not results this tunebox can read \
                 (edited, or written by another version) and were ignored; --fresh re-measures \
                 everything",
                self.unreadable.other
            ));
        }
        notes
    }

    /// That the file cannot be written (opened for appending), why, and the fix; `None` when it
    /// can be.
    pub(crate) fn unwritable(&self) -> Option<String> {
        self.unwritable.as_ref().map(|reason| {
            format!("{reason}; this run's results are not kept (what the file holds is still used)")
        })
    }

    /// How many results of this run could not be written (a full or read-only file system),
    /// and why the first could not, with the fix: a re-run measures them again.
    pub(crate) fn not_cached(&self) -> (usize, Option<&str>) {
        (self.not_cached, self.not_cached_reason.as_deref())
    }

    /// What a report says of this cache: its path, the `hits` a run took from it, and the
    /// results that could not be kept.
    pub(crate) fn info(&self, hits: usize) -> CacheInfo {
        CacheInfo {
            path: self.path.display().to_string(),
            hits,
            not_cached: self.not_cached,
            not_cached_reason: self.not_cached_reason.clone(),
        }
    }

    /// The cached result for `key`, if there is one usable with `timeout`. With `deps` (a C
    /// kernel), only a line whose recorded headers are unchanged: a line without them (a
    /// compile error, whose compiler listed nothing, or a line of an older tunebox) is compiled
    /// again.
    pub(crate) fn lookup(
        &self,
        key: &str,
        timeout: Duration,
        deps: Option<&DepsCheck>,
    ) -> Option<&CacheLine> {
        self.entries.get(key).filter(|line| {
            line.usable(timeout)
                && deps.is_none_or(|check| line.deps.as_ref().is_some_and(|d| check.current(d)))
        })
    }

    /// Copies the line of `key` into this file when it came from another one, so that this
    /// file holds every result of the run that uses it (a cache is also a results file).
    ///
    /// # Errors
    ///
    /// The write fails (the line stays in the other file, and is copied by a later run).
    pub(crate) fn adopt(&mut self, key: &str) -> Result<()> {
        if self.borrowed.contains(key)
            && let Some(line) = self.entries.get(key)
        {
            let text = self.line_text(line)?;
            self.write(&text).map_err(anyhow::Error::msg)?;
            self.borrowed.remove(key);
        }
        Ok(())
    }

    /// Appends a line (one `write`, so that concurrent appenders do not interleave on a local
    /// file system). A line that cannot be written is counted ([`ResultsCache::not_cached`])
    /// and still answers this run's lookups; every later line is tried again (space may have
    /// been freed).
    ///
    /// # Errors
    ///
    /// The first line of the run that cannot be written (disk full, read-only, …), saying what
    /// happened and the fix; later failures are only counted.
    pub(crate) fn append(&mut self, line: CacheLine) -> Result<()> {
        let text = self.line_text(&line)?;
        self.borrowed.remove(&line.key);
        self.entries.insert(line.key.clone(), line);
        match self.write(&text) {
            Ok(()) => Ok(()),
            Err(reason) => {
                self.not_cached += 1;
                if self.not_cached_reason.is_some() {
                    return Ok(());
                }
                self.not_cached_reason = Some(reason.clone());
                anyhow::bail!(
                    "{reason}; results that cannot be written are counted, and a re-run \
                     measures them again"
                )
            }
        }
    }

    /// Appends `line` in place of a line of the same key this run wrote already (a result
    /// measured in rounds, now with all its windows; the last line of a key wins). A write that
    /// fails is not counted: the earlier line keeps the result, with fewer windows.
    ///
    /// # Errors
    ///
    /// The write fails.
    pub(crate) fn update(&mut self, line: CacheLine) -> Result<()> {
        let text = self.line_text(&line)?;
        self.entries.insert(line.key.clone(), line);
        self.write(&text)
            .map_err(|reason| anyhow::anyhow!("{reason}"))
    }

    /// `line` as the text to append: after a cut line, on a line of its own.
    fn line_text(&self, line: &CacheLine) -> Result<String> {
        let mut text = String::from(if self.cut { "\n" } else { "" });
        text.push_str(&serde_json::to_string(line)?);
        text.push('\n');
        Ok(text)
    }

    /// Appends `text`, or says why it could not be, with the fix.
    fn write(&mut self, text: &str) -> Result<(), String> {
        let Some(file) = self.file.as_mut() else {
            return Err(self.unwritable.clone().unwrap_or_else(|| {
                format!("cannot write the results cache {}", self.path.display())
            }));
        };
        match append_text(file, text.as_bytes()) {
            Ok(()) => {
                self.cut = false;
                Ok(())
            }
            Err((error, left_cut)) => {
                self.cut |= left_cut;
                Err(write_failure(&self.path, &error))
            }
        }
    }
}

#[cfg(test)]
impl ResultsCache {
    /// Writes go to `file` from now on (`/dev/full` stands in for a full disk).
    pub(crate) fn write_to(&mut self, file: File) {
        self.file = Some(file);
    }
}

/// The text of the cache at `path` (read through `file` when it is open): empty when there is
/// none, or it cannot be read (then it is not used either).
fn read_text(path: &Path, file: Option<&mut File>) -> String {
    let mut text = String::new();
    let read = match file {
        Some(file) => file.read_to_string(&mut text).map(|_| ()),
        None => std::fs::read_to_string(path).map(|t| text = t),
    };
    match read {
        Ok(()) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            log::warn!("cannot read the results cache {}: {e}", path.display());
            String::new()
        }
    }
}

/// The readable lines of a cache file's text, and those that could not be read.
pub(crate) fn parse_lines(text: &str) -> (Vec<CacheLine>, Unreadable) {
    let mut lines = Vec::new();
    let mut unreadable = Unreadable::default();
    let mut rows = text.lines().enumerate().peekable();
    while let Some((n, line)) = rows.next() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<CacheLine>(line) {
            Ok(line) => lines.push(line),
            Err(e) => {
                log::debug!("results cache line {}: {e}", n + 1);
                if rows.peek().is_none() && !text.ends_with('\n') {
                    unreadable.cut_last = true;
                } else {
                    unreadable.other += 1;
                }
            }
        }
    }
    (lines, unreadable)
}

/// The default cache, which belongs to the manifest whatever the report's name: beside it
/// (`m.toml` → `m.tunebox-cache.jsonl`), or for a shard `m.shard-K-of-N.tunebox-cache.jsonl`
/// (one writer per file, also on a shared file system).
pub(crate) fn default_path(manifest: &Path, shard: Option<ShardInfo>) -> PathBuf {
    let stem = manifest_stem(manifest);
    manifest.with_file_name(match shard {
        None => format!("{stem}.tunebox-cache.jsonl"),
        Some(s) => format!(
            "{stem}.shard-{}-of-{}.tunebox-cache.jsonl",
            s.index, s.count
        ),
    })
}

/// The other default caches of the manifest (the unsharded one and every shard's) that exist,
/// besides `own`: a run reads what they hold too.
pub(crate) fn sibling_paths(manifest: &Path, own: &Path) -> Vec<PathBuf> {
    let stem = manifest_stem(manifest);
    let dir = match manifest.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let shard_prefix = format!("{stem}.shard-");
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name == format!("{stem}.tunebox-cache.jsonl")
                || (name.starts_with(&shard_prefix) && name.ends_with(".tunebox-cache.jsonl"))
        })
        .map(|e| manifest.with_file_name(e.file_name()))
        .filter(|p| p.file_name() != own.file_name())
        .collect();
    paths.sort();
    paths
}

fn manifest_stem(manifest: &Path) -> String {
    manifest
        .file_stem()
        .map_or_else(|| "tunebox".into(), |s| s.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_paths() {
        assert_eq!(
            default_path(Path::new("examples/m.toml"), None),
            Path::new("examples/m.tunebox-cache.jsonl")
        );
        assert_eq!(
            default_path(Path::new("m.toml"), Some(ShardInfo { index: 2, count: 8 })),
            Path::new("m.shard-2-of-8.tunebox-cache.jsonl")
        );
    }

    #[test]
    fn recorded_headers_are_checked_as_they_are_now() {
        let dir = tempfile::tempdir().unwrap();
        let header = dir.path().join("h.h");
        std::fs::write(&header, "1").unwrap();
        let deps = Deps::of(std::slice::from_ref(&header)).unwrap();
        assert!(DepsCheck::default().current(&deps));
        std::fs::write(&header, "2").unwrap();
        assert!(!DepsCheck::default().current(&deps), "edited");
        std::fs::remove_file(&header).unwrap();
        assert!(!DepsCheck::default().current(&deps), "deleted");
        assert_eq!(Deps::of(&[header]), None);
    }

    #[test]
    fn other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(&path, "{\n  \"tunebox_version\": \"0.1.0\"\n}\n").unwrap();
        let err = ResultsCache::open(&path, &[], false).unwrap_err();
        assert!(err.to_string().contains("is not a results cache"), "{err}");
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("}\n"));
    }

    #[test]
    fn cut_lines_are_skipped_and_ended_by_the_next_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        std::fs::write(&path, "{\"key\": \"a\", \"trunc").unwrap();
        let mut cache = ResultsCache::open(&path, &[], false).unwrap();
        assert_eq!(cache.unreadable.total(), 1);
        let notes = cache.notes();
        assert!(notes[0].contains("cut short") && notes[0].contains("disk was full"));
        assert_eq!(cache.unwritable(), None);
        // Opening writes nothing (a full disk cannot stop a run there).
        assert!(!std::fs::read_to_string(&path).unwrap().ends_with('\n'));
        cache.append(line("b")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let (lines, unreadable) = parse_lines(&text);
        assert_eq!(lines.len(), 1);
        assert_eq!(
            unreadable,
            Unreadable {
                cut_last: false,
                other: 1
            }
        );
    }

    fn line(key: &str) -> CacheLine {
        let result = ChoiceResult::failed(
            0,
            crate::space::Choice::new(Default::default()),
            Status::CompileError,
            "e".into(),
            "cpu",
        );
        let header = RunHeader::for_tests(1);
        CacheLine::new(key.into(), &header, Duration::from_secs(1), &result, None)
    }

    /// A file that cannot be opened for writing is read, never an error; each result that
    /// cannot be written is counted, and the first says why.
    #[test]
    fn an_unwritable_cache_is_read_and_its_losses_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        let mut cache = ResultsCache::open(&path, &[], false).unwrap();
        cache.append(line("a")).unwrap();
        drop(cache);
        // As a read-only file system does: the file is there, but cannot be opened to append.
        let mut cache = ResultsCache::open(&path, &[], false).unwrap();
        cache.file = None;
        cache.unwritable = Some(write_failure(
            &path,
            &std::io::Error::from(std::io::ErrorKind::ReadOnlyFilesystem),
        ));
        assert_eq!(cache.len(), 1);
        let first = cache.append(line("b")).unwrap_err().to_string();
        assert!(
            first.contains("read-only") && first.contains("--cache"),
            "{first}"
        );
        cache.append(line("c")).unwrap();
        assert_eq!(cache.not_cached().0, 2);
        assert_eq!(cache.info(1).not_cached, 2);
        assert!(cache.lookup("c", Duration::from_secs(1), None).is_some());
    }

    /// `/dev/full` fails every write with ENOSPC, as a full disk does.
    #[test]
    fn a_full_disk_is_named_with_its_fix() {
        let Ok(mut full) = OpenOptions::new().append(true).open("/dev/full") else {
            return;
        };
        let (error, _) = append_text(&mut full, b"{}\n").unwrap_err();
        let text = write_failure(Path::new("c.jsonl"), &error);
        assert!(text.contains("file system is full"), "{text}");
        assert!(text.contains("free space"), "{text}");
    }
}
