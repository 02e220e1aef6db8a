//! The parent's clock against the worker's: a candidate can patch or slow every clock in its
//! own process, but not the parent's.

use std::time::Duration;

use tunebox_protocol::{BenchError, BenchmarkResult};

/// Slack for what the worker's clock cannot see: the request's transfer and decoding, the
/// reply's, and the parent's wake-up on a loaded machine.
const SLACK: Duration = Duration::from_millis(50);

/// The share of the parent's time the worker's clock must see at least (after [`SLACK`]).
const MIN_SHARE: f64 = 0.5;

/// Fails with [`BenchError::Suspicious`] (`clock`) when the worker reports having spent much
/// less time on the request (`integrity.worker_ms`, its own clock) than the parent saw pass
/// between sending it and the reply (`parent`): less than half, beyond 50 ms of slack. A
/// result without `worker_ms` (a backend that does not report it), or a request the parent
/// did not time, passes.
pub(crate) fn check_worker_clock(
    result: BenchmarkResult,
    parent: Option<Duration>,
) -> Result<BenchmarkResult, BenchError> {
    let (Some(worker_ms), Some(parent)) = (result.integrity.worker_ms, parent) else {
        return Ok(result);
    };
    let parent_ms = parent.as_secs_f64() * 1e3;
    let floor_ms = (parent_ms - SLACK.as_secs_f64() * 1e3) * MIN_SHARE;
    if worker_ms.is_finite() && worker_ms >= floor_ms {
        return Ok(result);
    }
    Err(BenchError::Suspicious {
        check: "clock".into(),
        seen: format!(
            "the worker's clock saw {worker_ms:.1} ms pass during the request, the parent's \
             {parent_ms:.1} ms: the candidate slowed or replaced the clock it is timed with"
        ),
    })
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
        assert!(check_worker_clock(result(Some(390.0)), parent).is_ok());
        assert!(check_worker_clock(result(None), parent).is_ok());
        assert!(check_worker_clock(result(Some(1.0)), None).is_ok());
        let err = check_worker_clock(result(Some(3.0)), parent).unwrap_err();
        assert!(err.to_string().starts_with("suspicious (clock)"), "{err}");
        // Short requests leave room for the slack.
        assert!(check_worker_clock(result(Some(0.5)), Some(Duration::from_millis(40))).is_ok());
    }
}
