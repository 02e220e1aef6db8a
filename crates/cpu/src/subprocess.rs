//! Running the C compiler with a deadline: in a process group of its own, its output drained on
//! threads into bounded buffers, and killed with everything it started at the deadline or when
//! the caller cancels.
//!
//! Every wait here is bounded: the compiler's exit is awaited on a pidfd (or by polling where
//! pidfds are missing) in slices of at most [`CHECK_EVERY`], so that a deadline or a cancellation
//! is noticed within that; the output threads get [`DRAIN_GRACE`] after the compiler is gone.

use std::io::{self, Read};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, PidfdFlags, Signal};

/// How often a running compiler's deadline and cancellation are checked (its exit wakes the wait
/// at once).
const CHECK_EVERY: Duration = Duration::from_millis(25);

/// How long the output threads may take to see the end of the compiler's output after it has
/// exited or been killed. Only a process that left the compiler's process group (`setsid`) and
/// kept its stdout or stderr open makes them take longer; what they read by then is kept.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// How long a background compiler may wait for a CPU, getting at most [`STARVED_SHARE`] of
/// the time, before it counts as starved ([`Outcome::Starved`]).
pub(crate) const STARVED_AFTER: Duration = Duration::from_millis(400);

/// The share of the wall time a starved compiler ran, at most (its processes, together).
const STARVED_SHARE: f64 = 0.1;

/// Bytes kept from the start of each stream (a failed compile's first errors are the useful
/// ones).
pub(crate) const HEAD_BYTES: usize = 64 * 1024;

/// Bytes kept from the end of each stream (what a killed compiler printed last).
pub(crate) const TAIL_BYTES: usize = 4 * 1024;

/// When a run is given up.
pub(crate) struct Limits<'a> {
    /// Kill the compiler at this instant (`None`: never).
    pub(crate) deadline: Option<Instant>,
    /// Kill the compiler as soon as this returns `true`; called every [`CHECK_EVERY`].
    pub(crate) cancel: Option<&'a (dyn Fn() -> bool + Sync)>,
    /// Start the compiler in a process group of its own (killed as a whole), armed to die with
    /// this process; else it stays in the caller's group and only it is killed.
    pub(crate) own_group: bool,
    /// Start the compiler at the lowest priority (`SCHED_IDLE`, nice 19): see
    /// [`crate::CompileControl::background`].
    pub(crate) background: bool,
}

impl Limits<'_> {
    fn cancelled(&self) -> bool {
        self.cancel.is_some_and(|cancel| cancel())
    }

    fn expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }
}

/// Puts the calling process at the lowest priority the kernel has, best effort: nice 19 (its
/// time then counts as `nice` in `/proc/stat`) and the `SCHED_IDLE` policy (a process that
/// runs only when its CPU has nothing else to run). Async-signal-safe: two system calls.
fn lowest_priority() {
    // SAFETY: plain system calls on the calling process (pid 0), with a parameter block that
    // lives on the stack for the call.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
    }
}

/// How a run ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The compiler exited by itself.
    Exited {
        status: ExitStatus,
        output: Captured,
    },
    /// The deadline passed; the compiler (and its process group) was killed and reaped
    /// `late` after the deadline.
    TimedOut { output: Captured, late: Duration },
    /// The cancel check asked to stop (before the compiler started, or while it ran); it was
    /// killed and reaped.
    Cancelled,
    /// A background compiler ([`Limits::background`]) was starved: runnable but given almost
    /// no CPU for [`STARVED_AFTER`] (the machine is busy with work of normal priority); it was
    /// killed and reaped, so that the caller can run it in the foreground.
    Starved,
}

/// What the compiler printed, bounded.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub(crate) stdout: Capture,
    pub(crate) stderr: Capture,
}

/// One stream's first [`HEAD_BYTES`] and last [`TAIL_BYTES`] bytes, and its length.
#[derive(Debug, Default, Clone)]
pub(crate) struct Capture {
    head: Vec<u8>,
    /// The last bytes seen; may hold up to twice [`TAIL_BYTES`] between trims.
    tail: Vec<u8>,
    total: usize,
}

impl Capture {
    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len();
        let room = HEAD_BYTES.saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..room.min(bytes.len())]);
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * TAIL_BYTES {
            self.tail.drain(..self.tail.len() - TAIL_BYTES);
        }
    }

    /// The first bytes, and how many more were printed after them.
    pub(crate) fn head(&self) -> (&[u8], usize) {
        (&self.head, self.total - self.head.len())
    }

    /// The last (at most [`TAIL_BYTES`]) bytes, and whether earlier ones were dropped.
    pub(crate) fn tail(&self) -> (&[u8], bool) {
        let keep = self.tail.len().min(TAIL_BYTES);
        (&self.tail[self.tail.len() - keep..], keep < self.total)
    }

    /// Whether nothing but white space was printed.
    pub(crate) fn is_blank(&self) -> bool {
        self.head.iter().all(u8::is_ascii_whitespace) && self.total == self.head.len()
    }
}

/// Times [`spawn`] tries a command whose executable is busy (`ETXTBSY`), and how long it waits
/// between tries: 10 tries over ~50 ms in all.
const BUSY_TRIES: u32 = 10;
const BUSY_WAIT: Duration = Duration::from_millis(5);

/// Starts `command`, trying again a few times ([`BUSY_TRIES`]) while its executable is busy
/// (`ETXTBSY`, "Text file busy"). A compiler wrapper script written just before it runs (a
/// build system's, a test's) is busy while any thread of this process that forked meanwhile
/// has not yet exec'd: the child holds the script's write descriptor for that instant.
fn spawn(command: &mut Command) -> io::Result<Child> {
    let mut tries = 1;
    loop {
        match command.spawn() {
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && tries < BUSY_TRIES => {
                tries += 1;
                std::thread::sleep(BUSY_WAIT);
            }
            other => return other,
        }
    }
}

/// Runs `command` (stdin from `/dev/null`, stdout and stderr captured) until it exits, the
/// deadline passes or `limits.cancel` says stop, whichever comes first; in the last two cases its
/// process group (or, with `own_group` off, the process) is SIGKILLed and reaped before this
/// returns. Never blocks past the deadline by more than [`CHECK_EVERY`], the time the kernel
/// takes to deliver SIGKILL, and [`DRAIN_GRACE`].
///
/// # Errors
///
/// The command cannot be started (as [`Command::spawn`]), or an output thread cannot be
/// started (the compiler is then killed and reaped).
pub(crate) fn run(command: &mut Command, limits: &Limits<'_>) -> io::Result<Outcome> {
    if limits.cancelled() {
        return Ok(Outcome::Cancelled);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if limits.own_group {
        in_own_group(command);
    }
    if limits.background {
        in_background(command);
    }
    let mut child = spawn(command)?;
    let drains = Drains::start(&mut child, limits.own_group)?;
    let end = wait(&mut child, limits);
    Ok(match end? {
        End::Exited(status) => Outcome::Exited {
            status,
            output: drains.captured(),
        },
        End::TimedOut(late) => Outcome::TimedOut {
            output: drains.captured(),
            late,
        },
        End::Cancelled => Outcome::Cancelled,
        End::Starved => Outcome::Starved,
    })
}

/// Starts `command` in a process group of its own, out of the terminal's foreground group (a
/// Ctrl-C is ours to handle, not the compiler's), so that one killpg reaches everything the
/// compiler started; and it dies if this process does.
fn in_own_group(command: &mut Command) {
    command.process_group(0);
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec and only makes two system
    // calls (prctl, getppid), both async-signal-safe; it allocates nothing and takes no
    // lock.
    unsafe {
        command.pre_exec(move || {
            // The compiler dies if this process does (a second Ctrl-C exits at once, a
            // SIGKILL, an abort). The thread that forks it waits for it, so the signal,
            // which follows the forking thread, never fires early.
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            if rustix::process::getppid() != Some(parent) {
                // The parent died before the signal was armed.
                return Err(io::Error::other("the parent exited"));
            }
            Ok(())
        });
    }
}

/// Starts `command` at the lowest priority ([`lowest_priority`]).
fn in_background(command: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only makes two system
    // calls (setpriority, sched_setscheduler), both async-signal-safe; it allocates nothing
    // and takes no lock. Their errors are ignored: the compiler then runs as it would have.
    unsafe {
        command.pre_exec(|| {
            lowest_priority();
            Ok(())
        });
    }
}

/// The threads draining a compiler's stdout and stderr into bounded captures, each saying on
/// `done_rx` when its stream has ended.
struct Drains {
    done_rx: Receiver<()>,
    handles: Vec<JoinHandle<()>>,
    stdout: Arc<Mutex<Capture>>,
    stderr: Arc<Mutex<Capture>>,
}

impl Drains {
    /// Starts a drain on each of `child`'s captured streams; when one cannot be started, the
    /// child is killed (its group with `own_group`) and reaped.
    fn start(child: &mut Child, own_group: bool) -> io::Result<Drains> {
        let (done_tx, done_rx) = mpsc::channel();
        let stdout = Arc::new(Mutex::new(Capture::default()));
        let stderr = Arc::new(Mutex::new(Capture::default()));
        let drains = [
            child
                .stdout
                .take()
                .map(|pipe| drain(pipe, &stdout, &done_tx)),
            child
                .stderr
                .take()
                .map(|pipe| drain(pipe, &stderr, &done_tx)),
        ];
        drop(done_tx);
        let mut handles = Vec::new();
        for started in drains.into_iter().flatten() {
            match started {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    kill(child, own_group);
                    return Err(e);
                }
            }
        }
        Ok(Drains {
            done_rx,
            handles,
            stdout,
            stderr,
        })
    }

    /// What the compiler printed, once the drains have seen the end of its output or
    /// [`DRAIN_GRACE`] has passed (then what they read so far).
    fn captured(self) -> Captured {
        let until = Instant::now() + DRAIN_GRACE;
        let mut drained = 0;
        while drained < self.handles.len() {
            let left = until.saturating_duration_since(Instant::now());
            if self.done_rx.recv_timeout(left).is_err() {
                log::warn!(
                    "cpu: the compiler's output stayed open {DRAIN_GRACE:?} after it ended (a \
                     process it started left its process group?); keeping what it printed so \
                     far"
                );
                break;
            }
            drained += 1;
        }
        if drained == self.handles.len() {
            // Every drain has sent its last word and is returning: join them, so no thread of
            // a compile outlives it (a reused worker counts the threads a task leaves).
            for handle in self.handles {
                let _ = handle.join();
            }
        }
        let take =
            |c: &Arc<Mutex<Capture>>| c.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Captured {
            stdout: take(&self.stdout),
            stderr: take(&self.stderr),
        }
    }
}

enum End {
    Exited(ExitStatus),
    TimedOut(Duration),
    Cancelled,
    Starved,
}

/// Whether this kernel tells how long a process waited for a CPU (`/proc/<pid>/schedstat`):
/// what a background compile is watched by ([`Limits::background`]). Without it a starved
/// background compile cannot be told from a slow one, so callers should not compile in the
/// background.
pub(crate) fn can_watch_starvation() -> bool {
    std::fs::read_to_string("/proc/self/schedstat").is_ok_and(|t| parse_schedstat(&t).is_some())
}

/// `/proc/<pid>/schedstat`: nanoseconds on a CPU, and waiting on a run queue.
fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

/// The nanoseconds `pid` and its descendants have run and waited for a CPU, summed (processes
/// that already exited count through their parent no more: a sample between two of them may
/// go down, which reads as no progress); `None` when `pid`'s own cannot be read.
fn tree_schedstat(pid: u32) -> Option<(u64, u64)> {
    let read = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
            .ok()
            .and_then(|t| parse_schedstat(&t))
    };
    let mut total = read(pid)?;
    let mut pending = vec![pid];
    // A compile is a handful of processes (the driver, cc1, as, collect2, ld); bounded anyway.
    let mut seen = 0;
    while let Some(parent) = pending.pop() {
        seen += 1;
        if seen > 64 {
            break;
        }
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            if let Some((run, wait)) = read(child) {
                total = (total.0 + run, total.1 + wait);
            }
            pending.push(child);
        }
    }
    Some(total)
}

/// Watches a background compiler for starvation: over the last [`STARVED_AFTER`], its processes
/// ran at most [`STARVED_SHARE`] of the time and waited for a CPU most of it.
struct Starvation {
    pid: u32,
    /// The sample the current stretch started from: when, and the tree's run and wait time.
    since: Option<(Instant, u64, u64)>,
}

impl Starvation {
    fn new(pid: u32) -> Starvation {
        Starvation { pid, since: None }
    }

    /// Whether the compiler is starved, as of `now`.
    fn starved(&mut self, now: Instant) -> bool {
        let Some((run, wait)) = tree_schedstat(self.pid) else {
            return false;
        };
        let Some((at, run0, wait0)) = self.since else {
            self.since = Some((now, run, wait));
            return false;
        };
        let wall = now.saturating_duration_since(at);
        if wall < STARVED_AFTER {
            return false;
        }
        let wall_ns = wall.as_nanos() as f64;
        let ran = run.saturating_sub(run0) as f64 / wall_ns;
        let waited = wait.saturating_sub(wait0) as f64 / wall_ns;
        // A new stretch either way: a compiler that ran is judged afresh from here.
        self.since = Some((now, run, wait));
        ran <= STARVED_SHARE && waited >= 0.5
    }
}

/// Waits for `child` to exit, or kills it at the deadline or on cancellation. Reaps it either
/// way.
fn wait(child: &mut Child, limits: &Limits<'_>) -> io::Result<End> {
    let pidfd = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .and_then(|pid| rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok());
    let mut nap = Duration::from_millis(1);
    let mut starvation = limits.background.then(|| Starvation::new(child.id()));
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(End::Exited(status)),
            Ok(None) => {}
            Err(e) => {
                kill(child, limits.own_group);
                return Err(e);
            }
        }
        let now = Instant::now();
        if limits.expired(now) {
            kill(child, limits.own_group);
            let late = limits.deadline.map_or(Duration::ZERO, |d| d.elapsed());
            return Ok(End::TimedOut(late));
        }
        if limits.cancelled() {
            kill(child, limits.own_group);
            return Ok(End::Cancelled);
        }
        if starvation.as_mut().is_some_and(|s| s.starved(now)) {
            kill(child, limits.own_group);
            return Ok(End::Starved);
        }
        let slice = limits.deadline.map_or(CHECK_EVERY, |d| {
            d.saturating_duration_since(now).min(CHECK_EVERY)
        });
        match &pidfd {
            // Readable once the child has exited; EINTR and other errors just end this slice.
            Some(pidfd) => {
                let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
                let timespec = Timespec {
                    tv_sec: 0,
                    tv_nsec: slice.subsec_nanos().into(),
                };
                let _ = rustix::event::poll(&mut fds, Some(&timespec));
            }
            // Linux before 5.3: poll, 1 ms at first, backing off to CHECK_EVERY.
            None => {
                std::thread::sleep(nap.min(slice));
                nap = (nap * 2).min(CHECK_EVERY);
            }
        }
    }
}

/// SIGKILLs `child`'s process group (when it leads one) and `child` itself, then reaps it.
///
/// The child is not reaped before the group is signalled, so its pid (the group's id) cannot
/// have been reused by then.
fn kill(child: &mut Child, own_group: bool) {
    if own_group && let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
        // ESRCH: the group is already empty.
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    }
    // Also the process itself, should it have left its group; harmless if it already exited.
    let _ = child.kill();
    if let Err(e) = child.wait() {
        log::warn!("cpu: could not reap the compiler (pid {}): {e}", child.id());
    }
}

/// Copies `pipe` into `into` on a thread of its own until its end; then sends on `done`.
fn drain(
    mut pipe: impl Read + Send + 'static,
    into: &Arc<Mutex<Capture>>,
    done: &Sender<()>,
) -> io::Result<JoinHandle<()>> {
    let (into, done) = (Arc::clone(into), done.clone());
    std::thread::Builder::new()
        .name("tunebox-cc-output".into())
        .spawn(move || {
            let mut buffer = [0u8; 8192];
            loop {
                match pipe.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(n) => into
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(&buffer[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = done.send(());
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script held open for writing cannot be run ("Text file busy", as while another
    /// thread's fork has not yet exec'd); once it is let go, the next try runs it.
    #[test]
    fn a_busy_executable_is_tried_again() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("cc.sh");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let held = std::fs::OpenOptions::new()
            .write(true)
            .open(&script)
            .unwrap();
        let busy = Command::new(&script).spawn().map(|mut c| c.wait());
        assert_eq!(
            busy.err().map(|e| e.kind()),
            Some(io::ErrorKind::ExecutableFileBusy)
        );
        let release = std::thread::spawn(move || {
            std::thread::sleep(BUSY_WAIT * 2);
            drop(held);
        });
        let status = spawn(&mut Command::new(&script)).unwrap().wait().unwrap();
        release.join().unwrap();
        assert!(status.success());
    }

    #[test]
    fn capture_keeps_the_head_and_the_tail() {
        let mut c = Capture::default();
        c.push(b"hello ");
        c.push(b"world");
        assert_eq!(c.head(), (&b"hello world"[..], 0));
        assert_eq!(c.tail(), (&b"hello world"[..], false));
        assert!(!c.is_blank());

        let mut big = Capture::default();
        for i in 0..100_000u32 {
            big.push(format!("{i}\n").as_bytes());
        }
        let (head, more) = big.head();
        assert_eq!(head.len(), HEAD_BYTES);
        assert!(head.starts_with(b"0\n1\n2\n"));
        assert_eq!(head.len() + more, big.total);
        let (tail, cut) = big.tail();
        assert!(cut);
        assert_eq!(tail.len(), TAIL_BYTES);
        assert!(tail.ends_with(b"99998\n99999\n"));

        let mut blank = Capture::default();
        blank.push(b" \n\t");
        assert!(blank.is_blank());
        assert!(Capture::default().is_blank());
    }
}
