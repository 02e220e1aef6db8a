//! `TuningProcessPool`: Inductor's face of the pool.

use std::sync::{Arc, mpsc};
use std::time::Duration;

use tunebox_process::ProcessError;
use tunebox_protocol::{BenchmarkRequest, Task, TaskRequest};

use crate::contents::Contents;
use crate::engine::{Engine, TaskResult};
use crate::handle::typed;
use crate::{PoolConfig, PoolError};

/// Isolated workers that benchmark candidates in parallel, one per device, as Inductor's
/// `TuningProcessPool`.
///
/// Every candidate runs on the next free worker and its result lands at its own index. A
/// candidate that crashes or times out costs its result and a worker restart, made right away so
/// that the next candidate does not wait for it; the other candidates are unaffected. Dropping
/// the pool kills and reaps every worker.
pub struct TuningProcessPool {
    engine: Engine,
}

impl TuningProcessPool {
    /// Starts every worker of `config` (in parallel, each with its initializer) and returns
    /// the pool.
    ///
    /// ```no_run
    /// use tunebox_pool::{Devices, PoolConfig, TuningProcessPool};
    ///
    /// let pool = TuningProcessPool::new(PoolConfig::new().devices(Devices::FirstVisible(2)))?;
    /// assert_eq!(pool.size(), 2);
    /// # Ok::<(), tunebox_pool::PoolError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A device error ([`PoolError::NoWorkers`], [`PoolError::NoDevices`],
    /// [`PoolError::NotEnoughDevices`], [`PoolError::RepeatedDevice`],
    /// [`PoolError::DeviceCountUnknown`]) before anything starts; the first worker's start-up
    /// error ([`PoolError::Process`], e.g. `InitializerFailed`), with every started worker
    /// killed and reaped.
    pub fn new(config: PoolConfig) -> Result<TuningProcessPool, PoolError> {
        Ok(TuningProcessPool {
            engine: config.start(Arc::new(Contents::new()))?,
        })
    }

    /// Starts a pool of `config` beside this one: its own workers (as [`TuningProcessPool::new`]
    /// starts them), sharing this pool's large generated inputs
    /// ([`SHARED_INPUT_MIN_BYTES`](crate::SHARED_INPUT_MIN_BYTES) and up), which are then made
    /// once for both rather than once per pool. A tuning run measures a choice's first window
    /// in fresh workers and its later windows in a sibling pool whose workers are reused.
    ///
    /// # Errors
    ///
    /// As [`TuningProcessPool::new`].
    pub fn sibling(&self, config: PoolConfig) -> Result<TuningProcessPool, PoolError> {
        Ok(TuningProcessPool {
            engine: config.start(Arc::clone(self.engine.contents()))?,
        })
    }

    /// The engine under this pool (for [`run_pulled`](crate::run_pulled)).
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Number of workers.
    pub fn size(&self) -> usize {
        self.engine.size()
    }

    /// The per-candidate timeout.
    pub fn timeout(&self) -> Duration {
        self.engine.timeout()
    }

    /// The pid of each live worker process, by worker index: `None` while one is being replaced,
    /// and never the pid of a worker that has exited (even before it is reaped).
    pub fn worker_pids(&self) -> Vec<Option<u32>> {
        self.engine.worker_pids()
    }

    /// Benchmarks every request, each on the next free worker. Returns one result per request,
    /// in input order.
    pub fn benchmark(&self, requests: &[BenchmarkRequest]) -> Vec<TaskResult> {
        let submitted: Vec<_> = requests
            .iter()
            .map(|request| self.engine.submit(request.clone(), None, None, None))
            .collect();
        submitted
            .into_iter()
            .map(|completion| {
                completion.and_then(|c| {
                    c.take(None)
                        .expect("waiting without a deadline returns a result")
                })
            })
            .collect()
    }

    /// As [`benchmark`](TuningProcessPool::benchmark), calling `on_result(index, &result)` on
    /// the calling thread as each candidate finishes (in completion order), e.g. to show
    /// progress. No lock of the pool is held while it runs.
    pub fn benchmark_with<F>(
        &self,
        requests: &[BenchmarkRequest],
        mut on_result: F,
    ) -> Vec<TaskResult>
    where
        F: FnMut(usize, &TaskResult),
    {
        let (done_tx, done_rx) = mpsc::channel();
        let mut results: Vec<Option<TaskResult>> = Vec::with_capacity(requests.len());
        let mut completions = Vec::with_capacity(requests.len());
        for (index, request) in requests.iter().enumerate() {
            let notify = Some((done_tx.clone(), index));
            match self.engine.submit(request.clone(), None, notify, None) {
                Ok(completion) => {
                    completions.push(Some(completion));
                    results.push(None);
                }
                Err(e) => {
                    let result = Err(e);
                    on_result(index, &result);
                    completions.push(None);
                    results.push(Some(result));
                }
            }
        }
        drop(done_tx);
        let mut pending = completions.iter().flatten().count();
        while pending > 0 {
            // Drain what is ready before blocking: one wake-up serves many completions.
            let Ok(first) = done_rx.recv() else { break };
            for index in std::iter::once(first).chain(done_rx.try_iter()) {
                if let Some(completion) = &completions[index] {
                    completion.peek(|result| on_result(index, result));
                    results[index] = completion.take(None);
                    pending -= 1;
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every submitted task resolves"))
            .collect()
    }

    /// Runs every task of a kind defined outside tunebox ([`Task`]), each on the next free
    /// worker, and returns their typed results in input order: Inductor's `benchmark` for a
    /// `BenchmarkRequest` subclass of one's own. The workers need the task's backend
    /// (`tunebox_worker::Registry::with_task` in the worker's `main`). A task that cannot be
    /// encoded gets its error in place (`PoolError::Process` with `ProcessError::Remote`); a
    /// crash or timeout costs only its own task, as for any request.
    pub fn run_tasks<T, I>(&self, tasks: I) -> Vec<Result<T::Output, PoolError>>
    where
        T: Task,
        I: IntoIterator,
        I::Item: Into<TaskRequest<T>>,
    {
        let submitted: Vec<_> = tasks
            .into_iter()
            .map(|task| {
                let request = task.into().encode().map_err(ProcessError::Remote)?;
                self.engine.submit(request, None, None, None)
            })
            .collect();
        submitted
            .into_iter()
            .map(|completion| {
                completion.and_then(|c| {
                    c.take(None)
                        .expect("waiting without a deadline returns a result")
                        .and_then(typed::<T>)
                })
            })
            .collect()
    }

    /// Prepares every request (compile into the cache, load, check the launch) on the workers, in
    /// parallel, without measuring: compile errors surface before any benchmark, and the
    /// benchmarks that follow only load cached artifacts. One result per request, in input
    /// order.
    pub fn prepare(&self, requests: &[BenchmarkRequest]) -> Vec<Result<(), PoolError>> {
        let submitted: Vec<_> = requests
            .iter()
            .map(|request| self.engine.submit_prepare(request.clone(), None))
            .collect();
        submitted
            .into_iter()
            .map(|completion| {
                completion.and_then(|c| {
                    c.take(None)
                        .expect("waiting without a deadline returns a result")
                        .map(drop)
                })
            })
            .collect()
    }

    /// Median time in ms of each request, `f64::INFINITY` for a request that failed in any way
    /// or measured nothing (a task kind whose backend did not time it): Inductor's convention,
    /// where a failed choice is never picked.
    pub fn benchmark_or_inf(&self, requests: &[BenchmarkRequest]) -> Vec<f64> {
        self.benchmark(requests)
            .into_iter()
            .map(|r| match r {
                // A task that timed nothing has a NaN median: never the fastest.
                Ok(r) if !r.stats.median_ms.is_nan() => r.stats.median_ms,
                _ => f64::INFINITY,
            })
            .collect()
    }

    /// Stops the pool: queued candidates resolve to [`PoolError::ShutDown`], busy workers are
    /// killed (their candidates resolve to `ShutDown`), idle workers are asked to exit and given
    /// `grace`; returns once every worker is reaped (within `grace` plus a few ms), also when
    /// another thread is shutting the pool down at the same time. Idempotent; the pool accepts
    /// nothing afterwards.
    pub fn shutdown(&self, grace: Duration) {
        self.engine.shutdown(false, grace);
    }
}

impl std::fmt::Debug for TuningProcessPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TuningProcessPool")
            .field("size", &self.size())
            .field("timeout", &self.timeout())
            .finish()
    }
}
