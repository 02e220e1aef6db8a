//! A worker's descendants through its process tree, for when no cgroup holds them.
//!
//! Every worker is made a child subreaper (`PR_SET_CHILD_SUBREAPER`, set between `fork` and
//! `exec`): a process it started whose parent exits is handed to the worker, not to init. So
//! while the worker lives, everything it started — a daemon that double-forked and left its
//! session included — is a descendant of it, found through `/proc/<pid>/task/<tid>/children`.
//!
//! Killing them races their forks. [`end`] stops the worker first (SIGSTOP: its threads can
//! fork no more), then kills the living descendants it finds, again and again until a walk
//! finds none: a process killed in the middle of a `fork` either has the fork undone or dies
//! only after its child is in its `children` list, and a killed process's children are handed
//! to the (stopped, living) worker, where the next walk finds them. Signals go through pidfds,
//! each opened and then checked to be the child of a process of the tree, so a pid that was
//! reused meanwhile is never signalled.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::process::{PidfdFlags, Signal};

use crate::pids::pid;

/// How long [`end`] and [`kill_descendants`] keep killing before they give up (a process in
/// uninterruptible sleep can take a while to die; nothing else should).
const SWEEP_LIMIT: Duration = Duration::from_secs(5);

/// How long to let killed processes die between two walks.
const SWEEP_PAUSE: Duration = Duration::from_micros(500);

/// How many walks [`descendants`] makes at most to get one during which nothing exited.
const WALK_TRIES: usize = 10;

/// How long to wait for a stopped worker's threads to stop (a thread in uninterruptible sleep
/// stops only when it wakes).
const STOP_LIMIT: Duration = Duration::from_millis(200);

/// `(ppid, state)` of `pid` from `/proc/<pid>/stat`; `None` when it is gone.
fn stat(pid: u32) -> Option<(u32, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses: split at the last `)`.
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// Whether `state` is a dead process's (a zombie, or being reaped).
fn is_dead(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// One walk of a process tree.
struct Walk {
    /// The living descendants, each with the parent it was found under.
    living: Vec<(u32, u32)>,
    /// Whether the root's own children were the same at the end of the walk as at its start.
    /// A descendant that exits hands its children to the root (a child subreaper); when that
    /// happens in the middle of a walk, the walk may have read the root's children before they
    /// arrived and the exiting one's after they left, and missed them. An unchanged list at
    /// both ends means no descendant exited with children meanwhile.
    stable: bool,
}

/// Walks the descendants of `root` through `/proc` (`root` excluded).
fn walk(root: u32) -> Walk {
    let mut first = children(root);
    let mut living = Vec::new();
    let mut seen = BTreeSet::from([root]);
    let mut next = vec![(root, first.clone())];
    while let Some((parent, kids)) = next.pop() {
        for child in kids {
            if !seen.insert(child) {
                continue;
            }
            let Some((_, state)) = stat(child) else {
                continue;
            };
            if !is_dead(state) {
                living.push((child, parent));
            }
            next.push((child, children(child)));
        }
    }
    let mut last = children(root);
    first.sort_unstable();
    last.sort_unstable();
    Walk {
        living,
        stable: first == last,
    }
}

/// The living descendants of `root` (not `root` itself), from a walk during which no
/// descendant handed its children to `root` (up to a few tries; else the last walk's).
pub(crate) fn descendants(root: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for _ in 0..WALK_TRIES {
        let walk = walk(root);
        found = walk.living.into_iter().map(|(pid, _)| pid).collect();
        if walk.stable {
            break;
        }
    }
    found
}

/// A pidfd on `child`, once checked to be a child of `parent` (so that a pid reused since the
/// walk is never signalled: the pidfd pins the process it was opened on).
fn pidfd_of_child(child: u32, parent: u32) -> Option<OwnedFd> {
    let fd = rustix::process::pidfd_open(pid(child)?, PidfdFlags::empty()).ok()?;
    let (ppid, _) = stat(child)?;
    (ppid == parent).then_some(fd)
}

/// SIGKILLs every living descendant of `root` (through pidfds), then walks again, until a
/// stable walk (see [`Walk::stable`]) finds none or [`SWEEP_LIMIT`] has passed. Returns the
/// pids killed (each once).
///
/// `root` should be stopped (or be known to start nothing meanwhile): otherwise it may fork
/// again after the last walk.
pub(crate) fn kill_descendants(root: u32) -> Vec<u32> {
    let deadline = Instant::now() + SWEEP_LIMIT;
    let mut killed = BTreeSet::new();
    loop {
        let walk = walk(root);
        for &(child, parent) in &walk.living {
            if let Some(fd) = pidfd_of_child(child, parent) {
                let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
                killed.insert(child);
            }
        }
        let done = walk.living.is_empty() && walk.stable;
        if done || Instant::now() >= deadline {
            if !done {
                log::warn!(
                    "worker {root}: processes it started were still alive after {SWEEP_LIMIT:?} \
                     of killing"
                );
            }
            return killed.into_iter().collect();
        }
        std::thread::sleep(SWEEP_PAUSE);
    }
}

/// Stops `worker` (SIGSTOP) and waits until each of its threads has stopped or died (up to
/// [`STOP_LIMIT`]): from then on it forks nothing.
fn stop(worker: u32) {
    crate::pids::signal_process(worker, Signal::STOP);
    let deadline = Instant::now() + STOP_LIMIT;
    let stopped = |tid: &u32| {
        std::fs::read_to_string(format!("/proc/{worker}/task/{tid}/stat")).map_or(true, |text| {
            text.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_none_or(|state| matches!(state, "T" | "t" | "Z" | "X" | "x"))
        })
    };
    while Instant::now() < deadline {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{worker}/task")) else {
            return;
        };
        let tids: Vec<u32> = tasks
            .flatten()
            .filter_map(|t| t.file_name().to_str()?.parse().ok())
            .collect();
        if tids.iter().all(stopped) {
            return;
        }
        std::thread::sleep(SWEEP_PAUSE);
    }
}

/// Ends the worker `worker` (our unreaped child) and everything it started: stops it, kills
/// its descendants until none is left, then SIGKILLs its process group and itself. The caller
/// reaps it.
pub(crate) fn end(worker: u32) {
    stop(worker);
    kill_descendants(worker);
    crate::pids::signal_group(worker, Signal::KILL);
    crate::pids::signal_process(worker, Signal::KILL);
}

/// Kills the worker's living descendants while it lives on: stops it, kills them until none
/// is left, lets it go on. Returns the pids killed.
pub(crate) fn kill_strays(worker: u32) -> Vec<u32> {
    if descendants(worker).is_empty() {
        return Vec::new();
    }
    stop(worker);
    let killed = kill_descendants(worker);
    crate::pids::signal_process(worker, Signal::CONT);
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_reads_the_parent_and_state_past_a_command_with_parentheses() {
        let (ppid, state) = stat(std::process::id()).expect("this process");
        // SAFETY: `getppid` has no preconditions.
        assert_eq!(ppid, unsafe { libc::getppid() } as u32);
        assert!(!is_dead(state));
        assert_eq!(stat(u32::MAX), None);
    }
}
