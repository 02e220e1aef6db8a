//! `TuningProcess` against the real worker binary.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use tunebox_process::{ProcessConfig, ProcessError, TuningProcess};
use tunebox_protocol::{BenchError, DiagnosticTask};

use crate::util::{AXPY, LONG, c_request, config, diag, pid_exists, worker_exe};

/// What a misbehaving task must produce.
#[derive(Debug)]
enum Expect {
    Ok,
    /// A task error; the worker lives (same pid afterwards).
    Remote(fn(&BenchError) -> bool),
    Crashed {
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
    Timeout,
}

fn table() -> Vec<(&'static str, DiagnosticTask, Duration, Expect)> {
    let short = Duration::from_millis(300);
    vec![
        ("ok", DiagnosticTask::Sleep { ms: 1 }, LONG, Expect::Ok),
        (
            "error",
            DiagnosticTask::Fail {
                message: "bad tile size".into(),
            },
            LONG,
            Expect::Remote(
                |e| matches!(e, BenchError::Failed { message } if message == "bad tile size"),
            ),
        ),
        (
            "panic",
            DiagnosticTask::Panic {
                message: "index out of bounds".into(),
            },
            LONG,
            Expect::Remote(
                |e| matches!(e, BenchError::Panic { message } if message == "index out of bounds"),
            ),
        ),
        (
            "abort",
            DiagnosticTask::Abort,
            LONG,
            Expect::Crashed {
                exit_code: None,
                signal: Some(6),
            },
        ),
        (
            "segfault",
            DiagnosticTask::Segfault,
            LONG,
            Expect::Crashed {
                exit_code: None,
                signal: Some(11),
            },
        ),
        (
            "exit",
            DiagnosticTask::Exit { code: 3 },
            LONG,
            Expect::Crashed {
                exit_code: Some(3),
                signal: None,
            },
        ),
        ("hang", DiagnosticTask::Hang, short, Expect::Timeout),
        (
            "spin with signals blocked",
            DiagnosticTask::Spin {
                ms: 60_000,
                block_signals: true,
            },
            short,
            Expect::Timeout,
        ),
        (
            "flood stdout and stderr",
            DiagnosticTask::Print {
                stdout_bytes: 2 << 20,
                stderr_bytes: 2 << 20,
            },
            LONG,
            Expect::Ok,
        ),
    ]
}

#[test]
fn every_misbehaviour_gets_its_outcome_and_the_next_task_succeeds() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    for (name, task, timeout, expect) in table() {
        let pid = worker.pid().expect("a running worker");
        let start = Instant::now();
        let outcome = worker.benchmark(diag(task), timeout);
        let elapsed = start.elapsed();
        match (&expect, &outcome) {
            (Expect::Ok, Ok(_)) => assert_eq!(worker.pid(), Some(pid), "{name}"),
            (Expect::Remote(check), Err(ProcessError::Remote(e))) => {
                assert!(check(e), "{name}: {e:?}");
                assert_eq!(worker.pid(), Some(pid), "{name}: the worker must live on");
            }
            (
                Expect::Crashed { exit_code, signal },
                Err(ProcessError::WorkerCrashed {
                    exit_code: got_code,
                    signal: got_signal,
                    ..
                }),
            ) => {
                assert_eq!((got_code, got_signal), (exit_code, signal), "{name}");
                assert!(
                    elapsed < Duration::from_secs(5),
                    "{name}: seen late ({elapsed:?})"
                );
                assert!(!pid_exists(pid), "{name}: pid {pid} must be reaped");
            }
            (Expect::Timeout, Err(ProcessError::Timeout { after })) => {
                assert_eq!(*after, timeout);
                assert!(elapsed >= timeout, "{name}: early ({elapsed:?})");
                assert!(
                    elapsed < timeout + Duration::from_secs(2),
                    "{name}: {elapsed:?}"
                );
                assert!(
                    !pid_exists(pid),
                    "{name}: pid {pid} must be killed and reaped"
                );
            }
            _ => panic!("{name}: expected {expect:?}, got {outcome:?}"),
        }
        // The next task succeeds, on the same worker or a fresh one.
        let echo = worker
            .benchmark(diag(DiagnosticTask::Echo { bytes: vec![42] }), LONG)
            .unwrap_or_else(|e| panic!("{name}: the next task failed: {e}"));
        assert_eq!(echo.outputs[0].bytes, vec![42], "{name}");
    }
    // abort, segfault, exit, hang and spin each cost one restart.
    assert_eq!(worker.restarts(), 5);
}

#[test]
fn crash_errors_quote_the_stderr_tail() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let err = worker
        .benchmark(
            diag(DiagnosticTask::Panic {
                message: "first".into(),
            }),
            LONG,
        )
        .unwrap_err();
    assert!(matches!(err, ProcessError::Remote(_)), "{err}");
    let err = worker
        .benchmark(diag(DiagnosticTask::Abort), LONG)
        .unwrap_err();
    let ProcessError::WorkerCrashed { stderr_tail, .. } = &err else {
        panic!("expected a crash, got {err:?}");
    };
    // The caught panic of the first task was printed to stderr by the panic hook.
    assert!(stderr_tail.contains("first"), "tail: {stderr_tail:?}");
    assert!(err.to_string().contains("SIGABRT"), "{err}");
}

#[test]
fn c_kernels_compile_run_and_report_compile_errors() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let result = worker
        .benchmark(c_request(AXPY, "axpy", "1.0f"), LONG)
        .unwrap();
    assert_eq!(result.outputs.len(), 1);
    assert_eq!(result.outputs[0].name, "y");
    assert_eq!(result.outputs[0].bytes.len(), 4096 * 4);
    assert!(result.stats.median_ms > 0.0 && result.stats.reps >= 5);

    let broken = "void axpy(const float *x, float *y, long n) { this is not C }";
    let err = worker
        .benchmark(c_request(broken, "axpy", "1.0f"), LONG)
        .unwrap_err();
    let ProcessError::Remote(BenchError::Compile { log, .. }) = &err else {
        panic!("expected a compile error, got {err:?}");
    };
    assert!(
        log.contains("kernel.c:1"),
        "the log cites the source: {log}"
    );
    // A compile error is a task error: the same worker serves the next request.
    let pid = worker.pid();
    worker
        .benchmark(c_request(AXPY, "axpy", "1.0f"), LONG)
        .unwrap();
    assert_eq!(worker.pid(), pid);
}

#[test]
fn stale_replies_are_discarded() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    worker.put(diag(DiagnosticTask::Sleep { ms: 50 })).unwrap();
    // A second put before get: the reply to the first is stale when it arrives.
    worker
        .put(diag(DiagnosticTask::Echo { bytes: vec![7] }))
        .unwrap();
    let result = worker.get(LONG).unwrap();
    assert_eq!(result.outputs[0].bytes, vec![7]);
    let err = worker.get(Duration::from_millis(10)).unwrap_err();
    assert!(matches!(err, ProcessError::Protocol { .. }), "{err}");
}

#[test]
fn missing_worker_fails_at_once() {
    let start = Instant::now();
    let err = TuningProcess::spawn(config().worker("/nonexistent/tunebox-worker")).unwrap_err();
    assert!(matches!(err, ProcessError::Spawn { .. }), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/tunebox-worker"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(1));
}

/// Writes an executable shell script into `dir`.
fn script(dir: &tempfile::TempDir, body: &str) -> std::path::PathBuf {
    let path = dir.path().join("worker.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn worker_exiting_before_handshake_is_reported_with_its_code_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let exe = script(&dir, "echo 'missing libfoo.so' >&2; exit 3");
    let start = Instant::now();
    let err = TuningProcess::spawn(config().worker(exe)).unwrap_err();
    let ProcessError::ExitedBeforeHandshake {
        exit_code,
        stderr_tail,
        ..
    } = &err
    else {
        panic!("expected ExitedBeforeHandshake, got {err:?}");
    };
    assert_eq!(*exit_code, Some(3));
    assert!(stderr_tail.contains("missing libfoo.so"), "{stderr_tail:?}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn worker_that_never_connects_times_out_and_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = script(&dir, "exec sleep 60");
    let start = Instant::now();
    let err = TuningProcess::spawn(
        config()
            .worker(exe)
            .handshake_timeout(Duration::from_millis(300)),
    )
    .unwrap_err();
    assert!(
        matches!(err, ProcessError::HandshakeTimeout { after } if after == Duration::from_millis(300)),
        "{err:?}"
    );
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(2),
        "{elapsed:?}"
    );
}

#[test]
fn protocol_version_mismatch_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let exe = script(
        &dir,
        &format!(
            "TUNEBOX_PROTOCOL_VERSION=999 exec '{}'",
            worker_exe().display()
        ),
    );
    let err = TuningProcess::spawn(config().worker(exe)).unwrap_err();
    assert!(
        matches!(err, ProcessError::ProtocolMismatch { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("same tunebox release"), "{err}");
}

#[test]
fn ping_kill_and_lazy_restart() {
    let mut worker = TuningProcess::lazy(config());
    assert_eq!(worker.pid(), None);
    assert!(!worker.alive());
    let rtt = worker.ping(LONG).unwrap();
    assert!(rtt < LONG);
    let first = worker.pid().unwrap();
    assert!(worker.alive());
    worker.kill();
    assert!(!pid_exists(first), "killed workers are reaped");
    assert!(!worker.alive());
    worker.ping(LONG).unwrap();
    assert_ne!(worker.pid(), Some(first));
    assert_eq!(worker.restarts(), 1);
    worker.shutdown(Duration::from_secs(5));
    worker.shutdown(Duration::from_secs(5));
    assert_eq!(worker.pid(), None);
}

#[test]
fn drop_kills_and_reaps() {
    let worker = TuningProcess::spawn(config()).unwrap();
    let pid = worker.pid().unwrap();
    drop(worker);
    assert!(!pid_exists(pid));
}

#[test]
fn maximum_uses_recycles_the_worker() {
    let mut worker = TuningProcess::spawn(config().maximum_uses(Some(2))).unwrap();
    let mut pids = Vec::new();
    for _ in 0..6 {
        worker
            .benchmark(diag(DiagnosticTask::Sleep { ms: 0 }), LONG)
            .unwrap();
        pids.push(worker.pid().unwrap());
    }
    assert_eq!(pids[0], pids[1]);
    assert_eq!(pids[2], pids[3]);
    assert_eq!(pids[4], pids[5]);
    assert!(pids[0] != pids[2] && pids[2] != pids[4]);
    assert!(!pid_exists(pids[0]), "retired workers are reaped");
}

#[test]
fn unconfigured_worker_resolution_uses_the_environment_variable_or_current_exe() {
    // Without a configured path and without TUNEBOX_WORKER, the current executable is used.
    let config = ProcessConfig::new();
    if std::env::var_os(tunebox_process::WORKER_PATH_ENV).is_none() {
        assert_eq!(
            config.resolve_worker().unwrap(),
            std::env::current_exe().unwrap()
        );
    }
    assert_eq!(
        ProcessConfig::new()
            .worker("/x/w")
            .resolve_worker()
            .unwrap(),
        std::path::PathBuf::from("/x/w")
    );
}
