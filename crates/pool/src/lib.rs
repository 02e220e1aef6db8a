//! Benchmark many candidates across isolated tunebox worker processes.
//!
//! [`TuningProcessPool`] owns N [`TuningProcess`](tunebox_process::TuningProcess)es, built with
//! [`PoolBuilder`]. [`TuningProcessPool::benchmark`] hands each
//! [`BenchmarkRequest`](tunebox_protocol::BenchmarkRequest) to the next free worker and returns
//! one `Result` per request, in input order: a candidate that crashes, hangs past the timeout or
//! fails costs its own result (and a worker restart), never the others'. Errors are
//! [`PoolError`]s; [`TuningProcessPool::benchmark_or_inf`] gives Inductor's view, where a failed
//! choice times `+inf`. [`verify_outputs`] checks a candidate's outputs against a reference's
//! within a [`Tolerance`] (as `numpy.allclose`), and [`Status`] names a candidate's outcome
//! (`ok`, `wrong`, `compile_error`, `error`, `crashed`, `timeout`).
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use tunebox_pool::TuningProcessPool;
//! use tunebox_process::ProcessConfig;
//! use tunebox_protocol::{BenchmarkRequest, DiagnosticTask, Kernel};
//!
//! let pool = TuningProcessPool::builder()
//!     .workers(2)
//!     .timeout(Duration::from_secs(1))
//!     .process_config(ProcessConfig::new().worker("tunebox-worker"))
//!     .build()?;
//! let requests = vec![
//!     BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Sleep { ms: 5 })),
//!     BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Segfault)),
//!     BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Hang)),
//!     BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Sleep { ms: 1 })),
//! ];
//! let results = pool.benchmark(&requests);
//! assert!(results[0].is_ok() && results[3].is_ok());
//! assert!(results[1].is_err() && results[2].is_err());
//! # Ok::<(), tunebox_pool::PoolError>(())
//! ```
#![deny(missing_docs)]

mod error;
mod pool;
mod status;
mod verify;

pub use error::PoolError;
pub use pool::{PoolBuilder, TuningProcessPool};
pub use status::Status;
pub use verify::{TensorComparison, Tolerance, Verification, verify_outputs};
