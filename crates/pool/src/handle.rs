//! `TaskHandle`: one submitted task.

use std::sync::Arc;
use std::time::Duration;

use tunebox_protocol::BenchmarkResult;

use crate::PoolError;
use crate::engine::{Completion, Shared};

/// A task submitted to a [`PoolExecutor`](crate::PoolExecutor), as the future TVM's
/// `PopenPoolExecutor.submit` returns.
///
/// Dropping a handle does not cancel its task; the result is then discarded.
pub struct TaskHandle {
    pub(crate) completion: Arc<Completion>,
    pub(crate) shared: Arc<Shared>,
}

impl TaskHandle {
    /// Waits for the task and returns its result. Every task is resolved eventually: by its
    /// worker, by the task's timeout, by [`cancel`](TaskHandle::cancel) or by shutdown.
    ///
    /// # Errors
    ///
    /// The task's [`PoolError`].
    pub fn wait(self) -> Result<BenchmarkResult, PoolError> {
        self.completion
            .take(None)
            .expect("waiting without a deadline returns a result")
    }

    /// Waits up to `timeout` for the task. Returns the result, or the handle back if the task
    /// is still queued or running.
    ///
    /// # Errors
    ///
    /// `Err(handle)` when the task has not finished in time.
    pub fn wait_timeout(
        self,
        timeout: Duration,
    ) -> Result<Result<BenchmarkResult, PoolError>, TaskHandle> {
        let deadline = std::time::Instant::now().checked_add(timeout);
        match self.completion.take(deadline) {
            Some(result) => Ok(result),
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

impl std::fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}
