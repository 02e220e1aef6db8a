//! tunebox's Rust worker executable (`tunebox-worker`), carried inside this extension.
//!
//! With the `worker-binary` feature (maturin turns it on: pyproject.toml), `build.rs` builds
//! the workspace's `tunebox-worker` and the extension holds its bytes; [`path`] writes them
//! once into tunebox's cache directory (private to the user, as the kernel cache is) under a
//! name carrying their hash, and returns that file: the worker `tunebox.kernel_tuner` gives the
//! engine, so that a worker process is this executable and no Python interpreter. The wheel
//! thus carries the worker whatever installs it (`pip install .`, `maturin develop`), with no
//! file beside the extension to keep in step with it.

use std::path::PathBuf;

use pyo3::PyResult;
#[cfg(not(feature = "worker-binary"))]
use pyo3::exceptions::PyFileNotFoundError;
#[cfg(feature = "worker-binary")]
use pyo3::exceptions::PyOSError;

#[cfg(feature = "worker-binary")]
mod built {
    /// The worker's bytes, as `build.rs` built it.
    pub(super) static BYTES: &[u8] = include_bytes!(env!("TUNEBOX_WORKER_EXE"));
    /// A hash of [`BYTES`] (hex), computed by `build.rs`: the file's name changes with them.
    pub(super) const HASH: &str = env!("TUNEBOX_WORKER_HASH");
}

/// The worker executable, written into the cache on first use.
///
/// # Errors
///
/// `FileNotFoundError` without the `worker-binary` feature; `OSError` when the cache directory
/// cannot be had (none of `TUNEBOX_CACHE_DIR`, `XDG_CACHE_HOME`, `HOME`; not private), the file
/// cannot be written, or it cannot be executed there.
#[cfg(feature = "worker-binary")]
pub(crate) fn path() -> PyResult<PathBuf> {
    let error = |what: String| PyOSError::new_err(format!("tunebox's Rust worker: {what}"));
    let cache = tunebox_bench::CacheDir::from_env("worker").ok_or_else(|| {
        error("no cache directory: set TUNEBOX_CACHE_DIR (or XDG_CACHE_HOME or HOME)".into())
    })?;
    let dir = cache
        .ensure()
        .map_err(|e| error(format!("cache directory {}: {e}", cache.path().display())))?;
    let path = dir.join(format!("tunebox-worker-{}", built::HASH));
    if !is_current(&path) {
        write(&path, built::BYTES).map_err(|e| error(format!("{}: {e}", path.display())))?;
    }
    if !executable(&path) {
        return Err(error(format!(
            "{} cannot be executed (a noexec mount?); set TUNEBOX_CACHE_DIR to a directory \
             that can hold programs",
            path.display()
        )));
    }
    Ok(path)
}

#[cfg(not(feature = "worker-binary"))]
pub(crate) fn path() -> PyResult<PathBuf> {
    Err(PyFileNotFoundError::new_err(
        "this build of tunebox._native holds no Rust worker (built without the worker-binary \
         feature); build the package with maturin (pip install .)",
    ))
}

/// Whether `path` holds the worker already: a file of its size (its name carries the hash of
/// its bytes, and it is only ever put there whole, by a rename).
#[cfg(feature = "worker-binary")]
fn is_current(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == built::BYTES.len() as u64)
}

/// Writes `bytes` to `path` whole: into a temporary file beside it (mode 0700), then renamed,
/// so that a process starting the worker never sees half of it and two writers never clash.
#[cfg(feature = "worker-binary")]
fn write(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;

    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o700)
        .open(&temporary)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// Whether this user may execute `path` (`access(X_OK)`, which also refuses a `noexec` mount).
#[cfg(feature = "worker-binary")]
fn executable(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;

    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c_path` is a NUL-terminated string that lives across the call.
    unsafe { libc::access(c_path.as_ptr(), libc::X_OK) == 0 }
}
