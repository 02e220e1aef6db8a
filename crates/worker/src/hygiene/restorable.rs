//! Process state a task can change and the worker can put back: floating-point modes, signal
//! dispositions and mask, working directory, umask, environment, rlimits, CPU affinity,
//! scheduling priority and timer slack.

use std::ffi::OsString;
use std::path::PathBuf;

use tunebox_protocol::Leftover;

use super::fpenv::FpEnv;

/// The restorable state of the worker as it was before its first task.
pub(crate) struct Baseline {
    fp: FpEnv,
    signals: Vec<(i32, libc::sigaction)>,
    mask: Vec<i32>,
    cwd: Option<PathBuf>,
    umask: libc::mode_t,
    env: Vec<(OsString, OsString)>,
    rlimits: Vec<(i32, libc::rlimit)>,
    affinity: Option<Vec<usize>>,
    nice: i32,
    timer_slack: libc::c_int,
}

/// Signals whose disposition is compared: all but SIGKILL and SIGSTOP (which cannot change)
/// and the two real-time signals glibc keeps for itself (which `sigaction` refuses).
fn signals() -> impl Iterator<Item = i32> {
    (1..=libc::SIGRTMAX()).filter(|&s| {
        s != libc::SIGKILL && s != libc::SIGSTOP && !(32..libc::SIGRTMIN()).contains(&s)
    })
}

impl Baseline {
    /// The state now, taken once before the first task.
    pub(crate) fn capture() -> Baseline {
        Baseline {
            fp: FpEnv::current(),
            signals: signals()
                .filter_map(|s| disposition(s).map(|a| (s, a)))
                .collect(),
            mask: blocked_signals(),
            cwd: std::env::current_dir().ok(),
            umask: current_umask(),
            env: sorted_env(),
            rlimits: rlimit_resources()
                .filter_map(|r| get_rlimit(r).map(|l| (r, l)))
                .collect(),
            affinity: affinity(),
            nice: nice(),
            timer_slack: timer_slack(),
        }
    }

    /// Compares the state now with the baseline, puts back what differs and says what did,
    /// each [`Leftover`] `restored` unless putting it back failed.
    pub(crate) fn check_and_restore(&self) -> Vec<Leftover> {
        let mut found = Vec::new();
        self.fp_env(&mut found);
        self.signal_dispositions(&mut found);
        self.signal_mask(&mut found);
        self.working_directory(&mut found);
        self.file_mode_mask(&mut found);
        self.environment(&mut found);
        self.resource_limits(&mut found);
        self.cpu_affinity(&mut found);
        self.priority(&mut found);
        self.slack(&mut found);
        found
    }

    fn fp_env(&self, found: &mut Vec<Leftover>) {
        let now = FpEnv::current();
        if !now.same_modes(&self.fp) {
            self.fp.install();
            let restored = FpEnv::current().same_modes(&self.fp);
            found.push(Leftover::new(
                "floating-point environment",
                format!("{} instead of {}", now.describe(), self.fp.describe()),
                restored,
            ));
        }
    }

    fn signal_dispositions(&self, found: &mut Vec<Leftover>) {
        let mut changed = Vec::new();
        let mut restored = true;
        for (signal, before) in &self.signals {
            let Some(now) = disposition(*signal) else {
                continue;
            };
            if now.sa_sigaction != before.sa_sigaction || now.sa_flags != before.sa_flags {
                changed.push(format!("{} {}", signal_name(*signal), handler_words(&now)));
                // SAFETY: reinstalls the exact `sigaction` read from the kernel for this
                // signal at start-up; the handler it names (default, ignore, or the runtime's)
                // is still mapped, as it lives in the worker binary or libc.
                restored &= unsafe { libc::sigaction(*signal, before, std::ptr::null_mut()) } == 0;
            }
        }
        if !changed.is_empty() {
            found.push(Leftover::new(
                "signal dispositions",
                changed.join(", "),
                restored,
            ));
        }
    }

    fn signal_mask(&self, found: &mut Vec<Leftover>) {
        let now = blocked_signals();
        if now != self.mask {
            let blocked: Vec<String> = now
                .iter()
                .filter(|s| !self.mask.contains(s))
                .map(|&s| signal_name(s))
                .collect();
            let unblocked: Vec<String> = self
                .mask
                .iter()
                .filter(|s| !now.contains(s))
                .map(|&s| signal_name(s))
                .collect();
            let restored = set_blocked_signals(&self.mask);
            let mut detail = Vec::new();
            if !blocked.is_empty() {
                detail.push(format!("blocked {}", blocked.join(", ")));
            }
            if !unblocked.is_empty() {
                detail.push(format!("unblocked {}", unblocked.join(", ")));
            }
            found.push(Leftover::new("signal mask", detail.join("; "), restored));
        }
    }

    fn working_directory(&self, found: &mut Vec<Leftover>) {
        let Some(before) = &self.cwd else { return };
        let now = std::env::current_dir().ok();
        if now.as_ref() != Some(before) {
            let restored = std::env::set_current_dir(before).is_ok();
            let now = now.map_or_else(|| "a removed directory".into(), |p| p.display().to_string());
            found.push(Leftover::new(
                "working directory",
                format!("{now} instead of {}", before.display()),
                restored,
            ));
        }
    }

    fn file_mode_mask(&self, found: &mut Vec<Leftover>) {
        let now = current_umask();
        if now != self.umask {
            // SAFETY: `umask` only sets the process's file-mode mask.
            unsafe { libc::umask(self.umask) };
            found.push(Leftover::new(
                "umask",
                format!("{now:03o} instead of {:03o}", self.umask),
                true,
            ));
        }
    }

    fn environment(&self, found: &mut Vec<Leftover>) {
        let now = sorted_env();
        if now == self.env {
            return;
        }
        let mut changed = Vec::new();
        for (name, value) in &now {
            match self.env.iter().find(|(n, _)| n == name) {
                None => {
                    changed.push(format!("set {}", name.to_string_lossy()));
                    // SAFETY: the worker's own threads do not read the environment while the
                    // serving thread is between requests; a backend's helper threads (CUDA's)
                    // do not either once the context is set up.
                    unsafe { std::env::remove_var(name) };
                }
                Some((_, before)) if before != value => {
                    changed.push(format!("changed {}", name.to_string_lossy()));
                    // SAFETY: as above.
                    unsafe { std::env::set_var(name, before) };
                }
                Some(_) => {}
            }
        }
        for (name, before) in &self.env {
            if !now.iter().any(|(n, _)| n == name) {
                changed.push(format!("removed {}", name.to_string_lossy()));
                // SAFETY: as above.
                unsafe { std::env::set_var(name, before) };
            }
        }
        found.push(Leftover::new("environment", changed.join(", "), true));
    }

    fn resource_limits(&self, found: &mut Vec<Leftover>) {
        let mut changed = Vec::new();
        let mut restored = true;
        for (resource, before) in &self.rlimits {
            let Some(now) = get_rlimit(*resource) else {
                continue;
            };
            if now.rlim_cur != before.rlim_cur || now.rlim_max != before.rlim_max {
                changed.push(format!(
                    "{} {} / {} instead of {} / {}",
                    rlimit_name(*resource),
                    limit_words(now.rlim_cur),
                    limit_words(now.rlim_max),
                    limit_words(before.rlim_cur),
                    limit_words(before.rlim_max)
                ));
                // A lowered hard limit cannot be raised again without privilege.
                restored &= set_rlimit(*resource, before);
            }
        }
        if !changed.is_empty() {
            found.push(Leftover::new("rlimits", changed.join(", "), restored));
        }
    }

    fn cpu_affinity(&self, found: &mut Vec<Leftover>) {
        let Some(before) = &self.affinity else { return };
        let Some(now) = affinity() else { return };
        if &now != before {
            let restored = set_affinity(before);
            found.push(Leftover::new(
                "cpu affinity",
                format!("CPUs {} instead of {}", cpu_list(&now), cpu_list(before)),
                restored,
            ));
        }
    }

    fn priority(&self, found: &mut Vec<Leftover>) {
        let now = nice();
        if now != self.nice {
            // SAFETY: sets this thread's nice value; lowering it back may be refused.
            let restored = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, self.nice) } == 0;
            found.push(Leftover::new(
                "scheduling priority",
                format!("nice {now} instead of {}", self.nice),
                restored,
            ));
        }
    }

    fn slack(&self, found: &mut Vec<Leftover>) {
        let now = timer_slack();
        if now != self.timer_slack {
            // SAFETY: PR_SET_TIMERSLACK takes the slack in ns and changes nothing else.
            let restored =
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, self.timer_slack as libc::c_ulong) }
                    == 0;
            found.push(Leftover::new(
                "timer slack",
                format!("{now} ns instead of {} ns", self.timer_slack),
                restored,
            ));
        }
    }
}

fn disposition(signal: i32) -> Option<libc::sigaction> {
    // SAFETY: an all-zero `sigaction` is a valid value (plain integers and pointers).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: with a null new action, `sigaction` only writes the current one into `action`.
    let ok = unsafe { libc::sigaction(signal, std::ptr::null(), &mut action) } == 0;
    ok.then_some(action)
}

fn handler_words(action: &libc::sigaction) -> &'static str {
    match action.sa_sigaction {
        libc::SIG_DFL => "set to its default",
        libc::SIG_IGN => "ignored",
        _ => "handled",
    }
}

fn blocked_signals() -> Vec<i32> {
    // SAFETY: an all-zero sigset is valid storage.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: with a null new set, `pthread_sigmask` only writes this thread's mask to `set`.
    if unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: `set` was filled by the kernel.
    (1..=libc::SIGRTMAX())
        .filter(|&s| unsafe { libc::sigismember(&set, s) } == 1)
        .collect()
}

fn set_blocked_signals(signals: &[i32]) -> bool {
    // SAFETY: builds a set of valid signal numbers and makes it this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) == 0
    }
}

fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 32] = [
        "0",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match usize::try_from(signal).ok().and_then(|s| NAMES.get(s)) {
        Some(name) => (*name).to_owned(),
        None => format!("SIGRTMIN+{}", signal - libc::SIGRTMIN()),
    }
}

fn current_umask() -> libc::mode_t {
    // SAFETY: `umask` swaps the mask; the second call puts the old one back at once.
    unsafe {
        let mask = libc::umask(0o022);
        libc::umask(mask);
        mask
    }
}

fn sorted_env() -> Vec<(OsString, OsString)> {
    let mut env: Vec<_> = std::env::vars_os().collect();
    env.sort();
    env
}

fn rlimit_resources() -> impl Iterator<Item = i32> {
    // RLIMIT_CPU (0) to RLIMIT_RTTIME (15), the limits Linux has had since 2.6.25.
    0..16
}

fn get_rlimit(resource: i32) -> Option<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes the limit into `limit`; the resource is in range.
    let ok = unsafe { libc::getrlimit(resource as _, &mut limit) } == 0;
    ok.then_some(limit)
}

fn set_rlimit(resource: i32, limit: &libc::rlimit) -> bool {
    // SAFETY: sets a limit to a value read from the kernel at start-up.
    unsafe { libc::setrlimit(resource as _, limit) == 0 }
}

fn rlimit_name(resource: i32) -> String {
    const NAMES: [&str; 16] = [
        "RLIMIT_CPU",
        "RLIMIT_FSIZE",
        "RLIMIT_DATA",
        "RLIMIT_STACK",
        "RLIMIT_CORE",
        "RLIMIT_RSS",
        "RLIMIT_NPROC",
        "RLIMIT_NOFILE",
        "RLIMIT_MEMLOCK",
        "RLIMIT_AS",
        "RLIMIT_LOCKS",
        "RLIMIT_SIGPENDING",
        "RLIMIT_MSGQUEUE",
        "RLIMIT_NICE",
        "RLIMIT_RTPRIO",
        "RLIMIT_RTTIME",
    ];
    usize::try_from(resource)
        .ok()
        .and_then(|r| NAMES.get(r))
        .map_or_else(|| format!("rlimit {resource}"), |n| (*n).to_owned())
}

fn limit_words(limit: libc::rlim_t) -> String {
    if limit == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        limit.to_string()
    }
}

fn affinity() -> Option<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `sched_getaffinity` fills `set`, of the size given, for this thread.
    if unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    let cpus = 8 * size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is initialized and every index is below CPU_SETSIZE.
    Some(
        (0..cpus)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect(),
    )
}

fn set_affinity(cpus: &[usize]) -> bool {
    // SAFETY: builds a set from CPU numbers read at start-up and applies it to this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

fn cpu_list(cpus: &[usize]) -> String {
    let strings: Vec<String> = cpus.iter().map(usize::to_string).collect();
    strings.join(",")
}

fn nice() -> i32 {
    // SAFETY: reads this thread's nice value (-1 is also a valid value; errors are ignored).
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

fn timer_slack() -> libc::c_int {
    // SAFETY: PR_GET_TIMERSLACK returns the slack and changes nothing.
    unsafe { libc::prctl(libc::PR_GET_TIMERSLACK) }
}
