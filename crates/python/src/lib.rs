//! The Python package `tunebox` (module `tunebox._native`): tunebox's isolated workers from Python.
//!
//! Built with maturin into an abi3 wheel (`pip install .` at the repository root). The Python
//! faces live in `python/tunebox/`: `tunebox.popen_pool` (TVM's `PopenWorker` and
//! `PopenPoolExecutor`), `tunebox.benchmark` (an Inductor-style `TuningProcessPool`),
//! `tunebox.kernel_tuner` (Kernel Tuner's `tune_kernel`). This crate
//! is what they stand on:
//!
//! - `Worker` (`tunebox._native.Worker`, in `worker.rs`), the parent's handle on one worker
//!   process: a `tunebox_process::TuningProcess` whose worker is a Python interpreter, so its
//!   deadlines, process-group kill, reaping, crash reports and `maximum_process_uses` are
//!   tunebox's;
//! - `serve_worker` (`tunebox._native.serve_worker`, in `serve.rs`), the worker side:
//!   `python -m tunebox._worker` serves requests through `tunebox_worker`'s loop with a `python`
//!   backend that hands each pickled call to a Python handler (and `cpu` for C kernels);
//! - `tune` (`tunebox._native.tune`, in `tune.rs`): a manifest run by tunebox-tune's engine, as
//!   `tunebox tune` runs it, for `tunebox.kernel_tuner.tune_kernel`, in memory (manifest text,
//!   the source and the arrays as buffers in, the report as Python objects out); `engine_worker`
//!   (`worker_binary.rs`) is the worker it starts, tunebox's Rust `tunebox-worker` (the `cpu`,
//!   `cuda` and `diagnostics` backends) carried by the extension, and `serve_engine_worker`
//!   what the Python launcher `tunebox-engine-worker` runs where that binary is missing.
//!
//! Calls travel as one framed payload (`frame`): the cloudpickle of `(fn, args, kwargs)` and its
//! out-of-band buffers (pickle protocol 5: numpy arrays), in shared memory when large.
//!
//! # Example
//!
//! From Python, after `pip install .`:
//!
//! ```text
//! from tunebox.popen_pool import PopenPoolExecutor
//! pool = PopenPoolExecutor(max_workers=2, timeout=1.0)
//! assert pool.submit(pow, 2, 10).result() == 1024
//! ```

mod buffers;
mod ckernel;
mod frame;
mod serve;
mod tune;
mod worker;
mod worker_binary;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// The extension module `tunebox._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<worker::Worker>()?;
    m.add_class::<buffers::SharedView>()?;
    m.add_function(wrap_pyfunction!(serve::serve_worker, m)?)?;
    m.add_function(wrap_pyfunction!(tune::tune, m)?)?;
    m.add_function(wrap_pyfunction!(tune::engine_worker, m)?)?;
    m.add_function(wrap_pyfunction!(tune::serve_engine_worker, m)?)?;
    m.add("PROTOCOL_VERSION", tunebox_protocol::PROTOCOL_VERSION)?;
    // The workspace's version (Cargo.toml), which maturin also gives the wheel: `tunebox.__version__`.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The op codes of a Python call's payload (`frame::Op`), which `tunebox._calls` sends and
    // reads: one list, here.
    m.add("OPS", frame::Op::codes(m.py())?)?;
    // The engine's strategy names, which `tunebox.kernel_tuner` checks a `strategy=` against.
    m.add(
        "STRATEGIES",
        PyTuple::new(m.py(), tunebox_tune::strategies::NAMES)?,
    )?;
    Ok(())
}
