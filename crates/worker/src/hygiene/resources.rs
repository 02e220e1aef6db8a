//! Resources a task can leave behind that the worker cannot take back safely: descriptors,
//! threads, child processes, memory. Compared before and after each task.

use std::collections::BTreeSet;

/// Open descriptors, live threads, running child processes and anonymous resident memory at
/// one moment.
#[derive(Debug, Clone, Default)]
pub(crate) struct Resources {
    pub(crate) fds: BTreeSet<i32>,
    pub(crate) threads: BTreeSet<i32>,
    /// The pids of the worker's children that have not exited (zombies, which the worker
    /// reaps when it is replaced, are not running anything).
    pub(crate) children: BTreeSet<i32>,
    /// Anonymous resident memory, in KiB.
    pub(crate) anon_kib: u64,
}

impl Resources {
    /// The resources of this process now (empty sets where `/proc` cannot be read).
    pub(crate) fn now() -> Resources {
        Resources {
            fds: open_descriptors(),
            threads: numbered_entries("/proc/self/task"),
            children: running_children(),
            anon_kib: anon_kib().unwrap_or(0),
        }
    }
}

/// The open descriptors, without the one that lists them.
fn open_descriptors() -> BTreeSet<i32> {
    let mut fds = BTreeSet::new();
    // SAFETY: `opendir` gets a NUL-terminated path; the stream is read with `readdir` until it
    // ends and closed once; each entry's name is a NUL-terminated string inside the entry,
    // valid until the next `readdir`.
    unsafe {
        let dir = libc::opendir(c"/proc/self/fd".as_ptr());
        if dir.is_null() {
            return fds;
        }
        let own = libc::dirfd(dir);
        loop {
            let entry = libc::readdir(dir);
            if entry.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*entry).d_name.as_ptr());
            if let Some(fd) = name.to_str().ok().and_then(|n| n.parse::<i32>().ok())
                && fd != own
            {
                fds.insert(fd);
            }
        }
        libc::closedir(dir);
    }
    fds
}

/// The numeric names in a `/proc` directory.
fn numbered_entries(dir: &str) -> BTreeSet<i32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The pids of this process's children (every thread's `children` list) that are not zombies.
fn running_children() -> BTreeSet<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return BTreeSet::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .filter(|&pid| process_state(pid).is_some_and(|state| state != "Z"))
        .collect()
}

/// The state letter of process `pid` (`R`, `S`, `Z`, …); `None` once it is gone.
fn process_state(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().next().map(str::to_owned)
}

/// `sleep (pid 123)`: a child process's name (its `comm`) and pid.
pub(crate) fn process_name(pid: i32) -> String {
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|n| n.trim().to_owned())
        .unwrap_or_else(|_| "exited since".into());
    format!("{name} (pid {pid})")
}

/// Resident memory not backed by a file or shared memory: `resident - shared` of
/// `/proc/self/statm` (the `RssAnon` of `/proc/self/status`, which costs ten times more to
/// read), in KiB, less what the tensors' kept mappings hold
/// ([`tunebox_bench::kept_mappings_kib`]: the next request uses it or gives it back).
fn anon_kib() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut fields = statm.split_whitespace().skip(1);
    let resident: u64 = fields.next()?.parse().ok()?;
    let shared: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    let anon = resident.saturating_sub(shared) * page / 1024;
    Some(anon.saturating_sub(tunebox_bench::kept_mappings_kib()))
}

/// What descriptor `fd` refers to (`/dev/null`, `pipe:[123]`, `socket:[456]`, …); `None` once
/// it is closed (the one that listed `/proc/self/fd`, say).
pub(crate) fn fd_target(fd: i32) -> Option<String> {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .ok()
        .map(|p| p.display().to_string())
}

/// The name of thread `tid` (its `comm`).
pub(crate) fn thread_name(tid: i32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|n| n.trim().to_owned())
        .unwrap_or_else(|_| "exited since".into())
}

/// Whether a descriptor to `target` is the worker's own plumbing: the shared-memory regions of
/// requests and replies (ipc-channel's memfds), whose mappings the worker keeps between
/// requests.
pub(crate) fn is_plumbing(target: &str) -> bool {
    target.contains("ipc-channel-shared-memory")
}

/// Whether a descriptor to `target`, left by the first request a backend serves, is the
/// backend's own setup (a device file or event descriptor of the CUDA driver, …).
pub(crate) fn is_backend_setup(target: &str) -> bool {
    target.starts_with("/dev/")
        || target.starts_with("anon_inode:")
        || target.starts_with("pipe:")
        || target.starts_with("socket:")
}

/// `n` bytes given in KiB, in words (`1.5 GiB`, `300 MiB`).
pub(crate) fn kib_words(kib: u64) -> String {
    if kib >= 1 << 20 {
        format!("{:.1} GiB", kib as f64 / f64::from(1u32 << 20))
    } else {
        format!("{} MiB", kib >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_a_new_descriptor_and_a_new_thread() {
        let before = Resources::now();
        assert!(before.fds.contains(&0) || before.fds.contains(&1) || !before.fds.is_empty());
        // Tests run in threads of one process and open and close descriptors of their own,
        // so a low number seen new here may have been another test's a moment before: the
        // descriptor under test sits far above what they use.
        let null = std::fs::File::open("/dev/null").unwrap();
        // SAFETY: F_DUPFD duplicates a descriptor this test owns onto the lowest free number
        // at or above 900, which the OwnedFd below takes and closes once.
        let high =
            unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&null), libc::F_DUPFD, 900) };
        assert!(high >= 900, "{}", std::io::Error::last_os_error());
        // SAFETY: `high` is a fresh descriptor nothing else owns.
        let file = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(high) };
        drop(null);
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() }).unwrap();
            stop_rx.recv()
        });
        let tid = tid_rx.recv().unwrap();
        let after = Resources::now();
        let new_fds: Vec<_> = after.fds.difference(&before.fds).copied().collect();
        assert!(new_fds.contains(&high), "{new_fds:?}");
        assert_eq!(fd_target(high).as_deref(), Some("/dev/null"));
        assert!(after.threads.contains(&tid) && !before.threads.contains(&tid));
        drop(file);
        drop(stop_tx);
        thread.join().unwrap().unwrap_err();
        assert!(is_plumbing(
            "/memfd:/ipc-channel-shared-memory.1.2.3.4 (deleted)"
        ));
        assert!(is_backend_setup("/dev/nvidiactl") && !is_backend_setup("/tmp/x"));
        assert_eq!(kib_words(3 << 20), "3.0 GiB");
    }
}
