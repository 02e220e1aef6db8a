//! The pull-based face of the pool: the caller hands out requests as workers free up
//! ([`run_pulled`]), instead of submitting a batch up front.
//!
//! A tuning run does not know its next request in advance: the next choice may still be
//! compiling, a spare window may be due, the run may be told to stop. [`run_pulled`] keeps as
//! many requests in flight as it is given slots, asks a source for the next one each time a
//! slot frees ([`Pull`]), and hands each result back on the calling thread as it lands. No
//! thread is started for it: the pools' own worker threads run the requests, and a
//! [`WindowHook`] runs on them, just before a request is sent to its worker process and just
//! after the reply, so that what it observes brackets the window and nothing else.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tunebox_protocol::BenchmarkRequest;

use crate::engine::{Around, Completion, TaskResult};
use crate::{PoolError, TuningProcessPool};

/// What a source of requests hands [`run_pulled`] when a slot is free.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "returned once per request and unpacked at once; boxing would allocate per request"
)]
pub enum Pull<'p, J> {
    /// Measure `request` on `pool` with `timeout` (`None`: the pool's), then hand `job` back with
    /// its result.
    Request {
        /// The caller's name for the request, handed back with its result.
        job: J,
        /// The pool to measure it on (one call may use several, e.g. a pool and its sibling).
        pool: &'p TuningProcessPool,
        /// What to measure.
        request: BenchmarkRequest,
        /// Its own timeout, in place of the pool's (e.g. a longer one to re-measure with more
        /// reps). Zero fails the request with [`PoolError::ZeroTimeout`](crate::PoolError)
        /// before it reaches a worker.
        timeout: Option<Duration>,
    },
    /// Nothing to hand out yet (e.g. the next request is still compiling): ask again after at
    /// most this long, or as soon as a request in flight finishes.
    Wait(Duration),
    /// Nothing more (everything handed out, or the caller stops): [`run_pulled`] returns once
    /// the requests in flight have finished.
    Done,
}

/// Observes each request's window on the pool's worker thread: [`before`](WindowHook::before)
/// just before the request is sent to its worker process, [`after`](WindowHook::after) just
/// after its reply, before the caller sees the result. What it measures (CPU time of the
/// machine, other work that ran meanwhile) then covers the window alone: not the time the
/// request waited for a worker, nor the caller's handling of other results. A hook that panics
/// costs that request its result ([`PoolError::HookPanicked`]); the pool carries on.
pub trait WindowHook: Send + Sync + 'static {
    /// What `before` notes, for `after`.
    type Mark: Send + 'static;
    /// What the hook saw of one window, handed to the caller with the result.
    type Seen: Send + 'static;

    /// Called on the worker thread just before the request is sent.
    fn before(&self) -> Self::Mark;

    /// Called on the worker thread just after the reply (or the failure) of the request.
    fn after(
        &self,
        mark: Self::Mark,
        result: &Result<tunebox_protocol::BenchmarkResult, PoolError>,
    ) -> Self::Seen;
}

/// No hook: nothing is observed (`Seen` is `()`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHook;

impl WindowHook for NoHook {
    type Mark = ();
    type Seen = ();

    fn before(&self) {}

    fn after(&self, (): (), _: &TaskResult) {}
}

/// One request in flight: its job, its completion, and where its hook leaves what it saw.
struct InFlight<J, S> {
    job: J,
    completion: Arc<Completion>,
    seen: Arc<Mutex<Option<S>>>,
}

/// Runs requests pulled from `next` on their pools, at most `slots` at a time (at least one),
/// calling `on_result(job, result, seen)` on the calling thread as each finishes, in completion
/// order; `seen` is what `hook` observed around the request's window (`None` where the request
/// never ran: it could not be submitted, e.g. [`PoolError::ShutDown`] or
/// [`PoolError::Unavailable`]).
///
/// `next` is called on the calling thread each time a slot is free, never while `on_result`
/// runs; after it returns [`Pull::Done`] it is not called again, and `run_pulled` returns once
/// the requests in flight have finished. A request that fails (crash, timeout, a worker that
/// cannot start) is a result like any other: the other requests and the pools carry on.
///
/// ```no_run
/// use tunebox_pool::{NoHook, PoolConfig, Pull, TuningProcessPool, run_pulled};
/// use tunebox_process::ProcessConfig;
/// use tunebox_protocol::{BenchmarkRequest, DiagnosticTask};
///
/// // The worker program (`cargo build --release -p tunebox-worker`), or a program of one's own
/// // that calls `tunebox_worker::run_if_worker` first.
/// let worker = ProcessConfig::new().worker("target/release/tunebox-worker");
/// let pool = TuningProcessPool::new(PoolConfig::new().max_workers(2).process_config(worker))?;
/// let mut todo = vec![5, 1, 3];
/// let mut done = Vec::new();
/// run_pulled(
///     pool.size(),
///     &std::sync::Arc::new(NoHook),
///     || match todo.pop() {
///         Some(ms) => Pull::Request {
///             job: ms,
///             pool: &pool,
///             request: BenchmarkRequest::new(DiagnosticTask::Sleep { ms }),
///             timeout: None,
///         },
///         None => Pull::Done,
///     },
///     |ms, result, _seen| done.push((ms, result.is_ok())),
/// );
/// assert_eq!(done.len(), 3);
/// # Ok::<(), tunebox_pool::PoolError>(())
/// ```
pub fn run_pulled<'p, J, H: WindowHook>(
    slots: usize,
    hook: &Arc<H>,
    mut next: impl FnMut() -> Pull<'p, J>,
    mut on_result: impl FnMut(J, TaskResult, Option<H::Seen>),
) {
    let slots = slots.max(1);
    let (done_tx, done_rx) = mpsc::channel();
    let mut in_flight: Vec<Option<InFlight<J, H::Seen>>> = Vec::new();
    let mut running = 0;
    let mut exhausted = false;
    loop {
        let mut wait = None;
        while running < slots && !exhausted && wait.is_none() {
            match next() {
                Pull::Request {
                    job,
                    pool,
                    request,
                    timeout,
                } => {
                    if timeout.is_some_and(|t| t.is_zero()) {
                        let place = "Pull::Request::timeout";
                        on_result(job, Err(PoolError::ZeroTimeout { place }), None);
                        continue;
                    }
                    let index = free_index(&mut in_flight);
                    let seen = Arc::new(Mutex::new(None));
                    let around = around(hook, &seen);
                    let notify = Some((done_tx.clone(), index));
                    match pool.engine().submit(request, timeout, notify, Some(around)) {
                        Ok(completion) => {
                            in_flight[index] = Some(InFlight {
                                job,
                                completion,
                                seen,
                            });
                            running += 1;
                        }
                        Err(e) => on_result(job, Err(e), None),
                    }
                }
                Pull::Wait(d) => wait = Some(d),
                Pull::Done => exhausted = true,
            }
        }
        if running == 0 {
            match wait {
                Some(d) => std::thread::sleep(d),
                None if exhausted => return,
                None => {}
            }
            continue;
        }
        let first = match wait {
            Some(d) => match done_rx.recv_timeout(d) {
                Ok(index) => index,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => unreachable!("run_pulled holds a sender"),
            },
            None => done_rx.recv().expect("run_pulled holds a sender"),
        };
        // Drain what is ready before pulling again: one wake-up serves many completions.
        for index in std::iter::once(first).chain(done_rx.try_iter()) {
            let Some(done) = in_flight[index].take() else {
                continue;
            };
            running -= 1;
            let result = done
                .completion
                .take(None)
                .expect("a completion that notified holds its result");
            let seen = done
                .seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            on_result(done.job, result, seen);
        }
    }
}

/// The index of a free entry of `in_flight` (appending one if none is free).
fn free_index<T>(in_flight: &mut Vec<Option<T>>) -> usize {
    match in_flight.iter().position(Option::is_none) {
        Some(index) => index,
        None => {
            in_flight.push(None);
            in_flight.len() - 1
        }
    }
}

/// The engine's [`Around`] for one request: `hook` before and after the measurement, what it
/// saw left in `seen`.
fn around<H: WindowHook>(hook: &Arc<H>, seen: &Arc<Mutex<Option<H::Seen>>>) -> Around {
    let (hook, seen) = (Arc::clone(hook), Arc::clone(seen));
    Box::new(move |measure: &mut dyn FnMut() -> TaskResult| {
        let mark = hook.before();
        let result = measure();
        let observed = hook.after(mark, &result);
        *seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(observed);
        result
    })
}
