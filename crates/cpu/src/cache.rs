//! Where compiled kernels are kept.

use std::ffi::OsString;
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::CpuError;

/// Environment variable naming tunebox's cache root; compiled CPU kernels go to its `cpu`
/// subdirectory.
pub const CACHE_DIR_ENV: &str = "TUNEBOX_CACHE_DIR";

/// The directory holding compiled kernels, one `<blake3 hex key>.so` per distinct compilation.
///
/// The directory is created (mode 0700, with any missing parents) on first use by
/// [`compile`](crate::compile), not by the constructors. Share one between the parent, which
/// precompiles, and its workers, which then only load: [`CacheDir::from_env`] resolves to the same
/// place in both as long as they share an environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheDir {
    path: PathBuf,
}

impl CacheDir {
    /// Uses `path` itself as the cache directory (no `cpu` suffix is added). Tests pass a
    /// temporary directory here instead of touching the environment.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The default cache directory: `$TUNEBOX_CACHE_DIR/cpu` if that variable is set, else
    /// `$XDG_CACHE_HOME/tunebox/cpu` (when it is an absolute path, as the XDG spec requires),
    /// else `$HOME/.cache/tunebox/cpu`. Empty variables count as unset.
    ///
    /// # Errors
    ///
    /// [`CpuError::NoCacheDir`] when none of the three variables is usable.
    pub fn from_env() -> Result<Self, CpuError> {
        Self::from_vars(|name| std::env::var_os(name))
    }

    fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<Self, CpuError> {
        let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(root) = set(CACHE_DIR_ENV) {
            return Ok(Self::new(root.join("cpu")));
        }
        if let Some(xdg) = set("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
            return Ok(Self::new(xdg.join("tunebox").join("cpu")));
        }
        if let Some(home) = set("HOME") {
            return Ok(Self::new(home.join(".cache").join("tunebox").join("cpu")));
        }
        Err(CpuError::NoCacheDir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the directory and its missing parents with mode 0700 (objects built with
    /// `-march=native` and the kernels' sources are the user's own), and returns its path. An
    /// existing directory keeps its mode.
    pub(crate) fn ensure(&self) -> Result<&Path, CpuError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.path)
            .map_err(|source| CpuError::CacheDir {
                path: self.path.clone(),
                source,
            })?;
        Ok(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(vars: &[(&str, &str)]) -> Result<CacheDir, CpuError> {
        CacheDir::from_vars(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn env_precedence() {
        let all = [
            (CACHE_DIR_ENV, "/t"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(resolve(&all).unwrap().path(), Path::new("/t/cpu"));
        assert_eq!(
            resolve(&all[1..]).unwrap().path(),
            Path::new("/x/tunebox/cpu")
        );
        assert_eq!(
            resolve(&all[2..]).unwrap().path(),
            Path::new("/h/.cache/tunebox/cpu")
        );
    }

    #[test]
    fn empty_and_relative_xdg_are_ignored() {
        let vars = [
            (CACHE_DIR_ENV, ""),
            ("XDG_CACHE_HOME", "relative"),
            ("HOME", "/h"),
        ];
        assert_eq!(
            resolve(&vars).unwrap().path(),
            Path::new("/h/.cache/tunebox/cpu")
        );
        assert!(matches!(resolve(&[]), Err(CpuError::NoCacheDir)));
    }
}
