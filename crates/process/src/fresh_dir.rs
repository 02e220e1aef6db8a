//! Folders named after the process that made them (`<prefix><pid>-<n>`: worker cgroups and
//! scratch folders), which a killed process may have left behind.

use std::ffi::OsStr;
use std::fs::File;
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

/// Holds a shared `flock` on `dir` (a folder this process made) while the returned file is
/// open: the kernel drops it when this process dies, in whatever PID namespace, so a sweeper
/// that cannot see this process's pid still sees the folder is in use ([`left_behind`]).
/// `None` where the file system has no `flock` (the folder is then judged by its pid only).
pub(crate) fn hold(dir: &Path) -> Option<File> {
    lock(dir, rustix::fs::FlockOperation::LockShared)
}

/// Whether `dir`, named after the process `pid` that made it, was left behind by that process:
/// the pid is not alive here and no process holds the folder ([`hold`]). The returned lock
/// keeps another sweeper out while the caller removes it.
pub(crate) fn left_behind(dir: &Path, pid: u32) -> Option<File> {
    if alive(pid) {
        return None;
    }
    lock(dir, rustix::fs::FlockOperation::NonBlockingLockExclusive)
}

/// `dir` opened and locked with `operation`, or `None` when it is held elsewhere (for a
/// non-blocking one) or cannot be locked.
fn lock(dir: &Path, operation: rustix::fs::FlockOperation) -> Option<File> {
    let file = File::open(dir).ok()?;
    loop {
        match rustix::fs::flock(&file, operation) {
            Ok(()) => return Some(file),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
}

/// Removes `dir` and everything in it, making this user's folders in it writable first where a
/// process took that away (`chmod 0500` on its own working folder), which would otherwise keep
/// it for good. Symbolic links are removed, never followed.
///
/// # Errors
///
/// What removing still fails with after that (another user's files, an immutable file).
pub(crate) fn remove_all(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            make_writable(dir);
            std::fs::remove_dir_all(dir)
        }
        done => done,
    }
}

/// Gives `dir` and the folders under it (not through links) their owner's `rwx`.
fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            make_writable(&entry.path());
        }
    }
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
    fn a_folder_its_worker_made_read_only_is_removed_all_the_same() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("scratch");
        let locked = dir.join("locked");
        std::fs::create_dir_all(&locked).unwrap();
        std::fs::write(locked.join("junk"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc", dir.join("link")).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        remove_all(&dir).unwrap();
        assert!(!dir.exists());
        assert!(Path::new("/etc").is_dir(), "a link is not followed");
    }

    #[test]
    fn a_folder_held_by_its_maker_is_not_left_behind() {
        let base = tempfile::tempdir().unwrap();
        // A pid no process has: above the kernel's `pid_max` limit (2^22).
        let dead = 4_194_305;
        let _held = hold(base.path()).unwrap();
        assert!(
            left_behind(base.path(), dead).is_none(),
            "a maker in another PID namespace"
        );
        drop(_held);
        assert!(left_behind(base.path(), dead).is_some());
        assert!(left_behind(base.path(), std::process::id()).is_none());
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
