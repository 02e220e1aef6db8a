//! The parent's clock against the worker's: a candidate can patch or slow every clock in its
//! own process, but not the parent's.

use std::time::Duration;

use tunebox_protocol::{BenchError, BenchmarkResult, Kernel, RequestBody};

/// Slack for what the worker's clock cannot see: the request's transfer and decoding, the
/// reply's, and the parent's wake-up on a loaded machine.
const SLACK: Duration = Duration::from_millis(50);

/// The share of the parent's time the worker's clock must see at least (after [`SLACK`]).
const MIN_SHARE: f64 = 0.5;

/// Fails with [`BenchError::Suspicious`] (`clock`) when the worker reports having spent much
/// less time on the request (`integrity.worker_ms`, its own clock) than the parent saw pass
/// between sending it and the reply (`parent`), less the time the worker's and the parent's
/// threads spent waiting for a CPU meanwhile (`waited_ms`, [`WaitMark`]: a busy machine's
/// delay, which no clock in the worker sees): less than half, beyond 50 ms of slack. A result
/// without `worker_ms` (a backend that does not report it), or a request the parent did not
/// time, passes.
pub(crate) fn check_worker_clock(
    result: BenchmarkResult,
    parent: Option<Duration>,
    waited_ms: f64,
) -> Result<BenchmarkResult, BenchError> {
    let (Some(worker_ms), Some(parent)) = (result.integrity.worker_ms, parent) else {
        return Ok(result);
    };
    let parent_ms = parent.as_secs_f64() * 1e3;
    let floor_ms = (parent_ms - waited_ms.max(0.0) - SLACK.as_secs_f64() * 1e3) * MIN_SHARE;
    if worker_ms.is_finite() && worker_ms >= floor_ms {
        return Ok(result);
    }
    Err(BenchError::Suspicious {
        check: "clock".into(),
        seen: format!(
            "the worker's clock saw {worker_ms:.1} ms pass during the request, the parent's \
             {parent_ms:.1} ms ({waited_ms:.1} ms of it waiting for a CPU): the candidate \
             slowed or replaced the clock it is timed with"
        ),
    })
}

/// How long the worker's main thread and the calling thread of the parent have waited for a
/// CPU while runnable, from the kernel's scheduler statistics (`/proc/<pid>/schedstat` and
/// `/proc/thread-self/schedstat`, second field, ns): out of the candidate's reach. Taken when a
/// request is sent; [`WaitMark::waited_ms`] is what both waited since. Where the kernel keeps
/// no such statistics (no `CONFIG_SCHED_INFO`), nothing is discounted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitMark {
    worker: Option<(u32, u64)>,
    parent: Option<u64>,
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
            worker: read_wait_ns(&format!("/proc/{pid}/schedstat")).map(|ns| (pid, ns)),
            parent: read_wait_ns("/proc/thread-self/schedstat"),
        }
    }

    /// ms both waited since [`WaitMark::now`]: the worker only while it is still `pid`, and the
    /// parent only when read on the same thread (else 0 for that side).
    pub(crate) fn waited_ms(&self, pid: u32) -> f64 {
        let worker = self
            .worker
            .filter(|(marked, _)| *marked == pid)
            .and_then(|(_, ns)| read_wait_ns(&format!("/proc/{pid}/schedstat"))?.checked_sub(ns));
        let parent = self
            .parent
            .and_then(|ns| read_wait_ns("/proc/thread-self/schedstat")?.checked_sub(ns));
        (worker.unwrap_or(0) + parent.unwrap_or(0)) as f64 / 1e6
    }
}

/// The second field (ns waited on a run queue) of a `schedstat` file.
fn read_wait_ns(path: &str) -> Option<u64> {
    parse_wait_ns(&std::fs::read_to_string(path).ok()?)
}

fn parse_wait_ns(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::{Integrity, TimingStats};

    fn result(worker_ms: Option<f64>) -> BenchmarkResult {
        BenchmarkResult {
            stats: TimingStats::unmeasured(),
            value: None,
            outputs: Vec::new(),
            outputs_after_reps: Vec::new(),
            mutated_inputs: Vec::new(),
            integrity: Integrity {
                fresh_outputs: Vec::new(),
                worker_ms,
            },
            left_behind: Vec::new(),
        }
    }

    #[test]
    fn a_worker_clock_that_saw_little_time_is_suspicious() {
        let parent = Some(Duration::from_millis(400));
        assert!(check_worker_clock(result(Some(390.0)), parent, 0.0).is_ok());
        assert!(check_worker_clock(result(None), parent, 0.0).is_ok());
        assert!(check_worker_clock(result(Some(1.0)), None, 0.0).is_ok());
        let err = check_worker_clock(result(Some(3.0)), parent, 0.0).unwrap_err();
        assert!(err.to_string().starts_with("suspicious (clock)"), "{err}");
        // Short requests leave room for the slack.
        assert!(
            check_worker_clock(result(Some(0.5)), Some(Duration::from_millis(40)), 0.0).is_ok()
        );
    }

    /// On a busy machine the worker waits for a CPU before and after its clock runs (the case
    /// seen: the worker's clock 10.1 ms, the parent's 82.3 ms): that wait is no candidate's doing.
    #[test]
    fn time_spent_waiting_for_a_cpu_is_not_held_against_the_worker() {
        let parent = Some(Duration::from_micros(82_300));
        assert!(check_worker_clock(result(Some(10.1)), parent, 0.0).is_err());
        assert!(check_worker_clock(result(Some(10.1)), parent, 60.0).is_ok());
        // A clock slowed tenfold is still caught when the worker waited a little.
        let parent = Some(Duration::from_millis(400));
        assert!(check_worker_clock(result(Some(40.0)), parent, 20.0).is_err());
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
    fn the_wait_is_the_second_schedstat_field() {
        assert_eq!(parse_wait_ns("239667 6030253 2\n"), Some(6_030_253));
        assert_eq!(parse_wait_ns(""), None);
        let mark = WaitMark::now(std::process::id());
        assert!(mark.waited_ms(std::process::id()) >= 0.0);
        // Another pid than the one marked: nothing is discounted for the worker.
        assert_eq!(
            WaitMark {
                worker: Some((1, 0)),
                parent: None
            }
            .waited_ms(2),
            0.0
        );
    }
}
