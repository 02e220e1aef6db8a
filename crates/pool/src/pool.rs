//! `TuningProcessPool`: N workers, one candidate per free worker.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tunebox_process::{ProcessConfig, TuningProcess};
use tunebox_protocol::{BenchmarkRequest, BenchmarkResult};

use crate::PoolError;

/// Builds a [`TuningProcessPool`].
#[derive(Debug, Clone)]
pub struct PoolBuilder {
    workers: usize,
    timeout: Duration,
    config: ProcessConfig,
}

impl PoolBuilder {
    /// Number of worker processes (default: the number of CPUs).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Per-candidate timeout, from sending the request to its reply (default 60 s). A
    /// candidate that exceeds it is `ProcessError::Timeout` and its worker is replaced.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How each worker is started (executable, environment, output, handshake timeout, …).
    pub fn process_config(mut self, config: ProcessConfig) -> Self {
        self.config = config;
        self
    }

    /// Starts every worker (in parallel) and returns the pool.
    ///
    /// # Errors
    ///
    /// [`PoolError::NoWorkers`] for zero workers; the first worker's start-up error
    /// ([`PoolError::Process`]) when a worker cannot be started, with every started worker
    /// killed and reaped.
    pub fn build(self) -> Result<TuningProcessPool, PoolError> {
        if self.workers == 0 {
            return Err(PoolError::NoWorkers { requested: 0 });
        }
        // Start the workers in parallel; where a thread cannot be had, start inline.
        let started: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..self.workers)
                .map(|_| {
                    std::thread::Builder::new()
                        .name("tunebox-pool-start".into())
                        .spawn_scoped(scope, || TuningProcess::spawn(self.config.clone()))
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| match handle {
                    Ok(handle) => handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    Err(_) => TuningProcess::spawn(self.config.clone()),
                })
                .collect()
        });
        let mut workers = Vec::with_capacity(started.len());
        for worker in started {
            workers.push(Mutex::new(worker?));
        }
        Ok(TuningProcessPool {
            workers,
            timeout: self.timeout,
        })
    }
}

/// A set of isolated workers that benchmark candidates in parallel, as Inductor's
/// `TuningProcessPool`.
///
/// Every candidate runs on the next free worker; its result lands at its own index. A
/// candidate that crashes or times out costs its result and a worker restart (started lazily by
/// the next candidate on that worker), never the other candidates'. Dropping the pool kills and
/// reaps every worker.
#[derive(Debug)]
pub struct TuningProcessPool {
    workers: Vec<Mutex<TuningProcess>>,
    timeout: Duration,
}

impl TuningProcessPool {
    /// A builder with the defaults: one worker per CPU, 60 s timeout, default [`ProcessConfig`].
    pub fn builder() -> PoolBuilder {
        PoolBuilder {
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            timeout: Duration::from_secs(60),
            config: ProcessConfig::new(),
        }
    }

    /// Number of workers.
    pub fn size(&self) -> usize {
        self.workers.len()
    }

    /// The per-candidate timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Benchmarks every request, each on the next free worker. Returns one result per request,
    /// in input order.
    pub fn benchmark(
        &self,
        requests: &[BenchmarkRequest],
    ) -> Vec<Result<BenchmarkResult, PoolError>> {
        self.benchmark_with(requests, |_, _| {})
    }

    /// As [`benchmark`](TuningProcessPool::benchmark), calling `on_result(index, &result)` as
    /// each candidate finishes (from the thread that ran it), e.g. to show progress.
    pub fn benchmark_with<F>(
        &self,
        requests: &[BenchmarkRequest],
        on_result: F,
    ) -> Vec<Result<BenchmarkResult, PoolError>>
    where
        F: Fn(usize, &Result<BenchmarkResult, PoolError>) + Sync,
    {
        let next = AtomicUsize::new(0);
        let slots: Vec<Mutex<Option<Result<BenchmarkResult, PoolError>>>> =
            requests.iter().map(|_| Mutex::new(None)).collect();
        let drain = |worker: &Mutex<TuningProcess>| {
            let mut worker = worker.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(request) = requests.get(index) else {
                    break;
                };
                let result = worker
                    .benchmark(request.clone(), self.timeout)
                    .map_err(PoolError::from);
                on_result(index, &result);
                *slots[index].lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
            }
        };
        std::thread::scope(|scope| {
            let mut running = 0;
            for worker in self.workers.iter().take(requests.len()) {
                let spawned = std::thread::Builder::new()
                    .name("tunebox-pool".into())
                    .spawn_scoped(scope, || drain(worker));
                running += usize::from(spawned.is_ok());
            }
            if running == 0 {
                // Not a single thread to be had: run everything here, on the first worker.
                drain(&self.workers[0]);
            }
        });
        slots
            .into_iter()
            .map(|slot| {
                slot.into_inner()
                    .unwrap_or_else(PoisonError::into_inner)
                    .expect("every index below requests.len() was claimed by a worker thread")
            })
            .collect()
    }

    /// Median time in ms of each request, `f64::INFINITY` for a request that failed in any way:
    /// Inductor's convention, where a failed choice is never picked.
    pub fn benchmark_or_inf(&self, requests: &[BenchmarkRequest]) -> Vec<f64> {
        self.benchmark(requests)
            .into_iter()
            .map(|r| r.map_or(f64::INFINITY, |r| r.stats.median_ms))
            .collect()
    }

    /// Asks every worker to exit, waiting up to `grace` for each (in parallel), then kills what
    /// remains. Idempotent; a later `benchmark` restarts workers.
    pub fn shutdown(&self, grace: Duration) {
        std::thread::scope(|scope| {
            for worker in &self.workers {
                scope.spawn(move || {
                    // A worker that had died while idle is reaped all the same.
                    let _ = worker
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .shutdown(grace);
                });
            }
        });
    }
}
