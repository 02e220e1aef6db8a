//! The worker side: a Python interpreter that serves requests through tunebox-worker's loop.
//!
//! `python -m tunebox._worker` calls [`serve_worker`] with a handler written in Python
//! (`tunebox._worker.handle`). The loop, the handshake, the parent-death signal, the panic and
//! fault handling are tunebox-worker's; the `python` backend hands each call to the handler with
//! the GIL held, and releases it between requests.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tunebox_bench::Backend;
use tunebox_protocol::{
    BenchError, BenchmarkRequest, BenchmarkResult, Bytes, Kernel, TensorData, TimingStats,
};
use tunebox_worker::Registry;

use crate::buffers::{self, Place, RawBuffer};
use crate::frame::{self, Op};

/// The backend name Python calls are sent to.
pub(crate) const BACKEND: &str = "python";

/// The task type Python calls are sent as (checked by nobody but this backend).
pub(crate) const TASK_TYPE: &str = "tunebox::PythonCall";

/// Serves requests as a tunebox worker until the parent shuts it down or goes away; returns the
/// process exit code (0 after a clean end).
///
/// `handler(op, pickle, buffers)` is called for each request with `op` (0 call, 1 load, 2 run,
/// 3 initializer, 4 warm), the pickle as `bytes` and its out-of-band buffers as `bytearray`s; it
/// returns `(status, pickle, [(address, length)], owners)` with `status` TVM's `StatusKind`
/// (1 complete, 2 exception, 3 timeout), the reply's out-of-band buffers by address and the
/// objects that own them. An
/// exception it raises is answered as a task error naming it. The worker also has tunebox's `cpu`
/// and `diagnostics` backends.
#[pyfunction]
pub(crate) fn serve_worker(py: Python<'_>, handler: Py<PyAny>) -> i32 {
    py.detach(move || {
        let registry = Registry::standard().with(Box::new(PythonBackend { handler }));
        tunebox_worker::run_from_env(registry)
    })
}

/// Runs Python calls with the handler.
struct PythonBackend {
    handler: Py<PyAny>,
}

impl Backend for PythonBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn benchmark(&mut self, request: &BenchmarkRequest) -> Result<BenchmarkResult, BenchError> {
        let reply = self.run(request)?;
        Ok(BenchmarkResult::new(TimingStats::unmeasured())
            .with_value(Some(Bytes::from_vec(reply.framed).map_err(|e| {
                BenchError::Failed {
                    message: e.to_string(),
                }
            })?))
            .with_outputs(reply.buffers))
    }

    /// A `Load`: the handler unpickles and keeps the call; an unpickling error is kept too and
    /// reported by the `Run` that follows.
    fn prepare(&mut self, request: &BenchmarkRequest) -> Result<(), BenchError> {
        self.run(request).map(drop)
    }

    /// No: a Python worker keeps what its calls leave (globals, threads, open files, the
    /// initializer's state) for the next call, as TVM's worker does. Checking it would also cost
    /// about 100 µs a call and replace the worker after any call that leaves a thread running
    /// (a timeout's timer thread among them). `maximum_uses` is how a Python user bounds it.
    fn checks_worker_state(&self) -> bool {
        false
    }
}

impl PythonBackend {
    fn run(&mut self, request: &BenchmarkRequest) -> Result<Reply, BenchError> {
        let Kernel::Task(task) = &request.kernel else {
            return Err(invalid(
                "the `python` backend runs Python calls only".into(),
            ));
        };
        let (tag, parts) = frame::decode(&task.payload).map_err(invalid)?;
        let op = Op::from_byte(tag).ok_or_else(|| invalid(format!("unknown op {tag}")))?;
        if parts.is_empty() {
            return Err(invalid("a call without its pickle".into()));
        }
        Python::attach(|py| self.call_handler(py, op, parts[0], request))
    }

    fn call_handler(
        &self,
        py: Python<'_>,
        op: Op,
        pickle: &[u8],
        request: &BenchmarkRequest,
    ) -> Result<Reply, BenchError> {
        let pickle = PyBytes::new(py, pickle);
        let views = buffers::from_request(py, request).map_err(|e| python_error(py, e))?;
        let reply = self
            .handler
            .call1(py, (op as u8, pickle, views.clone()))
            .map_err(|e| python_error(py, e))?;
        // (status, pickle, [(address, length)], the objects that own that memory)
        let (status, pickle, raw, owners): (
            u8,
            Bound<'_, PyBytes>,
            Vec<RawBuffer>,
            Bound<'_, PyAny>,
        ) = reply.extract(py).map_err(|e| python_error(py, e))?;
        // SAFETY: `owners` (alive until after this, GIL held) owns the memory that `raw`
        // points to; the handler computed the addresses from it.
        let (places, buffers) = unsafe { buffers::outputs(&raw, request) }?;
        // The reply's buffers are copied or placed: what still holds a request buffer now is
        // the task's own.
        drop((owners, reply));
        let released = buffers::released(&views);
        Ok(Reply {
            framed: frame::encode(
                status,
                &[pickle.as_bytes(), &Place::encode(&places), &released],
            ),
            buffers,
        })
    }
}

/// A reply: the framed status and pickle, and the out-of-band buffers as outputs.
struct Reply {
    framed: Vec<u8>,
    buffers: Vec<TensorData>,
}

fn invalid(detail: String) -> BenchError {
    BenchError::InvalidRequest { detail }
}

/// A Python exception as a task error: its type, message and traceback.
fn python_error(py: Python<'_>, error: PyErr) -> BenchError {
    let traceback = error
        .traceback(py)
        .and_then(|tb| tb.format().ok())
        .unwrap_or_default();
    BenchError::Failed {
        message: format!("{traceback}{error}"),
    }
}
