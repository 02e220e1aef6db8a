//! What the calling thread went through during a timed rep, and the rep's time from it
//! ([`RepClock::Preemption`]).
//!
//! Around each host-timed sample, [`ThreadWatch`] reads the calling thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), the process's (`CLOCK_PROCESS_CPUTIME_ID`) and the thread's
//! context switches (`getrusage(RUSAGE_THREAD)`). [`ThreadThreadSpan::time_ms`] then keeps the sample's wall
//! time unless the thread was preempted or lost time to the hypervisor, in which case the
//! thread's CPU time is the kernel's time.

use tunebox_protocol::RepClock;

/// Wall time beyond the thread's CPU time that, with no context switch, means time stolen by the
/// hypervisor (or interrupts) rather than the clocks' own overhead: 5 % of the wall time...
const STOLEN_SHARE: f64 = 0.05;
/// ...and at least this many ms.
const STOLEN_FLOOR_MS: f64 = 0.002;
/// CPU time other threads of the worker may use during a rep (5 % of the calling thread's, at
/// least this many ms) before the kernel counts as multi-threaded.
const OTHERS_FLOOR_MS: f64 = 0.02;
const OTHERS_SHARE: f64 = 0.05;

/// The calling thread's clocks and counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    thread_cpu_ms: f64,
    process_cpu_ms: f64,
    voluntary: i64,
    involuntary: i64,
}

impl Reading {
    fn now() -> Option<Reading> {
        let thread_cpu_ms = thread_cpu_ms()?;
        let process_cpu_ms = process_cpu_ms()?;
        // SAFETY: rusage is plain integers, for which all-zero bytes are a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a valid, writable rusage; RUSAGE_THREAD only reads the calling
        // thread's counters.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
            return None;
        }
        Some(Reading {
            thread_cpu_ms,
            process_cpu_ms,
            voluntary: usage.ru_nvcsw,
            involuntary: usage.ru_nivcsw,
        })
    }
}

/// The calling thread's CPU time in ms (`CLOCK_THREAD_CPUTIME_ID`): the time it ran, not the
/// time it waited for a CPU; `None` where the clock cannot be read.
pub fn thread_cpu_ms() -> Option<f64> {
    cpu_ms(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The calling process's CPU time in ms, all its threads together
/// (`CLOCK_PROCESS_CPUTIME_ID`); `None` where the clock cannot be read.
pub fn process_cpu_ms() -> Option<f64> {
    cpu_ms(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The calling process's threads now (`/proc/self/task`); `None` where they cannot be counted.
pub fn thread_count() -> Option<usize> {
    std::fs::read_dir("/proc/self/task")
        .ok()
        .map(Iterator::count)
}

fn cpu_ms(clock: libc::clockid_t) -> Option<f64> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec.
    (unsafe { libc::clock_gettime(clock, &mut t) } == 0)
        .then(|| t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6)
}

/// Watches the calling thread across one timed sample: [`ThreadWatch::start`] before it,
/// [`ThreadWatch::stop`] after it, on the same thread.
#[derive(Debug)]
pub(crate) struct ThreadWatch {
    start: Option<Reading>,
}

impl ThreadWatch {
    /// Reads the thread's clocks and counters (a few system calls, before the timed window). With
    /// [`RepClock::Wall`] it reads nothing.
    pub(crate) fn start(clock: RepClock) -> ThreadWatch {
        ThreadWatch {
            start: match clock {
                RepClock::Wall => None,
                // Preemption, and any clock added later: read the thread's clocks.
                _ => Reading::now(),
            },
        }
    }

    /// What happened to the thread since [`ThreadWatch::start`]; `None` with
    /// [`RepClock::Wall`] or where the clocks cannot be read.
    pub(crate) fn stop(self) -> Option<ThreadSpan> {
        let start = self.start?;
        let end = Reading::now()?;
        let thread_cpu_ms = end.thread_cpu_ms - start.thread_cpu_ms;
        Some(ThreadSpan {
            thread_cpu_ms,
            others_cpu_ms: (end.process_cpu_ms - start.process_cpu_ms - thread_cpu_ms).max(0.0),
            voluntary_switches: end.voluntary - start.voluntary,
            involuntary_switches: end.involuntary - start.involuntary,
        })
    }
}

/// What the calling thread went through during one timed sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ThreadSpan {
    /// The thread's CPU time (user + system), ms.
    pub(crate) thread_cpu_ms: f64,
    /// CPU time of the process's other threads, ms.
    pub(crate) others_cpu_ms: f64,
    /// Times the thread gave up the CPU itself (sleep, I/O, a lock).
    pub(crate) voluntary_switches: i64,
    /// Times the scheduler took the CPU from it.
    pub(crate) involuntary_switches: i64,
}

impl ThreadSpan {
    /// The sample's time in ms from its wall time `wall_ms`, and whether it was corrected:
    /// the thread's CPU time when the thread was preempted or lost time it did not spend
    /// itself, `wall_ms` when nothing took its CPU, when the kernel blocked (its waits are its
    /// time) or when other threads of the worker ran (a multi-threaded kernel).
    pub(crate) fn time_ms(&self, wall_ms: f64) -> (f64, bool) {
        let blocked = self.voluntary_switches > 0;
        let threaded =
            self.others_cpu_ms > (OTHERS_SHARE * self.thread_cpu_ms).max(OTHERS_FLOOR_MS);
        if blocked || threaded || self.thread_cpu_ms >= wall_ms {
            return (wall_ms, false);
        }
        let preempted = self.involuntary_switches > 0;
        let stolen = wall_ms - self.thread_cpu_ms > (STOLEN_SHARE * wall_ms).max(STOLEN_FLOOR_MS);
        if preempted || stolen {
            (self.thread_cpu_ms, true)
        } else {
            (wall_ms, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(cpu: f64, others: f64, voluntary: i64, involuntary: i64) -> ThreadSpan {
        ThreadSpan {
            thread_cpu_ms: cpu,
            others_cpu_ms: others,
            voluntary_switches: voluntary,
            involuntary_switches: involuntary,
        }
    }

    #[test]
    fn a_quiet_rep_keeps_its_wall_time() {
        assert_eq!(span(3.19, 0.0, 0, 0).time_ms(3.2), (3.2, false));
    }

    #[test]
    fn a_preempted_rep_counts_its_threads_cpu_time() {
        assert_eq!(span(3.2, 0.0, 0, 2).time_ms(9.8), (3.2, true));
    }

    #[test]
    fn stolen_time_without_a_switch_is_taken_out() {
        assert_eq!(span(3.2, 0.0, 0, 0).time_ms(4.0), (3.2, true));
    }

    #[test]
    fn a_kernel_that_blocks_keeps_its_waits() {
        // A kernel that sleeps 10 ms per call must not look 1000x faster than it is.
        assert_eq!(span(0.01, 0.0, 1, 1).time_ms(10.0), (10.0, false));
    }

    #[test]
    fn a_multithreaded_kernel_keeps_its_wall_time() {
        assert_eq!(span(2.0, 2.0, 0, 1).time_ms(5.0), (5.0, false));
        // A worker's own housekeeping thread using a little CPU does not count.
        assert_eq!(span(3.2, 0.01, 0, 1).time_ms(9.8), (3.2, true));
    }

    #[test]
    fn the_clocks_overhead_is_not_a_correction() {
        // CPU time a little above the wall time (the clock reads are inside it).
        assert_eq!(span(0.0105, 0.0, 0, 0).time_ms(0.0100), (0.0100, false));
        // A tiny kernel: 1 µs of difference is below the floor.
        assert_eq!(span(0.010, 0.0, 0, 0).time_ms(0.011), (0.011, false));
    }

    #[test]
    fn the_watch_sees_this_threads_cpu_time() {
        let watch = ThreadWatch::start(RepClock::Preemption);
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed().as_millis() < 20 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
        let span = watch.stop().expect("the clocks are readable on Linux");
        assert!(span.thread_cpu_ms > 1.0, "{span:?}");
        assert!(span.thread_cpu_ms < 1000.0, "{span:?}");
        assert!(ThreadWatch::start(RepClock::Wall).stop().is_none());
    }
}
