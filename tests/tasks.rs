//! Task kinds of one's own ([`TestTask`], registered in the test worker) through
//! `TuningProcess`, `PoolExecutor` and `TuningProcessPool`: typed results, and the same
//! error/crash/timeout distinctions as the built-in kernels.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tunebox_pool::{MapResult, PoolConfig, PoolExecutor, StatusKind, TuningProcessPool};
use tunebox_process::{ProcessError, TuningProcess};
use tunebox_protocol::{
    BenchError, DType, SharedBuffer, Task, TaskRequest, TensorSpec, TimingConfig,
};

use crate::task_kinds::{TestOutput, TestTask};
use crate::util::config;

const LONG: Duration = Duration::from_secs(30);

fn quick() -> TimingConfig {
    TimingConfig::default().warmup_ms(1.0).rep_ms(5.0)
}

#[test]
fn typed_results_come_back_from_one_worker() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    assert_eq!(
        worker.run_task(TestTask::Square(12), LONG).unwrap(),
        TestOutput::Number(144.0)
    );
    // A value above the inline limit travels as shared memory, intact.
    let TestOutput::Blob(blob) = worker.run_task(TestTask::Blob(3 << 20), LONG).unwrap() else {
        panic!("a blob");
    };
    assert_eq!(blob.len(), 3 << 20);
    assert!(blob.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    // Tensors from the caller's shared memory, read as typed slices.
    let values: Vec<f64> = (0..100_000).map(f64::from).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let buffer = SharedBuffer::from_slice(&bytes).unwrap();
    let request = TaskRequest::new(TestTask::SumTensor)
        .tensor(TensorSpec::new("x", DType::F64, [100_000]).data(buffer.share()));
    assert_eq!(
        worker.run_task(request, LONG).unwrap(),
        TestOutput::Number(values.iter().sum())
    );
    // The wrong element type is the task's error, and the worker lives.
    let pid = worker.pid();
    let request =
        TaskRequest::new(TestTask::SumTensor).tensor(TensorSpec::new("x", DType::F32, [4]).ones());
    let err = worker.run_task(request, LONG).unwrap_err();
    assert!(
        err.to_string()
            .contains("tensor `x` holds f32 elements, not f64"),
        "{err}"
    );
    let timed = TaskRequest::new(TestTask::Timed).timing(quick());
    assert!(matches!(worker.run_task(timed, LONG).unwrap(), TestOutput::Reps(r) if r >= 10));
    assert_eq!(worker.pid(), pid);
    assert_eq!(worker.restarts(), 0);
}

#[test]
fn panics_crashes_and_hangs_of_a_task_kind_are_told_apart() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let pid = worker.pid().unwrap();
    let err = worker.run_task(TestTask::Panic, LONG).unwrap_err();
    assert!(
        matches!(err.bench_error(), Some(BenchError::Panic { message }) if message.contains("on purpose")),
        "{err}"
    );
    assert_eq!(worker.pid(), Some(pid), "a caught panic keeps the worker");
    match worker.run_task(TestTask::Abort, LONG).unwrap_err() {
        ProcessError::WorkerCrashed {
            pid: crashed,
            signal,
            ..
        } => {
            assert_eq!(crashed, pid);
            assert_eq!(signal, Some(libc::SIGABRT));
        }
        other => panic!("expected a crash, got {other}"),
    }
    let err = worker
        .run_task(TestTask::Hang, Duration::from_millis(500))
        .unwrap_err();
    assert!(matches!(err, ProcessError::Timeout { .. }), "{err}");
    assert_eq!(
        worker.run_task(TestTask::Square(3), LONG).unwrap(),
        TestOutput::Number(9.0)
    );
}

/// A task kind no worker has a backend for.
#[derive(Serialize, Deserialize)]
struct Unregistered;

impl Task for Unregistered {
    const BACKEND: &'static str = "nobody-runs-this";
    type Output = ();
}

#[test]
fn a_worker_without_the_backend_names_the_ones_it_has() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let err = worker.run_task(Unregistered, LONG).unwrap_err();
    match err.bench_error() {
        Some(BenchError::UnknownBackend { backend, available }) => {
            assert_eq!(backend, "nobody-runs-this");
            assert!(available.iter().any(|b| b == "test-tasks"), "{available:?}");
            assert!(available.iter().any(|b| b == "cpu"), "{available:?}");
        }
        _ => panic!("expected UnknownBackend, got {err}"),
    }
}

#[test]
fn both_pool_faces_run_task_kinds_in_order() {
    let pool_config = PoolConfig::new()
        .max_workers(2)
        .timeout(Duration::from_secs(2))
        .process_config(config());
    let executor = PoolExecutor::new(pool_config.clone()).unwrap();
    let tasks = [
        TestTask::Square(2),
        TestTask::Panic,
        TestTask::Abort,
        TestTask::Hang,
        TestTask::Square(5),
    ];
    let results = executor.map_tasks(tasks.clone());
    let statuses: Vec<StatusKind> = results.iter().map(MapResult::status).collect();
    assert_eq!(
        statuses,
        [
            StatusKind::Complete,
            StatusKind::Exception,
            StatusKind::Crashed,
            StatusKind::Timeout,
            StatusKind::Complete
        ]
    );
    assert_eq!(results[4].value(), Some(&TestOutput::Number(25.0)));
    let handle = executor.submit_task(TestTask::Square(7)).unwrap();
    assert_eq!(handle.wait().unwrap(), TestOutput::Number(49.0));
    // A task's own timeout, shorter than the executor's 2 s.
    let started = std::time::Instant::now();
    let handle = executor
        .submit_task_with_timeout(TestTask::Hang, Duration::from_millis(300))
        .unwrap();
    let err = handle.wait().unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() < Duration::from_millis(1900), "{err}");
    executor.shutdown(true);

    let pool = TuningProcessPool::new(pool_config).unwrap();
    let results = pool.run_tasks((1..=6).map(TestTask::Square));
    let squares: Vec<TestOutput> = results.into_iter().map(Result::unwrap).collect();
    let expected: Vec<TestOutput> = (1..=6)
        .map(|n| TestOutput::Number(f64::from(n * n)))
        .collect();
    assert_eq!(squares, expected);
    // Inductor's convention over untyped results: a task that timed nothing is never the best.
    let requests = [
        TaskRequest::new(TestTask::Timed)
            .timing(quick())
            .encode()
            .unwrap(),
        TaskRequest::new(TestTask::Square(2)).encode().unwrap(),
    ];
    let timings = pool.benchmark_or_inf(&requests);
    assert!(timings[0].is_finite(), "{timings:?}");
    assert_eq!(timings[1], f64::INFINITY);
}
