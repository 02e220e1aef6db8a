//! `PoolExecutor`: TVM's face of the pool.

use std::time::Duration;

use tunebox_process::ProcessError;
use tunebox_protocol::{BenchmarkRequest, BenchmarkResult, Task, TaskRequest};

use crate::engine::Engine;
use crate::handle::{typed, untyped};
use crate::{PoolConfig, PoolError, StatusKind, TaskHandle};

/// The outcome of one task of [`PoolExecutor::map_with_error_catching`] or
/// [`PoolExecutor::map_tasks`], as TVM's `MapResult`: the value of a completed task, or the
/// error of one that was not, told apart by how it ended ([`StatusKind`]). `T` is a
/// [`BenchmarkResult`] for plain requests, the typed `T::Output` for task kinds.
#[derive(Debug)]
pub enum MapResult<T = BenchmarkResult> {
    /// The task produced a result.
    Complete(T),
    /// The task failed: an error inside the worker, a cancellation, a shutdown, a worker that
    /// could not start.
    Exception(PoolError),
    /// The task exceeded its timeout; its worker was killed.
    Timeout(PoolError),
    /// The task's worker died while running it.
    Crashed(PoolError),
}

impl<T> MapResult<T> {
    /// How the task ended.
    pub fn status(&self) -> StatusKind {
        match self {
            MapResult::Complete(_) => StatusKind::Complete,
            MapResult::Exception(_) => StatusKind::Exception,
            MapResult::Timeout(_) => StatusKind::Timeout,
            MapResult::Crashed(_) => StatusKind::Crashed,
        }
    }

    /// The value of a completed task.
    pub fn value(&self) -> Option<&T> {
        match self {
            MapResult::Complete(value) => Some(value),
            _ => None,
        }
    }

    /// The error of a task that did not complete.
    pub fn error(&self) -> Option<&PoolError> {
        match self {
            MapResult::Complete(_) => None,
            MapResult::Exception(e) | MapResult::Timeout(e) | MapResult::Crashed(e) => Some(e),
        }
    }

    /// The value, or the error.
    ///
    /// # Errors
    ///
    /// The task's [`PoolError`] when it did not complete.
    pub fn into_result(self) -> Result<T, PoolError> {
        match self {
            MapResult::Complete(value) => Ok(value),
            MapResult::Exception(e) | MapResult::Timeout(e) | MapResult::Crashed(e) => Err(e),
        }
    }
}

impl<T> From<Result<T, PoolError>> for MapResult<T> {
    fn from(result: Result<T, PoolError>) -> Self {
        match result {
            Ok(value) => MapResult::Complete(value),
            Err(error) => match error.status().kind() {
                StatusKind::Timeout => MapResult::Timeout(error),
                StatusKind::Crashed => MapResult::Crashed(error),
                StatusKind::Exception | StatusKind::Complete => MapResult::Exception(error),
            },
        }
    }
}

impl<T> From<MapResult<T>> for Result<T, PoolError> {
    fn from(result: MapResult<T>) -> Self {
        result.into_result()
    }
}

/// A pool of `max_workers` isolated workers taking tasks one by one, as TVM's
/// `PopenPoolExecutor`.
///
/// [`submit`](PoolExecutor::submit) queues a task and returns its [`TaskHandle`];
/// [`map_with_error_catching`](PoolExecutor::map_with_error_catching) runs many and returns a
/// [`MapResult`] per task, in input order. A worker that crashes, times out or reaches
/// `maximum_process_uses` is replaced right away, so that the next task does not pay the
/// start-up. Dropping the executor stops it as `shutdown(false)` does.
///
/// ```no_run
/// use std::time::Duration;
/// use tunebox_pool::{PoolConfig, PoolExecutor, StatusKind};
/// use tunebox_process::ProcessConfig;
/// use tunebox_protocol::{BenchmarkRequest, DiagnosticTask};
///
/// let executor = PoolExecutor::new(
///     PoolConfig::new()
///         .max_workers(2)
///         .timeout(Duration::from_secs(1))
///         .maximum_process_uses(Some(100))
///         .process_config(ProcessConfig::new().worker("target/release/tunebox-worker")),
/// )?;
/// let handle = executor.submit(BenchmarkRequest::new(DiagnosticTask::Sleep { ms: 5 }))?;
/// assert!(handle.wait()?.stats.median_ms >= 5.0);
/// let tasks = vec![
///     BenchmarkRequest::new(DiagnosticTask::Hang),
///     BenchmarkRequest::new(DiagnosticTask::Abort),
/// ];
/// let results = executor.map_with_error_catching(tasks);
/// assert_eq!(results[0].status(), StatusKind::Timeout);
/// assert_eq!(results[1].status(), StatusKind::Crashed);
/// # Ok::<(), tunebox_pool::PoolError>(())
/// ```
pub struct PoolExecutor {
    engine: Engine,
}

impl PoolExecutor {
    /// Starts the `max_workers` workers of `config` (in parallel, each with its initializer).
    ///
    /// # Errors
    ///
    /// As [`TuningProcessPool::new`](crate::TuningProcessPool::new): a device error such as
    /// [`PoolError::NoWorkers`] for zero workers before anything starts; the first worker's
    /// start-up error (e.g. `InitializerFailed`) with every started worker reaped.
    pub fn new(config: PoolConfig) -> Result<PoolExecutor, PoolError> {
        Ok(PoolExecutor {
            engine: config.start(std::sync::Arc::new(crate::contents::Contents::new()))?,
        })
    }

    /// Number of workers.
    pub fn max_workers(&self) -> usize {
        self.engine.size()
    }

    /// The pid of each live worker process, by worker index: `None` while one is being replaced,
    /// and never the pid of a worker that has exited (even before it is reaped).
    pub fn worker_pids(&self) -> Vec<Option<u32>> {
        self.engine.worker_pids()
    }

    /// Queues `request` with the executor's timeout; it runs on the first free worker.
    ///
    /// # Errors
    ///
    /// [`PoolError::ShutDown`] after shutdown (nothing is started); [`PoolError::Unavailable`]
    /// when no worker can be started any more.
    pub fn submit(&self, request: BenchmarkRequest) -> Result<TaskHandle, PoolError> {
        self.submit_with_timeout(request, self.engine.timeout())
    }

    /// Queues `request` with its own timeout.
    ///
    /// # Errors
    ///
    /// As [`submit`](PoolExecutor::submit).
    pub fn submit_with_timeout(
        &self,
        request: BenchmarkRequest,
        timeout: Duration,
    ) -> Result<TaskHandle, PoolError> {
        self.submit_request(request, timeout, untyped)
    }

    /// Queues a task of a kind defined outside tunebox ([`Task`]), with the executor's timeout;
    /// its handle resolves to the typed `T::Output`. The workers need the task's backend
    /// (`tunebox_worker::Registry::with_task` in the worker's `main`), as TVM's
    /// `PopenPoolExecutor.submit(fn, *args)` needs `fn` importable in its workers.
    ///
    /// # Errors
    ///
    /// As [`submit`](PoolExecutor::submit), and [`PoolError::Process`] with a
    /// `ProcessError::Remote` when the task cannot be encoded (nothing is queued). A task error,
    /// crash or timeout comes from the handle, as for any request.
    pub fn submit_task<T: Task>(
        &self,
        task: impl Into<TaskRequest<T>>,
    ) -> Result<TaskHandle<T::Output>, PoolError> {
        self.submit_task_with_timeout(task, self.engine.timeout())
    }

    /// [`submit_task`](PoolExecutor::submit_task) with the task's own timeout, as
    /// [`submit_with_timeout`](PoolExecutor::submit_with_timeout) for a request.
    ///
    /// # Errors
    ///
    /// As [`submit_task`](PoolExecutor::submit_task).
    pub fn submit_task_with_timeout<T: Task>(
        &self,
        task: impl Into<TaskRequest<T>>,
        timeout: Duration,
    ) -> Result<TaskHandle<T::Output>, PoolError> {
        let request = task.into().encode().map_err(ProcessError::Remote)?;
        self.submit_request(request, timeout, typed::<T>)
    }

    fn submit_request<O>(
        &self,
        request: BenchmarkRequest,
        timeout: Duration,
        decode: fn(BenchmarkResult) -> Result<O, PoolError>,
    ) -> Result<TaskHandle<O>, PoolError> {
        let completion = self.engine.submit(request, Some(timeout), None, None)?;
        Ok(TaskHandle {
            completion,
            shared: self.engine.shared().clone(),
            decode,
        })
    }

    /// Runs every request and returns their outcomes in input order; no task's failure affects
    /// another's (TVM's `map_with_error_catching`).
    pub fn map_with_error_catching<I>(&self, requests: I) -> Vec<MapResult>
    where
        I: IntoIterator<Item = BenchmarkRequest>,
    {
        let handles: Vec<_> = requests.into_iter().map(|r| self.submit(r)).collect();
        handles
            .into_iter()
            .map(|handle| MapResult::from(handle.and_then(TaskHandle::wait)))
            .collect()
    }

    /// Runs every task of kind `T` and returns their typed outcomes in input order, as
    /// [`map_with_error_catching`](PoolExecutor::map_with_error_catching) does for requests.
    pub fn map_tasks<T, I>(&self, tasks: I) -> Vec<MapResult<T::Output>>
    where
        T: Task,
        I: IntoIterator,
        I::Item: Into<TaskRequest<T>>,
    {
        let handles: Vec<_> = tasks.into_iter().map(|t| self.submit_task(t)).collect();
        handles
            .into_iter()
            .map(|handle| MapResult::from(handle.and_then(TaskHandle::wait)))
            .collect()
    }

    /// Stops the executor. With `wait`, queued tasks still run and the call returns when they
    /// are done; without, queued tasks resolve to [`PoolError::ShutDown`] and running ones are
    /// killed (and resolve to `ShutDown`). Either way every worker is killed or exited, and
    /// reaped, before it returns, also when another thread is shutting the executor down at the
    /// same time (each call waits for all of them). Idempotent; `submit` fails with `ShutDown`
    /// afterwards.
    pub fn shutdown(&self, wait: bool) {
        self.engine.shutdown(wait, Duration::from_millis(500));
    }
}

impl std::fmt::Debug for PoolExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolExecutor")
            .field("max_workers", &self.max_workers())
            .finish()
    }
}
