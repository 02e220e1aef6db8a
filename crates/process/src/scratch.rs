//! A worker's scratch folder (`$TMPDIR/tunebox-scratch-<pid>-<n>`, mode 0700): its working
//! directory and `TMPDIR`, removed with its [`Enclosure`](crate::containment::Enclosure).
//!
//! A parent that is killed (`SIGKILL`, the OOM killer) never removes its workers' folders, and a
//! worker may have filled one with gigabytes. So the first folder a process makes sweeps away
//! those whose maker is gone: the parent holds a shared `flock` on each of its folders for the
//! folder's life, and the kernel drops it when the parent dies, whatever its PID namespace. A
//! folder is swept only when its lock can be taken, its maker's pid is not alive here, and it
//! belongs to this user.

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::AtomicU64;

use crate::fresh_dir;

/// The start of every scratch folder's name; the maker's pid and a number follow.
const PREFIX: &str = "tunebox-scratch-";

/// A worker's scratch folder, locked (shared) while this value lives, removed when dropped.
#[derive(Debug)]
pub(crate) struct Scratch {
    path: PathBuf,
    /// The open folder holding the shared lock; `None` where the file system has no `flock`.
    _lock: Option<File>,
}

impl Scratch {
    /// A fresh private folder under this process's temporary directory; the first call of the
    /// process sweeps the folders killed processes left there first.
    ///
    /// # Errors
    ///
    /// The folder cannot be made (a read-only or full `TMPDIR`).
    pub(crate) fn create() -> io::Result<Scratch> {
        Self::create_in(&std::env::temp_dir())
    }

    fn create_in(tmp: &Path) -> io::Result<Scratch> {
        // Absolute: the worker's `TMPDIR` is read from the scratch folder it starts in.
        let tmp = std::path::absolute(tmp)?;
        let tmp = tmp.as_path();
        static SWEPT: Once = Once::new();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        SWEPT.call_once(|| sweep(tmp));
        let pid = std::process::id();
        let path = fresh_dir::create(
            &NEXT,
            |n| tmp.join(format!("{PREFIX}{pid}-{n}")),
            |dir| std::fs::DirBuilder::new().mode(0o700).create(dir),
        )?;
        let lock = fresh_dir::hold(&path);
        Ok(Scratch { path, _lock: lock })
    }

    /// The folder.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fresh_dir::remove_all(&self.path);
    }
}

/// Removes the scratch folders under `tmp` that killed processes left: see the module's
/// documentation for when a folder counts as left.
fn sweep(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let uid = rustix::process::geteuid().as_raw();
    for entry in entries.flatten() {
        let Some(pid) = fresh_dir::maker(&entry.file_name(), PREFIX) else {
            continue;
        };
        let path = entry.path();
        let mine = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        // A living maker (here, or in another PID namespace: it holds the folder) keeps it.
        let Some(_held) = mine.then(|| fresh_dir::left_behind(&path, pid)).flatten() else {
            continue;
        };
        match fresh_dir::remove_all(&path) {
            Ok(()) => log::debug!("removed {}, left by pid {pid}", path.display()),
            Err(e) => log::debug!("cannot remove {}, left by pid {pid}: {e}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid no process has: above the kernel's `pid_max` limit (2^22).
    const DEAD: u32 = 4_194_305;

    fn left(tmp: &Path, pid: u32) -> PathBuf {
        let dir = tmp.join(format!("{PREFIX}{pid}-0"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("kernel.o"), b"left behind").unwrap();
        dir
    }

    #[test]
    fn the_folders_of_dead_makers_are_swept_and_the_others_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dead = left(tmp.path(), DEAD);
        let living = left(tmp.path(), 1);
        let locked = left(tmp.path(), DEAD + 1);
        let _held = fresh_dir::hold(&locked).unwrap();
        let other = tmp.path().join("tunebox-scratch-notes");
        std::fs::create_dir(&other).unwrap();
        sweep(tmp.path());
        assert!(!dead.exists(), "a dead maker's folder is swept");
        assert!(living.exists(), "pid 1 is alive");
        assert!(locked.exists(), "a folder still locked is in use");
        assert!(other.exists(), "not a scratch folder's name");
    }

    #[test]
    fn a_scratch_folder_is_private_locked_and_removed_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let scratch = Scratch::create_in(tmp.path()).unwrap();
        let path = scratch.path().to_owned();
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(
            fresh_dir::left_behind(&path, 4_194_305).is_none(),
            "its maker holds it"
        );
        drop(scratch);
        assert!(!path.exists());
    }
}
