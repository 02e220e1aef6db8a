//! Folders named after the process that made them (`<prefix><pid>-<n>`: worker cgroups and
//! scratch folders), which a killed process may have left behind.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many taken names [`create`] skips before it gives up.
const TRIES: u64 = 1024;

/// Makes the folder `name(n)` for the next `n` of `next` whose folder does not exist yet, with
/// `make`, and returns its path. A pid is reused: a process killed before it could remove its
/// folders leaves `…-<pid>-<n>` behind for the next process of that pid, which takes the next
/// free number instead of failing.
///
/// # Errors
///
/// `make`'s error other than `AlreadyExists`, or `AlreadyExists` after [`TRIES`] taken names.
pub(crate) fn create(
    next: &AtomicU64,
    name: impl Fn(u64) -> PathBuf,
    make: impl Fn(&Path) -> io::Result<()>,
) -> io::Result<PathBuf> {
    let mut last = None;
    for _ in 0..TRIES {
        let dir = name(next.fetch_add(1, Ordering::Relaxed));
        match make(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
}

/// The pid of the process that made the folder `name`, when it is `<prefix><pid>-<n>`.
pub(crate) fn maker(name: &OsStr, prefix: &str) -> Option<u32> {
    let (pid, n) = name.to_str()?.strip_prefix(prefix)?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Whether `pid` is this process or another living one (in this PID namespace): the maker of a
/// folder, or a process that took its pid since.
pub(crate) fn alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_left_under_the_next_name_is_skipped() {
        let base = tempfile::tempdir().unwrap();
        let next = AtomicU64::new(0);
        let name = |n: u64| base.path().join(format!("tunebox-scratch-7-{n}"));
        // What a killed process of the same pid left.
        std::fs::create_dir(name(0)).unwrap();
        std::fs::create_dir(name(1)).unwrap();
        let made = create(&next, name, |d| std::fs::create_dir(d)).unwrap();
        assert_eq!(made, name(2));
        assert!(made.is_dir());
    }

    #[test]
    fn the_maker_is_read_from_the_name() {
        let maker = |name: &str| maker(OsStr::new(name), "tunebox-");
        assert_eq!(maker("tunebox-41-0"), Some(41));
        assert_eq!(maker("tunebox-41-x"), None);
        assert_eq!(maker("tunebox-scratch-41-0"), None);
        assert_eq!(maker("other-41-0"), None);
        assert!(alive(std::process::id()));
    }

    #[test]
    fn another_error_is_returned_at_once() {
        let next = AtomicU64::new(0);
        let error = create(
            &next,
            |n| PathBuf::from(format!("/nonexistent-parent/x-{n}")),
            |d| std::fs::create_dir(d),
        )
        .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert_eq!(next.load(Ordering::Relaxed), 1, "one try");
    }
}
