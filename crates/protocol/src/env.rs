//! Environment variables through which a parent bootstraps a worker, and the cache root that
//! the parent and its workers must agree on.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// Name of the parent's one-shot IPC server; its presence puts a tunebox binary in worker mode.
pub const WORKER_SERVER_ENV: &str = "TUNEBOX_WORKER_SERVER";

/// Whether this process reached the worker entry point (see [`mark_worker_entry`]).
static WORKER_ENTRY_REACHED: AtomicBool = AtomicBool::new(false);

/// Records that this process reached the worker entry point (`tunebox_worker::run_from_env`,
/// called by `run_if_worker`). `tunebox-process` checks it in a process started as a worker
/// ([`WORKER_SERVER_ENV`] set): one that exits, or is about to start workers itself, without
/// having reached the entry point forgot to call `run_if_worker` first thing in `main`, and
/// exits with [`EXIT_NO_WORKER_ENTRY`](crate::EXIT_NO_WORKER_ENTRY) instead of running on.
/// Lives here because both the worker and the process crate depend on this crate.
#[doc(hidden)]
pub fn mark_worker_entry() {
    WORKER_ENTRY_REACHED.store(true, Ordering::SeqCst);
}

/// Whether [`mark_worker_entry`] was called in this process.
#[doc(hidden)]
pub fn worker_entry_reached() -> bool {
    WORKER_ENTRY_REACHED.load(Ordering::SeqCst)
}

/// The parent's pid, so the worker can tell whether its parent died before it armed
/// `PR_SET_PDEATHSIG`.
pub const PARENT_PID_ENV: &str = "TUNEBOX_PARENT_PID";

/// The parent's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION), checked by the worker before it
/// connects.
pub const PROTOCOL_VERSION_ENV: &str = "TUNEBOX_PROTOCOL_VERSION";

/// How many benchmark requests the worker will serve before the parent replaces it (its
/// `maximum_process_uses`, plus one for an initializer); unset: no limit. A worker skips the
/// checks of its state after the last one, which no later task could inherit.
pub const WORKER_USES_ENV: &str = "TUNEBOX_WORKER_USES";

/// Names tunebox's cache root; each backend keeps its compiled kernels in a subdirectory
/// (`cpu`, `cuda`).
pub const CACHE_DIR_ENV: &str = "TUNEBOX_CACHE_DIR";

/// tunebox's cache root, from the variables `var` reads: `$TUNEBOX_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/tunebox` (only when absolute, as the XDG spec requires), else
/// `$HOME/.cache/tunebox`; `None` when none is usable. Empty variables count as unset. A parent
/// and its workers resolve the same root as long as they share these variables (workers inherit
/// all three).
///
/// ```
/// use std::path::PathBuf;
/// let vars = |name: &str| (name == "HOME").then(|| "/home/ada".into());
/// assert_eq!(
///     tunebox_protocol::cache_root(vars),
///     Some(PathBuf::from("/home/ada/.cache/tunebox"))
/// );
/// ```
pub fn cache_root(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    set(CACHE_DIR_ENV)
        .or_else(|| {
            set("XDG_CACHE_HOME")
                .filter(|p| p.is_absolute())
                .map(|p| p.join("tunebox"))
        })
        .or_else(|| set("HOME").map(|home| home.join(".cache").join("tunebox")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(vars: &[(&str, &str)]) -> Option<PathBuf> {
        cache_root(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn tunebox_variable_then_xdg_then_home() {
        let all = [
            (CACHE_DIR_ENV, "/t"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(root(&all), Some("/t".into()));
        assert_eq!(root(&all[1..]), Some("/x/tunebox".into()));
        assert_eq!(root(&all[2..]), Some("/h/.cache/tunebox".into()));
        assert_eq!(root(&[]), None);
    }

    #[test]
    fn empty_variables_and_a_relative_xdg_are_ignored() {
        let odd = [
            (CACHE_DIR_ENV, ""),
            ("XDG_CACHE_HOME", "relative"),
            ("HOME", "/h"),
        ];
        assert_eq!(root(&odd), Some("/h/.cache/tunebox".into()));
        assert_eq!(root(&[("HOME", "")]), None);
    }
}
