//! `TuningProcessPool` against the real worker binary.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use tunebox_pool::{PoolConfig, PoolError, Status, Tolerance, TuningProcessPool, verify_outputs};
use tunebox_protocol::DiagnosticTask;

use crate::util::{AXPY, bytes, c_request, config, diag};

fn pool(workers: usize, timeout: Duration) -> TuningProcessPool {
    TuningProcessPool::new(
        PoolConfig::new()
            .max_workers(workers)
            .timeout(timeout)
            .process_config(config()),
    )
    .unwrap()
}

#[test]
fn results_come_back_in_input_order_with_their_statuses() {
    let pool = pool(2, Duration::from_millis(500));
    let broken = "void axpy(float *x, float *y, long n) { syntax error }";
    let requests = vec![
        c_request(AXPY, "axpy", "1.0f"),
        c_request(broken, "axpy", "1.0f"),
        diag(DiagnosticTask::Abort),
        diag(DiagnosticTask::Segfault),
        diag(DiagnosticTask::Hang),
        diag(DiagnosticTask::Panic {
            message: "boom".into(),
        }),
        diag(DiagnosticTask::Echo { bytes: bytes(&[5]) }),
        c_request(AXPY, "axpy", "1.0f"),
    ];
    let seen = Mutex::new(Vec::new());
    let results = pool.benchmark_with(&requests, |i, _| seen.lock().unwrap().push(i));
    let statuses: Vec<Status> = results.iter().map(Status::of).collect();
    assert_eq!(
        statuses,
        [
            Status::Ok,
            Status::CompileError,
            Status::Crashed,
            Status::Crashed,
            Status::Timeout,
            Status::Error,
            Status::Ok,
            Status::Ok,
        ]
    );
    assert_eq!(results[6].as_ref().unwrap().outputs[0].bytes, vec![5]);
    let mut seen = seen.into_inner().unwrap();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..requests.len()).collect::<Vec<_>>(),
        "one callback per request"
    );
    // After all that, both workers still serve.
    let again = pool.benchmark(&[
        diag(DiagnosticTask::Sleep { ms: 0 }),
        diag(DiagnosticTask::Sleep { ms: 0 }),
    ]);
    assert!(again.iter().all(Result::is_ok));
}

#[test]
fn wrong_answers_are_caught_by_verification() {
    let pool = pool(2, Duration::from_secs(30));
    let results = pool.benchmark(&[
        c_request(AXPY, "axpy", "1.0f"),
        c_request(AXPY, "axpy", "1.5f"),
        c_request(AXPY, "axpy", "1.0f"),
    ]);
    let outputs: Vec<_> = results
        .into_iter()
        .map(|r| r.expect("all three run").outputs)
        .collect();
    let tolerance = Tolerance {
        rtol: 1e-5,
        atol: 1e-6,
    };
    let wrong = verify_outputs(&outputs[0], &outputs[1], tolerance);
    assert!(!wrong.passed());
    assert_eq!(wrong.mismatches(), 4096);
    assert!(
        (wrong.max_abs_error() - 0.5).abs() < 1e-6,
        "{}",
        wrong.summary()
    );
    assert!(verify_outputs(&outputs[0], &outputs[2], tolerance).passed());
}

#[test]
fn a_hung_task_does_not_hold_back_the_others() {
    let pool = pool(2, Duration::from_secs(3));
    let mut requests = vec![diag(DiagnosticTask::Hang)];
    requests.extend((0..20u8).map(|i| diag(DiagnosticTask::Echo { bytes: bytes(&[i]) })));
    let start = std::time::Instant::now();
    let results = pool.benchmark(&requests);
    assert_eq!(Status::of(&results[0]), Status::Timeout);
    for (i, result) in results.iter().enumerate().skip(1) {
        assert_eq!(
            result.as_ref().unwrap().outputs[0].bytes,
            vec![(i - 1) as u8]
        );
    }
    // The 20 echoes ran on the other worker while the first hung.
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn benchmark_or_inf_follows_inductor() {
    let pool = pool(2, Duration::from_secs(30));
    let timings = pool.benchmark_or_inf(&[
        diag(DiagnosticTask::Sleep { ms: 20 }),
        diag(DiagnosticTask::Segfault),
        diag(DiagnosticTask::Sleep { ms: 1 }),
    ]);
    assert!(timings[0] >= 20.0 && timings[0].is_finite());
    assert_eq!(timings[1], f64::INFINITY);
    assert!(timings[2] >= 1.0 && timings[2] < timings[0]);
}

#[test]
fn every_worker_is_a_distinct_process() {
    let pool = pool(3, Duration::from_secs(30));
    let results = pool.benchmark(
        &(0..9)
            .map(|_| {
                diag(DiagnosticTask::EnvVar {
                    name: "TUNEBOX_PARENT_PID".into(),
                })
            })
            .collect::<Vec<_>>(),
    );
    let parents: HashSet<Vec<u8>> = results
        .into_iter()
        .map(|r| r.unwrap().outputs[0].bytes.to_vec())
        .collect();
    assert_eq!(
        parents,
        HashSet::from([std::process::id().to_string().into_bytes()])
    );
    assert_eq!(pool.size(), 3);
    pool.shutdown(Duration::from_secs(5));
}

#[test]
fn zero_workers_is_an_error() {
    let err = TuningProcessPool::new(PoolConfig::new().max_workers(0).process_config(config()))
        .unwrap_err();
    assert!(matches!(err, PoolError::NoWorkers { .. }), "{err}");
}

#[test]
fn no_candidate_is_blamed_for_its_predecessor_ending_the_worker() {
    let pool = pool(2, crate::util::LONG);
    let requests = vec![diag(DiagnosticTask::ExitAfterReply { code: 0 }); 1000];
    let results = pool.benchmark(&requests);
    let failed: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().err().map(|e| format!("candidate {i}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 1000 candidates failed; first: {:?}",
        failed.len(),
        failed.first()
    );
}
