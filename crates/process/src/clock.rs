//! The parent's clock against the worker's: a candidate can patch or slow every clock in its
//! own process, but not the parent's.

use std::time::Duration;

use tunebox_protocol::{BenchError, BenchmarkResult, Kernel, RequestBody};

use crate::cpu_times::{CpuTimes, USER_HZ};

/// Slack for what the worker's clock cannot see: the request's transfer and decoding, the
/// reply's encoding and transfer, and the parent's wake-up on a loaded machine. The parent's
/// clock stops where the receive call that took the reply began, before the reply's decoding:
/// up to 10 ms before the reply arrived, a leniency well within this slack (the parent's waits
/// for a CPU are read after the decoding, so a wait during it is discounted too, a leniency of
/// the same kind).
const SLACK: Duration = Duration::from_millis(50);

/// The share of the parent's time the worker's clock must see at least (after [`SLACK`]).
const MIN_SHARE: f64 = 0.5;

/// The share of its main thread's time on a CPU the worker's clock must see at least (after
/// [`RAN_SLACK`]): all of it, honestly, but for the request's decoding, the reply's encoding
/// and the worker's own work after its reply until the parent reads the count, which its clock
/// does not cover. Honest requests on a 2-vCPU EPYC guest (the main job, the OpenMP histogram,
/// 3 x 256 MiB tensors, idle and beside four busy loops; `RUST_LOG=debug`'s `clock check`
/// lines): the main thread's time exceeded the worker's clock by 1.03 ms at most (of 500 ms),
/// and a busy machine only adds to the clock (its waits), never to the thread's time. 3/4
/// beyond 50 ms let a clock slowed to 0.52 of real time pass in requests of ~100-150 ms, a
/// 1.9x fake speed-up (a helper's hostile trial).
const RAN_SHARE: f64 = 0.95;

/// Slack of the main thread's time check with its waits ([`RAN_SHARE`] of its time on a CPU
/// and waiting for one): on a busy machine a slowed clock hides in the waits, which the
/// worker's clock sees and its time on a CPU does not (a clock at 0.6 of real time passed the
/// check on the thread's time alone beside four busy loops). Of the thread's waits, those
/// before its clock starts (its wake-up to take the request) and after it stops are outside
/// the clock: honest requests beside four busy loops were 17.4 ms over at most (the main job
/// and the histogram, `clock check` debug lines).
const WAITED_SLACK: Duration = Duration::from_millis(50);

/// Slack of the main thread's time check ([`RAN_SHARE`]): five times the most an honest
/// request was seen to need. The worker's clock covers all it does for a request (mapping the
/// inputs, the state checks, the teardown: `serve::benchmark_whole`), so what is left outside
/// is the request's decoding and the reply's encoding.
const RAN_SLACK: Duration = Duration::from_millis(5);

/// Fails with [`BenchError::Suspicious`] (`clock`) when the worker reports having spent much
/// less time on the request (`integrity.worker_ms`, its own clock) than the parent saw pass
/// between sending it and the reply (`parent`), less the time the worker's and the parent's
/// threads spent waiting for a CPU meanwhile, and the host's steal (`waited_ms`, [`WaitMark`]:
/// a busy machine's delay, which no clock in the worker sees): less than half, beyond 50 ms of
/// slack. Nor may it see less than 95 % of the time the worker's main thread ran on a CPU
/// meanwhile (`ran_ms`, the first `schedstat` field, beyond 5 ms), nor 95 % of that and its
/// waits for a CPU (`worker_waited_ms`, the second) less 50 ms: a thread's wall time is never
/// less than its time on a CPU and its waits for one, so a busy machine, whose waits excuse
/// the first check, cannot hide a clock slowed while its thread ran or waited. A result
/// without `worker_ms` (a backend that does not report it), or a request the parent did not
/// time, passes.
pub(crate) fn check_worker_clock(
    result: BenchmarkResult,
    parent: Option<Duration>,
    sched: Sched,
) -> Result<BenchmarkResult, BenchError> {
    let (Some(worker_ms), Some(parent)) = (result.integrity.worker_ms, parent) else {
        return Ok(result);
    };
    let parent_ms = parent.as_secs_f64() * 1e3;
    let slack_ms = SLACK.as_secs_f64() * 1e3;
    let waited_ms = sched.waited_ms.max(0.0);
    let ran_slack_ms = RAN_SLACK.as_secs_f64() * 1e3;
    let waited_slack_ms = WAITED_SLACK.as_secs_f64() * 1e3;
    let floor_ms = ((parent_ms - waited_ms - slack_ms) * MIN_SHARE)
        .max((sched.ran_ms - ran_slack_ms) * RAN_SHARE)
        .max((sched.ran_ms + sched.worker_waited_ms.max(0.0)) * RAN_SHARE - waited_slack_ms);
    log::debug!(
        "clock check: worker {worker_ms:.2} ms, parent {parent_ms:.2} ms, waited {waited_ms:.2} \
         ms, ran {:.2} ms, worker waited {:.2} ms, floor {floor_ms:.2} ms",
        sched.ran_ms,
        sched.worker_waited_ms
    );
    if worker_ms.is_finite() && worker_ms >= floor_ms {
        return Ok(result);
    }
    Err(BenchError::Suspicious {
        check: "clock".into(),
        seen: format!(
            "the worker's clock saw {worker_ms:.1} ms pass during the request, the parent's \
             {parent_ms:.1} ms ({waited_ms:.1} ms of it waiting for a CPU, {:.1} ms on one): \
             the candidate slowed or replaced the clock it is timed with",
            sched.ran_ms
        ),
    })
}

/// What the scheduler saw of a request ([`WaitMark::since`]): ms the worker's main thread
/// and the parent's calling thread waited for a CPU, and ms the worker's main thread ran.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Sched {
    pub waited_ms: f64,
    pub ran_ms: f64,
    /// Of `waited_ms`, the worker's main thread's own waits for a CPU.
    pub worker_waited_ms: f64,
}

/// How long the worker's main thread and the calling thread of the parent have waited for a
/// CPU while runnable, from the kernel's scheduler statistics (`/proc/<pid>/schedstat` and
/// `/proc/thread-self/schedstat`, second field, ns), and how long a CPU of the virtual machine
/// waited for the host's (`steal` in `/proc/stat`, which no thread's statistics count): out of
/// the candidate's reach. Taken when a request is sent; [`WaitMark::since`] is what they
/// waited since. Where the kernel keeps no such statistics (no `CONFIG_SCHED_INFO`, no steal
/// accounting), nothing is discounted for them.
#[derive(Debug, Clone)]
pub(crate) struct WaitMark {
    /// The worker's pid and its main thread's [`Stat`].
    worker: Option<(u32, Stat)>,
    parent: Option<u64>,
    /// Every CPU's counters so far (their steal, in clock ticks).
    stolen: Option<CpuTimes>,
}

/// A `schedstat` file's first two fields: ns on a CPU, ns waiting for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    ran_ns: u64,
    waited_ns: u64,
}

impl WaitMark {
    /// The waits so far of worker `pid` and of this thread, for a request whose reply the
    /// clock check judges (a benchmark of a C or CUDA kernel: the backends that report
    /// `worker_ms`); `None` for any other, which reads nothing.
    pub(crate) fn for_request(body: &RequestBody, pid: u32) -> Option<WaitMark> {
        let checked = matches!(
            body,
            RequestBody::Benchmark(request) if matches!(request.kernel, Kernel::C(_) | Kernel::Cuda(_))
        );
        checked.then(|| WaitMark::now(pid))
    }

    /// The waits so far of worker `pid` and of this thread.
    pub(crate) fn now(pid: u32) -> WaitMark {
        WaitMark {
            worker: read_stat(&format!("/proc/{pid}/schedstat")).map(|s| (pid, s)),
            parent: read_stat("/proc/thread-self/schedstat").map(|s| s.waited_ns),
            stolen: CpuTimes::now(),
        }
    }

    /// What the scheduler saw since [`WaitMark::now`]: ms both waited and the host stole (the
    /// most any one CPU lost: a stall of any CPU may have held either side, but one thread
    /// stands on one CPU at a time, and a candidate that keeps every CPU busy raises every
    /// CPU's steal), and ms the worker ran; the worker only while it is still `pid`, and the
    /// parent only when read on the same thread (else 0 for that side).
    pub(crate) fn since(&self, pid: u32) -> Sched {
        let worker = self
            .worker
            .filter(|(marked, _)| *marked == pid)
            .and_then(|(_, before)| {
                let now = read_stat(&format!("/proc/{pid}/schedstat"))?;
                Some((
                    now.ran_ns.checked_sub(before.ran_ns)?,
                    now.waited_ns.checked_sub(before.waited_ns)?,
                ))
            });
        let parent = self.parent.and_then(|ns| {
            read_stat("/proc/thread-self/schedstat")?
                .waited_ns
                .checked_sub(ns)
        });
        let stolen_ms = self
            .stolen
            .as_ref()
            .zip(CpuTimes::now())
            .map_or(0.0, |(before, now)| {
                most_stolen(before, &now) as f64 * 1e3 / USER_HZ
            });
        let (ran, waited) = worker.unwrap_or((0, 0));
        Sched {
            waited_ms: (waited + parent.unwrap_or(0)) as f64 / 1e6 + stolen_ms,
            ran_ms: ran as f64 / 1e6,
            worker_waited_ms: waited as f64 / 1e6,
        }
    }
}

/// The most ticks any one CPU lost to the host between `before` and `now`; 0 when the CPUs
/// changed meanwhile.
fn most_stolen(before: &CpuTimes, now: &CpuTimes) -> u64 {
    if before.0.len() != now.0.len() {
        return 0;
    }
    before
        .0
        .iter()
        .zip(&now.0)
        .map(|(b, n)| n.steal.saturating_sub(b.steal))
        .max()
        .unwrap_or(0)
}

/// The first two fields of a `schedstat` file.
fn read_stat(path: &str) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

fn parse_stat(text: &str) -> Option<Stat> {
    let mut fields = text.split_whitespace();
    Some(Stat {
        ran_ns: fields.next()?.parse().ok()?,
        waited_ns: fields.next()?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_times::CpuTicks;
    use tunebox_protocol::{Integrity, TimingStats};

    fn result(worker_ms: Option<f64>) -> BenchmarkResult {
        BenchmarkResult::new(TimingStats::unmeasured()).with_integrity(
            Integrity::default()
                .with_fresh_outputs(Vec::new())
                .with_worker_ms(worker_ms),
        )
    }

    #[test]
    fn a_worker_clock_that_saw_little_time_is_suspicious() {
        let parent = Some(Duration::from_millis(400));
        assert!(check_worker_clock(result(Some(390.0)), parent, waited(0.0)).is_ok());
        assert!(check_worker_clock(result(None), parent, waited(0.0)).is_ok());
        assert!(check_worker_clock(result(Some(1.0)), None, waited(0.0)).is_ok());
        let err = check_worker_clock(result(Some(3.0)), parent, waited(0.0)).unwrap_err();
        assert!(err.to_string().starts_with("suspicious (clock)"), "{err}");
        // Short requests leave room for the slack.
        assert!(
            check_worker_clock(
                result(Some(0.5)),
                Some(Duration::from_millis(40)),
                waited(0.0)
            )
            .is_ok()
        );
    }

    /// On a busy machine the worker waits for a CPU before and after its clock runs (the case
    /// seen: the worker's clock 10.1 ms, the parent's 82.3 ms): that wait is no candidate's doing.
    #[test]
    fn time_spent_waiting_for_a_cpu_is_not_held_against_the_worker() {
        let parent = Some(Duration::from_micros(82_300));
        assert!(check_worker_clock(result(Some(10.1)), parent, waited(0.0)).is_err());
        assert!(check_worker_clock(result(Some(10.1)), parent, waited(60.0)).is_ok());
        // A clock slowed tenfold is still caught when the worker waited a little.
        let parent = Some(Duration::from_millis(400));
        assert!(check_worker_clock(result(Some(40.0)), parent, waited(20.0)).is_err());
    }

    fn waited(waited_ms: f64) -> Sched {
        Sched {
            waited_ms,
            ran_ms: 0.0,
            worker_waited_ms: 0.0,
        }
    }

    /// Under a busy machine's waits (the zoo's clock patcher, 2 busy loops on 2 CPUs), the
    /// worker's time on a CPU still tells a clock that stopped while its thread ran.
    #[test]
    fn a_clock_slower_than_the_workers_own_cpu_time_is_suspicious() {
        let parent = Some(Duration::from_millis(900));
        let busy = |ran_ms| Sched {
            waited_ms: 600.0,
            ran_ms,
            worker_waited_ms: 0.0,
        };
        assert!(check_worker_clock(result(Some(130.0)), parent, busy(20.0)).is_ok());
        let err = check_worker_clock(result(Some(130.0)), parent, busy(290.0)).unwrap_err();
        assert!(err.to_string().contains("290.0 ms on one"), "{err}");
        // Honest: a thread's wall time covers its CPU time.
        assert!(check_worker_clock(result(Some(290.0)), parent, busy(290.0)).is_ok());
        // A clock at 0.6 of real time over a thread that ran all along (a helper's trial: 0.52
        // passed the old 3/4 beyond 50 ms), and the honest request beside it, a millisecond of
        // the thread's time outside its clock.
        let idle = |ran_ms| Sched {
            waited_ms: 0.0,
            ran_ms,
            worker_waited_ms: 0.0,
        };
        let parent = Some(Duration::from_millis(150));
        assert!(check_worker_clock(result(Some(90.0)), parent, idle(150.0)).is_err());
        assert!(check_worker_clock(result(Some(148.0)), parent, idle(149.0)).is_ok());
        // On a busy machine the thread ran 100 ms and waited 300 ms of a 400 ms request: a
        // clock at 0.6 (240 ms) hides from the time on a CPU, not from it and the waits; an
        // honest clock 17 ms short of both (waits before it started) passes.
        let loaded = Sched {
            waited_ms: 320.0,
            ran_ms: 100.0,
            worker_waited_ms: 300.0,
        };
        let parent = Some(Duration::from_millis(420));
        assert!(check_worker_clock(result(Some(240.0)), parent, loaded).is_err());
        assert!(check_worker_clock(result(Some(383.0)), parent, loaded).is_ok());
    }

    #[test]
    fn only_requests_the_clock_check_judges_read_the_waits() {
        use tunebox_protocol::{BenchmarkRequest, CKernel, DiagnosticTask};
        let pid = std::process::id();
        let c = RequestBody::Benchmark(Box::new(BenchmarkRequest::new(CKernel::new("", "k"))));
        assert!(WaitMark::for_request(&c, pid).is_some());
        let sleep =
            RequestBody::Benchmark(Box::new(BenchmarkRequest::new(DiagnosticTask::Sleep {
                ms: 1,
            })));
        assert!(WaitMark::for_request(&sleep, pid).is_none());
        assert!(WaitMark::for_request(&RequestBody::Ping, pid).is_none());
    }

    #[test]
    fn the_run_and_the_wait_are_the_first_two_schedstat_fields() {
        assert_eq!(
            parse_stat("239667 6030253 2\n"),
            Some(Stat {
                ran_ns: 239_667,
                waited_ns: 6_030_253
            })
        );
        assert_eq!(parse_stat(""), None);
        let mark = WaitMark::now(std::process::id());
        let sched = mark.since(std::process::id());
        assert!(sched.waited_ms >= 0.0 && sched.ran_ms >= 0.0, "{sched:?}");
        // Another pid than the one marked: nothing is discounted for the worker.
        let other = WaitMark {
            worker: Some((
                1,
                Stat {
                    ran_ns: 0,
                    waited_ns: 0,
                },
            )),
            parent: None,
            stolen: None,
        };
        assert_eq!(other.since(2), Sched::default());
    }

    /// One thread stands on one CPU: however many CPUs the host stalled, and however long,
    /// the discount is the most one CPU lost (a candidate keeping all eight busy on a crowded
    /// host must not buy eight times its time).
    #[test]
    fn the_steal_discounted_is_the_most_one_cpu_lost() {
        let steal = |ticks: &[u64]| {
            CpuTimes(
                ticks
                    .iter()
                    .map(|&steal| CpuTicks {
                        steal,
                        ..CpuTicks::default()
                    })
                    .collect(),
            )
        };
        let most = |before: &[u64], now: &[u64]| most_stolen(&steal(before), &steal(now));
        assert_eq!(most(&[10, 20, 30], &[15, 29, 31]), 9);
        assert_eq!(most(&[10; 8], &[40; 8]), 30);
        assert_eq!(most(&[10, 20], &[15, 29, 31]), 0, "a CPU came online");
        assert_eq!(most(&[], &[]), 0);
    }
}
