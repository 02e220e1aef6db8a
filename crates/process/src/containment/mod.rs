//! What holds the processes a worker starts, so that none outlives it, sandboxed or not.
//!
//! Every worker gets, set up before `fork` and joined between `fork` and `exec`:
//! - cgroups of its own where this process can make them ([`cgroup`]): everything the worker
//!   starts is in them whatever its session, process group or parent, and ending the worker
//!   kills them all (`cgroup.kill`, else freeze-kill-thaw, else kill until empty);
//! - the child-subreaper attribute ([`tree`]): a process it started whose parent exits is
//!   handed to the worker instead of init, so without a cgroup its process tree still holds
//!   everything it started while it lives, and ending the worker stops it, kills its
//!   descendants until none is left, then kills it.
//!
//! [`Enclosure`] is one worker's share (its cgroups and its scratch folder); the parent ends
//! the worker through it, and a process-wide registry ends every worker still enclosed when
//! this process calls `exit` (a second Ctrl-C, say), where no destructor runs.

mod cgroup;
mod tree;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::scratch::Scratch;

pub(crate) use cgroup::{Bases, KillMethod, WorkerCgroups};

/// How this machine holds the processes a worker starts, so that none outlives the worker
/// (`SandboxSupport::containment`, `tunebox doctor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Containment {
    /// A cgroup per worker, killed whole by `cgroup.kill` (cgroup v2, Linux 5.14+): the
    /// kernel also kills a process forked into it while it is being killed.
    CgroupKill,
    /// A cgroup per worker, frozen, killed and thawed (the cgroup freezer, v1 or v2): a frozen
    /// process forks nothing.
    CgroupFreezer,
    /// A cgroup per worker (v1 `pids`, no freezer) whose members are killed until none is left.
    CgroupSweep,
    /// No cgroup can be made (or `TUNEBOX_CGROUPS=off`): the worker is a child subreaper, and
    /// ending it stops it and kills its process tree. What a worker that dies by itself (a
    /// crash) leaves running outside its process group is handed to init, out of reach.
    Subreaper,
}

impl Containment {
    /// What this process can use, probed once (a cgroup made and removed in each hierarchy).
    pub fn probe() -> Containment {
        match bases().kill_method() {
            Some(KillMethod::Kill) => Containment::CgroupKill,
            Some(KillMethod::Freeze) => Containment::CgroupFreezer,
            Some(KillMethod::Sweep) => Containment::CgroupSweep,
            None => Containment::Subreaper,
        }
    }
}

impl std::fmt::Display for Containment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Containment::CgroupKill => "a cgroup per worker (cgroup.kill)",
            Containment::CgroupFreezer => "a cgroup per worker (freezer)",
            Containment::CgroupSweep => "a cgroup per worker (killed until empty)",
            Containment::Subreaper => "the worker's process tree (child subreaper; no cgroup)",
        })
    }
}

/// Where this process can make cgroups, probed once.
pub(crate) fn bases() -> &'static Bases {
    static BASES: OnceLock<Bases> = OnceLock::new();
    BASES.get_or_init(Bases::probe)
}

/// One worker's cgroups and scratch folder. [`end`](Enclosure::end) kills the worker and all
/// it started; dropping it kills what is left in its cgroups and removes them and the scratch
/// folder.
#[derive(Debug, Default)]
pub(crate) struct Enclosure {
    cgroups: Option<Arc<WorkerCgroups>>,
    scratch: Option<Scratch>,
    /// Whether it is in the registry of enclosed workers, under this key.
    registered: Option<u64>,
}

impl Enclosure {
    /// An enclosure of `cgroups` (none: the process tree) and `scratch` (removed with it).
    pub(crate) fn new(cgroups: Option<WorkerCgroups>, scratch: Option<Scratch>) -> Self {
        Enclosure {
            cgroups: cgroups.map(Arc::new),
            scratch,
            registered: None,
        }
    }

    /// The cgroups the worker joins.
    pub(crate) fn cgroups(&self) -> Option<&WorkerCgroups> {
        self.cgroups.as_deref()
    }

    /// The worker's scratch folder, if it has one.
    pub(crate) fn scratch(&self) -> Option<&Scratch> {
        self.scratch.as_ref()
    }

    /// Records the started worker `pid`, so that this process's `exit` ends it too.
    pub(crate) fn register(&mut self, pid: u32) {
        let key = registry().add(pid, self.cgroups.clone());
        self.registered = Some(key);
    }

    /// Kills what the living worker `pid` started and left running (in its cgroups, else among
    /// its descendants), and returns their pids; the worker lives on.
    pub(crate) fn kill_strays(&self, pid: u32) -> Vec<u32> {
        match &self.cgroups {
            Some(cgroups) => cgroups.kill_strays(pid),
            None => tree::kill_strays(pid),
        }
    }

    /// Before the living worker `pid` is asked to exit by itself: without cgroups, kills what
    /// it started now, while its process tree still holds them (its exit would hand them to
    /// init). With cgroups, nothing: dropping the enclosure kills what is left.
    pub(crate) fn prepare_exit(&self, pid: u32) {
        if self.cgroups.is_none() {
            tree::kill_strays(pid);
        }
    }

    /// Kills the worker `pid` (an unreaped child of this process) and everything it started;
    /// the caller reaps it.
    pub(crate) fn end(&self, pid: u32) {
        end(pid, self.cgroups.as_deref());
    }
}

impl Drop for Enclosure {
    fn drop(&mut self) {
        if let Some(key) = self.registered.take() {
            registry().remove(key);
        }
        // The cgroups first (the registry held the only other reference): killing what is
        // left may free files in the scratch folder.
        drop(self.cgroups.take());
        drop(self.scratch.take());
    }
}

/// Kills the worker `pid` and everything it started: through its cgroups when it has some,
/// else through its process tree.
fn end(pid: u32, cgroups: Option<&WorkerCgroups>) {
    match cgroups {
        // The cgroups hold everything: no need to stop the worker first. Its process tree is
        // swept all the same (a walk, no stop: cheap), for a plain worker running as root that
        // moved a process out of its cgroups (the sandbox's Landlock keeps `/sys` read-only).
        Some(cgroups) => {
            tree::kill_descendants(pid);
            crate::pids::signal_group(pid, rustix::process::Signal::KILL);
            crate::pids::signal_process(pid, rustix::process::Signal::KILL);
            cgroups.kill_all();
        }
        None => tree::end(pid),
    }
}

/// Ends the worker `pid` (an unreaped child of this process) and everything it started, from
/// any thread that knows only its pid (the kill switch, the watchdog), through its cgroups
/// when its [`Enclosure`] has some, else its process tree.
pub(crate) fn end_worker(pid: u32) {
    let cgroups = REGISTRY.get().and_then(|registry| {
        let live = registry.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.values()
            .find(|(p, _)| *p == pid)
            .and_then(|(_, cgroups)| cgroups.clone())
    });
    end(pid, cgroups.as_deref());
}

/// A worker enclosed now: its pid and its cgroups.
type Enclosed = (u32, Option<Arc<WorkerCgroups>>);

/// The workers enclosed now, for [`end_all_at_exit`].
#[derive(Default)]
struct Registry {
    live: Mutex<HashMap<u64, Enclosed>>,
    next: AtomicU64,
}

impl Registry {
    fn add(&self, pid: u32, cgroups: Option<Arc<WorkerCgroups>>) -> u64 {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, (pid, cgroups));
        key
    }

    fn remove(&self, key: u64) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
    }
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

fn registry() -> &'static Registry {
    REGISTRY.get_or_init(|| {
        // SAFETY: `atexit` registers a function with C linkage that takes no argument; it runs
        // once, on the thread that calls `exit`.
        if unsafe { libc::atexit(end_all_at_exit) } != 0 {
            log::warn!("cannot register the exit hook that ends the workers");
        }
        Registry::default()
    })
}

/// Runs at `exit` (not at a kill of this process): ends every worker still enclosed and what
/// it started. Destructors do not run at `exit`, and a worker dies with this process
/// (`PR_SET_PDEATHSIG`) while what it started would not.
extern "C" fn end_all_at_exit() {
    let Some(registry) = REGISTRY.get() else {
        return;
    };
    // Another thread may hold the lock while this one exits; it never holds it for long.
    let live = (0..100).find_map(|_| match registry.live.try_lock() {
        Ok(live) => Some(live),
        Err(_) => {
            std::thread::sleep(std::time::Duration::from_millis(1));
            None
        }
    });
    let Some(live) = live else {
        return;
    };
    for (pid, cgroups) in live.values() {
        end(*pid, cgroups.as_deref());
        if let Some(cgroups) = cgroups {
            cgroups.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each way of ending a worker's processes, against a shell that leaves a daemon in a
    //! session of its own and a chain of processes that fork the next link and exit at once
    //! (what a kill by pid list races), run for a moment and then ended: nothing of it may be
    //! left.

    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use super::cgroup::{Bases, WorkerCgroups};
    use super::tree;

    /// A daemon in a new session, and a chain whose every link forks the next and exits.
    const SCRIPT: &str = "setsid sleep 30 & f() { f & exit 0; }; f & sleep 30";

    /// The variable that marks the processes of one test.
    const MARK: &str = "TUNEBOX_TEST_CONTAINMENT";

    /// Starts the script, marked with `mark`; `setup` runs in the child before `exec`.
    fn start(
        mark: &str,
        setup: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
    ) -> Child {
        let mut command = Command::new("sh");
        command
            .args(["-c", SCRIPT])
            .env(MARK, mark)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // SAFETY: `setup` makes async-signal-safe system calls only (see the callers).
        unsafe { command.pre_exec(setup) };
        command.spawn().expect("sh starts")
    }

    /// The living processes marked with `mark`.
    fn marked(mark: &str) -> Vec<u32> {
        let needle = format!("{MARK}={mark}");
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
            })
            .collect()
    }

    /// Waits until processes marked `mark` exist (the script has begun), then a moment more.
    fn let_it_run(mark: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while marked(mark).len() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    /// Asserts that nothing marked `mark` is alive now, nor a moment later (a chain that
    /// escaped would still be forking).
    fn assert_all_gone(mark: &str, how: &str) {
        for _ in 0..2 {
            let left = marked(mark);
            if !left.is_empty() {
                for &pid in &left {
                    crate::pids::signal_process(pid, rustix::process::Signal::KILL);
                }
                panic!("{how}: processes {left:?} outlived the kill");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs the script in cgroups made under `bases` and ends it with `kill_all`, a few times.
    fn ends_everything_in(bases: Bases, how: &str) {
        for round in 0..3 {
            let cgroups = WorkerCgroups::create(&bases, Some(512))
                .expect("cgroups")
                .expect("a cgroup");
            let mark = format!("{how}-{}-{round}", std::process::id());
            let procs = cgroups.procs().to_vec();
            let mut child = start(&mark, move || {
                // Async-signal-safe, on paths made before `fork`.
                for path in &procs {
                    crate::sandbox::write_file(path, b"0")?;
                }
                Ok(())
            });
            let_it_run(&mark);
            cgroups.kill_all();
            let _ = child.wait();
            assert_all_gone(&mark, how);
            drop(cgroups);
        }
    }

    #[test]
    fn each_cgroup_method_ends_a_daemon_and_a_fork_chain() {
        let probed = Bases::probe();
        let mut tried = Vec::new();
        for (how, bases) in probed.each_method() {
            ends_everything_in(bases, how);
            tried.push(how);
        }
        println!(
            "cgroup methods tried here: {tried:?} (the others need hierarchies this machine lacks)"
        );
    }

    #[test]
    fn the_subreaper_tree_ends_a_daemon_and_a_fork_chain() {
        for round in 0..3 {
            let mark = format!("tree-{}-{round}", std::process::id());
            let mut child = start(&mark, || {
                // SAFETY: `prctl` takes integers only.
                if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
            let_it_run(&mark);
            tree::end(child.id());
            let _ = child.wait();
            assert_all_gone(&mark, "subreaper tree");
        }
    }
}
