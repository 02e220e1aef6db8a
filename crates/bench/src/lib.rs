//! The measuring method shared by tunebox backends.
//!
//! A backend (`tunebox-cpu`, `tunebox-cuda`, the worker's diagnostics backend, a task kind's
//! [`TaskBackend`]) implements
//! [`Backend`]: given a [`BenchmarkRequest`](tunebox_protocol::BenchmarkRequest), measure it and
//! return a [`BenchmarkResult`](tunebox_protocol::BenchmarkResult) or a
//! [`BenchError`](tunebox_protocol::BenchError). To time a kernel it implements [`Runner`] (run
//! once, flush caches, optionally time one run itself) and calls [`do_bench`], which follows
//! triton's `do_bench`: estimate one run, derive warmup and rep counts from the budget, flush before
//! every timed rep, and summarize the reps as [`TimingStats`](tunebox_protocol::TimingStats)
//! (median, mean, min, max, p20, p80, stddev, in ms). [`HostTensor`] allocates and fills a tensor
//! from its [`TensorSpec`](tunebox_protocol::TensorSpec) identically in every worker, so that a
//! reference and a candidate see the same inputs. A task kind defined outside tunebox
//! ([`Task`](tunebox_protocol::Task)) gets a [`TaskBackend`] from a closure, which receives a
//! [`TaskContext`] with the request's tensors and scalars and the same timing helpers.
//!
//! Modules: `backend.rs` ([`Backend`]), `cache_dir.rs` ([`CacheDir`]: one backend's private
//! directory of compiled kernels), `do_bench.rs` ([`do_bench`], and [`do_bench_within`],
//! which fits warmup and reps into the request's budget), `stats.rs` ([`summarize`],
//! [`quantile`] as numpy's), `progress.rs` ([`report_progress`]: each phase and call, to the
//! worker's progress sink), `rep_clock.rs` (a preempted rep counts its thread's
//! CPU time), `restore.rs` ([`Restore`]: the tensors put back between calls), `tensor.rs` ([`HostTensor`], [`physical_memory_bytes`]), `huge_map.rs`
//! (large tensors' huge-page mappings, kept between a worker's requests: [`keep_mappings`],
//! [`end_request`], [`kept_mappings_kib`]), `openmp.rs` (the idle threads of the OpenMP runtimes a
//! kernel loaded: [`end_openmp_pools`], [`start_gnu_openmp_pool`]), `private_map.rs` (inputs mapped copy-on-write
//! from the caller's shared buffer), `task.rs` ([`TaskBackend`], [`TaskContext`]).
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use tunebox_bench::{do_bench, Runner};
//! use tunebox_protocol::{BenchError, TimingConfig};
//!
//! struct Sleepy;
//! impl Runner for Sleepy {
//!     fn run(&mut self) -> Result<(), BenchError> {
//!         std::thread::sleep(Duration::from_micros(200));
//!         Ok(())
//!     }
//!     fn flush(&mut self) -> Result<(), BenchError> {
//!         Ok(())
//!     }
//! }
//!
//! let config = TimingConfig::default().warmup_ms(1.0).rep_ms(5.0);
//! let stats = do_bench(&mut Sleepy, &config).unwrap();
//! assert!(stats.median_ms >= 0.2);
//! assert!(stats.reps >= config.min_reps);
//! ```
#![deny(missing_docs)]

mod backend;
mod cache_dir;
mod do_bench;
mod fresh;
mod huge_map;
mod openmp;
mod private_map;
mod progress;
mod rep_clock;
mod restore;
mod stats;
mod task;
mod tensor;
mod varied;

pub use backend::Backend;
pub use cache_dir::CacheDir;
pub use do_bench::{
    Runner, check_budget, check_first_call, do_bench, do_bench_after, do_bench_within,
};
pub use fresh::{fresh_input_spec, fresh_inputs};
pub use huge_map::{end_request, keep_mappings, kept_mappings_kib};
pub use openmp::{EndedPools, Runtimes, end_openmp_pools, start_gnu_openmp_pool};
pub use private_map::note_kernel_call;
pub use progress::{install_progress_sink, report_progress};
pub use rep_clock::{process_cpu_ms, thread_count, thread_cpu_ms};
pub use restore::Restore;
pub use stats::{quantile, summarize};
pub use task::{TaskBackend, TaskContext};
pub use tensor::{HostTensor, physical_memory_bytes};
pub use varied::{VariedReps, vary_with};
