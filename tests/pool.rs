//! `TuningProcessPool` against the real worker binary.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use tunebox_pool::{PoolConfig, PoolError, Status, Tolerance, TuningProcessPool, verify_outputs};
use tunebox_process::ProcessError;
use tunebox_protocol::DiagnosticTask;

use crate::util::{AXPY, bytes, c_request, config, diag, pool};

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
    let tolerance = Tolerance::new(1e-5, 1e-6);
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

/// The process id a diagnostics `Pid` task reported.
fn reported_pid(result: &Result<tunebox_protocol::BenchmarkResult, PoolError>) -> u32 {
    let result = result.as_ref().expect("the pid task succeeds");
    String::from_utf8_lossy(&result.outputs[0].bytes)
        .parse()
        .expect("a pid")
}

/// Two workers that crash in one pool run give two errors, each with the pid of the worker
/// that crashed (which reported it just before).
#[test]
fn crash_errors_carry_the_pid_of_the_worker_that_crashed() {
    let pool = pool(1, Duration::from_secs(30));
    let mut pids = Vec::new();
    for crash in [DiagnosticTask::Segfault, DiagnosticTask::Abort] {
        let results = pool.benchmark(&[diag(DiagnosticTask::Pid), diag(crash)]);
        let pid = reported_pid(&results[0]);
        let err = results[1].as_ref().expect_err("a crash");
        assert!(err.is_crash(), "{err}");
        assert_eq!(err.pid(), Some(pid), "{err}");
        assert!(
            err.to_string().contains(&format!("worker {pid} crashed")),
            "{err}"
        );
        pids.push(pid);
    }
    assert_ne!(pids[0], pids[1], "the crashed worker was replaced");
}

/// A kernel that reports its process id on stderr, then dies of SIGSEGV.
const REPORT_PID_THEN_SEGFAULT: &str = r#"
    #include <stdio.h>
    #include <unistd.h>
    void crash(const float *x, float *y, long n) {
        fprintf(stderr, "crashing in process %d\n", (int)getpid());
        fflush(stderr);
        *(volatile int *)0 = (int)OFFSET;
    }"#;

/// Two workers crash at the same time: each error carries its own worker's pid and quotes
/// that worker's own last words.
#[test]
fn concurrent_crashes_are_told_apart_by_pid() {
    let pool = pool(2, Duration::from_secs(60));
    let results = pool.benchmark(&[
        c_request(REPORT_PID_THEN_SEGFAULT, "crash", "1"),
        c_request(REPORT_PID_THEN_SEGFAULT, "crash", "2"),
    ]);
    let mut pids = HashSet::new();
    for result in &results {
        let Err(PoolError::Process(ProcessError::WorkerCrashed {
            pid, stderr_tail, ..
        })) = result
        else {
            panic!("expected a crash, got {result:?}");
        };
        assert!(
            stderr_tail.contains(&format!("crashing in process {pid}\n")),
            "{pid}: {stderr_tail:?}"
        );
        assert_eq!(
            stderr_tail.matches("crashing in process").count(),
            1,
            "only its own task's output: {stderr_tail:?}"
        );
        pids.insert(*pid);
    }
    assert_eq!(pids.len(), 2, "two errors, two workers: {results:?}");
}
