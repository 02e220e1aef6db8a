//! A cgroup of its own per sandboxed worker: `pids.max` stops a fork bomb, and every process the
//! worker started (in its process group or not) is killed with it.
//!
//! `RLIMIT_NPROC` is no answer on its own: it counts all of a user's processes, not the
//! worker's, and does not bind root. A `pids` cgroup counts exactly the worker's tasks
//! (processes and threads), whatever their user, session or process group.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One worker's cgroup; dropping it kills what is left in it and removes it.
#[derive(Debug)]
pub(crate) struct Cgroup {
    dir: PathBuf,
    /// `<dir>/cgroup.procs`, which the child writes `0` to between fork and exec.
    pub(crate) procs: CString,
}

/// Distinguishes the cgroups of one parent's workers.
static NEXT: AtomicU64 = AtomicU64::new(0);

impl Cgroup {
    /// Makes `<base>/tunebox-<pid>-<n>` with `pids.max = limit`.
    pub(crate) fn create(base: &Path, limit: u64) -> std::io::Result<Cgroup> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("tunebox-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let cgroup = Cgroup {
            procs: CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                .map_err(std::io::Error::other)?,
            dir,
        };
        std::fs::write(cgroup.dir.join("pids.max"), limit.to_string())?;
        Ok(cgroup)
    }

    /// The pids of the processes in the cgroup now.
    pub(crate) fn processes(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// SIGKILLs every process in the cgroup, until it is empty or about a second has passed.
    pub(crate) fn kill_all(&self) {
        for _ in 0..200 {
            let pids = self.processes();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                // SAFETY: `kill` only sends a signal; a pid that has since exited fails ESRCH.
                // A pid in this cgroup is one of the worker's own processes: the cgroup is ours
                // and nothing else is ever moved into it.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.kill_all();
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        log::warn!(
            "sandbox: could not remove the worker cgroup {}",
            self.dir.display()
        );
    }
}

/// The folder under which this process can make cgroups with a `pids` controller: its own
/// cgroup in the cgroup-v1 `pids` hierarchy, or its own cgroup-v2 folder when that delegates
/// `pids` to children; checked by making and removing one.
pub(crate) fn probe_base() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    candidates(&own, &mounts)
        .into_iter()
        .find(|base| Cgroup::create(base, 16).is_ok())
}

/// Possible bases, v1 `pids` first, from `/proc/self/cgroup` and `/proc/self/mountinfo`.
fn candidates(own: &str, mounts: &str) -> Vec<PathBuf> {
    let mut bases = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        let mount = if controllers.split(',').any(|c| c == "pids") {
            mount_point(mounts, |fstype, options| {
                fstype == "cgroup" && options.split(',').any(|o| o == "pids")
            })
        } else if controllers.is_empty() {
            mount_point(mounts, |fstype, _| fstype == "cgroup2")
        } else {
            None
        };
        if let Some(mount) = mount {
            let base = mount.join(path);
            let v2_without_pids = controllers.is_empty()
                && !std::fs::read_to_string(base.join("cgroup.subtree_control"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"));
            if !v2_without_pids {
                bases.push(base);
            }
        }
    }
    bases
}

/// The mount point of the first mount whose file-system type and super options `matches`.
fn mount_point(mounts: &str, matches: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        // `id parent major:minor root mount-point options [optional…] - fstype source super`
        let (left, right) = line.split_once(" - ")?;
        let mount = left.split_whitespace().nth(4)?;
        let mut right = right.split_whitespace();
        let fstype = right.next()?;
        let options = right.nth(1).unwrap_or("");
        matches(fstype, options).then(|| PathBuf::from(mount))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_come_from_the_pids_hierarchy_and_cgroup2() {
        let own = "8:pids:/a/b\n4:memory:/m\n0::/user.slice\n";
        let mounts = "30 25 0:26 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids\n\
                      31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let bases = candidates(own, mounts);
        assert!(
            bases.contains(&PathBuf::from("/sys/fs/cgroup/pids/a/b")),
            "{bases:?}"
        );
    }
}
