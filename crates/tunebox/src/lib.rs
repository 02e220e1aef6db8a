//! tunebox for downstream tools: benchmark kernel candidates, or task kinds of your own, in
//! isolated worker processes, with one dependency.
//!
//! A candidate that crashes, hangs past its timeout, leaks or poisons a GPU context costs its
//! own result and a worker restart, never the run: the Rust counterpart of PyTorch Inductor's
//! `TuningProcess`/`TuningProcessPool` and Apache TVM's `PopenWorker`/`PopenPoolExecutor`. This
//! crate re-exports what a tool needs from the layered crates (also reachable whole as
//! [`protocol`], [`mod@bench`], [`process`], [`pool`], [`worker`]):
//!
//! - **Requests**: [`BenchmarkRequest`] of a built-in kernel ([`CKernel`], [`CudaKernel`]) with
//!   its [`TensorSpec`]s and [`TimingConfig`], answered by a [`BenchmarkResult`]
//!   ([`TimingStats`] in ms) or a [`BenchError`].
//! - **Task kinds of your own**: implement [`Task`] for any serde type, with any serde
//!   [`Task::Output`]; register its backend in your worker with [`Registry::with_task`], which
//!   hands it a [`TaskContext`] (tensors, scalars, the `do_bench` timing helpers); submit it
//!   with [`TuningProcess::run_task`], [`PoolExecutor::submit_task`] / [`PoolExecutor::map_tasks`]
//!   or [`TuningProcessPool::run_tasks`]. See `docs/extending.md`.
//! - **Processes**: [`TuningProcess`] (one worker, [`ProcessConfig`], [`ProcessError`]) and the
//!   pools [`TuningProcessPool`] (Inductor's: one worker per device) and [`PoolExecutor`]
//!   (TVM's: `submit`, `map_with_error_catching` → [`MapResult`]).
//! - **Tensors and verification**: [`TensorSpec`] (built from typed values of any
//!   [`Element`] type with [`TensorSpec::from_values`]), [`HostTensor`] in a task,
//!   [`TensorData`] back; [`verify_outputs`] as `numpy.allclose` ([`Tolerance`]) gives a
//!   [`Verification`] of one [`TensorComparison`] per output, with its first
//!   [`ElementMismatch`]; every outcome is a [`Status`] ([`StatusKind`]).
//! - **The worker entry point**: a program that uses its own executable as the worker (the
//!   default) calls [`run_if_worker`] first thing in `main`.
//! - **Whole tuning runs** (feature `tune`): the engine behind `tunebox tune`, whole as
//!   [`mod@tune`], with its main types here: a [`Manifest`] (read, or built in code), its
//!   [`SearchSpace`] of [`Choice`]s, a [`Strategy`], [`TuneOptions`] (a builder over the
//!   CLI's defaults), and the [`Report`] of [`ChoiceResult`]s that `tune::tune` returns.
//!
//! Features: `cpu` and `cuda` (both default) put the built-in C and CUDA backends into
//! [`Registry::standard`]; without them nothing of CUDA is compiled, and a worker runs the
//! diagnostics backend and your own task kinds. `tune` (default) adds the tuning engine.
//!
//! # Example
//!
//! A task kind of one's own, run in a pool of workers that are this very program. The task and
//! result types need serde; this crate re-exports it ([`serde`]), so `cargo add tunebox` is
//! enough when the types name it with `#[serde(crate = "tunebox::serde")]`.
//!
//! ```no_run
//! use std::time::Duration;
//! use tunebox::serde::{Deserialize, Serialize};
//! use tunebox::{PoolConfig, PoolExecutor, Registry, Task, TimingStats};
//!
//! /// Sum `n` integers in a worker, timed as triton's `do_bench`.
//! #[derive(Serialize, Deserialize)]
//! #[serde(crate = "tunebox::serde")]
//! struct SumTo(u64);
//!
//! impl Task for SumTo {
//!     const BACKEND: &'static str = "sums";
//!     type Output = (u64, TimingStats);
//! }
//!
//! fn main() -> Result<(), tunebox::PoolError> {
//!     // In a worker this serves tasks and exits; in the parent it returns at once.
//!     tunebox::run_if_worker(|| {
//!         Registry::standard().with_task(|SumTo(n), cx| {
//!             let mut sum = 0;
//!             let stats = cx.bench(|| {
//!                 sum = std::hint::black_box(0..n).sum();
//!                 Ok(())
//!             })?;
//!             Ok((sum, stats))
//!         })
//!     });
//!     let config = PoolConfig::new().max_workers(2).timeout(Duration::from_secs(10));
//!     let executor = PoolExecutor::new(config)?;
//!     for result in executor.map_tasks([SumTo(1_000), SumTo(1_000_000)]) {
//!         let (sum, stats) = result.into_result()?;
//!         println!("sum {sum} in {:.3} ms", stats.median_ms);
//!     }
//!     Ok(())
//! }
//! ```
#![deny(missing_docs)]

pub use serde;
pub use tunebox_bench as bench;
pub use tunebox_pool as pool;
pub use tunebox_process as process;
pub use tunebox_protocol as protocol;
#[cfg(feature = "tune")]
pub use tunebox_tune as tune;
pub use tunebox_worker as worker;

pub use tunebox_bench::{
    Backend, HostTensor, Runner, TaskBackend, TaskContext, do_bench, do_bench_within,
};
pub use tunebox_pool::{
    Devices, ElementMismatch, MapResult, PoolConfig, PoolError, PoolExecutor, Status, StatusKind,
    TaskHandle, TensorComparison, Tolerance, TuningProcessPool, Verification, verify_outputs,
};
pub use tunebox_process::{
    DeviceToken, InitRequest, KillSwitch, Output, ProcessConfig, ProcessError, TuningProcess,
    WORKER_PATH_ENV,
};
pub use tunebox_protocol::{
    Arg, BenchError, BenchmarkRequest, BenchmarkResult, CACHE_DIR_ENV, CKernel, CacheFlush,
    CudaCode, CudaKernel, DType, Define, DeviceInfo, DiagnosticTask, Element, Init, Kernel,
    LaunchConfig, Scalar, ScalarKind, SharedBuffer, SharedData, Task, TaskRequest, TensorData,
    TensorSpec, TimingConfig, TimingStats,
};
#[cfg(feature = "tune")]
pub use tunebox_tune::{
    BruteForce, CacheMode, Choice, ChoiceResult, Manifest, ManifestBuilder, Observer, ParamValue,
    Plan, RandomSample, Report, SearchSpace, Selection, Stop, Strategy, TuneOptions,
};
pub use tunebox_worker::{DiagnosticsBackend, Registry, WorkerError, run_if_worker};
