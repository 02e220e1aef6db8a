//! `run_pulled`: requests handed out as workers free up, against the real worker binary.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tunebox_pool::{
    PoolConfig, PoolError, Pull, Status, TuningProcessPool, WindowHook, run_pulled,
};
use tunebox_protocol::{BenchmarkResult, DiagnosticTask};

use crate::util::{config, diag, pool};

/// Counts the windows running at once, from the pool's worker threads, and says how long each
/// took between its `before` and `after`.
#[derive(Default)]
struct Concurrency {
    running: AtomicUsize,
    most: AtomicUsize,
}

impl WindowHook for Concurrency {
    type Mark = Instant;
    type Seen = (Duration, std::thread::ThreadId);

    fn before(&self) -> Instant {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        Instant::now()
    }

    fn after(
        &self,
        mark: Instant,
        _: &Result<BenchmarkResult, PoolError>,
    ) -> (Duration, std::thread::ThreadId) {
        self.running.fetch_sub(1, Ordering::SeqCst);
        (mark.elapsed(), std::thread::current().id())
    }
}

#[test]
fn pulled_requests_run_at_most_slots_at_once_and_each_comes_back_with_what_its_hook_saw() {
    let pool = pool(3, Duration::from_secs(30));
    let hook = Arc::new(Concurrency::default());
    let mut todo: Vec<u64> = vec![30, 30, 30, 30, 30, 30];
    let mut waits = 3;
    let mut results = Vec::new();
    run_pulled(
        2,
        &hook,
        || {
            // The source is not always ready: a few waits come first, as while compiling.
            if waits > 0 {
                waits -= 1;
                return Pull::Wait(Duration::from_millis(5));
            }
            match todo.pop() {
                Some(ms) => Pull::Request {
                    job: ms,
                    pool: &pool,
                    request: diag(DiagnosticTask::Sleep { ms }),
                    timeout: None,
                },
                None => Pull::Done,
            }
        },
        |job, result, seen| results.push((job, result, seen)),
    );
    assert_eq!(results.len(), 6);
    assert_eq!(
        hook.most.load(Ordering::SeqCst),
        2,
        "two slots, so two at once"
    );
    let caller = std::thread::current().id();
    for (_, result, seen) in &results {
        assert!(result.is_ok(), "{result:?}");
        let (took, thread) = seen.expect("every request ran, so its hook saw it");
        // The hook ran on the pool's worker thread, around the 30 ms sleep.
        assert_ne!(thread, caller);
        assert!(took >= Duration::from_millis(30), "{took:?}");
    }
}

#[test]
fn a_request_s_own_timeout_replaces_the_pool_s_and_a_crash_costs_only_its_own_result() {
    let pool = pool(2, Duration::from_secs(60));
    let mut todo = vec![
        (0, DiagnosticTask::Sleep { ms: 1 }, None),
        (1, DiagnosticTask::Hang, Some(Duration::from_millis(300))),
        (2, DiagnosticTask::Segfault, None),
        (3, DiagnosticTask::Sleep { ms: 1 }, None),
    ];
    todo.reverse();
    let started = Instant::now();
    let mut statuses = vec![None; 4];
    run_pulled(
        2,
        &Arc::new(tunebox_pool::NoHook),
        || match todo.pop() {
            Some((job, task, timeout)) => Pull::Request {
                job,
                pool: &pool,
                request: diag(task),
                timeout,
            },
            None => Pull::Done,
        },
        |job, result, _| statuses[job] = Some(Status::of(&result)),
    );
    assert_eq!(
        statuses,
        [
            Some(Status::Ok),
            Some(Status::Timeout),
            Some(Status::Crashed),
            Some(Status::Ok)
        ]
    );
    // The hang ended at its own 300 ms, not the pool's 60 s (generous: a busy machine).
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn one_call_measures_on_a_pool_and_its_sibling_and_stops_pulling_at_done() {
    let first = pool(1, Duration::from_secs(30));
    let sibling = first
        .sibling(PoolConfig::new().max_workers(1).process_config(config()))
        .unwrap();
    let mut pulled = 0;
    let mut pids = Vec::new();
    run_pulled(
        2,
        &Arc::new(tunebox_pool::NoHook),
        || {
            pulled += 1;
            match pulled {
                1..=4 => Pull::Request {
                    job: pulled,
                    pool: if pulled % 2 == 0 { &sibling } else { &first },
                    request: diag(DiagnosticTask::Pid),
                    timeout: None,
                },
                _ => Pull::Done,
            }
        },
        |job, result, _| pids.push((job % 2, result.map(|r| pid_of_result(&r)))),
    );
    assert_eq!(pulled, 5, "nothing is pulled after Done");
    assert_eq!(pids.len(), 4);
    let pid_of = |pool: u32| -> std::collections::HashSet<String> {
        pids.iter()
            .filter(|(p, _)| *p == pool)
            .map(|(_, r)| r.as_ref().unwrap().clone())
            .collect()
    };
    assert_eq!(pid_of(0).len(), 1, "the sibling's one worker");
    assert_eq!(pid_of(1).len(), 1, "the first pool's one worker");
    assert!(pid_of(0).is_disjoint(&pid_of(1)));
}

#[test]
fn a_request_a_closed_pool_refuses_comes_back_as_its_error() {
    let pool = pool(1, Duration::from_secs(30));
    pool.shutdown(Duration::from_millis(100));
    let mut handed = false;
    let mut results = Vec::new();
    run_pulled(
        1,
        &Arc::new(tunebox_pool::NoHook),
        || {
            if handed {
                return Pull::Done;
            }
            handed = true;
            Pull::Request {
                job: (),
                pool: &pool,
                request: diag(DiagnosticTask::Sleep { ms: 1 }),
                timeout: None,
            }
        },
        |(), result, seen| results.push((result, seen)),
    );
    assert_eq!(results.len(), 1);
    assert!(
        matches!(results[0].0, Err(PoolError::ShutDown)),
        "{:?}",
        results[0].0
    );
    assert!(results[0].1.is_none(), "it never ran");
}

/// A timeout of zero would kill every task as it starts: a request's own is refused before it
/// reaches a worker (the next request still runs), and a pool's is refused when it starts.
#[test]
fn a_timeout_of_zero_is_refused_and_the_next_request_runs() {
    let pool = pool(1, Duration::from_secs(30));
    let mut timeouts = vec![None, Some(Duration::ZERO)];
    let mut results = Vec::new();
    run_pulled(
        1,
        &Arc::new(tunebox_pool::NoHook),
        || match timeouts.pop() {
            Some(timeout) => Pull::Request {
                job: timeout,
                pool: &pool,
                request: diag(DiagnosticTask::Sleep { ms: 1 }),
                timeout,
            },
            None => Pull::Done,
        },
        |timeout, result, _| results.push((timeout, result)),
    );
    assert_eq!(results.len(), 2);
    assert!(
        matches!(
            &results[0],
            (Some(_), Err(PoolError::ZeroTimeout { place })) if place.contains("Pull::Request")
        ),
        "{:?}",
        results[0]
    );
    assert!(matches!(&results[1], (None, Ok(_))), "{:?}", results[1]);
    let refused = TuningProcessPool::new(
        PoolConfig::new()
            .max_workers(1)
            .timeout(Duration::ZERO)
            .process_config(config()),
    );
    let Err(error) = refused else {
        panic!("a pool with a zero timeout is refused");
    };
    assert!(
        matches!(error, PoolError::ZeroTimeout { place } if place.contains("PoolConfig")),
        "{error}"
    );
    assert!(error.to_string().contains("60 s"), "{error}");
}

/// The worker's pid a [`DiagnosticTask::Pid`] returned.
fn pid_of_result(result: &BenchmarkResult) -> String {
    String::from_utf8(result.outputs[0].bytes.to_vec()).unwrap()
}

/// Panics in `before` on the second window it sees, and in `after` on the fourth.
#[derive(Default)]
struct Panicky {
    seen: AtomicUsize,
}

impl WindowHook for Panicky {
    type Mark = usize;
    type Seen = ();

    fn before(&self) -> usize {
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        assert_ne!(n, 2, "the hook's own bug, before");
        n
    }

    fn after(&self, n: usize, _: &Result<BenchmarkResult, PoolError>) {
        assert_ne!(n, 4, "the hook's own bug, after");
    }
}

#[test]
fn a_hook_that_panics_costs_its_request_and_not_the_pool() {
    let pool = pool(1, Duration::from_secs(30));
    let mut todo: Vec<usize> = (0..5).rev().collect();
    let mut errors = Vec::new();
    let mut ok = 0;
    run_pulled(
        1,
        &Arc::new(Panicky::default()),
        || match todo.pop() {
            Some(job) => Pull::Request {
                job,
                pool: &pool,
                request: diag(DiagnosticTask::Sleep { ms: 1 }),
                timeout: None,
            },
            None => Pull::Done,
        },
        |job, result, _| match result {
            Ok(_) => ok += 1,
            Err(e) => errors.push((job, e.to_string())),
        },
    );
    assert_eq!(ok, 3, "{errors:?}");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].1.contains("the window hook panicked") && errors[0].1.contains("before"),
        "{errors:?}"
    );
    assert!(errors[1].1.contains("after"), "{errors:?}");
    // The pool still measures.
    assert!(pool.benchmark(&[diag(DiagnosticTask::Sleep { ms: 1 })])[0].is_ok());
}
