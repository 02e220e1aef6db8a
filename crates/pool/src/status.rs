//! The outcome of one candidate, in one word.

use tunebox_process::ProcessError;
use tunebox_protocol::{BenchError, BenchmarkResult};

use crate::PoolError;

/// What became of a candidate, as reported by `tunebox tune` (`status` in its JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Measured (and, when verified, correct).
    Ok,
    /// Its outputs differ from the reference's.
    Wrong,
    /// It did not compile.
    CompileError,
    /// It failed inside a worker that lived on (bad request, load error, caught panic, …), or
    /// its worker could not be started.
    Error,
    /// Its worker died (signal or exit).
    Crashed,
    /// It exceeded its timeout and its worker was killed.
    Timeout,
}

impl Status {
    /// The classification of a pool result before verification: `Ok` for a measurement, else
    /// the kind of failure.
    pub fn of(result: &Result<BenchmarkResult, PoolError>) -> Status {
        match result {
            Ok(_) => Status::Ok,
            Err(e) => Status::of_error(e),
        }
    }

    /// The classification of a failure: `compile_error`, `timeout`, `crashed` (a dead worker, or
    /// a device fault that lost the GPU context), else `error`.
    pub fn of_error(error: &PoolError) -> Status {
        match error {
            PoolError::Process(e) => match e {
                ProcessError::Remote(BenchError::Compile { .. }) => Status::CompileError,
                ProcessError::Remote(BenchError::DeviceFault { sticky: true, .. }) => {
                    Status::Crashed
                }
                ProcessError::Timeout { .. }
                | ProcessError::Remote(BenchError::DoesNotFit { .. }) => Status::Timeout,
                ProcessError::WorkerCrashed { .. } => Status::Crashed,
                _ => Status::Error,
            },
            _ => Status::Error,
        }
    }

    /// The name used in reports and JSON: `ok`, `wrong`, `compile_error`, `error`, `crashed`,
    /// `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Wrong => "wrong",
            Status::CompileError => "compile_error",
            Status::Error => "error",
            Status::Crashed => "crashed",
            Status::Timeout => "timeout",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
