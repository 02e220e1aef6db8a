//! `PoolExecutor`: TVM's face of the pool.

use std::time::Duration;

use tunebox_protocol::{BenchmarkRequest, BenchmarkResult};

use crate::engine::Engine;
use crate::{PoolConfig, PoolError, StatusKind, TaskHandle};

/// The outcome of one task of [`PoolExecutor::map_with_error_catching`], as TVM's `MapResult`.
#[derive(Debug)]
pub struct MapResult {
    /// How the task ended.
    pub status: StatusKind,
    /// The result, when `status` is `Complete`.
    pub value: Option<BenchmarkResult>,
    /// The error, for every other status.
    pub error: Option<PoolError>,
}

impl MapResult {
    fn from_result(result: Result<BenchmarkResult, PoolError>) -> MapResult {
        match result {
            Ok(value) => MapResult {
                status: StatusKind::Complete,
                value: Some(value),
                error: None,
            },
            Err(error) => MapResult {
                status: error.status().kind(),
                value: None,
                error: Some(error),
            },
        }
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
/// assert_eq!(results[0].status, StatusKind::Timeout);
/// assert_eq!(results[1].status, StatusKind::Crashed);
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
            engine: config.start()?,
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
        let completion = self.engine.submit(request, Some(timeout), None)?;
        Ok(TaskHandle {
            completion,
            shared: self.engine.shared().clone(),
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
            .map(|handle| MapResult::from_result(handle.and_then(TaskHandle::wait)))
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
