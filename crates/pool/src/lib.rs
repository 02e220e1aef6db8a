//! Benchmark many candidates across isolated tunebox worker processes.
//!
//! Two faces over one engine of worker threads, each owning a
//! [`TuningProcess`](tunebox_process::TuningProcess) and taking tasks from one queue:
//!
//! - [`TuningProcessPool`] is PyTorch Inductor's: one worker per device ([`Devices`]),
//!   [`benchmark`](TuningProcessPool::benchmark) returns one `Result` per
//!   [`BenchmarkRequest`](tunebox_protocol::BenchmarkRequest) in input order, and
//!   [`benchmark_or_inf`](TuningProcessPool::benchmark_or_inf) gives Inductor's "a failed choice
//!   times `+inf`".
//! - [`PoolExecutor`] is TVM's `PopenPoolExecutor`: `max_workers`, [`submit`](PoolExecutor::submit)
//!   returning a [`TaskHandle`], and [`map_with_error_catching`](PoolExecutor::map_with_error_catching)
//!   returning a [`MapResult`] ([`StatusKind`]) per task.
//! - [`run_pulled`] is a tuner's: it asks a source for the next request each time one of its
//!   slots frees ([`Pull`]: a request on a pool of its choice with an optional timeout of its
//!   own, a wait while nothing is ready, or done), hands each result back as it lands, and runs
//!   a [`WindowHook`] on the pool's worker thread just before and after each window. A tuning
//!   run measures this way, its next choice decided only once a worker is free.
//!
//! Both start from a [`PoolConfig`] (workers, timeout, `maximum_process_uses`, initializer,
//! output): `TuningProcessPool::new(config)`, `PoolExecutor::new(config)`. A candidate that crashes, hangs past its timeout or fails costs its own result; its worker is
//! replaced at once, off the next task's path; other candidates never wait for it. Errors are
//! [`PoolError`]s. [`verify_outputs`] checks a candidate's outputs against a reference's within a
//! [`Tolerance`] (as `numpy.allclose`), and [`Status`] names a tuning outcome (`ok`, `wrong`,
//! `compile_error`, `error`, `crashed`, `timeout`; [`PoolError::status`] classifies a failure,
//! [`PoolError::bench_error`] gives the task's own error, and [`StatusKind`] is derived from
//! [`Status`]).
//!
//! A pool makes a request's large generated inputs (random or ones, at least
//! [`SHARED_INPUT_MIN_BYTES`]) once, in shared memory, and every worker maps them
//! copy-on-write ([`TensorSpec::contents`](tunebox_protocol::TensorSpec::contents)): a
//! window's cost does not grow with its inputs.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use tunebox_pool::{PoolConfig, TuningProcessPool};
//! use tunebox_process::ProcessConfig;
//! use tunebox_protocol::{BenchmarkRequest, DiagnosticTask};
//!
//! let pool = TuningProcessPool::new(
//!     PoolConfig::new()
//!         .max_workers(2)
//!         .timeout(Duration::from_secs(1))
//!         .process_config(ProcessConfig::new().worker("target/release/tunebox-worker")),
//! )?;
//! let requests = vec![
//!     BenchmarkRequest::new(DiagnosticTask::Sleep { ms: 5 }),
//!     BenchmarkRequest::new(DiagnosticTask::Segfault),
//!     BenchmarkRequest::new(DiagnosticTask::Hang),
//!     BenchmarkRequest::new(DiagnosticTask::Sleep { ms: 1 }),
//! ];
//! let timings = pool.benchmark_or_inf(&requests);
//! assert!(timings[0] >= 5.0 && timings[3] >= 1.0);
//! assert_eq!(timings[1], f64::INFINITY); // crashed
//! assert_eq!(timings[2], f64::INFINITY); // timed out
//! # Ok::<(), tunebox_pool::PoolError>(())
//! ```
#![deny(missing_docs)]

mod config;
mod contents;
mod devices;
mod engine;
mod error;
mod executor;
mod handle;
mod pool;
mod pull;
mod status;
mod verify;

pub use config::PoolConfig;
pub use contents::SHARED_INPUT_MIN_BYTES;
pub use devices::Devices;
pub use error::PoolError;
pub use executor::{MapResult, PoolExecutor};
pub use handle::TaskHandle;
pub use pool::TuningProcessPool;
pub use pull::{NoHook, Pull, WindowHook, run_pulled};
pub use status::{Status, StatusKind};
pub use verify::{ElementMismatch, TensorComparison, Tolerance, Verification, verify_outputs};
