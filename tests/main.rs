//! Cross-crate integration tests: `TuningProcess` and `TuningProcessPool` driving the real worker
//! binary through every way a candidate can succeed or fail.

mod containment;
mod executor;
mod forgetful;
mod fuzz;
mod gpu;
mod kernels;
mod pool;
mod process;
mod pull;
mod reuse;
mod sandbox;
mod sandbox_cuda;
mod sandbox_nonroot;
mod shared;
#[allow(
    dead_code,
    reason = "the backend half runs in the test worker (worker_main.rs)"
)]
mod task_kinds;
mod tasks;
mod tune;
mod util;
