//! The results cache: a JSON-lines file with one line per finished choice, appended as each
//! finishes, so that a run that is interrupted (Ctrl-C, a kill, a lost node) or simply run again
//! skips what it already measured.
//!
//! Each line carries the choice's key (see `fingerprint.rs`), the run's header (manifest hash,
//! device, shard, …) and the result, so a cache file is also a results file: `tunebox report` and
//! `tunebox merge` read it. Lines are written with one `write` on a file opened for appending;
//! a line cut short by a kill is skipped when read.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use tunebox_pool::Status;

use crate::results::{ChoiceResult, ResultJson, RunHeader, ShardInfo};

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
        }
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
    file: File,
    /// Lines that could not be read (cut short by a kill, or not ours).
    unreadable: usize,
}

impl ResultsCache {
    /// Opens (creating it if needed) the cache at `path` for appending, and reads its lines
    /// unless `fresh`; then, unless `fresh`, the lines of `others` (caches of the same manifest
    /// written by other runs, such as shards), which are only read.
    ///
    /// # Errors
    ///
    /// The file cannot be created, read or opened for appending.
    pub(crate) fn open(path: &Path, others: &[PathBuf], fresh: bool) -> Result<ResultsCache> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .with_context(|| {
                format!(
                    "cannot open the results cache {}; choose another with --cache PATH, or run \
                     with --no-cache",
                    path.display()
                )
            })?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .with_context(|| format!("cannot read the results cache {}", path.display()))?;
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
        // A line cut short by a kill: end it, so that the next line starts on its own.
        if !text.is_empty() && !text.ends_with('\n') {
            file.seek(SeekFrom::End(0))?;
            file.write_all(b"\n")?;
        }
        Ok(ResultsCache {
            path: path.to_owned(),
            entries,
            borrowed,
            file,
            unreadable: if fresh { 0 } else { unreadable },
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
    pub fn path(&self) -> &Path {
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

    /// Lines that could not be read.
    pub(crate) fn unreadable(&self) -> usize {
        self.unreadable
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
    /// The write fails.
    pub(crate) fn adopt(&mut self, key: &str) -> Result<()> {
        if self.borrowed.remove(key)
            && let Some(line) = self.entries.get(key).cloned()
        {
            self.append(line)?;
        }
        Ok(())
    }

    /// Appends a line (one `write`, so that concurrent appenders do not interleave on a local
    /// file system).
    ///
    /// # Errors
    ///
    /// The write fails (disk full, …).
    pub(crate) fn append(&mut self, line: CacheLine) -> Result<()> {
        let mut text = serde_json::to_string(&line)?;
        text.push('\n');
        self.file.write_all(text.as_bytes()).with_context(|| {
            format!("cannot append to the results cache {}", self.path.display())
        })?;
        self.entries.insert(line.key.clone(), line);
        Ok(())
    }
}

/// The readable lines of a cache file's text, and the number of unreadable ones.
pub(crate) fn parse_lines(text: &str) -> (Vec<CacheLine>, usize) {
    let mut lines = Vec::new();
    let mut unreadable = 0;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<CacheLine>(line) {
            Ok(line) => lines.push(line),
            Err(e) => {
                log::debug!("results cache line {}: {e}", n + 1);
                unreadable += 1;
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
    fn cut_lines_are_skipped_and_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        std::fs::write(&path, "{\"key\": \"a\", \"trunc").unwrap();
        let cache = ResultsCache::open(&path, &[], false).unwrap();
        assert_eq!(cache.unreadable(), 1);
        assert!(std::fs::read_to_string(&path).unwrap().ends_with('\n'));
    }
}
