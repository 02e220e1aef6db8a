//! Cross-crate integration tests: `TuningProcess` and `TuningProcessPool` driving the real worker
//! binary through every way a candidate can succeed or fail.

mod executor;
mod forgetful;
mod fuzz;
mod gpu;
mod kernels;
mod pool;
mod process;
mod shared;
mod tune;
mod util;
