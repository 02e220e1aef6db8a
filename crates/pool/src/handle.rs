//! `TaskHandle`: one submitted task.

use std::sync::Arc;
use std::time::Duration;

use tunebox_process::ProcessError;
use tunebox_protocol::{BenchmarkResult, Task, decode_output};

use crate::PoolError;
use crate::engine::{Completion, Shared};

/// A task submitted to a [`PoolExecutor`](crate::PoolExecutor), as the future TVM's
/// `PopenPoolExecutor.submit` returns. `O` is what it resolves to: a [`BenchmarkResult`] for a
/// [`submit`](crate::PoolExecutor::submit)ted request, the typed `T::Output` for a
/// [`submit_task`](crate::PoolExecutor::submit_task)ed task of kind `T`.
///
/// Dropping a handle does not cancel its task; the result is then discarded.
pub struct TaskHandle<O = BenchmarkResult> {
    pub(crate) completion: Arc<Completion>,
    pub(crate) shared: Arc<Shared>,
    /// Turns the worker's reply into `O`.
    pub(crate) decode: fn(BenchmarkResult) -> Result<O, PoolError>,
}

/// The reply itself: what a handle of a plain request resolves to.
pub(crate) fn untyped(result: BenchmarkResult) -> Result<BenchmarkResult, PoolError> {
    Ok(result)
}

/// The typed result of a task of kind `T`; a reply that does not decode is the task's error.
pub(crate) fn typed<T: Task>(result: BenchmarkResult) -> Result<T::Output, PoolError> {
    decode_output::<T>(&result).map_err(|e| PoolError::Process(ProcessError::Remote(e)))
}

impl<O> TaskHandle<O> {
    /// Waits for the task and returns its result. Every task is resolved eventually: by its
    /// worker, by the task's timeout, by [`cancel`](TaskHandle::cancel) or by shutdown.
    ///
    /// # Errors
    ///
    /// The task's [`PoolError`].
    pub fn wait(self) -> Result<O, PoolError> {
        self.completion
            .take(None)
            .expect("waiting without a deadline returns a result")
            .and_then(self.decode)
    }

    /// Waits up to `timeout` for the task. Returns the result, or the handle back if the task
    /// is still queued or running.
    ///
    /// # Errors
    ///
    /// `Err(handle)` when the task has not finished in time.
    pub fn wait_timeout(self, timeout: Duration) -> Result<Result<O, PoolError>, TaskHandle<O>> {
        let deadline = std::time::Instant::now().checked_add(timeout);
        match self.completion.take(deadline) {
            Some(result) => Ok(result.and_then(self.decode)),
            None => Err(self),
        }
    }

    /// Whether the task has finished (its result is ready).
    pub fn is_finished(&self) -> bool {
        self.completion.is_done()
    }

    /// Cancels the task: a queued task never runs; a running one has its worker killed (and
    /// replaced). It then resolves to [`PoolError::Cancelled`]. Returns `false` when the task
    /// had already finished.
    pub fn cancel(&self) -> bool {
        self.shared.cancel(&self.completion)
    }
}

impl<O> std::fmt::Debug for TaskHandle<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}
