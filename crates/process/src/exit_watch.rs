//! One process-wide thread that notices at once when a watched worker exits, so that whoever
//! owns it can reap and replace it even while nothing waits on it (an idle worker killed from
//! outside).
//!
//! Each watched worker has a pidfd, opened while it is still an unreaped child (so it can never
//! refer to another process, whatever happens to the pid later); the thread polls them all plus
//! an eventfd that tells it the set changed. When a pidfd turns readable the worker has exited:
//! the entry is removed and its `wake` called, on this thread.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use rustix::event::{EventfdFlags, PollFd, PollFlags};
use rustix::process::PidfdFlags;

use crate::pids::pid;

/// What to call when a watched worker exits. It runs on the watcher thread: it must be quick
/// and must not block (set a flag, notify a condition variable).
pub(crate) type Wake = Arc<dyn Fn() + Send + Sync>;

struct Entry {
    pidfd: Arc<OwnedFd>,
    wake: Wake,
}

#[derive(Default)]
struct Entries {
    by_key: HashMap<u64, Entry>,
    next: u64,
}

struct ExitWatch {
    entries: Mutex<Entries>,
    /// An eventfd written to make the thread look at `entries` again.
    poke: OwnedFd,
}

/// A worker being watched; dropping it stops the watch (the worker is about to be reaped, or
/// its owner no longer cares).
pub(crate) struct Watch {
    key: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(watch) = EXIT_WATCH.get().and_then(Option::as_ref) {
            watch.lock().by_key.remove(&self.key);
            // The thread still polls this pidfd (it holds its own reference until it looks at
            // the set again): make it look now.
            watch.poke();
        }
    }
}

static EXIT_WATCH: OnceLock<Option<&'static ExitWatch>> = OnceLock::new();

/// Calls `wake` once, on the watcher thread, when the process `raw` exits. `raw` must be an
/// unreaped child of this process. `None` when it cannot be watched (no pidfds before Linux
/// 5.3, no thread): the owner then notices the exit on its next request, as before.
pub(crate) fn watch(raw: u32, wake: Wake) -> Option<Watch> {
    let watch = exit_watch()?;
    let pidfd = rustix::process::pidfd_open(pid(raw)?, PidfdFlags::empty())
        .map_err(|e| log::debug!("no pidfd for worker {raw}: {e}"))
        .ok()?;
    let key = {
        let mut entries = watch.lock();
        entries.next += 1;
        let key = entries.next;
        entries.by_key.insert(
            key,
            Entry {
                pidfd: Arc::new(pidfd),
                wake,
            },
        );
        key
    };
    watch.poke();
    Some(Watch { key })
}

fn exit_watch() -> Option<&'static ExitWatch> {
    *EXIT_WATCH.get_or_init(|| {
        let poke = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| log::warn!("no eventfd for the exit watcher: {e}"))
            .ok()?;
        let watch: &'static ExitWatch = Box::leak(Box::new(ExitWatch {
            entries: Mutex::new(Entries::default()),
            poke,
        }));
        std::thread::Builder::new()
            .name("tunebox-exit-watch".into())
            .spawn(move || watch.run())
            .map_err(|e| log::warn!("no exit-watcher thread: {e}"))
            .ok()?;
        Some(watch)
    })
}

impl ExitWatch {
    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn poke(&self) {
        // A full counter (never, in practice) still wakes the thread.
        let _ = rustix::io::write(&self.poke, &1u64.to_ne_bytes());
    }

    fn run(&self) {
        loop {
            let watched: Vec<(u64, Arc<OwnedFd>)> = self
                .lock()
                .by_key
                .iter()
                .map(|(key, entry)| (*key, entry.pidfd.clone()))
                .collect();
            let mut fds = Vec::with_capacity(watched.len() + 1);
            fds.push(PollFd::new(&self.poke, PollFlags::IN));
            fds.extend(
                watched
                    .iter()
                    .map(|(_, pidfd)| PollFd::new(&**pidfd, PollFlags::IN)),
            );
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    log::warn!("exit watcher: poll failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            }
            let exited: Vec<u64> = fds[1..]
                .iter()
                .zip(&watched)
                .filter(|(fd, _)| !fd.revents().is_empty())
                .map(|(_, (key, _))| *key)
                .collect();
            if !fds[0].revents().is_empty() {
                let mut counter = [0u8; 8];
                let _ = rustix::io::read(&self.poke, &mut counter);
            }
            drop(fds);
            let wakes: Vec<Wake> = {
                let mut entries = self.lock();
                exited
                    .iter()
                    .filter_map(|key| entries.by_key.remove(key))
                    .map(|entry| entry.wake)
                    .collect()
            };
            for wake in wakes {
                wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn an_exit_wakes_at_once_and_a_dropped_watch_never_does() {
        let mut quiet = Command::new("sleep").arg("30").spawn().unwrap();
        let mut killed = Command::new("sleep").arg("30").spawn().unwrap();
        let (tx, rx) = mpsc::channel();
        let quiet_tx = tx.clone();
        let unwatched = watch(
            quiet.id(),
            Arc::new(move || quiet_tx.send("quiet").unwrap()),
        )
        .expect("pidfds on this kernel");
        let watched = watch(killed.id(), Arc::new(move || tx.send("killed").unwrap()))
            .expect("pidfds on this kernel");
        drop(unwatched);
        quiet.kill().unwrap();
        let start = Instant::now();
        killed.kill().unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok("killed"));
        assert!(start.elapsed() < Duration::from_secs(5));
        // Still unreaped: the watcher only looks.
        assert!(killed.try_wait().unwrap().is_some());
        quiet.wait().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(rx.try_recv().is_err(), "a dropped watch fired");
        drop(watched);
    }
}
