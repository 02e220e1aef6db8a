//! The dependency file: the headers the compiler read (its `-MD` output), and their digests,
//! which key an artifact's variant; a header that changed during the compile is not recorded.

use std::collections::HashSet;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tunebox_protocol::CKernel;

use crate::CpuError;
use crate::cache;
use crate::error::io_err;

/// File timestamps come from a coarse clock (one kernel tick, up to 10 ms, behind the real time):
/// a file whose timestamp is this close before a compilation started may have been written after
/// the compiler read it.
pub(crate) const TIMESTAMP_SLACK: Duration = Duration::from_millis(20);

/// A dependency that changed while the compiler may have been reading it.
#[derive(Debug)]
pub(crate) struct Changed {
    pub(crate) path: PathBuf,
    /// Its newest timestamp, if it still exists.
    pub(crate) stamp: Option<SystemTime>,
}

/// The files the compiler read, from the dependency file it wrote, without the temporary source
/// itself and without repeats, in the compiler's order.
pub(crate) fn read_dependencies(
    kernel: &CKernel,
    depfile: &Path,
    source: &Path,
) -> Result<Vec<PathBuf>, CpuError> {
    let no_deps = || CpuError::NoDependencies {
        compiler: kernel.compiler.clone(),
        path: depfile.to_path_buf(),
    };
    let text = match std::fs::read(depfile) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_deps()),
        Err(e) => {
            return Err(io_err(
                "read the dependency list the C compiler wrote to",
                depfile,
            )(e));
        }
    };
    let mut deps = parse_depfile(&text).ok_or_else(no_deps)?;
    let before = deps.len();
    deps.retain(|d| d != source);
    if deps.len() == before {
        log::warn!(
            "cpu: the dependency list of `{}` does not name its source `{}`",
            kernel.source_name,
            source.display()
        );
    }
    let mut seen = HashSet::new();
    deps.retain(|d| seen.insert(d.clone()));
    Ok(deps)
}

/// The digest of each of `deps`' contents, in order; `Err(Changed)` when one was modified (or
/// its status changed) at or after `started` (less [`TIMESTAMP_SLACK`]) and before its digest
/// was taken, or is gone, since then the object may have been built from other contents.
/// Timestamps after the check (a clock ahead of ours) are not a change.
pub(crate) fn digest_dependencies(
    deps: &[PathBuf],
    started: SystemTime,
) -> Result<Result<Vec<blake3::Hash>, Changed>, CpuError> {
    let since = started.checked_sub(TIMESTAMP_SLACK).unwrap_or(started);
    let mut digests = Vec::with_capacity(deps.len());
    let mut stamps = Vec::with_capacity(deps.len());
    for path in deps {
        let gone = || Changed {
            path: path.clone(),
            stamp: None,
        };
        let digest = match cache::file_digest(path) {
            Ok(digest) => digest,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Err(gone())),
            Err(e) => return Err(io_err("read the included file", path)(e)),
        };
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Err(gone())),
            Err(e) => return Err(io_err("read the status of", path)(e)),
        };
        digests.push(digest);
        stamps.push(newest_stamp(&metadata));
    }
    let checked = SystemTime::now();
    for (path, stamp) in deps.iter().zip(stamps) {
        if stamp >= since && stamp <= checked {
            return Ok(Err(Changed {
                path: path.clone(),
                stamp: Some(stamp),
            }));
        }
    }
    Ok(Ok(digests))
}

/// The later of a file's modification and status-change times.
fn newest_stamp(metadata: &std::fs::Metadata) -> SystemTime {
    let at = |secs: i64, nanos: i64| {
        let (Ok(secs), Ok(nanos)) = (u64::try_from(secs), u32::try_from(nanos)) else {
            return SystemTime::UNIX_EPOCH;
        };
        SystemTime::UNIX_EPOCH + Duration::new(secs, nanos)
    };
    at(metadata.mtime(), metadata.mtime_nsec()).max(at(metadata.ctime(), metadata.ctime_nsec()))
}

/// The prerequisites of the first rule of a Makefile-style dependency file as gcc and clang write
/// it for `-MD`: `target…: prerequisite… \` continued over lines. The targets end at the first
/// `:` followed by white space or the end of the line (a `:` inside a path, as in a cache directory
/// named `a:b`, is followed by more of the path). Decodes the escapes of both compilers: `\ ` is a
/// space inside a name (and `2n+1` backslashes before a space are `n` backslashes and a space),
/// `\#` is `#`, `$$` is `$`; a backslash before a newline continues the line. Other rules (from a
/// user's `-MP`) are ignored. `None` when there is no rule.
pub(crate) fn parse_depfile(text: &[u8]) -> Option<Vec<PathBuf>> {
    let mut rule = Rule {
        tokens: Vec::new(),
        token: Vec::new(),
        in_targets: true,
    };
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'\\' => i = rule.backslashes(text, i),
            b'$' if text.get(i + 1) == Some(&b'$') => {
                rule.token.push(b'$');
                i += 2;
            }
            b' ' | b'\t' | b'\r' => {
                rule.end_token();
                i += 1;
            }
            b'\n' => {
                rule.end_token();
                if !rule.in_targets {
                    break;
                }
                i += 1;
            }
            b':' if rule.in_targets
                && matches!(text.get(i + 1), None | Some(b' ' | b'\t' | b'\r' | b'\n')) =>
            {
                rule.end_token();
                rule.tokens.clear();
                rule.in_targets = false;
                i += 1;
            }
            b => {
                rule.token.push(b);
                i += 1;
            }
        }
    }
    rule.end_token();
    (!rule.in_targets).then(|| {
        rule.tokens
            .into_iter()
            .map(cache::path_from_bytes)
            .collect()
    })
}

/// The first rule of a dependency file as it is read: its names so far (the targets' until
/// its `:`, then the prerequisites'), the name being read, and whether the `:` is still to
/// come.
struct Rule {
    tokens: Vec<Vec<u8>>,
    token: Vec<u8>,
    in_targets: bool,
}

impl Rule {
    /// Ends the name being read, if any.
    fn end_token(&mut self) {
        if !self.token.is_empty() {
            self.tokens.push(std::mem::take(&mut self.token));
        }
    }

    /// Reads the run of backslashes at `text[i]` with what follows it (an escaped space or
    /// `#`, a continued line, or backslashes as they are); returns where reading goes on.
    fn backslashes(&mut self, text: &[u8], i: usize) -> usize {
        let run = text[i..].iter().take_while(|&&b| b == b'\\').count();
        let next = text.get(i + run).copied();
        match next {
            Some(b' ' | b'\t') => {
                self.token.extend(std::iter::repeat_n(b'\\', run / 2));
                if run % 2 == 1 {
                    self.token.extend(next);
                } else {
                    self.end_token();
                }
                i + run + 1
            }
            Some(b'#') => {
                self.token.extend(std::iter::repeat_n(b'\\', run - 1));
                self.token.push(b'#');
                i + run + 1
            }
            Some(b'\n') => {
                self.token.extend(std::iter::repeat_n(b'\\', run - 1));
                self.end_token();
                i + run + 1
            }
            Some(b'\r') if text.get(i + run + 1) == Some(&b'\n') => {
                self.token.extend(std::iter::repeat_n(b'\\', run - 1));
                self.end_token();
                i + run + 2
            }
            _ => {
                self.token.extend(std::iter::repeat_n(b'\\', run));
                i + run
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn depfile_as_gcc_writes_it() {
        // gcc 12, for a cache directory and an include directory named `a b#c$d:e`.
        let text =
            b"a\\ b\\#c$$d:e/o\\ x.so: a\\ b\\#c$$d:e/src\\ x.c /usr/include/stdc-predef.h \\\n \
                     /usr/include/stdint.h \\\n /usr/include/features.h a\\ b\\#c$$d:e/v\\ h.h\n";
        assert_eq!(
            parse_depfile(text).unwrap(),
            paths(&[
                "a b#c$d:e/src x.c",
                "/usr/include/stdc-predef.h",
                "/usr/include/stdint.h",
                "/usr/include/features.h",
                "a b#c$d:e/v h.h",
            ])
        );
    }

    #[test]
    fn depfile_edge_cases() {
        // CRLF line ends and continuations; several targets; no trailing newline.
        assert_eq!(
            parse_depfile(b"t1 t2: a.c \\\r\n  b.h\r\n").unwrap(),
            paths(&["a.c", "b.h"])
        );
        assert_eq!(
            parse_depfile(b"t: a.c b.h").unwrap(),
            paths(&["a.c", "b.h"])
        );
        // Phony rules from a user's `-MP` are not prerequisites.
        assert_eq!(
            parse_depfile(b"t: a.c b.h\n\nb.h:\n").unwrap(),
            paths(&["a.c", "b.h"])
        );
        // Backslashes: 2n+1 before a space are n and a space, 2n end the name after n; others
        // are literal; `\#` is `#`.
        assert_eq!(
            parse_depfile(b"t: a\\\\\\ b c\\\\ d\\e f\\#g\n").unwrap(),
            paths(&["a\\ b", "c\\", "d\\e", "f#g"])
        );
        // A single `$` is literal; `$$` is one.
        assert_eq!(parse_depfile(b"t: $a $$b\n").unwrap(), paths(&["$a", "$b"]));
        // A target with no prerequisites; no rule at all.
        assert_eq!(parse_depfile(b"t:\n").unwrap(), paths(&[]));
        assert_eq!(parse_depfile(b""), None);
        assert_eq!(parse_depfile(b"just words\n"), None);
        assert_eq!(parse_depfile(b"c:/no/separator\n"), None);
        // Non-UTF-8 names survive.
        assert_eq!(
            parse_depfile(b"t: caf\xe9.h\n").unwrap(),
            vec![cache::path_from_bytes(b"caf\xe9.h".to_vec())]
        );
    }
}
