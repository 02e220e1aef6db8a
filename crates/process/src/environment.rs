//! What a worker inherits from the parent's environment, and where its executable comes from.
//!
//! A worker runs code nobody has vetted, so it gets a short, documented list of the parent's
//! variables rather than all of them (tokens, credentials and the like stay in the parent), plus
//! whatever the caller adds with [`ProcessConfig::env`](crate::ProcessConfig::env) or asks to
//! pass on with [`ProcessConfig::inherit_env`](crate::ProcessConfig::inherit_env).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The parent's variables every worker inherits, by exact name: what a process, a C compiler,
/// NVRTC, the CUDA driver and the loader need, and Rust's logging switches.
pub const INHERITED_ENV: &[&str] = &[
    // The process and its user.
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "XDG_CACHE_HOME",
    "XDG_RUNTIME_DIR",
    // The loader: libcuda, libnvrtc and a kernel's own libraries.
    "LD_LIBRARY_PATH",
    // The C compiler (the cpu backend runs it in the worker).
    "CC",
    "CPATH",
    "C_INCLUDE_PATH",
    "LIBRARY_PATH",
    "COMPILER_PATH",
    "GCC_EXEC_PREFIX",
    "SOURCE_DATE_EPOCH",
    // Logs, backtraces and coverage of the worker itself.
    "RUST_LOG",
    "RUST_BACKTRACE",
    "RUST_LIB_BACKTRACE",
    "LLVM_PROFILE_FILE",
];

/// The parent's variables every worker inherits, by prefix: locale, tunebox's own settings, CUDA
/// and NVIDIA settings (`CUDA_VISIBLE_DEVICES`, `CUDA_CACHE_PATH`, …), ccache, the threading of
/// OpenMP and BLAS libraries a kernel may use, and sanitizer options.
pub const INHERITED_ENV_PREFIXES: &[&str] = &[
    "LC_",
    "TUNEBOX_",
    "CUDA_",
    "NVIDIA_",
    "CCACHE_",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "ASAN_",
    "UBSAN_",
    "LSAN_",
    "MSAN_",
    "TSAN_",
];

/// Whether a worker gets the parent's variable `name` without being asked to pass it: it is in
/// [`INHERITED_ENV`] or starts with one of [`INHERITED_ENV_PREFIXES`].
pub fn inherited_by_default(name: &str) -> bool {
    Inheritance::default().passes(OsStr::new(name))
}

/// Which of the parent's variables a worker gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Inheritance {
    /// Every variable, as `std::process::Command` does by default.
    pub(crate) all: bool,
    /// Names passed on beyond [`INHERITED_ENV`] and [`INHERITED_ENV_PREFIXES`].
    pub(crate) extra: Vec<OsString>,
}

impl Inheritance {
    /// Whether the variable `name` passes.
    pub(crate) fn passes(&self, name: &OsStr) -> bool {
        let bytes = name.as_bytes();
        self.all
            || INHERITED_ENV.iter().any(|n| n.as_bytes() == bytes)
            || INHERITED_ENV_PREFIXES
                .iter()
                .any(|p| bytes.starts_with(p.as_bytes()))
            || self.extra.iter().any(|n| n.as_os_str() == name)
    }

    /// The variables of `parent` that pass, in order.
    pub(crate) fn filter(
        &self,
        parent: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        parent
            .into_iter()
            .filter(|(name, _)| self.passes(name))
            .collect()
    }
}

/// Finds the executable a configured worker name refers to. A path with a `/` is taken as given
/// (relative ones against the current directory: the caller wrote it so). A bare name is looked
/// up in the absolute directories of `path_var` (`PATH`), never in its empty or relative entries,
/// so a file dropped in the current directory is never run by accident.
///
/// # Errors
///
/// `NotFound` naming `origin` (where the name came from) and what to write instead.
pub(crate) fn locate(name: &Path, origin: &str, path_var: Option<&OsStr>) -> io::Result<PathBuf> {
    if name.as_os_str().is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{origin} is empty; give the path of a worker executable"),
        ));
    }
    if name.as_os_str().as_bytes().contains(&b'/') {
        return Ok(name.to_path_buf());
    }
    let found = path_var
        .into_iter()
        .flat_map(std::env::split_paths)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate));
    found.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{origin} names `{name}`, which is in no absolute directory of PATH (the current \
                 directory and other relative PATH entries are never searched); give a path, \
                 e.g. ./{name} or $(command -v {name})",
                name = name.display()
            ),
        )
    })
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn only_listed_names_and_prefixes_pass() {
        let parent = vars(&[
            ("PATH", "/usr/bin"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("GITHUB_TOKEN", "t"),
            ("LC_ALL", "C"),
            ("CUDA_VISIBLE_DEVICES", "1"),
            ("TUNEBOX_CACHE_DIR", "/c"),
            ("PATHOLOGICAL", "x"),
            ("MY_VAR", "m"),
        ]);
        let passed = Inheritance::default().filter(parent.clone());
        assert_eq!(
            passed,
            vars(&[
                ("PATH", "/usr/bin"),
                ("LC_ALL", "C"),
                ("CUDA_VISIBLE_DEVICES", "1"),
                ("TUNEBOX_CACHE_DIR", "/c"),
            ])
        );
        let extra = Inheritance {
            all: false,
            extra: vec!["MY_VAR".into()],
        };
        assert!(
            extra
                .filter(parent.clone())
                .contains(&("MY_VAR".into(), "m".into()))
        );
        assert!(!extra.passes(OsStr::new("MY_VA")));
        assert!(inherited_by_default("OMP_NUM_THREADS") && !inherited_by_default("MY_VAR"));
        let all = Inheritance {
            all: true,
            extra: Vec::new(),
        };
        assert_eq!(all.filter(parent.clone()), parent);
    }

    #[test]
    fn bare_names_are_searched_in_absolute_path_entries_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let exe = dir.join("fake-worker");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let name = Path::new("fake-worker");

        let path = std::env::join_paths([Path::new("/nonexistent"), &dir]).unwrap();
        assert_eq!(locate(name, "TUNEBOX_WORKER", Some(&path)).unwrap(), exe);

        // The same directory reached through a relative entry is not searched.
        let relative = std::env::join_paths([Path::new("."), Path::new("")]).unwrap();
        let err = locate(name, "TUNEBOX_WORKER", Some(&relative)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let text = err.to_string();
        assert!(
            text.contains("TUNEBOX_WORKER") && text.contains("./fake-worker"),
            "{text}"
        );

        // Paths with a slash are the caller's choice, taken as given.
        assert_eq!(
            locate(Path::new("./w"), "x", None).unwrap(),
            PathBuf::from("./w")
        );
        assert_eq!(
            locate(Path::new("/a/w"), "x", None).unwrap(),
            PathBuf::from("/a/w")
        );
        // A file that is not executable is not a worker.
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(locate(name, "x", Some(&path)).is_err());
        assert!(locate(Path::new(""), "x", Some(&path)).is_err());
    }
}
