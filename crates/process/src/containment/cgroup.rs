//! The cgroups of one worker: every process it starts is in them, whatever its session, process
//! group or parent, so the parent can list them, bound their number (`pids.max`, for the
//! sandbox's task limit) and kill them all.
//!
//! A worker joins (between `fork` and `exec`) one cgroup per hierarchy tunebox uses: a cgroup-v2
//! one where this process owns a v2 folder (it has `cgroup.kill` and `cgroup.freeze`, and
//! `pids.max` where `pids` is delegated); otherwise a v1 `freezer` one; and a v1 `pids` one
//! where the task limit needs it. `RLIMIT_NPROC` is no substitute for `pids.max`: it counts all
//! of a user's processes, not the worker's, and does not bind root.
//!
//! Ending them all ([`WorkerCgroups::kill_all`]) races the forks of what is being killed; in
//! order of preference:
//! - `cgroup.kill` (v2, Linux 5.14+) kills every process in the cgroup at once, and the kernel
//!   kills a child forked into it meanwhile;
//! - the freezer (v2 `cgroup.freeze`, v1 `freezer.state`): freeze, wait until frozen, SIGKILL
//!   every member, thaw: a frozen process forks nothing;
//! - otherwise SIGKILL every member and list again, until a list is empty: a process killed in
//!   the middle of a `fork` leaves the list only after its child is on it.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// How long to wait for a cgroup to freeze, empty or be removed before giving up.
const WAIT_LIMIT: Duration = Duration::from_secs(5);

/// How long to sleep between two looks at a cgroup.
const POLL: Duration = Duration::from_micros(500);

/// The environment variable that turns cgroups off (`off`): workers are then held through their
/// process tree only (`containment::tree`), and the task limit is `RLIMIT_NPROC`.
pub(crate) const CGROUPS_ENV: &str = "TUNEBOX_CGROUPS";

/// Which hierarchy a cgroup is in, and so which files it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hierarchy {
    V2,
    V1Freezer,
    V1Pids,
}

/// Where this process can make cgroups for its workers, probed once (by making and removing
/// one in each).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Bases {
    /// This process's own cgroup-v2 folder.
    v2: Option<PathBuf>,
    /// Whether cgroups made under `v2` have `pids.max`.
    v2_pids: bool,
    /// Whether cgroups made under `v2` have `cgroup.kill` (Linux 5.14+).
    v2_kill: bool,
    /// Whether cgroups made under `v2` have `cgroup.freeze` (Linux 5.2+).
    v2_freeze: bool,
    /// This process's own cgroup in the v1 `freezer` hierarchy.
    v1_freezer: Option<PathBuf>,
    /// This process's own cgroup in the v1 `pids` hierarchy.
    v1_pids: Option<PathBuf>,
}

/// How [`WorkerCgroups::kill_all`] ends everything in a worker's cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KillMethod {
    /// `cgroup.kill`.
    Kill,
    /// Freeze, kill, thaw.
    Freeze,
    /// Kill and list again until empty.
    Sweep,
}

impl Bases {
    /// Probes `/proc/self/cgroup` and `/proc/self/mountinfo`; nothing when [`CGROUPS_ENV`] is
    /// `off`.
    pub(crate) fn probe() -> Bases {
        if std::env::var_os(CGROUPS_ENV).is_some_and(|v| v == "off") {
            return Bases::default();
        }
        let (Ok(own), Ok(mounts)) = (
            std::fs::read_to_string("/proc/self/cgroup"),
            std::fs::read_to_string("/proc/self/mountinfo"),
        ) else {
            return Bases::default();
        };
        let found = candidates(&own, &mounts);
        let mut bases = Bases::default();
        for (hierarchy, base) in found {
            clean_stale(&base, hierarchy);
            let Ok(probe) = Cgroup::create(&base, hierarchy) else {
                continue;
            };
            match hierarchy {
                Hierarchy::V2 if bases.v2.is_none() => {
                    bases.v2_pids = probe.dir.join("pids.max").exists();
                    bases.v2_kill = probe.dir.join("cgroup.kill").exists();
                    bases.v2_freeze = probe.dir.join("cgroup.freeze").exists();
                    bases.v2 = Some(base);
                }
                Hierarchy::V1Freezer if bases.v1_freezer.is_none() => {
                    bases.v1_freezer = Some(base);
                }
                Hierarchy::V1Pids if bases.v1_pids.is_none() => bases.v1_pids = Some(base),
                _ => {}
            }
            probe.remove();
        }
        bases
    }

    /// The folder under which a worker's cgroup gets a `pids.max`, if any.
    pub(crate) fn pids(&self) -> Option<&Path> {
        if self.v2_pids {
            self.v2.as_deref()
        } else {
            self.v1_pids.as_deref()
        }
    }

    /// Whether a worker can be put in any cgroup at all.
    pub(crate) fn any(&self) -> bool {
        self.v2.is_some() || self.v1_freezer.is_some() || self.v1_pids.is_some()
    }

    /// How the cgroups of a worker made here would be killed; `None` without cgroups.
    pub(crate) fn kill_method(&self) -> Option<KillMethod> {
        if self.v2.is_some() && self.v2_kill {
            Some(KillMethod::Kill)
        } else if (self.v2.is_some() && self.v2_freeze) || self.v1_freezer.is_some() {
            Some(KillMethod::Freeze)
        } else if self.any() {
            Some(KillMethod::Sweep)
        } else {
            None
        }
    }
}

#[cfg(test)]
impl Bases {
    /// One `Bases` per way of killing that these bases allow, each allowing only it.
    pub(crate) fn each_method(&self) -> Vec<(&'static str, Bases)> {
        let mut each = Vec::new();
        if self.v2.is_some() && self.v2_kill {
            each.push((
                "cgroup.kill",
                Bases {
                    v1_freezer: None,
                    v1_pids: None,
                    ..self.clone()
                },
            ));
        }
        if self.v2.is_some() && self.v2_freeze {
            let bases = Bases {
                v2_kill: false,
                v1_freezer: None,
                v1_pids: None,
                ..self.clone()
            };
            each.push(("v2 freezer", bases));
        }
        if self.v1_freezer.is_some() {
            let bases = Bases {
                v1_freezer: self.v1_freezer.clone(),
                ..Bases::default()
            };
            each.push(("v1 freezer", bases));
        }
        if self.v1_pids.is_some() {
            let bases = Bases {
                v1_pids: self.v1_pids.clone(),
                ..Bases::default()
            };
            each.push(("v1 pids, killed until empty", bases));
        }
        each
    }
}

/// One cgroup of a worker.
#[derive(Debug)]
struct Cgroup {
    dir: PathBuf,
    hierarchy: Hierarchy,
    /// The shared `flock` its maker holds on it while it lives ([`crate::fresh_dir::hold`]),
    /// or the exclusive one of a sweeper removing it; `None` where cgroupfs has no `flock`.
    _lock: Option<std::fs::File>,
}

/// Distinguishes the cgroups of one parent's workers.
static NEXT: AtomicU64 = AtomicU64::new(0);

impl Cgroup {
    /// Makes `<base>/tunebox-<pid>-<n>` (the next free `n`: a killed process of the same pid
    /// may have left some, which [`clean_stale`] leaves to a pid that is alive).
    fn create(base: &Path, hierarchy: Hierarchy) -> std::io::Result<Cgroup> {
        let pid = std::process::id();
        let dir = crate::fresh_dir::create(
            &NEXT,
            |n| base.join(format!("tunebox-{pid}-{n}")),
            |dir| std::fs::create_dir(dir),
        )?;
        let lock = crate::fresh_dir::hold(&dir);
        Ok(Cgroup {
            dir,
            hierarchy,
            _lock: lock,
        })
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The pids of the processes in it now.
    fn members(&self) -> Vec<u32> {
        std::fs::read_to_string(self.procs())
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Freezes it and waits until every member is frozen (up to [`WAIT_LIMIT`]); `false` when
    /// it has no freezer or did not freeze in time.
    fn freeze(&self) -> bool {
        let (file, value) = match self.hierarchy {
            Hierarchy::V2 => ("cgroup.freeze", "1"),
            Hierarchy::V1Freezer => ("freezer.state", "FROZEN"),
            Hierarchy::V1Pids => return false,
        };
        if std::fs::write(self.dir.join(file), value).is_err() {
            return false;
        }
        wait_until(|| self.frozen())
    }

    fn frozen(&self) -> bool {
        match self.hierarchy {
            Hierarchy::V2 => std::fs::read_to_string(self.dir.join("cgroup.events"))
                .is_ok_and(|events| events.lines().any(|l| l.trim() == "frozen 1")),
            Hierarchy::V1Freezer => std::fs::read_to_string(self.dir.join("freezer.state"))
                .is_ok_and(|state| state.trim() == "FROZEN"),
            Hierarchy::V1Pids => false,
        }
    }

    fn thaw(&self) {
        let (file, value) = match self.hierarchy {
            Hierarchy::V2 => ("cgroup.freeze", "0"),
            Hierarchy::V1Freezer => ("freezer.state", "THAWED"),
            Hierarchy::V1Pids => return,
        };
        if let Err(e) = std::fs::write(self.dir.join(file), value) {
            log::warn!("cannot thaw the worker cgroup {}: {e}", self.dir.display());
        }
    }

    /// Writes `1` to `cgroup.kill`; `false` where there is none.
    fn kill(&self) -> bool {
        self.hierarchy == Hierarchy::V2 && std::fs::write(self.dir.join("cgroup.kill"), "1").is_ok()
    }

    /// Removes the (empty) cgroup, retrying while its last members finish exiting.
    fn remove(&self) {
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) if Instant::now() >= deadline => {
                    log::warn!(
                        "cannot remove the worker cgroup {}: {e}",
                        self.dir.display()
                    );
                    return;
                }
                Err(_) => std::thread::sleep(POLL),
            }
        }
    }
}

/// Ends and removes the cgroups under `base` that a tunebox process no longer alive left behind
/// (`tunebox-<pid>-<n>` whose `<pid>` is gone: it was killed, so neither its destructors nor
/// its exit hook ran, and what its workers started may still run there). A cgroup whose pid
/// is alive — its owner, or a process that took the pid since — is left alone, and so is one
/// whose owner still holds its lock (an owner in another PID namespace).
fn clean_stale(base: &Path, hierarchy: Hierarchy) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(owner) = crate::fresh_dir::maker(&entry.file_name(), "tunebox-") else {
            continue;
        };
        // A living owner keeps it: here, or in another PID namespace sharing this hierarchy
        // (a container), where its pid means nothing but it holds the cgroup's lock.
        let Some(lock) = crate::fresh_dir::left_behind(&entry.path(), owner) else {
            continue;
        };
        let stale = Cgroup {
            dir: entry.path(),
            hierarchy,
            _lock: Some(lock),
        };
        if !stale.members().is_empty() {
            log::warn!(
                "ending what a tunebox process that is gone (pid {owner}) left running in {}",
                stale.dir.display()
            );
            if !stale.kill() {
                stale.thaw();
                wait_until(|| {
                    let left = stale.members();
                    left.iter().copied().for_each(sigkill);
                    left.is_empty()
                });
            }
        }
        stale.remove();
    }
}

/// Polls `done` until it holds or [`WAIT_LIMIT`] has passed; whether it held.
fn wait_until(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// SIGKILLs `pid`. A pid listed in a worker's cgroup is one of the worker's own processes (the
/// cgroup is ours and nothing else is moved into it); one that has exited since fails ESRCH.
fn sigkill(pid: u32) {
    crate::pids::signal_process(pid, rustix::process::Signal::KILL);
}

/// The cgroups one worker joins; dropping them kills what is left in them and removes them.
#[derive(Debug)]
pub(crate) struct WorkerCgroups {
    groups: Vec<Cgroup>,
    /// How they are killed: [`Bases::kill_method`].
    method: KillMethod,
    /// The `cgroup.procs` of each, which the child writes `0` to between fork and exec.
    procs: Vec<CString>,
}

impl WorkerCgroups {
    /// Makes a worker's cgroups under `bases`: a v2 one, else a v1 freezer one, and a v1 pids
    /// one too when `tasks` asks for a limit that the v2 one cannot hold; each member of `tasks`
    /// sets `pids.max`. `None` when none can be made. Whether the task limit could be set is
    /// [`WorkerCgroups::limits_tasks`].
    ///
    /// # Errors
    ///
    /// A cgroup that was made but whose `pids.max` cannot be written (the rest are removed).
    pub(crate) fn create(bases: &Bases, tasks: Option<u64>) -> std::io::Result<Option<Self>> {
        let mut groups = Vec::new();
        let made = |groups: &mut Vec<Cgroup>, base: &Option<PathBuf>, hierarchy| {
            if let Some(base) = base {
                match Cgroup::create(base, hierarchy) {
                    Ok(group) => groups.push(group),
                    Err(e) => log::warn!("no worker cgroup under {}: {e}", base.display()),
                }
            }
        };
        made(&mut groups, &bases.v2, Hierarchy::V2);
        if groups.is_empty() {
            made(&mut groups, &bases.v1_freezer, Hierarchy::V1Freezer);
        }
        let v2_limits =
            groups.first().is_some_and(|g| g.hierarchy == Hierarchy::V2) && bases.v2_pids;
        if (tasks.is_some() && !v2_limits) || groups.is_empty() {
            made(&mut groups, &bases.v1_pids, Hierarchy::V1Pids);
        }
        let Some(method) = bases.kill_method().filter(|_| !groups.is_empty()) else {
            return Ok(None);
        };
        let mut cgroups = WorkerCgroups {
            procs: Vec::new(),
            groups,
            method,
        };
        for group in &cgroups.groups {
            let procs = CString::new(group.procs().as_os_str().as_bytes())
                .map_err(std::io::Error::other)?;
            cgroups.procs.push(procs);
        }
        if let Some(limit) = tasks {
            let limited = cgroups.groups.iter().find(|g| {
                g.hierarchy == Hierarchy::V1Pids || (g.hierarchy == Hierarchy::V2 && bases.v2_pids)
            });
            if let Some(group) = limited {
                std::fs::write(group.dir.join("pids.max"), limit.to_string())?;
            }
        }
        Ok(Some(cgroups))
    }

    /// Whether one of the cgroups holds a `pids.max`.
    pub(crate) fn limits_tasks(&self, bases: &Bases) -> bool {
        self.groups.iter().any(|g| {
            g.hierarchy == Hierarchy::V1Pids || (g.hierarchy == Hierarchy::V2 && bases.v2_pids)
        })
    }

    /// The `cgroup.procs` files the child joins.
    pub(crate) fn procs(&self) -> &[CString] {
        &self.procs
    }

    /// The cgroup-v2 folder a child can be made in (`CLONE_INTO_CGROUP`), if there is one.
    pub(crate) fn birth_dir(&self) -> Option<&Path> {
        self.birth_procs().map(|i| self.groups[i].dir.as_path())
    }

    /// The index in [`procs`](Self::procs) of the [`birth_dir`](Self::birth_dir)'s.
    pub(crate) fn birth_procs(&self) -> Option<usize> {
        self.groups
            .iter()
            .position(|g| g.hierarchy == Hierarchy::V2)
    }

    /// The pids of the processes in any of the cgroups now.
    pub(crate) fn members(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.groups.iter().flat_map(Cgroup::members).collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    fn empty(&self) -> bool {
        self.groups.iter().all(|g| g.members().is_empty())
    }

    /// The cgroup with a freezer, when the method is to freeze.
    fn freezer(&self) -> Option<&Cgroup> {
        if self.method == KillMethod::Sweep {
            return None;
        }
        self.groups
            .iter()
            .find(|g| matches!(g.hierarchy, Hierarchy::V1Freezer | Hierarchy::V2))
    }

    /// Kills every process in the cgroups and waits until they are empty (see the module's
    /// notes for how the forks of what is being killed are kept from escaping).
    pub(crate) fn kill_all(&self) {
        if self.method == KillMethod::Kill && self.groups.iter().any(Cgroup::kill) {
            if !wait_until(|| self.empty()) {
                log::warn!("a worker cgroup did not empty after cgroup.kill");
            }
            return;
        }
        self.kill_members(|_| true);
    }

    /// Kills every process in the cgroups but `worker`, which lives on: what it started and
    /// left running. Returns those killed.
    pub(crate) fn kill_strays(&self, worker: u32) -> Vec<u32> {
        self.kill_members(|pid| pid != worker)
    }

    /// Kills the members `chosen` picks: frozen where a freezer is, else again and again until
    /// none is left. Returns the pids killed.
    fn kill_members(&self, chosen: impl Fn(u32) -> bool) -> Vec<u32> {
        if !self.members().into_iter().any(&chosen) {
            return Vec::new();
        }
        let mut killed = Vec::new();
        if let Some(freezer) = self.freezer().filter(|f| f.freeze()) {
            killed = self.members().into_iter().filter(|&p| chosen(p)).collect();
            killed.iter().copied().for_each(sigkill);
            freezer.thaw();
            if !wait_until(|| !self.members().into_iter().any(&chosen)) {
                log::warn!("processes of a worker cgroup survived SIGKILL");
            }
            return killed;
        }
        let finished = wait_until(|| {
            let left: Vec<u32> = self.members().into_iter().filter(|&p| chosen(p)).collect();
            for &pid in &left {
                sigkill(pid);
                if !killed.contains(&pid) {
                    killed.push(pid);
                }
            }
            left.is_empty()
        });
        if !finished {
            log::warn!(
                "processes of a worker cgroup were still alive after {WAIT_LIMIT:?} of killing"
            );
        }
        killed
    }
}

impl WorkerCgroups {
    /// Kills what is left in the cgroups and removes them.
    pub(crate) fn remove(&self) {
        self.kill_all();
        self.groups.iter().for_each(Cgroup::remove);
    }
}

impl Drop for WorkerCgroups {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Possible bases, from `/proc/self/cgroup` and `/proc/self/mountinfo`: this process's own
/// cgroup in each hierarchy tunebox uses (v2, v1 `freezer`, v1 `pids`).
fn candidates(own: &str, mounts: &str) -> Vec<(Hierarchy, PathBuf)> {
    let mut bases = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        let has = |name: &str| controllers.split(',').any(|c| c == name);
        let (hierarchy, mount) = if controllers.is_empty() {
            (
                Hierarchy::V2,
                mount_point(mounts, |fstype, _| fstype == "cgroup2"),
            )
        } else if has("freezer") {
            (
                Hierarchy::V1Freezer,
                mount_point(mounts, |fstype, options| {
                    fstype == "cgroup" && options.split(',').any(|o| o == "freezer")
                }),
            )
        } else if has("pids") {
            (
                Hierarchy::V1Pids,
                mount_point(mounts, |fstype, options| {
                    fstype == "cgroup" && options.split(',').any(|o| o == "pids")
                }),
            )
        } else {
            continue;
        };
        if let Some(mount) = mount {
            bases.push((hierarchy, mount.join(path)));
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
        matches(fstype, options).then(|| PathBuf::from(unescape(mount)))
    })
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(path: &str) -> OsString {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    std::os::unix::ffi::OsStringExt::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "30 25 0:26 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids\n\
                          32 25 0:28 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n\
                          31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";

    #[test]
    fn bases_come_from_each_hierarchy_tunebox_uses() {
        let own = "8:pids:/a/b\n6:freezer:/helpers\n4:memory:/m\n0::/user.slice\n";
        let bases = candidates(own, MOUNTS);
        assert_eq!(
            bases,
            vec![
                (Hierarchy::V1Pids, PathBuf::from("/sys/fs/cgroup/pids/a/b")),
                (
                    Hierarchy::V1Freezer,
                    PathBuf::from("/sys/fs/cgroup/freezer/helpers")
                ),
                (
                    Hierarchy::V2,
                    PathBuf::from("/sys/fs/cgroup/unified/user.slice")
                ),
            ]
        );
    }

    #[test]
    fn a_v2_only_machine_has_one_base() {
        let mounts = "29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let bases = candidates("0::/system.slice/x.service\n", mounts);
        assert_eq!(
            bases,
            vec![(
                Hierarchy::V2,
                PathBuf::from("/sys/fs/cgroup/system.slice/x.service")
            )]
        );
    }

    /// Where this process can make cgroups that hold processes: its v2 folder, else its v1
    /// `pids` cgroup.
    fn a_base() -> Option<(PathBuf, Hierarchy)> {
        let probed = Bases::probe();
        probed
            .v2
            .map(|b| (b, Hierarchy::V2))
            .or_else(|| probed.v1_pids.map(|b| (b, Hierarchy::V1Pids)))
    }

    /// A cgroup left by a tunebox process that is gone (killed: no destructor, no exit hook)
    /// is ended and removed by the next probe; one whose owner lives is left alone.
    #[test]
    fn the_cgroups_of_a_process_that_is_gone_are_ended_and_removed() {
        use std::os::unix::process::CommandExt;
        let Some((base, hierarchy)) = a_base() else {
            println!("skipped: no cgroup can be made here");
            return;
        };
        // A pid that is gone: a child that exited and was reaped.
        let gone = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        let _ = { gone }.wait();
        let stale = base.join(format!("tunebox-{gone_pid}-0"));
        let alive = base.join(format!("tunebox-{}-999", std::process::id()));
        std::fs::create_dir(&alive).unwrap();
        // Another test of this binary that probes the cgroups cleans stale ones too, and may
        // remove this one between its creation and the child's joining it: make it again.
        let mut left = None;
        for _ in 0..100 {
            match std::fs::create_dir(&stale) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => panic!("cannot make {}: {e}", stale.display()),
            }
            let procs = CString::new(stale.join("cgroup.procs").as_os_str().as_bytes()).unwrap();
            let mut command = std::process::Command::new("sleep");
            command.arg("30");
            // SAFETY: `write_file` is async-signal-safe, on a path made before `fork`.
            unsafe {
                command.pre_exec(move || crate::sandbox::write_file(&procs, b"0"));
            }
            match command.spawn() {
                Ok(child) => {
                    left = Some(child);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("cannot start a process in {}: {e}", stale.display()),
            }
        }
        let mut left = left.expect("the stale cgroup kept vanishing before a process joined it");
        clean_stale(&base, hierarchy);
        let status = left.wait().unwrap();
        assert!(
            !status.success(),
            "the process left in the stale cgroup was killed"
        );
        // Removed by this cleaning, or by another test's that held its lock then (this one
        // skipped it) and may still be waiting for its last member to exit.
        assert!(
            wait_until(|| !stale.exists()),
            "the stale cgroup was removed"
        );
        assert!(alive.exists(), "a cgroup whose owner lives stays");
        std::fs::remove_dir(&alive).unwrap();
    }

    #[test]
    fn a_cgroup_its_owner_holds_is_kept_whatever_its_pid_says() {
        let Some((base, hierarchy)) = a_base() else {
            println!("skipped: no cgroup can be made here");
            return;
        };
        // A pid this process cannot see, as a tunebox in another PID namespace's is: above the
        // kernel's `pid_max` limit (2^22). Its owner holds the cgroup's lock.
        let held = base.join(format!("tunebox-{}-0", 4_194_305));
        // Other tests of this binary sweep too, and may remove it before it is held.
        let lock = (0..100)
            .find_map(|_| {
                match std::fs::create_dir(&held) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => panic!("cannot make {}: {e}", held.display()),
                }
                crate::fresh_dir::hold(&held)
            })
            .expect("the cgroup kept vanishing before it was held");
        clean_stale(&base, hierarchy);
        assert!(held.exists(), "a cgroup whose owner holds it stays");
        drop(lock);
        // Removed by this cleaning, or by another test's that held its lock then (this one
        // skipped it) and may not have removed it yet (CI saw it still there once).
        assert!(
            wait_until(|| {
                clean_stale(&base, hierarchy);
                !held.exists()
            }),
            "once its owner is gone it is removed"
        );
    }

    #[test]
    fn mount_points_with_spaces_are_unescaped() {
        assert_eq!(unescape(r"/mnt/a\040b"), OsString::from("/mnt/a b"));
        assert_eq!(unescape(r"/plain\x"), OsString::from(r"/plain\x"));
    }
}
