//! Seeing interference: what else ran on the machine while a window was timed.
//!
//! A window's [`Conditions`] come from two snapshots of `/proc/stat` (per-CPU busy and steal
//! time, in clock ticks), taken by the parent's pool thread just before it sends a request to
//! its worker and just after the reply ([`Watch`]). The worker's own time is one CPU's worth, or the CPU time
//! its process reports for the request when that is more (`Integrity::worker_cpu_ms`: a
//! multi-threaded kernel, OpenMP or a thread pool, keeps several CPUs busy), so the busy time
//! beyond that is someone else's: another process, another worker, one of tunebox's compiles.
//! Each CPU's tick count is off by up to a tick over a window, so a window whose worker kept k
//! CPUs busy needs k − 1 foreign ticks more before it counts as disturbed: without that, a
//! two-thread kernel's windows of ~30 ms on two CPUs were flagged one in three on an idle
//! machine (2 foreign ticks: the parent's few ms and the rounding).
//! Steal time is the hypervisor running another guest on our vCPU.
//! Either one above its threshold marks the window disturbed: such a window does not decide a
//! choice's time, and a result without enough quiet windows is not cached as final.
//!
//! tunebox's own compiles may run beside a window (on the CPUs the workers leave, and in the
//! background on theirs: [`tunebox_cpu::CompileControl::background`]). They are not
//! interference: [`BackgroundWork`] knows how long compile threads ran during the window, and
//! that much is taken off the CPUs' busy time. A compile thread is one CPU-bound process at a
//! time, so this is about what it used; while compiles run, work of someone else's up to that
//! much goes unseen (the rounds after the compiles still see it).
//!
//! The CPU topology ([`Topology`], from sysfs `thread_siblings_list`) says which CPUs share a
//! core, so that compiles stay off every core a worker may measure on. Both sources can be
//! replaced for tests and for simulating other machines: `TUNEBOX_PROC_STAT` (a file in
//! `/proc/stat`'s format) and `TUNEBOX_SYSFS_CPU` (a folder shaped as `/sys/devices/system/cpu`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tunebox_pool::{PoolError, WindowHook};
use tunebox_process::{CpuTicks, CpuTimes, USER_HZ};
use tunebox_protocol::BenchmarkResult;

/// The other CPUs' busy share (of their time) above which a window counts as disturbed.
pub const BUSY_THRESHOLD: f64 = 0.25;
/// The steal share (of all CPUs' time) above which a window counts as disturbed.
pub const STEAL_THRESHOLD: f64 = 0.05;
/// Clock ticks of foreign busy time below which nothing is flagged beside a single-threaded
/// worker (one tick is 10 ms at the usual `USER_HZ` of 100: a window of 30 ms cannot tell 1
/// tick from noise); one more for each further CPU the window's own threads kept busy.
const MIN_TICKS: u64 = 2;
/// What else ran while a window was timed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Conditions {
    /// The other CPUs' busy share during the window (0-1): busy time beyond one CPU's worth
    /// (the worker's), over the other CPUs' time.
    pub other_busy: f64,
    /// The share of all CPUs' time stolen by the hypervisor (0-1).
    pub steal: f64,
    /// Either one above its threshold ([`BUSY_THRESHOLD`], [`STEAL_THRESHOLD`]).
    pub disturbed: bool,
    /// When the window ended, seconds since the Unix epoch (0: not known).
    pub ended_s: f64,
    /// How long the window took, from sending its request to its worker to the reply (the
    /// worker's checks included), seconds (0: not known).
    pub took_s: f64,
}

impl Conditions {
    /// The conditions between two snapshots (`None` where either is missing or the CPUs
    /// changed: unknown, so not disturbed), with `own` of tunebox's own work (compile threads'
    /// time, [`BackgroundWork`]) in between, and `worker` of CPU time the window's worker
    /// process used (all its threads) over the window's `wall` time (zero: unknown): neither is
    /// interference.
    pub(crate) fn between(
        before: Option<&CpuTimes>,
        after: Option<&CpuTimes>,
        own: Duration,
        worker: Duration,
        wall: Duration,
    ) -> Conditions {
        let (Some(before), Some(after)) = (before, after) else {
            return Conditions::default();
        };
        if before.0.len() != after.0.len() || before.0.is_empty() {
            return Conditions::default();
        }
        let delta: Vec<CpuTicks> = before
            .0
            .iter()
            .zip(&after.0)
            .map(|(b, a)| CpuTicks {
                busy: a.busy.saturating_sub(b.busy),
                steal: a.steal.saturating_sub(b.steal),
                total: a.total.saturating_sub(b.total),
            })
            .collect();
        // Rounded up: a compile that ran for part of a tick may have been charged the tick.
        let own_ticks = (own.as_secs_f64() * USER_HZ).ceil() as u64;
        let busy: u64 = delta
            .iter()
            .map(|d| d.busy)
            .sum::<u64>()
            .saturating_sub(own_ticks);
        let steal: u64 = delta.iter().map(|d| d.steal).sum();
        let total: u64 = delta.iter().map(|d| d.total).sum();
        // One CPU's worth of time is the worker's (it may move between CPUs: the sum counts),
        // or what its threads used together when that is more. Rounded down: a share of a
        // tick the worker did not use may be someone else's.
        let one = delta.iter().map(|d| d.total).max().unwrap_or(0);
        let worker_ticks = (worker.as_secs_f64() * USER_HZ).floor() as u64;
        // Each CPU's count is off by up to a tick (a window does not start or end on one), so
        // what ticks can tell grows with the CPUs the window's own threads kept busy: one
        // tick more for each beyond the first.
        let min_foreign = MIN_TICKS + cpus_kept_busy(worker, wall, one).min(delta.len() as u64) - 1;
        let foreign = busy.saturating_sub(one.max(worker_ticks));
        let others = total.saturating_sub(one);
        let share = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                part as f64 / whole as f64
            }
        };
        let other_busy = share(foreign, others);
        let steal_share = share(steal, total);
        log::trace!(
            "window: busy {busy} ticks (own work {own_ticks} off), worker {worker_ticks}, one \
             CPU {one}, foreign {foreign} of {others}; steal {steal} of {total}"
        );
        Conditions {
            other_busy,
            steal: steal_share,
            disturbed: (foreign >= min_foreign && other_busy > BUSY_THRESHOLD)
                || (steal >= MIN_TICKS && steal_share > STEAL_THRESHOLD),
            ended_s: 0.0,
            took_s: 0.0,
        }
    }

    /// Measures a window with `f` on the calling thread, and says what else ran meanwhile,
    /// as [`Watch`] does on a pool's worker thread.
    pub(crate) fn around(
        background: Option<&Arc<BackgroundWork>>,
        f: impl FnOnce() -> Result<BenchmarkResult, PoolError>,
    ) -> (Result<BenchmarkResult, PoolError>, Conditions) {
        let watch = Watch::new(background);
        let mark = watch.before();
        let value = f();
        let conditions = watch.after(mark, &value);
        (value, conditions)
    }

    /// These conditions, of a window that ended now.
    fn ended_now(self) -> Conditions {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        Conditions {
            ended_s: now.map_or(0.0, |d| d.as_secs_f64()),
            ..self
        }
    }
}

/// What a run watches around each window, on the pool's worker thread that sends it
/// ([`tunebox_pool::WindowHook`]): the CPUs' times just before the request goes to the worker
/// and just after its reply, and how long tunebox's own `background` work (compiles) ran
/// meanwhile. What else ran then, that work and the worker's own threads (its result's
/// `integrity.worker_cpu_ms`) aside, is the window's [`Conditions`].
#[derive(Debug, Default)]
pub(crate) struct Watch {
    background: Option<Arc<BackgroundWork>>,
}

/// What [`Watch`] noted before a window.
#[derive(Debug)]
pub(crate) struct Before {
    own: Option<Duration>,
    started: Instant,
    cpus: Option<CpuTimes>,
}

impl Watch {
    /// Watches windows with `background`'s time (tunebox's compiles) taken off.
    pub(crate) fn new(background: Option<&Arc<BackgroundWork>>) -> Watch {
        Watch {
            background: background.cloned(),
        }
    }
}

impl WindowHook for Watch {
    type Mark = Before;
    type Seen = Conditions;

    fn before(&self) -> Before {
        Before {
            own: self.background.as_deref().map(BackgroundWork::total),
            started: Instant::now(),
            cpus: CpuTimes::now(),
        }
    }

    fn after(&self, before: Before, value: &Result<BenchmarkResult, PoolError>) -> Conditions {
        let after = CpuTimes::now();
        let own = self
            .background
            .as_deref()
            .map(BackgroundWork::total)
            .zip(before.own)
            .map_or(Duration::ZERO, |(a, b)| a.saturating_sub(b));
        let worker = value
            .as_ref()
            .ok()
            .and_then(|r| r.integrity.worker_cpu_ms)
            .filter(|ms| ms.is_finite() && *ms > 0.0)
            .map_or(Duration::ZERO, |ms| Duration::from_secs_f64(ms / 1e3));
        let took = before.started.elapsed();
        let conditions = Conditions {
            took_s: took.as_secs_f64(),
            ..Conditions::between(before.cpus.as_ref(), after.as_ref(), own, worker, took)
        };
        conditions.ended_now()
    }
}

/// How many CPUs a worker that used `cpu` of CPU time kept busy over a window of `wall` (or,
/// `wall` unknown, of `one_ticks` clock ticks), at least 1. A quarter of a CPU's worth is
/// left to noise: a single-threaded worker's CPU time can exceed the window's time a little
/// (the clocks are read at different moments), and must not count as two CPUs.
fn cpus_kept_busy(cpu: Duration, wall: Duration, one_ticks: u64) -> u64 {
    let wall_s = if wall.is_zero() {
        one_ticks as f64 / USER_HZ
    } else {
        wall.as_secs_f64()
    };
    if wall_s <= 0.0 {
        return 1;
    }
    ((cpu.as_secs_f64() / wall_s - 0.25).ceil() as u64).max(1)
}

/// How long tunebox's own background work (compile threads) has run, summed over threads: a
/// clock that each thread starts ([`BackgroundWork::start`]) and that stops with the guard it
/// returns. [`Conditions::around`] reads it before and after a window.
#[derive(Debug)]
pub(crate) struct BackgroundWork {
    state: Mutex<Clock>,
}

#[derive(Debug)]
struct Clock {
    /// Threads running now.
    running: u32,
    /// Thread time summed up to `since`.
    total: Duration,
    since: Instant,
}

impl Default for BackgroundWork {
    fn default() -> Self {
        BackgroundWork {
            state: Mutex::new(Clock {
                running: 0,
                total: Duration::ZERO,
                since: Instant::now(),
            }),
        }
    }
}

impl BackgroundWork {
    /// Thread time so far (the running threads' up to now).
    pub(crate) fn total(&self) -> Duration {
        let mut clock = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        clock.advance(Instant::now());
        clock.total
    }

    /// One more thread runs until the guard is dropped.
    pub(crate) fn start(&self) -> Running<'_> {
        let mut clock = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        clock.advance(Instant::now());
        clock.running += 1;
        Running { work: self }
    }
}

impl Clock {
    fn advance(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.since);
        self.total += elapsed * self.running;
        self.since = now;
    }
}

/// A thread of [`BackgroundWork`] running; it stops when dropped.
#[derive(Debug)]
pub(crate) struct Running<'w> {
    work: &'w BackgroundWork,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut clock = self
            .work
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        clock.advance(Instant::now());
        clock.running = clock.running.saturating_sub(1);
    }
}

/// Which CPUs share a core: the groups of sysfs `cpuN/topology/thread_siblings_list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    /// One entry per core: the CPUs (SMT threads) it runs.
    pub cores: Vec<Vec<usize>>,
}

impl Topology {
    /// The machine's topology (`$TUNEBOX_SYSFS_CPU`, else `/sys/devices/system/cpu`); without
    /// sysfs, one core per CPU the process may use.
    pub(crate) fn detect() -> Topology {
        let root = std::env::var_os("TUNEBOX_SYSFS_CPU")
            .map_or_else(|| PathBuf::from("/sys/devices/system/cpu"), PathBuf::from);
        Topology::read(&root).unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            Topology {
                cores: (0..n).map(|c| vec![c]).collect(),
            }
        })
    }

    /// The topology under `root` (shaped as `/sys/devices/system/cpu`), `None` when it has no
    /// `cpuN/topology/thread_siblings_list`.
    pub(crate) fn read(root: &Path) -> Option<Topology> {
        let mut cores: Vec<Vec<usize>> = Vec::new();
        let mut cpus: Vec<usize> = std::fs::read_dir(root)
            .ok()?
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_prefix("cpu")?.parse().ok()
            })
            .collect();
        cpus.sort_unstable();
        for cpu in cpus {
            let path = root.join(format!("cpu{cpu}/topology/thread_siblings_list"));
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            let siblings = parse_cpu_list(&text)?;
            if !cores.iter().any(|c| c.contains(&cpu)) {
                cores.push(siblings);
            }
        }
        (!cores.is_empty()).then_some(Topology { cores })
    }

    /// All CPUs.
    #[cfg(test)]
    pub(crate) fn cpus(&self) -> usize {
        self.cores.iter().map(Vec::len).sum()
    }

    /// Whether some core runs two CPUs or more (SMT: a compile on a worker's sibling would
    /// share its core's execution units, whatever its priority).
    pub(crate) fn has_smt(&self) -> bool {
        self.cores.iter().any(|c| c.len() > 1)
    }

    /// The CPUs left when `workers` workers each hold a whole core (the largest cores first:
    /// a worker and an SMT sibling slow each other as much as two workers on one CPU).
    pub(crate) fn free_cpus(&self, workers: usize) -> usize {
        let mut sizes: Vec<usize> = self.cores.iter().map(Vec::len).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        sizes.iter().skip(workers).sum()
    }
}

/// `0-3,8,10-11` → `[0, 1, 2, 3, 8, 10, 11]`; `None` when malformed.
pub(crate) fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// A short machine-speed probe: the time a fixed piece of integer work takes on this thread
/// (about 0.5 ms on a current core). Run before each round: a round whose probe is much slower
/// than the run's fastest ran on a slowed machine (frequency, a busy sibling, steal).
pub(crate) fn speed_probe() -> Duration {
    let start = Instant::now();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..400_000u64 {
        x = x.rotate_left(7) ^ i.wrapping_mul(0x2545_F491_4F6C_DD1D);
    }
    std::hint::black_box(x);
    start.elapsed()
}

/// The 1-minute load average (`/proc/loadavg`), where readable.
pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Conditions::between`] for a window whose time is not known: its ticks stand for it.
    fn untimed(
        before: Option<&CpuTimes>,
        after: Option<&CpuTimes>,
        own: Duration,
        worker: Duration,
    ) -> Conditions {
        Conditions::between(before, after, own, worker, Duration::ZERO)
    }

    fn stat(cpus: &[(u64, u64, u64)]) -> String {
        // (busy as user, idle, steal) per CPU.
        let mut text = String::from("cpu  0 0 0 0 0 0 0 0 0 0\n");
        for (i, (busy, idle, steal)) in cpus.iter().enumerate() {
            text.push_str(&format!("cpu{i} {busy} 0 0 {idle} 0 0 0 {steal} 0 0\n"));
        }
        text.push_str("intr 1 2 3\nctxt 5\n");
        text
    }

    #[test]
    fn a_busy_other_cpu_disturbs_a_window_and_an_idle_one_does_not() {
        let before = CpuTimes::parse(&stat(&[(100, 100, 0), (100, 100, 0)]));
        // The worker busy on cpu0 for 10 ticks, cpu1 idle (1 tick of the parent).
        let quiet = CpuTimes::parse(&stat(&[(110, 100, 0), (101, 109, 0)]));
        let c = untimed(Some(&before), Some(&quiet), Duration::ZERO, Duration::ZERO);
        assert!(!c.disturbed, "{c:?}");
        assert!(c.other_busy < 0.15, "{c:?}");
        // A busy loop on cpu1 all along.
        let busy = CpuTimes::parse(&stat(&[(110, 100, 0), (110, 100, 0)]));
        let c = untimed(Some(&before), Some(&busy), Duration::ZERO, Duration::ZERO);
        assert!(c.disturbed && (c.other_busy - 1.0).abs() < 1e-9, "{c:?}");
        // The worker moved between the CPUs half way: still one CPU's worth, quiet.
        let moved = CpuTimes::parse(&stat(&[(105, 105, 0), (105, 105, 0)]));
        assert!(!untimed(Some(&before), Some(&moved), Duration::ZERO, Duration::ZERO).disturbed);
        // The hypervisor stole a third of the time.
        let stolen = CpuTimes::parse(&stat(&[(107, 100, 3), (100, 107, 3)]));
        let c = untimed(Some(&before), Some(&stolen), Duration::ZERO, Duration::ZERO);
        assert!(c.disturbed && c.steal > 0.25, "{c:?}");
        // One tick of foreign work in a short window is below what ticks can tell.
        let short = CpuTimes::parse(&stat(&[(103, 100, 0), (101, 102, 0)]));
        assert!(!untimed(Some(&before), Some(&short), Duration::ZERO, Duration::ZERO).disturbed);
        // Unknown conditions are not interference.
        assert_eq!(
            untimed(None, Some(&busy), Duration::ZERO, Duration::ZERO),
            Conditions::default()
        );
    }

    /// A multi-threaded kernel keeps both CPUs busy with its own threads: the CPU time its
    /// worker process reports is the window's own, not interference; a busy loop beside a
    /// single-threaded worker still is.
    #[test]
    fn a_worker_whose_threads_keep_every_cpu_busy_is_not_disturbed() {
        let before = CpuTimes::parse(&stat(&[(100, 100, 0), (100, 100, 0)]));
        let both = CpuTimes::parse(&stat(&[(110, 100, 0), (110, 100, 0)]));
        let ms = Duration::from_millis;
        // 20 ticks of the worker's own threads (200 ms of CPU time over a 100 ms window).
        let c = untimed(Some(&before), Some(&both), Duration::ZERO, ms(200));
        assert!(!c.disturbed && c.other_busy < 0.05, "{c:?}");
        // A single-threaded worker (100 ms of CPU time): the other CPU's 10 ticks are foreign.
        let c = untimed(Some(&before), Some(&both), Duration::ZERO, ms(100));
        assert!(c.disturbed, "{c:?}");
        // Its threads used half the other CPU: the other half is someone else's.
        let c = untimed(Some(&before), Some(&both), Duration::ZERO, ms(150));
        assert!((c.other_busy - 0.5).abs() < 1e-9, "{c:?}");
    }

    /// Each CPU's count is off by up to a tick over a window, so a window whose worker kept two
    /// CPUs busy needs a foreign tick more: the OpenMP histogram's two-thread windows of ~30 ms
    /// (both CPUs busy 3 ticks each, the worker's threads 45 ms of it, the rest the parent
    /// and the rounding) were flagged one in three on an idle machine. Busy loops are still
    /// seen beside it, and beside a single-threaded window of a few ms.
    #[test]
    fn a_multi_threaded_window_allows_a_tick_per_cpu_its_threads_kept_busy() {
        let ms = Duration::from_millis;
        let before = CpuTimes::parse(&stat(&[(100, 100, 0), (100, 100, 0)]));
        let short = CpuTimes::parse(&stat(&[(103, 100, 0), (103, 100, 0)]));
        let c = Conditions::between(Some(&before), Some(&short), ms(0), ms(45), ms(30));
        assert!(!c.disturbed, "{c:?}");
        // Busy loops beside it: the kernel's threads got half the CPUs.
        let c = Conditions::between(Some(&before), Some(&short), ms(0), ms(30), ms(30));
        assert!(c.disturbed, "{c:?}");
        // A single-threaded window of 20 ms whose worker used 23 ms (its clock read a little
        // apart from the window's): one CPU, and a busy loop on the other is seen.
        let single = CpuTimes::parse(&stat(&[(102, 100, 0), (102, 100, 0)]));
        let c = Conditions::between(Some(&before), Some(&single), ms(0), ms(23), ms(20));
        assert!(c.disturbed, "{c:?}");
        // The window's time unknown: its ticks stand for it.
        let c = Conditions::between(Some(&before), Some(&single), ms(0), ms(23), ms(0));
        assert!(c.disturbed, "{c:?}");
        assert_eq!(cpus_kept_busy(ms(45), ms(30), 3), 2);
        assert_eq!(cpus_kept_busy(ms(23), ms(20), 2), 1);
        assert_eq!(cpus_kept_busy(ms(0), ms(0), 0), 1);
    }

    /// tunebox's own compiles beside a window (timed by [`BackgroundWork`]) are not
    /// interference; someone else's work, beyond what the compiles ran, still is.
    #[test]
    fn own_background_compiles_do_not_disturb_a_window() {
        // (user, nice, idle) per CPU.
        let stat = |cpus: &[(u64, u64, u64)]| {
            let mut text = String::new();
            for (i, (user, nice, idle)) in cpus.iter().enumerate() {
                text.push_str(&format!("cpu{i} {user} {nice} 0 {idle} 0 0 0 0 0 0\n"));
            }
            CpuTimes::parse(&text)
        };
        let before = stat(&[(100, 0, 100), (100, 0, 100)]);
        // The worker on cpu0 for 10 ticks, a compile niced on cpu1 for 10.
        let after = stat(&[(110, 0, 100), (100, 10, 100)]);
        let ran = |ms| Duration::from_millis(ms);
        let c = untimed(Some(&before), Some(&after), ran(100), Duration::ZERO);
        assert!(!c.disturbed && c.other_busy < 0.01, "{c:?}");
        // No compile ran: the time is someone else's.
        let c = untimed(Some(&before), Some(&after), Duration::ZERO, Duration::ZERO);
        assert!(c.disturbed, "{c:?}");
        // A compile ran a quarter of the time (3 ticks, rounded up): the rest is someone
        // else's.
        let c = untimed(Some(&before), Some(&after), ran(25), Duration::ZERO);
        assert!(c.disturbed && (c.other_busy - 0.7).abs() < 0.01, "{c:?}");
        // The clock: two threads for a while, then one.
        let work = BackgroundWork::default();
        let start = work.total();
        {
            let _a = work.start();
            let _b = work.start();
            std::thread::sleep(ran(20));
        }
        let two = work.total() - start;
        assert!(two >= ran(40) && two < ran(400), "{two:?}");
        std::thread::sleep(ran(10));
        assert!(work.total() - start - two < ran(5), "no thread ran");
    }

    #[test]
    fn topology_groups_smt_siblings_from_a_fake_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        // 4 CPUs on 2 cores (0,2 and 1,3), and an entry that is not a CPU.
        for (cpu, siblings) in [(0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")] {
            let topology = dir.path().join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&topology).unwrap();
            std::fs::write(
                topology.join("thread_siblings_list"),
                format!("{siblings}\n"),
            )
            .unwrap();
        }
        std::fs::create_dir_all(dir.path().join("cpufreq")).unwrap();
        let t = Topology::read(dir.path()).unwrap();
        assert_eq!(t.cores, [vec![0, 2], vec![1, 3]]);
        assert_eq!(t.cpus(), 4);
        // One worker holds a core and its sibling: two CPUs are free for compiles.
        assert_eq!(t.free_cpus(1), 2);
        assert_eq!(t.free_cpus(2), 0);
        assert!(t.has_smt());
        assert!(
            !Topology {
                cores: vec![vec![0], vec![1]]
            }
            .has_smt()
        );
        // Ranges; no sysfs at all.
        assert_eq!(parse_cpu_list("0-2,5\n"), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(Topology::read(&dir.path().join("none")), None);
    }
}
