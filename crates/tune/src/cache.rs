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
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use tunebox_pool::Status;

use crate::results::{ChoiceResult, ResultJson, RunHeader};

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
}

impl CacheLine {
    pub(crate) fn new(
        key: String,
        header: &RunHeader,
        timeout: Duration,
        result: &ChoiceResult,
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
    file: File,
    /// Lines that could not be read (cut short by a kill, or not ours).
    unreadable: usize,
}

impl ResultsCache {
    /// Opens (creating it if needed) the cache at `path` for appending, and reads its lines
    /// unless `fresh`.
    ///
    /// # Errors
    ///
    /// The file cannot be created, read or opened for appending.
    pub(crate) fn open(path: &Path, fresh: bool) -> Result<ResultsCache> {
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
        if !fresh {
            for line in lines {
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
            file,
            unreadable: if fresh { 0 } else { unreadable },
        })
    }

    /// Opens (creating it if needed) the results cache at `path`, and reads what it holds
    /// unless `fresh` (new results are still appended).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Run`]: the file cannot be created, read or opened for appending, or is
    /// not a results cache.
    pub fn load(path: &Path, fresh: bool) -> crate::Result<ResultsCache> {
        ResultsCache::open(path, fresh).map_err(crate::Error::run)
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

    /// The cached result for `key`, if there is one usable with `timeout`.
    pub(crate) fn lookup(&self, key: &str, timeout: Duration) -> Option<&CacheLine> {
        self.entries.get(key).filter(|line| line.usable(timeout))
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

/// The default cache: beside the JSON report (`r.json` → `r.tunebox-cache.jsonl`), else beside
/// the manifest (`m.toml` → `m.tunebox-cache.jsonl`).
pub(crate) fn default_path(manifest: &Path, json: Option<&Path>) -> PathBuf {
    let base = json.unwrap_or(manifest);
    let stem = base
        .file_stem()
        .map_or_else(|| "tunebox".into(), |s| s.to_string_lossy().into_owned());
    base.with_file_name(format!("{stem}.tunebox-cache.jsonl"))
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
            default_path(Path::new("m.toml"), Some(Path::new("out/r.json"))),
            Path::new("out/r.tunebox-cache.jsonl")
        );
    }

    #[test]
    fn other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(&path, "{\n  \"tunebox_version\": \"0.1.0\"\n}\n").unwrap();
        let err = ResultsCache::open(&path, false).unwrap_err();
        assert!(err.to_string().contains("is not a results cache"), "{err}");
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("}\n"));
    }

    #[test]
    fn cut_lines_are_skipped_and_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        std::fs::write(&path, "{\"key\": \"a\", \"trunc").unwrap();
        let cache = ResultsCache::open(&path, false).unwrap();
        assert_eq!(cache.unreadable(), 1);
        assert!(std::fs::read_to_string(&path).unwrap().ends_with('\n'));
    }
}
