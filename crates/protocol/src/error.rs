//! Errors as data: why a worker could not measure a request.

use serde::{Deserialize, Serialize};

/// Why a benchmark request failed inside a worker that is still alive.
///
/// A worker that dies is not a `BenchError`: the parent sees that itself (a crash or a timeout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The request names a backend this worker does not have.
    #[error("this worker has no `{backend}` backend (it has: {})", available.join(", "))]
    UnknownBackend {
        /// The backend the request needs.
        backend: String,
        /// The backends the worker has.
        available: Vec<String>,
    },
    /// The request is malformed (a bad tensor spec, too many arguments, …).
    #[error("invalid request: {detail}")]
    InvalidRequest {
        /// What is wrong and what to change.
        detail: String,
    },
    /// The kernel did not compile.
    #[error("compilation failed: `{command}`\n{log}")]
    Compile {
        /// The compiler command line that was run.
        command: String,
        /// The compiler's output.
        log: String,
    },
    /// The compiled kernel could not be loaded or its entry not found.
    #[error("could not load `{path}`: {detail}")]
    Load {
        /// The artifact.
        path: String,
        /// The loader's message.
        detail: String,
    },
    /// The measurement cannot be trusted: the candidate was caught cheating the harness (work
    /// still running after its call returned, outputs changing after it, a clock that saw less
    /// time pass than the parent's). `check` names the check (`threads_after_call`,
    /// `children_after_call`, `cpu_after_call`, `outputs_changed_after_call`, `clock`), `seen`
    /// what it saw. Reported as `suspicious`, never ranked.
    #[error("suspicious ({check}): {seen}")]
    Suspicious {
        /// The check that caught it.
        check: String,
        /// What was seen.
        seen: String,
    },
    /// The backend panicked; the panic was caught and the worker lives.
    #[error("the backend panicked: {message}")]
    Panic {
        /// The panic message.
        message: String,
    },
    /// A library the backend loads at run time is missing (`libcuda.so.1`, …).
    #[error("{library}: {detail}")]
    DriverUnavailable {
        /// The library.
        library: String,
        /// Why (the loader's message), and what to do.
        detail: String,
    },
    /// The run-time compiler (NVRTC) is missing.
    #[error("the CUDA compiler (NVRTC) is unavailable: {detail}")]
    CompilerUnavailable {
        /// Why, and what to do.
        detail: String,
    },
    /// The launch configuration breaks a device limit; the worker lives.
    #[error("invalid launch: {detail}")]
    InvalidLaunch {
        /// The violated limit, with the requested and allowed values.
        detail: String,
    },
    /// The device reported an error running the kernel. A `sticky` one leaves the device context
    /// unusable: the worker answers with it and exits, and the next request gets a new worker.
    #[error("device error {code} ({name}): {message}{}", if *sticky { " (the context is lost; the worker restarts)" } else { "" })]
    DeviceFault {
        /// The CUDA error code (700 = illegal address, 710 = assert, …).
        code: i32,
        /// Its name, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`.
        name: String,
        /// The driver's description.
        message: String,
        /// Whether the context is lost.
        sticky: bool,
    },
    /// The kernel wrote outside a tensor: the guard zone before or after it changed. The
    /// worker lives (its memory is intact around the tensors), but the candidate is wrong.
    #[error("out of bounds on tensor `{tensor}`: {detail}")]
    OutOfBounds {
        /// The tensor's name.
        tensor: String,
        /// Which side, and how far from the tensor.
        detail: String,
    },
    /// The measurement cannot fit the request's time budget (`TimingConfig::budget_ms`): one
    /// call takes so long that the first call, an estimate run, one timed rep and the final
    /// verification call need more. Said before the parent's timeout would kill the worker, so
    /// that the message can say what to change; reported as a timeout.
    #[error(
        "one call takes ~{call_ms:.1} ms: measuring it needs ~{needed_ms:.0} ms (the first call, \
         an estimate run, one timed rep and the final call), more than the {budget_ms:.0} ms \
         budget (80 % of the timeout); give it a timeout of at least {:.1} s",
        timeout_for(*needed_ms)
    )]
    DoesNotFit {
        /// The duration of one call, as measured so far (ms).
        call_ms: f64,
        /// What the smallest measurement needs (ms).
        needed_ms: f64,
        /// The request's budget (ms).
        budget_ms: f64,
    },
    /// A task of a kind defined outside tunebox, or its result, could not be decoded: the
    /// parent and the worker disagree on the type (built from different versions of it, or two
    /// task types under one backend name).
    #[error("could not decode {detail}")]
    Decode {
        /// What was decoded, as what, and why it failed.
        detail: String,
    },
    /// The backend failed for another reason (out of memory, I/O, …).
    #[error("{message}")]
    Failed {
        /// What failed.
        message: String,
    },
}

/// The integrity checks that catch work a candidate left running after its call returned.
const LEFT_RUNNING: [&str; 4] = [
    "threads_after_call",
    "children_after_call",
    "cpu_after_call",
    "outputs_changed_after_call",
];

impl BenchError {
    /// Whether this error leaves the backend unusable (a sticky device fault: the GPU context
    /// is lost).
    pub fn ends_worker(&self) -> bool {
        matches!(self, BenchError::DeviceFault { sticky: true, .. })
    }

    /// Whether the candidate was caught leaving work running in its worker after its call
    /// returned (a thread, a child process, CPU time, outputs still changing: a `Suspicious`
    /// error of those checks): that work runs on in the worker, so it is not reused.
    pub fn left_work_running(&self) -> bool {
        matches!(self, BenchError::Suspicious { check, .. } if LEFT_RUNNING.contains(&check.as_str()))
    }

    /// Whether the worker exits after answering with this error, so that the next request runs
    /// in a fresh process: the backend is unusable ([`BenchError::ends_worker`]), or a
    /// candidate's work runs on in it ([`BenchError::left_work_running`]), which would
    /// otherwise be charged to the next request.
    pub fn retires_worker(&self) -> bool {
        self.ends_worker() || self.left_work_running()
    }
}

/// The timeout, in s, that a measurement needing `needed_ms` fits (at
/// [`BUDGET_SHARE`](crate::budget::BUDGET_SHARE) of it, with a tenth more
/// for the calls' spread), rounded up to the next tenth of a second: a timeout said to fit must
/// fit when taken at its word, not miss by the rounding.
fn timeout_for(needed_ms: f64) -> f64 {
    let s = needed_ms / crate::budget::BUDGET_SHARE * 1.1 / 1e3;
    (s * 10.0).ceil() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_a_does_not_fit_error_suggests_fits_when_taken_at_its_word() {
        // Needing 2802 ms of a budget that is 80 % of the timeout: 3.50 s would be 2 ms short.
        let err = BenchError::DoesNotFit {
            call_ms: 700.0,
            needed_ms: 2802.0,
            budget_ms: 1600.0,
        };
        let said = err.to_string();
        assert!(
            said.ends_with("give it a timeout of at least 3.9 s"),
            "{said}"
        );
        // A microsecond kernel under a 1 ms timeout is told a timeout above 0.
        assert_eq!(timeout_for(1.0), 0.1);
        for needed_ms in [1.0, 799.0, 2802.0, 10_000.0] {
            let budget_ms = timeout_for(needed_ms) * 1e3 * crate::budget::BUDGET_SHARE;
            assert!(budget_ms >= needed_ms, "{needed_ms}");
        }
    }
}
