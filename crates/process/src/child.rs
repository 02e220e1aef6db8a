//! A live worker process: its channels, its process group, and how it ends.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use ipc_channel::ipc::{IpcReceiver, IpcSender};
use ipc_channel::{IpcError, TryRecvError};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::PidfdFlags;
use tunebox_protocol::{Request, Response, StartedCell};

use crate::capture::Tail;
use crate::exit_watch::Watch;
use crate::pids::{deadline_after, has_exited, pid};
use crate::quiet_panic::catch_quietly;
use crate::stop_watch::StopWatch;
use crate::watchdog;
use crate::write_watch::WriteWatch;

/// How long to wait for a dead worker's stderr pipe to reach its end before quoting it.
const TAIL_GRACE: Duration = Duration::from_millis(100);

/// How long a receive looks for a reply without sleeping before it blocks.
const RECEIVE_SPIN: Duration = Duration::from_micros(50);

/// How often a waiting receive checks whether the worker died while something else keeps its
/// channel open (a child the kernel forked and left running): the channel then never reports
/// the death, and without this check the task would end only at its timeout.
const EXIT_CHECK: Duration = Duration::from_millis(10);

/// How long after a receive deadline the watchdog kills a worker whose read is still blocked.
const STUCK_GRACE: Duration = Duration::from_millis(250);

/// How long one read of the channel may block before the watchdog kills the worker, at most:
/// the fragments of a reply (one packet unless it carries more inline bytes than the socket
/// buffer holds; large payloads travel as shared memory) follow one another at once, so a read
/// that blocks this long is one of a partial or garbled message a kernel wrote into the
/// channel. Its timer is renewed every half of this while reads return, so such a worker is
/// killed 2.5-5 s after the message came, not at the request's timeout; far longer than a
/// thread of this process waits for a CPU on a loaded machine (a watchdog that was stopped
/// itself, Ctrl-Z, gives the waits it guards time to run first: `watchdog.rs`).
const STUCK_READ: Duration = Duration::from_secs(5);

/// One running worker process.
pub(crate) struct Worker {
    pub(crate) child: crate::launch::WorkerChild,
    pub(crate) pid: u32,
    pub(crate) requests: IpcSender<Request>,
    pub(crate) responses: IpcReceiver<Response>,
    pub(crate) stderr: Option<Tail>,
    pub(crate) stdout: Option<Tail>,
    /// Benchmark requests sent to this process (the initializer excluded).
    pub(crate) uses: u64,
    /// Where the worker records each request it begins; read after its death.
    pub(crate) started: StartedCell,
    /// Tells the owner when the worker exits while nothing waits on it; dropped before the
    /// worker is reaped.
    pub(crate) watch: Option<Watch>,
    /// The worker's cgroups and scratch folder; dropped (what is left in the cgroups killed,
    /// both removed) with the worker.
    pub(crate) enclosure: crate::containment::Enclosure,
}

/// A reply and when the receive call that took it began (`polled_at`): the reply arrived at
/// most [`EXIT_CHECK`] after that instant (the longest one call waits), and its decoding, which
/// on a loaded machine can wait for this process's own locks (its memory map's, its
/// allocator's) held by a thread that waits for a CPU, comes after it. The clock check ends the
/// parent's clock there: that wait is no time of the worker's.
pub(crate) struct Received {
    pub(crate) response: Response,
    pub(crate) polled_at: Instant,
}

/// Why a send did not complete.
pub(crate) enum SendFailure {
    /// The worker's end is closed: it died.
    Closed,
    /// The worker did not take the message in time; its process group was SIGKILLed.
    TimedOut,
}

/// What a waiting receive looks at besides the channel: the worker's writes and its stops.
struct Watches {
    writes: WriteWatch,
    stops: StopWatch,
}

impl Watches {
    /// Why the wait must end now (`now`), if it must.
    fn failure(&mut self, now: Instant) -> Option<ReceiveFailure> {
        if let Some(written) = self.writes.over_limit() {
            return Some(ReceiveFailure::WroteTooMuch(written));
        }
        self.stops
            .stopped_too_long(now)
            .map(ReceiveFailure::Stopped)
    }
}

/// Why no awaited response arrived.
pub(crate) enum ReceiveFailure {
    /// The deadline passed.
    TimedOut,
    /// The worker's end is closed: it died.
    Closed,
    /// A message could not be decoded.
    Garbled(String),
    /// A read blocked past the deadline on a partial message; the watchdog killed the worker.
    Stuck,
    /// The worker wrote this many bytes since the receive began, past its write limit.
    WroteTooMuch(u64),
    /// The worker stayed stopped by this signal (job control) for
    /// [`STOPPED_GRACE`](crate::stop_watch::STOPPED_GRACE).
    Stopped(i32),
}

impl Worker {
    /// Sends `request`. With `guard`, the watchdog kills the worker if the send has not
    /// completed within `guard` (a worker that stopped reading with its socket buffer full),
    /// which fails the send: the caller is never blocked indefinitely. Messages are never
    /// fragmented (large payloads travel as shared memory), so killing the peer always releases
    /// a blocked send.
    pub(crate) fn send(
        &self,
        request: Request,
        guard: Option<Duration>,
    ) -> Result<(), SendFailure> {
        // What the worker wrote before this request (the previous task's panic message, output
        // between tasks) is no part of this request's crash.
        if let Some(stderr) = &self.stderr {
            stderr.mark();
        }
        let armed = guard.map(|limit| watchdog::arm(self.pid, deadline_after(limit)));
        let sent = self.requests.send(request);
        match (sent, armed) {
            (Ok(()), _) => Ok(()),
            (Err(_), Some(armed)) if armed.fired() => Err(SendFailure::TimedOut),
            (Err(_), _) => Err(SendFailure::Closed),
        }
    }

    /// Waits until `deadline` for the response to request `id`, discarding responses to other
    /// (earlier, abandoned) requests.
    ///
    /// ipc-channel reads the rest of a message without a timeout once its first bytes arrived,
    /// so a worker that writes a partial or garbled message into its channel could block this
    /// read; the watchdog kills such a worker once a read blocked [`STUCK_READ`], or shortly
    /// after the deadline ([`ReceiveFailure::Stuck`], [`StuckWatch`]). A worker that writes
    /// more than `write_limit` bytes meanwhile ([`WriteWatch`]) fails the wait
    /// ([`ReceiveFailure::WroteTooMuch`]).
    pub(crate) fn receive(
        &self,
        id: u64,
        deadline: Instant,
        write_limit: Option<u64>,
    ) -> Result<Received, ReceiveFailure> {
        let mut stuck = StuckWatch::arm(self.pid, deadline);
        let mut watches = Watches {
            writes: WriteWatch::start(self.pid, write_limit),
            stops: StopWatch::start(self.pid),
        };
        match self.receive_until(id, deadline, &mut stuck, &mut watches) {
            Err(ReceiveFailure::Closed | ReceiveFailure::Garbled(_)) if stuck.fired() => {
                Err(ReceiveFailure::Stuck)
            }
            other => other,
        }
    }

    fn receive_until(
        &self,
        id: u64,
        deadline: Instant,
        stuck: &mut StuckWatch,
        watches: &mut Watches,
    ) -> Result<Received, ReceiveFailure> {
        // Look without sleeping for a moment first: a quick reply is then taken without the
        // cost of waking this thread, which is 50-90 µs across CPUs on some VMs.
        let spin_until = Instant::now() + RECEIVE_SPIN;
        loop {
            let now = Instant::now();
            stuck.renew(now);
            let wait = next_wait(now, spin_until, deadline);
            let received = catch_quietly(|| self.responses.try_recv_timeout(wait))
                .map_err(|panic| ReceiveFailure::Garbled(format!("malformed message: {panic}")))?;
            match received {
                Ok(response) if response.id == id => {
                    return Ok(Received {
                        response,
                        polled_at: now,
                    });
                }
                Ok(stale) => log::debug!("pid {}: discarding stale reply {}", self.pid, stale.id),
                // ipc-channel polls with millisecond granularity: check the clock, not the error.
                Err(TryRecvError::Empty) if !wait.is_zero() && self.has_exited() => {
                    return self.last_words(id);
                }
                // Read once a wait began: a reply taken while spinning reads no `/proc` file.
                Err(TryRecvError::Empty)
                    if !wait.is_zero()
                        && let Some(failure) = watches.failure(now) =>
                {
                    return Err(failure);
                }
                Err(TryRecvError::Empty) if Instant::now() < deadline => {}
                Err(TryRecvError::Empty) => return Err(ReceiveFailure::TimedOut),
                Err(TryRecvError::IpcError(IpcError::Disconnected)) => {
                    return Err(ReceiveFailure::Closed);
                }
                // A signal this process handles arrived during the wait (`poll` is never
                // restarted, whatever `SA_RESTART` says): nothing was taken off the channel.
                Err(TryRecvError::IpcError(IpcError::Io(e)))
                    if e.kind() == std::io::ErrorKind::Interrupted =>
                {
                    if Instant::now() >= deadline {
                        return Err(ReceiveFailure::TimedOut);
                    }
                }
                Err(TryRecvError::IpcError(e)) => {
                    return Err(ReceiveFailure::Garbled(e.to_string()));
                }
            }
        }
    }

    /// Whether the worker has exited (it stays unreaped: `WorkerChild::try_wait` still sees it).
    pub(crate) fn has_exited(&self) -> bool {
        has_exited(self.pid)
    }

    /// After the worker exited with its channel still open: kills what is left of what it
    /// started (whatever held the channel open) and takes a reply the worker sent before it
    /// died (a sticky device fault is answered, then the worker exits); without one, the worker
    /// crashed.
    fn last_words(&self, id: u64) -> Result<Received, ReceiveFailure> {
        self.enclosure.end(self.pid);
        loop {
            let polled_at = Instant::now();
            let received = catch_quietly(|| self.responses.try_recv_timeout(Duration::ZERO))
                .map_err(|panic| ReceiveFailure::Garbled(format!("malformed message: {panic}")))?;
            match received {
                Ok(response) if response.id == id => {
                    return Ok(Received {
                        response,
                        polled_at,
                    });
                }
                Ok(stale) => log::debug!("pid {}: discarding stale reply {}", self.pid, stale.id),
                Err(_) => return Err(ReceiveFailure::Closed),
            }
        }
    }

    /// Kills the worker and everything it started (its process group, its cgroups or its
    /// process tree: `containment`) and reaps the worker. Returns its exit status.
    pub(crate) fn kill(&mut self) -> Option<ExitStatus> {
        self.enclosure.end(self.pid);
        self.child.wait().ok()
    }

    /// Asks nothing: waits up to `timeout` for the worker to exit by itself (after a
    /// `Shutdown`, say); kills it after that. Either way everything it started is killed and
    /// the worker is reaped.
    pub(crate) fn wait_or_kill(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Ok(None) = self.child.try_wait() {
            wait_for_exit(self.pid, timeout);
        }
        // Whether it exited or not: `end` kills it and what it started; an exited worker is
        // unreaped until `wait`, so its pid is still ours.
        self.enclosure.end(self.pid);
        self.child.wait().ok()
    }

    /// The captured stderr tail, including what a dying worker wrote last.
    pub(crate) fn stderr_tail(&self) -> String {
        self.stderr
            .as_ref()
            .map(|t| t.text(TAIL_GRACE))
            .unwrap_or_default()
    }

    /// What the worker wrote to stderr since the last request was sent to it (all it wrote when
    /// none was), including what a dying worker wrote last: the tail a crash quotes.
    pub(crate) fn request_stderr_tail(&self) -> String {
        self.stderr
            .as_ref()
            .map(|t| t.text_since_mark(TAIL_GRACE))
            .unwrap_or_default()
    }

    /// The captured stdout tail.
    pub(crate) fn stdout_tail(&self) -> String {
        self.stdout
            .as_ref()
            .map(|t| t.text(TAIL_GRACE))
            .unwrap_or_default()
    }
}

/// How long the next look at the channel at `now` waits: none while spinning (after yielding
/// the CPU once), then up to [`EXIT_CHECK`], never past `deadline`.
fn next_wait(now: Instant, spin_until: Instant, deadline: Instant) -> Duration {
    if now < spin_until {
        std::thread::yield_now();
        return Duration::ZERO;
    }
    deadline.saturating_duration_since(now).min(EXIT_CHECK)
}

/// The watchdog's kill of a worker whose read of the channel blocks: at most [`STUCK_READ`]
/// after the read began (renewed every half of it while reads return), and never later than
/// [`STUCK_GRACE`] after the receive's deadline. Its timers share one `fired` flag, so a kill
/// by a timer being replaced is still seen.
struct StuckWatch {
    pid: u32,
    deadline: Instant,
    armed: watchdog::Armed,
    renew_at: Instant,
}

impl StuckWatch {
    fn arm(pid: u32, deadline: Instant) -> StuckWatch {
        let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (armed, renew_at) = Self::arm_from_now(pid, deadline, fired);
        StuckWatch {
            pid,
            deadline,
            armed,
            renew_at,
        }
    }

    fn arm_from_now(
        pid: u32,
        deadline: Instant,
        fired: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> (watchdog::Armed, Instant) {
        let now = Instant::now();
        let kill_at = (now + STUCK_READ).min(deadline + STUCK_GRACE);
        (
            watchdog::arm_with(pid, kill_at, fired),
            now + STUCK_READ / 2,
        )
    }

    /// Moves the kill later once half its time has passed by `now` (a read that returned is not
    /// stuck). The new timer is armed before the old is dropped, so the watchdog's thread,
    /// asleep until the old one, is not woken for it.
    fn renew(&mut self, now: Instant) {
        if now < self.renew_at || self.fired() {
            return;
        }
        let (armed, renew_at) = Self::arm_from_now(self.pid, self.deadline, self.armed.flag());
        self.armed = armed;
        self.renew_at = renew_at;
    }

    /// Whether the watchdog killed the worker.
    fn fired(&self) -> bool {
        self.armed.fired()
    }
}

/// Waits up to `timeout` for the process `raw` (our unreaped child) to exit, without reaping it:
/// a pidfd becomes readable at the exit, so this wakes at once instead of polling. Where pidfds
/// are unavailable (Linux before 5.3), it polls every 200 µs.
fn wait_for_exit(raw: u32, timeout: Duration) {
    let deadline = deadline_after(timeout);
    if let Some(pidfd) =
        pid(raw).and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok())
    {
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let timespec = Timespec {
                tv_sec: left.as_secs().try_into().unwrap_or(i64::MAX),
                tv_nsec: left.subsec_nanos().into(),
            };
            match rustix::event::poll(&mut fds, Some(&timespec)) {
                Err(rustix::io::Errno::INTR) => continue,
                _ => return,
            }
        }
    }
    while Instant::now() < deadline && is_running(raw) {
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Whether `/proc` shows `raw` neither gone nor a zombie.
fn is_running(raw: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{raw}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}
