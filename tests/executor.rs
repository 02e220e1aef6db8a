//! `PoolExecutor` and `TuningProcessPool` lifecycle against the real worker binary: ports of
//! TVM's `test_popen_pool.py`, Inductor's `TestTuningProcessPool` and procspawn's
//! `tests/test_pool.rs`, plus recycling, initializer failure, outside kills and shutdown.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use tunebox_pool::{Devices, PoolConfig, PoolError, PoolExecutor, StatusKind, TuningProcessPool};
use tunebox_process::{InitRequest, ProcessError};
use tunebox_protocol::{BenchmarkResult, DiagnosticTask};

use crate::util::{LONG, bytes, config, diag, is_dead, kill, pid_exists, wait_gone};

fn executor(workers: usize, timeout: Duration) -> PoolExecutor {
    PoolExecutor::new(
        PoolConfig::new()
            .max_workers(workers)
            .timeout(timeout)
            .process_config(config()),
    )
    .unwrap()
}

fn echo(value: u8) -> tunebox_protocol::BenchmarkRequest {
    diag(DiagnosticTask::Echo {
        bytes: bytes(&[value]),
    })
}

fn pid_of(result: &BenchmarkResult) -> u32 {
    std::str::from_utf8(&result.outputs[0].bytes)
        .unwrap()
        .parse()
        .unwrap()
}

fn live_pids(pids: &[Option<u32>]) -> Vec<u32> {
    pids.iter()
        .flatten()
        .copied()
        .filter(|&p| !is_dead(p))
        .collect()
}

// --- TVM test_popen_pool.py ---

#[test]
fn tvm_timeout_crash_and_value() {
    let ex = executor(2, Duration::from_millis(500));
    let results = ex.map_with_error_catching([
        diag(DiagnosticTask::Sleep { ms: 5000 }),
        diag(DiagnosticTask::Abort),
        echo(7),
    ]);
    assert_eq!(results[0].status(), StatusKind::Timeout);
    assert!(results[0].error().unwrap().is_timeout());
    assert_eq!(results[1].status(), StatusKind::Crashed);
    assert_eq!(results[2].status(), StatusKind::Complete);
    assert!(results[2].value().unwrap().outputs[0].bytes == vec![7]);
}

#[test]
fn tvm_ordered_map_with_error_catching_over_100_items() {
    let ex = executor(2, LONG);
    let requests = (0..100u8).map(|i| {
        if i % 10 == 3 {
            diag(DiagnosticTask::Fail {
                message: format!("item {i}"),
            })
        } else {
            echo(i)
        }
    });
    let results = ex.map_with_error_catching(requests);
    assert_eq!(results.len(), 100);
    for (i, result) in results.iter().enumerate() {
        if i % 10 == 3 {
            assert_eq!(result.status(), StatusKind::Exception, "{i}");
            assert!(
                result
                    .error()
                    .unwrap()
                    .to_string()
                    .contains(&format!("item {i}"))
            );
        } else {
            assert_eq!(result.status(), StatusKind::Complete, "{i}");
            assert!(
                result.value().unwrap().outputs[0].bytes == vec![i as u8],
                "{i}"
            );
        }
    }
}

#[test]
fn tvm_recycling_one_worker_two_uses_ten_tasks_five_pids() {
    let ex = PoolExecutor::new(
        PoolConfig::new()
            .max_workers(1)
            .maximum_process_uses(Some(2))
            .timeout(LONG)
            .process_config(config()),
    )
    .unwrap();
    let results = ex.map_with_error_catching((0..10).map(|_| diag(DiagnosticTask::Pid)));
    let mut uses: HashMap<u32, usize> = HashMap::new();
    for result in &results {
        *uses.entry(pid_of(result.value().unwrap())).or_default() += 1;
    }
    assert_eq!(uses.len(), 5, "{uses:?}");
    assert!(uses.values().all(|&n| n == 2), "{uses:?}");
    // Every retired worker was reaped.
    let current = ex.worker_pids()[0];
    for &pid in uses.keys().filter(|&&p| Some(p) != current) {
        assert!(
            wait_gone(pid, Duration::from_secs(2)).is_some(),
            "pid {pid} left behind"
        );
    }
}

#[test]
fn tvm_initializer_with_and_without_recycling() {
    for maximum in [None, Some(1)] {
        let ex = PoolExecutor::new(
            PoolConfig::new()
                .max_workers(2)
                .maximum_process_uses(maximum)
                .initializer(InitRequest::new(diag(DiagnosticTask::Remember {
                    bytes: bytes(b"initialized"),
                })))
                .process_config(config()),
        )
        .unwrap();
        let results = ex.map_with_error_catching((0..6).map(|_| diag(DiagnosticTask::Recall)));
        for result in results {
            assert!(result.into_result().unwrap().outputs[0].bytes == b"initialized".to_vec());
        }
    }
}

// --- Inductor TestTuningProcessPool ---

#[test]
fn inductor_crash_and_timeout_are_inf_then_next_value() {
    let pool = TuningProcessPool::new(
        PoolConfig::new()
            .devices(Devices::Cpu(1))
            .timeout(Duration::from_millis(500))
            .process_config(config()),
    )
    .unwrap();
    let timings = pool.benchmark_or_inf(&[
        diag(DiagnosticTask::Segfault),
        diag(DiagnosticTask::Sleep { ms: 3 }),
        diag(DiagnosticTask::Hang),
        diag(DiagnosticTask::Sleep { ms: 3 }),
    ]);
    assert_eq!(timings[0], f64::INFINITY);
    assert!(timings[1].is_finite() && timings[1] >= 3.0);
    assert_eq!(timings[2], f64::INFINITY);
    assert!(timings[3].is_finite() && timings[3] >= 3.0);
}

#[test]
fn inductor_two_devices_each_worker_sees_its_own_token() {
    let pool = TuningProcessPool::new(
        PoolConfig::new()
            .devices(Devices::List(vec![
                "GPU-fake-a".into(),
                "GPU-fake-b".into(),
            ]))
            .timeout(LONG)
            .process_config(config()),
    )
    .unwrap();
    assert_eq!(pool.size(), 2);
    // Each choice returns its own value, whichever device ran it.
    let results = pool.benchmark(&(0..20u8).map(echo).collect::<Vec<_>>());
    for (i, result) in results.iter().enumerate() {
        assert!(result.as_ref().unwrap().outputs[0].bytes == vec![i as u8]);
    }
    // Both workers took part, each pinned to its token.
    // (A busy machine may let one worker take a whole batch: a few more batches then.)
    let mut seen = HashSet::new();
    for _ in 0..50 {
        let results = pool.benchmark(
            &(0..4)
                .map(|_| {
                    diag(DiagnosticTask::Spin {
                        ms: 20,
                        block_signals: false,
                    })
                })
                .chain(
                    std::iter::repeat_with(|| {
                        diag(DiagnosticTask::EnvVar {
                            name: "CUDA_VISIBLE_DEVICES".into(),
                        })
                    })
                    .take(4),
                )
                .collect::<Vec<_>>(),
        );
        for result in &results[4..] {
            seen.insert(
                String::from_utf8(result.as_ref().unwrap().outputs[0].bytes.to_vec()).unwrap(),
            );
        }
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(
        seen,
        HashSet::from(["GPU-fake-a".to_owned(), "GPU-fake-b".to_owned()])
    );
}

// --- procspawn tests/test_pool.rs ---

#[test]
fn procspawn_every_fourth_task_panics_twelve_succeed() {
    let ex = executor(4, LONG);
    let results = ex.map_with_error_catching((0..16u8).map(|i| {
        if i % 4 == 0 {
            diag(DiagnosticTask::Panic {
                message: format!("task {i}"),
            })
        } else {
            echo(i)
        }
    }));
    assert_eq!(
        results
            .iter()
            .filter(|r| r.status() == StatusKind::Complete)
            .count(),
        12
    );
    let panics = results.iter().filter(|r| {
        matches!(
            r.error().and_then(PoolError::bench_error),
            Some(tunebox_protocol::BenchError::Panic { .. })
        )
    });
    assert_eq!(panics.count(), 4);
}

#[test]
fn procspawn_overload_many_more_tasks_than_workers() {
    let ex = executor(2, LONG);
    let handles: Vec<_> = (0..200u8).map(|i| ex.submit(echo(i)).unwrap()).collect();
    for (i, handle) in handles.into_iter().enumerate() {
        assert!(handle.wait().unwrap().outputs[0].bytes == vec![i as u8]);
    }
}

#[test]
fn procspawn_timeout_then_42() {
    let ex = executor(1, Duration::from_millis(300));
    let err = ex
        .submit(diag(DiagnosticTask::Hang))
        .unwrap()
        .wait()
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let value = ex.submit(echo(42)).unwrap().wait().unwrap();
    assert!(value.outputs[0].bytes == vec![42]);
}

// --- added cases ---

#[test]
fn the_next_task_starts_soon_after_a_crash() {
    let ex = executor(1, LONG);
    let crash = ex.submit(diag(DiagnosticTask::Abort)).unwrap();
    let next = ex.submit(echo(1)).unwrap();
    assert!(crash.wait().unwrap_err().is_crash());
    let crashed_at = Instant::now();
    next.wait().unwrap();
    // Replacing the worker takes a few ms; the bound is generous for a loaded CI machine.
    assert!(
        crashed_at.elapsed() < Duration::from_millis(500),
        "{:?}",
        crashed_at.elapsed()
    );
}

#[test]
fn initializer_failure_at_construction_is_reported_quickly() {
    let start = Instant::now();
    let err = PoolExecutor::new(
        PoolConfig::new()
            .max_workers(2)
            .initializer(InitRequest::new(diag(DiagnosticTask::Fail {
                message: "no device".into(),
            })))
            .process_config(config()),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            PoolError::Process(ProcessError::InitializerFailed { .. })
        ),
        "{err:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn an_initializer_that_starts_failing_stops_respawns_and_fails_queued_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("fail-now");
    let ex = PoolExecutor::new(
        PoolConfig::new()
            .max_workers(1)
            .timeout(LONG)
            .initializer(InitRequest::new(diag(DiagnosticTask::FailIfExists {
                path: marker.to_str().unwrap().into(),
            })))
            .process_config(config()),
    )
    .unwrap();
    std::fs::write(&marker, "").unwrap();
    // The crash forces a restart, whose initializer now fails every time.
    let crash = ex.submit(diag(DiagnosticTask::Abort)).unwrap();
    let queued: Vec<_> = (0..5).map(|i| ex.submit(echo(i)).unwrap()).collect();
    let start = Instant::now();
    assert!(crash.wait().unwrap_err().is_crash());
    for handle in queued {
        let err = handle.wait().unwrap_err();
        assert!(matches!(err, PoolError::Unavailable { .. }), "{err:?}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let err = ex.submit(echo(9)).unwrap_err();
    assert!(matches!(err, PoolError::Unavailable { .. }), "{err:?}");
    assert!(ex.worker_pids()[0].is_none(), "no worker left running");
}

#[test]
fn a_worker_killed_from_outside_mid_task_costs_only_its_task() {
    let ex = executor(2, LONG);
    let tasks: Vec<_> = (0..2)
        .map(|_| ex.submit(diag(DiagnosticTask::Sleep { ms: 2000 })).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let before = live_pids(&ex.worker_pids());
    assert_eq!(before.len(), 2);
    kill(before[0], 9);
    let outcomes: Vec<_> = tasks.into_iter().map(|t| t.wait()).collect();
    assert_eq!(outcomes.iter().filter(|r| r.is_ok()).count(), 1);
    assert_eq!(
        outcomes
            .iter()
            .filter(|r| r.as_ref().is_err_and(PoolError::is_crash))
            .count(),
        1
    );
    // Back to two live workers, the killed one replaced.
    let start = Instant::now();
    loop {
        let now = live_pids(&ex.worker_pids());
        if now.len() == 2 && !now.contains(&before[0]) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "not replaced: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn shutdown_with_busy_and_idle_workers() {
    let pool = TuningProcessPool::new(
        PoolConfig::new()
            .devices(Devices::Cpu(4))
            .timeout(LONG)
            .process_config(config()),
    )
    .unwrap();
    let pids = live_pids(&pool.worker_pids());
    assert_eq!(pids.len(), 4);
    let busy = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            pool.benchmark(&[
                diag(DiagnosticTask::Sleep { ms: 30_000 }),
                diag(DiagnosticTask::Sleep { ms: 30_000 }),
            ])
        });
        std::thread::sleep(Duration::from_millis(300));
        let grace = Duration::from_millis(500);
        let start = Instant::now();
        pool.shutdown(grace);
        let took = start.elapsed();
        assert!(took < grace + Duration::from_millis(500), "{took:?}");
        pool.shutdown(grace); // twice is fine
        running.join().unwrap()
    });
    for result in busy {
        assert!(matches!(result, Err(PoolError::ShutDown)), "{result:?}");
    }
    for pid in pids {
        assert!(is_dead(pid), "worker {pid} survived shutdown");
    }
    let after = pool.benchmark(&[echo(1)]);
    assert!(matches!(after[0], Err(PoolError::ShutDown)));
}

#[test]
fn drop_with_tasks_in_flight_resolves_every_handle_and_reaps() {
    let ex = executor(2, LONG);
    let pids = live_pids(&ex.worker_pids());
    let handles: Vec<_> = (0..6)
        .map(|_| {
            ex.submit(diag(DiagnosticTask::Sleep { ms: 30_000 }))
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    drop(ex);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    for handle in handles {
        let err = handle
            .wait_timeout(Duration::from_secs(1))
            .expect("resolved")
            .unwrap_err();
        assert!(matches!(err, PoolError::ShutDown), "{err:?}");
    }
    for pid in pids {
        assert!(is_dead(pid), "worker {pid} survived the drop");
    }
}

#[test]
fn submit_after_shutdown_is_refused_and_starts_nothing() {
    let ex = executor(1, LONG);
    let pid = ex.worker_pids()[0].unwrap();
    ex.shutdown(true);
    assert!(is_dead(pid));
    let err = ex.submit(echo(1)).unwrap_err();
    assert!(matches!(err, PoolError::ShutDown), "{err:?}");
    assert_eq!(ex.worker_pids(), vec![None]);
}

#[test]
fn shutdown_with_wait_finishes_queued_tasks() {
    let ex = executor(1, LONG);
    let handles: Vec<_> = (0..5u8).map(|i| ex.submit(echo(i)).unwrap()).collect();
    ex.shutdown(true);
    for (i, handle) in handles.into_iter().enumerate() {
        assert!(handle.wait().unwrap().outputs[0].bytes == vec![i as u8]);
    }
}

#[test]
fn cancel_a_queued_and_a_running_task() {
    let ex = executor(1, LONG);
    let running = ex
        .submit(diag(DiagnosticTask::Sleep { ms: 30_000 }))
        .unwrap();
    let queued = ex.submit(echo(1)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(queued.cancel());
    assert!(running.cancel());
    assert!(matches!(running.wait(), Err(PoolError::Cancelled)));
    assert!(matches!(queued.wait(), Err(PoolError::Cancelled)));
    // The worker was replaced and serves again.
    assert!(ex.submit(echo(2)).unwrap().wait().unwrap().outputs[0].bytes == vec![2]);
    let finished = ex.submit(echo(3)).unwrap();
    let value = finished.wait_timeout(LONG).unwrap().unwrap();
    assert!(value.outputs[0].bytes == vec![3]);
}

#[test]
fn wait_timeout_returns_the_handle_while_running() {
    let ex = executor(1, LONG);
    let handle = ex.submit(diag(DiagnosticTask::Sleep { ms: 300 })).unwrap();
    let handle = handle
        .wait_timeout(Duration::from_millis(10))
        .expect_err("still running");
    assert!(!handle.is_finished());
    assert!(handle.wait_timeout(LONG).unwrap().is_ok());
}

#[test]
fn a_gpu_pool_without_a_device_mask_counts_the_gpus_through_a_probe_worker() {
    if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some() {
        return; // The mask decides; covered by the device-token tests.
    }
    let start = Instant::now();
    match TuningProcessPool::new(
        PoolConfig::new()
            .devices(Devices::Visible)
            .process_config(config()),
    ) {
        // A machine with GPUs and a CUDA backend: one worker per GPU.
        Ok(pool) => assert!(pool.size() >= 1),
        // This machine has none: a clear error, not a panic, and soon.
        Err(PoolError::NoDevices | PoolError::DeviceCountUnknown { .. }) => {}
        Err(other) => panic!("unexpected error: {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn a_gpu_pool_of_a_worker_with_only_task_kinds_says_it_has_no_gpu_backend() {
    if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some() {
        return; // The mask decides, not the worker.
    }
    let err = TuningProcessPool::new(
        PoolConfig::new()
            .devices(Devices::Visible)
            .process_config(config().env("TUNEBOX_TEST_REGISTRY", "tasks")),
    )
    .map(|pool| pool.size())
    .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(&err, PoolError::NoGpuInWorker { backends } if backends.contains(&"test-tasks".to_owned())),
        "{err:?}"
    );
    assert!(
        !message.contains("hides every device")
            && message.contains("CUDA_VISIBLE_DEVICES is unset")
            && message.contains("no GPU backend")
            && message.contains("Devices::Cpu"),
        "{message}"
    );
}

#[test]
fn no_task_is_blamed_for_its_predecessor_ending_the_worker() {
    let ex = executor(2, LONG);
    let results = ex.map_with_error_catching(
        (0..1000).map(|_| diag(DiagnosticTask::ExitAfterReply { code: 0 })),
    );
    let failed: Vec<String> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.status() != StatusKind::Complete)
        .map(|(i, r)| format!("task {i}: {:?} {:?}", r.status(), r.error()))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 1000 tasks failed; first: {:?}",
        failed.len(),
        failed.first()
    );
}

/// Kills worker `victim` of a pool while it is idle, then watches `worker_pids` until the dead
/// worker is reaped (gone from /proc, not a zombie) and replaced, checking on every look that a
/// pid already dead is never reported. Returns how long the reap and the replacement took.
fn kill_idle_and_watch(
    worker_pids: impl Fn() -> Vec<Option<u32>>,
    victim: u32,
) -> (Duration, Duration) {
    let workers = worker_pids().len();
    kill(victim, 9);
    let start = Instant::now();
    let (mut reaped, mut replaced) = (None, None);
    while reaped.is_none() || replaced.is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "after 5 s: reaped {reaped:?}, replaced {replaced:?}, zombie: {}, pids {:?}",
            pid_exists(victim),
            worker_pids()
        );
        let dead = is_dead(victim);
        let pids = worker_pids();
        assert!(
            !(dead && pids.contains(&Some(victim))),
            "worker_pids lists the dead worker {victim}: {pids:?}"
        );
        if reaped.is_none() && !pid_exists(victim) {
            reaped = Some(start.elapsed());
        }
        if replaced.is_none()
            && pids.iter().flatten().count() == workers
            && !pids.contains(&Some(victim))
        {
            replaced = Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    (reaped.unwrap(), replaced.unwrap())
}

#[test]
fn an_idle_worker_killed_from_outside_is_reaped_and_replaced_at_once() {
    let ex = executor(2, LONG);
    for round in 0..3 {
        let pids = live_pids(&ex.worker_pids());
        assert_eq!(pids.len(), 2);
        let (reaped, replaced) = kill_idle_and_watch(|| ex.worker_pids(), pids[round % 2]);
        eprintln!(
            "executor, idle worker killed: reaped after {reaped:?}, replaced after {replaced:?}"
        );
        // The other worker is untouched, and the pool serves on.
        assert!(ex.worker_pids().contains(&Some(pids[(round + 1) % 2])));
        assert_eq!(
            ex.submit(echo(7)).unwrap().wait().unwrap().outputs[0].bytes,
            vec![7]
        );
    }
    let pool = TuningProcessPool::new(
        PoolConfig::new()
            .devices(Devices::Cpu(2))
            .timeout(LONG)
            .process_config(config()),
    )
    .unwrap();
    let victim = pool.worker_pids()[1].unwrap();
    let (reaped, replaced) = kill_idle_and_watch(|| pool.worker_pids(), victim);
    eprintln!("pool, idle worker killed: reaped after {reaped:?}, replaced after {replaced:?}");
    assert!(
        pool.benchmark(&[echo(1), echo(2)])
            .iter()
            .all(Result::is_ok)
    );
}

/// Two threads call `shutdown(false)` at the same moment on an executor whose three workers all
/// hang: each call must return only once all three are killed and reaped.
#[test]
fn concurrent_shutdowns_both_return_after_every_worker_is_reaped() {
    for round in 0..3 {
        let ex = executor(3, LONG);
        let pids = live_pids(&ex.worker_pids());
        assert_eq!(pids.len(), 3);
        let handles: Vec<_> = (0..3)
            .map(|_| ex.submit(diag(DiagnosticTask::Hang)).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let barrier = std::sync::Barrier::new(2);
        let survivors: Vec<Vec<u32>> = std::thread::scope(|scope| {
            let callers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        ex.shutdown(false);
                        pids.iter().copied().filter(|&p| pid_exists(p)).collect()
                    })
                })
                .collect();
            callers.into_iter().map(|c| c.join().unwrap()).collect()
        });
        for (caller, left) in survivors.iter().enumerate() {
            assert!(
                left.is_empty(),
                "round {round}: shutdown #{caller} returned with workers {left:?} not reaped"
            );
        }
        for handle in handles {
            let err = handle.wait().unwrap_err();
            assert!(matches!(err, PoolError::ShutDown), "{err:?}");
        }
    }
    // The same for TuningProcessPool::shutdown, and a shutdown racing the drop that follows.
    let pool = std::sync::Arc::new(
        TuningProcessPool::new(
            PoolConfig::new()
                .devices(Devices::Cpu(3))
                .timeout(LONG)
                .process_config(config()),
        )
        .unwrap(),
    );
    let pids = live_pids(&pool.worker_pids());
    let busy = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.benchmark(&vec![diag(DiagnosticTask::Hang); 3]))
    };
    std::thread::sleep(Duration::from_millis(300));
    let other = {
        let pool = pool.clone();
        let pids = pids.clone();
        std::thread::spawn(move || {
            pool.shutdown(Duration::from_millis(200));
            pids.iter().copied().filter(|&p| pid_exists(p)).count()
        })
    };
    pool.shutdown(Duration::from_millis(200));
    let left = pids.iter().filter(|&&p| pid_exists(p)).count();
    assert_eq!(left, 0, "shutdown returned with {left} workers not reaped");
    assert_eq!(other.join().unwrap(), 0);
    assert!(
        busy.join()
            .unwrap()
            .iter()
            .all(|r| matches!(r, Err(PoolError::ShutDown)))
    );
}
