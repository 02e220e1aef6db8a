//! Where backends keep their compiled kernels: one private directory per backend (`cpu`,
//! `cuda`) under tunebox's cache root, shared by the parent, which compiles ahead, and its
//! workers, which then only load.

use std::ffi::OsString;
use std::fs::{DirBuilder, Metadata};
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

/// The directory holding one backend's compiled kernels (what is in it is the backend's:
/// `tunebox-cpu`'s shared objects and dependency manifests, `tunebox-cuda`'s cubins).
///
/// The directory is created (mode 0700, with any missing parents) on first use, not by the
/// constructors. Its compiled kernels are loaded and run, so it must belong to this user and
/// be writable by nobody else ([`CacheDir::ensure`], [`CacheDir::untrusted`]).
///
/// ```
/// use std::path::Path;
/// use tunebox_bench::CacheDir;
///
/// let cache = CacheDir::new("/tmp/kernels");
/// assert_eq!(cache.path(), Path::new("/tmp/kernels"));
/// // `$TUNEBOX_CACHE_DIR/cpu`, else `$XDG_CACHE_HOME/tunebox/cpu`, else `~/.cache/tunebox/cpu`:
/// let default = CacheDir::from_env("cpu");
/// # let _ = default;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheDir {
    path: PathBuf,
}

impl CacheDir {
    /// Uses `path` itself as the cache directory (no backend suffix is added). Tests pass a
    /// temporary directory here instead of touching the environment.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The default directory of `backend` (`"cpu"`, `"cuda"`): `$TUNEBOX_CACHE_DIR/<backend>`
    /// if that variable is set, else `$XDG_CACHE_HOME/tunebox/<backend>` (when it is an
    /// absolute path, as the XDG spec requires), else `$HOME/.cache/tunebox/<backend>`; `None`
    /// when none of the three is usable (empty variables count as unset). A parent and its
    /// workers resolve the same directory as long as they share these variables.
    pub fn from_env(backend: &str) -> Option<Self> {
        Self::from_vars(backend, |name| std::env::var_os(name))
    }

    fn from_vars(backend: &str, var: impl Fn(&str) -> Option<OsString>) -> Option<Self> {
        tunebox_protocol::cache_root(var).map(|root| Self::new(root.join(backend)))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the directory and its missing parents with mode 0700 (objects built with
    /// `-march=native` and the kernels' sources are the user's own), checks that it is private,
    /// and returns its path.
    ///
    /// # Errors
    ///
    /// It cannot be created or inspected, or it belongs to another user or is writable by
    /// others (`PermissionDenied`, saying so).
    pub fn ensure(&self) -> io::Result<&Path> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.path)?;
        let metadata = std::fs::metadata(&self.path)?;
        match not_private(&metadata) {
            None => Ok(&self.path),
            Some((uid, mode)) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "it belongs to uid {uid} with mode {mode:o}; it must be yours and writable \
                     only by you (chmod 700), because its compiled kernels are loaded and run"
                ),
            )),
        }
    }

    /// Why the directory must not be trusted, or `None` when it is private (or does not exist
    /// yet): whoever can write it chooses the code that runs.
    pub fn untrusted(&self) -> Option<String> {
        let metadata = std::fs::metadata(&self.path).ok()?;
        not_private(&metadata).map(|(uid, mode)| {
            format!(
                "`{}` belongs to uid {uid} with mode {mode:o}; it must be yours and writable \
                 only by you (chmod 700)",
                self.path.display()
            )
        })
    }
}

/// `(owner, permission bits)` of a directory that is not this user's alone.
fn not_private(metadata: &Metadata) -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    (metadata.uid() != me || metadata.mode() & 0o022 != 0)
        .then(|| (metadata.uid(), metadata.mode() & 0o7777))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn resolve(backend: &str, vars: &[(&str, &str)]) -> Option<CacheDir> {
        CacheDir::from_vars(backend, |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn each_backend_has_its_subdirectory_of_the_cache_root() {
        // The root's own rules are tested with `tunebox_protocol::cache_root`.
        let vars = [(tunebox_protocol::CACHE_DIR_ENV, "/t"), ("HOME", "/h")];
        assert_eq!(resolve("cpu", &vars).unwrap().path(), Path::new("/t/cpu"));
        assert_eq!(resolve("cuda", &vars).unwrap().path(), Path::new("/t/cuda"));
        assert_eq!(resolve("cpu", &[]), None);
    }

    #[test]
    fn only_a_private_directory_is_trusted() {
        let root = tempfile::tempdir().unwrap();
        let cache = CacheDir::new(root.path().join("nested").join("cpu"));
        assert_eq!(cache.untrusted(), None, "a directory not made yet");
        assert_eq!(cache.ensure().unwrap(), cache.path());
        let mode = std::fs::metadata(cache.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = cache.ensure().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("chmod 700"), "{err}");
        assert!(cache.untrusted().unwrap().contains("mode 777"));
    }
}
