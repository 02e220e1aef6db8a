//! The interface between a worker and the code that measures one kind of kernel.

use tunebox_protocol::{BenchError, BenchmarkRequest, BenchmarkResult, DeviceInfo};

/// Measures requests of one kind (`cpu`, `diagnostics`, …) inside a worker.
///
/// The worker calls [`Backend::benchmark`] on its main thread and catches panics, so an
/// implementation may panic on a bug without killing the worker; it should still return errors as
/// [`BenchError`] values.
pub trait Backend {
    /// The name requests select it by (see `Kernel::backend`).
    fn name(&self) -> &'static str;

    /// Runs and times one request.
    ///
    /// # Errors
    ///
    /// A [`BenchError`] when the request is invalid, does not compile or load, or the measurement
    /// fails; the worker lives on and answers the next request.
    fn benchmark(&mut self, request: &BenchmarkRequest) -> Result<BenchmarkResult, BenchError>;

    /// Does everything [`Backend::benchmark`] would before measuring (compile into the cache,
    /// load, check the launch), so that compiles can be spread over a pool's workers ahead of the
    /// measurements. The default does nothing.
    ///
    /// # Errors
    ///
    /// As [`Backend::benchmark`].
    fn prepare(&mut self, request: &BenchmarkRequest) -> Result<(), BenchError> {
        let _ = request;
        Ok(())
    }

    /// The devices this backend can run on (GPUs); empty for backends without devices.
    ///
    /// # Errors
    ///
    /// Why the backend cannot see its devices (no driver, …).
    fn devices(&mut self) -> Result<Vec<DeviceInfo>, BenchError> {
        Ok(Vec::new())
    }

    /// Whether the worker checks its state around this backend's requests and puts it back
    /// (floating-point modes, signal dispositions, working directory, rlimits…), replacing a
    /// worker a task left descriptors, threads or memory in. The default is yes.
    ///
    /// A backend whose tasks keep state in the worker on purpose says no: a Python interpreter
    /// whose calls keep globals, threads and open files from one call to the next, as TVM's
    /// `PopenWorker` keeps them (an initializer's state, a module's cache).
    fn checks_worker_state(&self) -> bool {
        true
    }
}
