//! Folders named after this process (`…-<pid>-<n>`) that a killed process of the same pid may
//! have left behind.

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
