//! `TuningProcess` against the real worker binary.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use tunebox_process::{ProcessConfig, ProcessError, TuningProcess};
use tunebox_protocol::{BenchError, DiagnosticTask};

use tunebox_process::{DeviceToken, InitRequest, Output};

use crate::util::{
    AXPY, LONG, bytes, c_request, config, diag, kill, launcher_exe, pid_exists, wait_gone,
    worker_exe,
};

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
            (Expect::Timeout, Err(ProcessError::Timeout { after, .. })) => {
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
            .benchmark(
                diag(DiagnosticTask::Echo {
                    bytes: bytes(&[42]),
                }),
                LONG,
            )
            .unwrap_or_else(|e| panic!("{name}: the next task failed: {e}"));
        assert_eq!(echo.outputs[0].bytes, vec![42], "{name}");
    }
    // abort, segfault, exit, hang and spin each cost one restart.
    assert_eq!(worker.restarts(), 5);
}

#[test]
fn a_crash_quotes_only_what_its_own_task_wrote_and_names_its_worker() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let pid = worker.pid().unwrap();
    let err = worker
        .benchmark(
            diag(DiagnosticTask::Panic {
                message: "the first task's panic".into(),
            }),
            LONG,
        )
        .unwrap_err();
    assert!(matches!(err, ProcessError::Remote(_)), "{err}");
    // The worker lives, and printed the caught panic to stderr.
    assert_eq!(worker.pid(), Some(pid));
    assert!(worker.stderr_tail().contains("the first task's panic"));
    let err = worker
        .benchmark(diag(DiagnosticTask::Segfault), LONG)
        .unwrap_err();
    let ProcessError::WorkerCrashed {
        stderr_tail,
        pid: crashed,
        ..
    } = &err
    else {
        panic!("expected a crash, got {err:?}");
    };
    assert!(
        !stderr_tail.contains("the first task's panic"),
        "the previous task's output is no part of this crash: {stderr_tail:?}"
    );
    assert_eq!(*crashed, pid);
    assert_eq!(err.pid(), Some(pid));
    let message = err.to_string();
    assert!(
        message.contains(&format!("worker {pid} crashed")) && message.contains("SIGSEGV"),
        "{message}"
    );
}

/// A kernel that reports its process id on stderr, then aborts.
const REPORT_PID_THEN_ABORT: &str = r#"
    #include <stdio.h>
    #include <stdlib.h>
    #include <unistd.h>
    void crash(const float *x, float *y, long n) {
        fprintf(stderr, "kernel in process %d is about to abort\n", (int)getpid());
        fflush(stderr);
        abort();
    }"#;

#[test]
fn a_crash_quotes_what_its_task_wrote_before_dying() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let pid = worker.pid().unwrap();
    let err = worker
        .benchmark(c_request(REPORT_PID_THEN_ABORT, "crash", "1"), LONG)
        .unwrap_err();
    let ProcessError::WorkerCrashed {
        stderr_tail,
        signal,
        pid: crashed,
        ..
    } = &err
    else {
        panic!("expected a crash, got {err:?}");
    };
    assert_eq!(*signal, Some(6), "SIGABRT");
    assert_eq!(*crashed, pid);
    assert!(
        stderr_tail.contains(&format!("kernel in process {pid} is about to abort")),
        "{stderr_tail:?}"
    );
    assert!(
        err.to_string().contains(&format!("worker {pid} crashed")),
        "{err}"
    );
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
    let Some(BenchError::Compile { log, .. }) = err.bench_error() else {
        panic!("expected a compile error, got {err:?}");
    };
    assert!(
        log.contains("kernel.c:1"),
        "the log cites the source: {log}"
    );
    // A compile error is a task error: the same worker serves the next request.
    assert_serves_the_next_kernel_in_the_same_process(&mut worker);
}

fn assert_serves_the_next_kernel_in_the_same_process(worker: &mut TuningProcess) {
    let pid = worker.pid();
    worker
        .benchmark(c_request(AXPY, "axpy", "1.0f"), LONG)
        .unwrap();
    assert_eq!(worker.pid(), pid);
}

#[test]
fn a_worker_dying_while_its_forked_child_holds_the_channel_is_a_crash_at_once() {
    // The kernel forks (no exec: the child keeps the worker's sockets open), then dies; the
    // channel never reports the death, so only watching the worker itself sees it.
    let source = r#"
        #include <signal.h>
        #include <stdlib.h>
        #include <unistd.h>
        void forks(const float *x, float *y, long n) {
            if (fork() == 0) { sleep(30); _exit(0); }
            if (OFFSET == 1) abort();
            exit(3);
        }"#;
    let mut worker = TuningProcess::spawn(config()).unwrap();
    for (offset, abort) in [("1", true), ("2", false)] {
        let start = Instant::now();
        let err = worker
            .benchmark(c_request(source, "forks", offset), Duration::from_secs(20))
            .unwrap_err();
        let ProcessError::WorkerCrashed {
            exit_code, signal, ..
        } = err
        else {
            panic!("expected a crash, got {err:?}");
        };
        if abort {
            assert_eq!(signal, Some(6), "SIGABRT");
        } else {
            assert_eq!(exit_code, Some(3));
        }
        // Well before the 20 s timeout (compiling the kernel takes most of this).
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }
    // The forked children went with the worker's process group.
    worker.ping(LONG).unwrap();
}

#[test]
fn a_kernel_raising_sigsegv_dies_there() {
    // Rust's SIGSEGV handler returns for a signal that is not a stack overflow; a worker that
    // kept it would let this kernel run on to exit(7).
    let source = r#"
        #include <signal.h>
        #include <stdlib.h>
        void raises(const float *x, float *y, long n) { raise(SIGSEGV); exit(7); }"#;
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let err = worker
        .benchmark(c_request(source, "raises", "0"), LONG)
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProcessError::WorkerCrashed {
                signal: Some(11),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_kernel_writing_one_element_past_its_output_is_an_error_not_a_result() {
    let source = "void overrun(const float *x, float *y, long n) \
                  { for (long i = 0; i <= n; i++) y[i] = 2.0f * x[i % n] + OFFSET; }";
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let err = worker
        .benchmark(c_request(source, "overrun", "0"), LONG)
        .unwrap_err();
    let Some(BenchError::OutOfBounds { tensor, detail }) = err.bench_error() else {
        panic!("expected OutOfBounds, got {err:?}");
    };
    assert_eq!(tensor, "y");
    assert!(
        detail.contains("byte 0 after the last of its 16384 bytes"),
        "{detail}"
    );
    assert_serves_the_next_kernel_in_the_same_process(&mut worker);
}

#[test]
fn stale_replies_are_discarded() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    worker.put(diag(DiagnosticTask::Sleep { ms: 50 })).unwrap();
    // A second put before get: the reply to the first is stale when it arrives.
    worker
        .put(diag(DiagnosticTask::Echo { bytes: bytes(&[7]) }))
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
        matches!(err, ProcessError::HandshakeTimeout { after, own_executable: false, .. } if after == Duration::from_millis(300)),
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
    worker.shutdown(Duration::from_secs(5)).unwrap();
    worker.shutdown(Duration::from_secs(5)).unwrap();
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
fn maximum_process_uses_recycles_the_worker() {
    let mut worker = TuningProcess::spawn(config().maximum_process_uses(Some(2))).unwrap();
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

#[test]
fn exit_without_reply_is_seen_at_once_not_at_the_deadline() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let start = Instant::now();
    let err = worker
        .benchmark(
            diag(DiagnosticTask::Exit { code: 0 }),
            Duration::from_secs(30),
        )
        .unwrap_err();
    let elapsed = start.elapsed();
    assert!(
        matches!(
            err,
            ProcessError::WorkerCrashed {
                exit_code: Some(0),
                signal: None,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        elapsed < Duration::from_millis(500),
        "seen after {elapsed:?}"
    );
}

#[test]
fn a_worker_ignoring_signals_is_killed_at_the_deadline() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let pid = worker.pid().unwrap();
    let timeout = Duration::from_millis(300);
    let start = Instant::now();
    let err = worker
        .benchmark(
            diag(DiagnosticTask::Spin {
                ms: 60_000,
                block_signals: true,
            }),
            timeout,
        )
        .unwrap_err();
    let elapsed = start.elapsed();
    assert!(matches!(err, ProcessError::Timeout { .. }), "{err:?}");
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_millis(200),
        "{elapsed:?}"
    );
    assert!(!pid_exists(pid), "no zombie");
    worker.ping(LONG).unwrap();
    assert_ne!(worker.pid(), Some(pid));
}

#[test]
fn a_non_executable_worker_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-executable");
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    let start = Instant::now();
    let err = TuningProcess::spawn(config().worker(&path)).unwrap_err();
    assert!(matches!(err, ProcessError::Spawn { .. }), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(1));
}

/// A log file that already holds `FILE_OUTPUT_LIMIT` bytes (sparse here: no disk used) takes no
/// more: the next worker's stream goes to `/dev/null`, and it still runs.
#[test]
fn a_log_file_past_its_limit_takes_no_more_from_the_next_worker() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("out.log");
    std::fs::File::create(&log)
        .unwrap()
        .set_len(tunebox_process::FILE_OUTPUT_LIMIT)
        .unwrap();
    let mut worker = TuningProcess::spawn(config().stdout(Output::File(log.clone()))).unwrap();
    worker
        .benchmark(
            diag(DiagnosticTask::Print {
                stdout_bytes: 1 << 20,
                stderr_bytes: 0,
            }),
            LONG,
        )
        .unwrap();
    drop(worker);
    let len = std::fs::metadata(&log).unwrap().len();
    assert_eq!(len, tunebox_process::FILE_OUTPUT_LIMIT);
}

/// A task printing without end is killed once it wrote past the write limit, whatever its
/// stream's sink (a file it would fill, `/dev/null`, a pipe the parent drains), not at its
/// timeout; the next request gets a fresh worker.
#[test]
fn a_task_writing_past_its_limit_is_killed_before_its_timeout() {
    if std::fs::read_to_string("/proc/self/io").is_err() {
        eprintln!("skipped: this kernel keeps no task I/O accounting (/proc/self/io)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("out.log");
    let limit = 8 << 20;
    let endless = || {
        diag(DiagnosticTask::Print {
            stdout_bytes: u64::MAX,
            stderr_bytes: 0,
        })
    };
    let sinks = [
        Output::File(log.clone()),
        Output::Null,
        Output::Capture { tail_bytes: 4096 },
    ];
    for sink in sinks {
        let mut worker =
            TuningProcess::spawn(config().stdout(sink.clone()).write_limit(Some(limit))).unwrap();
        let mut written_in_all = 0;
        for request in 0..2 {
            let start = Instant::now();
            let err = worker.benchmark(endless(), LONG).unwrap_err();
            let elapsed = start.elapsed();
            let ProcessError::WroteTooMuch {
                pid,
                written,
                limit: said,
            } = err
            else {
                panic!("{sink:?} request {request}: expected WroteTooMuch, got {err:?}");
            };
            assert!(
                written > limit && said == limit,
                "{sink:?}: {written} {said}"
            );
            assert!(err.to_string().contains("print in a loop"), "{err}");
            assert!(
                elapsed < LONG / 3,
                "{sink:?}: killed after {elapsed:?}, not long before the {LONG:?} timeout"
            );
            assert!(
                wait_gone(pid, Duration::from_secs(5)).is_some(),
                "{sink:?}: {pid} lives"
            );
            written_in_all += written;
        }
        if matches!(sink, Output::File(_)) {
            // What the two requests wrote when their last look saw them, and what they wrote
            // between that look and their kill: not what the timeouts would have let through.
            let logged = std::fs::metadata(&log).unwrap().len();
            assert!(
                logged <= written_in_all + (256 << 20),
                "the log took {logged} bytes, the requests' looks saw {written_in_all}"
            );
        }
    }
    // Without a limit the same request runs to its timeout.
    let mut unlimited = TuningProcess::spawn(config().write_limit(None)).unwrap();
    let err = unlimited
        .benchmark(endless(), Duration::from_millis(600))
        .unwrap_err();
    assert!(matches!(err, ProcessError::Timeout { .. }), "{err:?}");
}

#[test]
fn floods_of_output_never_block_in_any_mode() {
    let dir = tempfile::tempdir().unwrap();
    let modes = [
        Output::Null,
        Output::File(dir.path().join("out.log")),
        Output::Capture { tail_bytes: 4096 },
    ];
    for mode in modes {
        let mut worker =
            TuningProcess::spawn(config().stdout(mode.clone()).stderr(mode.clone())).unwrap();
        for round in 0..2 {
            let start = Instant::now();
            worker
                .benchmark(
                    diag(DiagnosticTask::Print {
                        stdout_bytes: 2 << 20,
                        stderr_bytes: 2 << 20,
                    }),
                    LONG,
                )
                .unwrap();
            let elapsed = start.elapsed();
            assert!(
                elapsed < Duration::from_secs(1),
                "{mode:?} round {round}: {elapsed:?}"
            );
        }
        if let Output::Capture { tail_bytes } = mode {
            let tail = worker.stdout_tail();
            assert_eq!(tail.len(), tail_bytes, "the tail is bounded");
            assert!(tail.ends_with("x\n"));
        }
    }
    let logged = std::fs::metadata(dir.path().join("out.log")).unwrap().len();
    assert_eq!(
        logged,
        2 * 2 * (4 << 20) / 2,
        "both streams, both rounds, appended"
    );
    // Inherited streams: through a launcher whose own output goes nowhere.
    let status = std::process::Command::new(launcher_exe())
        .args(["flood", worker_exe().to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "inherited output blocked or was slow: {status}"
    );
}

/// Starts the launcher in `mode` and reads the worker pid it prints.
fn launch(mode: &str) -> (std::process::Child, u32) {
    let mut launcher = std::process::Command::new(launcher_exe())
        .args([mode, worker_exe().to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(launcher.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let pid = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("a pid, got {line:?}"));
    (launcher, pid)
}

#[test]
fn a_busy_worker_dies_with_its_parent() {
    let (mut launcher, worker) = launch("busy");
    assert!(pid_exists(worker));
    kill(launcher.id(), 9);
    launcher.wait().unwrap();
    let gone = wait_gone(worker, Duration::from_secs(1));
    assert!(gone.is_some(), "worker {worker} outlived its parent by 1 s");
}

#[test]
fn a_worker_outlives_the_thread_that_spawned_it() {
    let (mut launcher, worker) = launch("thread");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        pid_exists(worker),
        "the worker died with its spawning thread"
    );
    kill(launcher.id(), 9);
    launcher.wait().unwrap();
    assert!(wait_gone(worker, Duration::from_secs(1)).is_some());
}

fn env_of(worker: &mut TuningProcess, name: &str) -> String {
    let result = worker
        .benchmark(diag(DiagnosticTask::EnvVar { name: name.into() }), LONG)
        .unwrap();
    String::from_utf8(result.outputs[0].bytes.to_vec()).unwrap()
}

#[test]
fn device_pinning_and_environment_survive_restarts() {
    let mut worker = TuningProcess::spawn(
        config()
            .device(Some(DeviceToken::from("B")))
            .env("TUNEBOX_TEST_VALUE", "42"),
    )
    .unwrap();
    assert_eq!(env_of(&mut worker, "CUDA_VISIBLE_DEVICES"), "B");
    assert_eq!(env_of(&mut worker, "TUNEBOX_TEST_VALUE"), "42");
    worker
        .benchmark(diag(DiagnosticTask::Segfault), LONG)
        .unwrap_err();
    assert_eq!(env_of(&mut worker, "CUDA_VISIBLE_DEVICES"), "B");
    assert_eq!(env_of(&mut worker, "TUNEBOX_TEST_VALUE"), "42");
    assert_eq!(worker.restarts(), 1);
    // The parent's own environment was never touched.
    assert_eq!(std::env::var_os("TUNEBOX_TEST_VALUE"), None);
}

#[test]
fn workers_inherit_only_the_documented_environment() {
    // Cargo sets CARGO_MANIFEST_DIR for every test it runs: a variable of the parent that is on
    // no list, standing in for a secret.
    let secret = std::env::var_os("CARGO_MANIFEST_DIR").expect("run under `cargo test`");
    let path = std::env::var_os("PATH").expect("PATH is set");
    let mut worker = TuningProcess::spawn(config()).unwrap();
    assert_eq!(env_of(&mut worker, "CARGO_MANIFEST_DIR"), "");
    assert_eq!(env_of(&mut worker, "PATH").as_str(), path.to_str().unwrap());
    let mut asked = TuningProcess::spawn(config().inherit_env("CARGO_MANIFEST_DIR")).unwrap();
    assert_eq!(
        env_of(&mut asked, "CARGO_MANIFEST_DIR").as_str(),
        secret.to_str().unwrap()
    );
    let mut all = TuningProcess::spawn(config().inherit_all_env(true)).unwrap();
    assert_eq!(
        env_of(&mut all, "CARGO_MANIFEST_DIR").as_str(),
        secret.to_str().unwrap()
    );
}

#[test]
fn a_bare_worker_name_not_on_path_is_a_spawn_error_saying_what_to_write() {
    // The test worker's own file name, which is on no PATH entry (that relative entries and the
    // current directory are skipped is the unit test `environment::tests::bare_names_…`).
    let exe = worker_exe();
    let name = exe.file_name().unwrap();
    let err = TuningProcess::spawn(config().worker(name)).unwrap_err();
    let text = std::error::Error::source(&err).unwrap().to_string();
    assert!(
        matches!(err, ProcessError::Spawn { ref path, .. } if path.as_os_str() == name),
        "{err:?}"
    );
    assert!(
        text.contains("never searched") && text.contains(&format!("./{}", name.display())),
        "{text}"
    );
}

#[test]
fn killed_while_idle_then_healthy() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let pid = worker.pid().unwrap();
    kill(pid, 9);
    while pid_exists(pid)
        && !matches!(
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| s.contains(") Z ")),
            Ok(true)
        )
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(worker.pid(), None, "a dead worker's pid is not reported");
    // Nothing was lost: the next request runs on a new worker.
    let echo = worker
        .benchmark(diag(DiagnosticTask::Echo { bytes: bytes(&[1]) }), LONG)
        .unwrap();
    assert_eq!(echo.outputs[0].bytes, vec![1]);
    assert_ne!(worker.pid(), Some(pid));
    assert!(!pid_exists(pid), "the dead worker was reaped");
}

#[test]
fn a_reply_sent_before_death_is_delivered() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let pid = worker.pid().unwrap();
    worker
        .put(diag(DiagnosticTask::Echo { bytes: bytes(&[3]) }))
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    kill(pid, 9);
    let result = worker.get(LONG).unwrap();
    assert_eq!(result.outputs[0].bytes, vec![3]);
}

#[test]
fn the_initializer_runs_on_every_start_and_is_not_a_use() {
    let init = InitRequest::new(diag(DiagnosticTask::Remember {
        bytes: bytes(&[9, 9]),
    }));
    for maximum_process_uses in [None, Some(2)] {
        let mut worker = TuningProcess::spawn(
            config()
                .initializer(init.clone())
                .maximum_process_uses(maximum_process_uses),
        )
        .unwrap();
        let mut pids = Vec::new();
        for _ in 0..6 {
            let result = worker
                .benchmark(diag(DiagnosticTask::Recall), LONG)
                .unwrap();
            assert_eq!(result.outputs[0].bytes, vec![9, 9], "initializer state");
            pids.push(worker.pid().unwrap());
        }
        let distinct = pids.iter().collect::<std::collections::HashSet<_>>().len();
        assert_eq!(
            distinct,
            if maximum_process_uses.is_some() { 3 } else { 1 },
            "{pids:?}"
        );
    }
}

#[test]
fn initializer_failures_are_reported_not_retried_in_a_loop() {
    let failing = [
        DiagnosticTask::Fail {
            message: "no such device".into(),
        },
        DiagnosticTask::Segfault,
    ];
    for task in failing {
        let start = Instant::now();
        let err = TuningProcess::spawn(config().initializer(InitRequest::new(diag(task.clone()))))
            .unwrap_err();
        assert!(
            matches!(err, ProcessError::InitializerFailed { .. }),
            "{err:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(2));
        // A lazy handle reports the same on each request, without a respawn loop.
        let mut worker = TuningProcess::lazy(config().initializer(InitRequest::new(diag(task))));
        for _ in 0..2 {
            let err = worker.ping(LONG).unwrap_err();
            assert!(
                matches!(err, ProcessError::InitializerFailed { .. }),
                "{err:?}"
            );
            assert_eq!(worker.pid(), None);
        }
    }
    let err = TuningProcess::spawn(config().initializer(InitRequest::new(diag(
        DiagnosticTask::Fail {
            message: "no such device".into(),
        },
    ))))
    .unwrap_err();
    assert!(err.to_string().contains("no such device"), "{err}");
}

#[test]
fn put_never_blocks_on_a_worker_that_stopped_reading() {
    let send_timeout = Duration::from_millis(500);
    let mut worker = TuningProcess::spawn(config().send_timeout(send_timeout)).unwrap();
    let pid = worker.pid().unwrap();
    kill(pid, SIGSTOP);
    // Each put abandons the previous request; the stopped worker reads none of them, so its
    // socket buffer fills and a send would block. The guard must kill the worker instead.
    let start = Instant::now();
    let source = format!("{AXPY}/*{}*/", "x".repeat(64 * 1024));
    let err = (0..10_000)
        .find_map(|_| worker.put(c_request(&source, "axpy", "1.0f")).err())
        .expect("a stopped worker cannot take requests forever");
    let elapsed = start.elapsed();
    assert!(
        matches!(err, ProcessError::SendTimeout { after, .. } if after == send_timeout),
        "{err:?}"
    );
    assert!(
        elapsed < send_timeout + Duration::from_secs(3),
        "{elapsed:?}"
    );
    assert!(!pid_exists(pid), "the stopped worker was killed and reaped");
    worker.ping(LONG).unwrap();
}

#[test]
fn oversized_requests_are_refused_before_sending() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let source = format!("{AXPY}/*{}*/", "x".repeat(200 * 1024));
    let err = worker.put(c_request(&source, "axpy", "1.0f")).unwrap_err();
    assert!(
        matches!(err, ProcessError::RequestTooLarge { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("#include"), "{err}");
    // Large payloads travel as shared memory and are fine.
    let big = vec![0xA5u8; 16 << 20];
    let echo = worker
        .benchmark(diag(DiagnosticTask::Echo { bytes: bytes(&big) }), LONG)
        .unwrap();
    assert!(echo.outputs[0].bytes == big);
}

/// SIGSTOP on Linux.
const SIGSTOP: i32 = 19;

/// A kernel that writes garbage into every socket it can reach, as a buggy kernel scribbling over
/// file descriptors it does not own would.
const SCRIBBLER: &str = r#"#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
void axpy(const float *x, float *y, int64_t n) {
    static const char junk[] = "\x40\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\x7f garbage";
    for (int fd = 3; fd < 256; fd++) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) (void)!write(fd, junk, sizeof junk);
    }
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + OFFSET;
}
"#;

/// A read of the channel that blocks on the scribbled message is ended within seconds (the
/// watchdog's `STUCK_READ`, 2 s), not at the request's timeout.
#[test]
fn a_kernel_scribbling_on_the_channel_is_an_error_within_seconds_not_at_its_timeout() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let start = Instant::now();
    let err = worker
        .benchmark(c_request(SCRIBBLER, "axpy", "1.0f"), LONG)
        .unwrap_err();
    let elapsed = start.elapsed();
    assert!(
        matches!(
            err,
            ProcessError::Protocol { .. } | ProcessError::WorkerCrashed { .. }
        ),
        "{err:?}"
    );
    assert!(
        elapsed < LONG / 3,
        "{elapsed:?} of a {LONG:?} timeout: {err}"
    );
    worker.ping(LONG).unwrap();
}

#[test]
fn the_kill_switch_kills_from_another_thread_and_is_reported_once() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let switch = worker.kill_switch();
    assert_eq!(switch.pid(), worker.pid());
    let killer = std::thread::spawn({
        let switch = switch.clone();
        move || {
            std::thread::sleep(Duration::from_millis(200));
            switch.kill()
        }
    });
    let start = Instant::now();
    let err = worker
        .benchmark(diag(DiagnosticTask::Sleep { ms: 30_000 }), LONG)
        .unwrap_err();
    assert!(killer.join().unwrap());
    assert!(
        matches!(
            err,
            ProcessError::WorkerCrashed {
                signal: Some(9),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(switch.pid(), None, "cleared before the worker was reaped");

    // A kill between requests fails the next request instead of being papered over, once.
    worker.ping(LONG).unwrap();
    let pid = worker.pid().unwrap();
    assert!(switch.kill());
    let err = worker.ping(LONG).unwrap_err();
    assert!(matches!(err, ProcessError::WorkerCrashed { .. }), "{err:?}");
    assert!(!pid_exists(pid));
    worker.ping(LONG).unwrap();
    assert_ne!(worker.pid(), Some(pid));
}

#[test]
fn core_dumps_are_off_in_workers() {
    let worker = TuningProcess::spawn(config()).unwrap();
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", worker.pid().unwrap())).unwrap();
    let core = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .unwrap();
    assert_eq!(core.split_whitespace().nth(4), Some("0"), "{core}");
}

#[test]
fn a_sticky_device_fault_replaces_the_worker_and_a_non_sticky_one_does_not() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let first = worker.pid().unwrap();
    let err = worker
        .benchmark(
            diag(DiagnosticTask::DeviceFault {
                code: 1,
                sticky: false,
            }),
            LONG,
        )
        .unwrap_err();
    assert!(
        matches!(
            err.bench_error(),
            Some(BenchError::DeviceFault { sticky: false, .. })
        ),
        "{err:?}"
    );
    assert_eq!(
        worker.pid(),
        Some(first),
        "a non-sticky fault keeps the worker"
    );
    let err = worker
        .benchmark(
            diag(DiagnosticTask::DeviceFault {
                code: 700,
                sticky: true,
            }),
            LONG,
        )
        .unwrap_err();
    assert!(
        matches!(
            err.bench_error(),
            Some(BenchError::DeviceFault {
                code: 700,
                sticky: true,
                ..
            })
        ),
        "{err:?}"
    );
    // The worker answered, exited and was reaped; the next request gets a fresh one.
    assert_eq!(worker.pid(), None);
    assert!(!pid_exists(first));
    worker.ping(LONG).unwrap();
    assert_eq!(worker.restarts(), 1);
}

#[test]
fn probe_lists_backends_and_prepare_answers() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let probe = worker.probe(LONG).unwrap();
    assert!(probe.backends.contains(&"cpu".to_owned()), "{probe:?}");
    assert!(
        probe.backends.contains(&"diagnostics".to_owned()),
        "{probe:?}"
    );
    worker
        .prepare(c_request(AXPY, "axpy", "1.0f"), LONG)
        .unwrap();
    let pid = worker.pid();
    let err = worker
        .prepare(c_request("not C", "axpy", "1.0f"), LONG)
        .unwrap_err();
    assert!(
        matches!(err.bench_error(), Some(BenchError::Compile { .. })),
        "{err:?}"
    );
    assert_eq!(worker.pid(), pid, "a compile error keeps the worker");
}

/// A task that replies, then ends its worker at once: the reply always arrives, and the request
/// after it finds the worker gone or going before it could begin.
fn reply_then_exit() -> tunebox_protocol::BenchmarkRequest {
    diag(DiagnosticTask::ExitAfterReply { code: 0 })
}

#[test]
fn a_request_sent_to_a_worker_exiting_after_its_last_reply_runs_on_a_fresh_one() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let mut failures = Vec::new();
    for i in 0..1000 {
        // put/get and benchmark alike.
        let result = if i % 2 == 0 {
            worker.benchmark(reply_then_exit(), LONG)
        } else {
            worker
                .put(reply_then_exit())
                .and_then(|()| worker.get(LONG))
        };
        if let Err(e) = result {
            failures.push(format!("request {i}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 1000 requests failed, blamed for their predecessor's exit; first: {:?}",
        failures.len(),
        failures.first()
    );
    // Each request after an exit went to a new worker (only the first found one waiting).
    assert!(worker.restarts() >= 999, "{}", worker.restarts());
    // Other kinds of request after an exit: a ping, a prepare, a probe.
    worker.benchmark(reply_then_exit(), LONG).unwrap();
    worker.ping(LONG).unwrap();
    worker.benchmark(reply_then_exit(), LONG).unwrap();
    worker.prepare(reply_then_exit(), LONG).unwrap();
    worker.benchmark(reply_then_exit(), LONG).unwrap();
    worker.probe(LONG).unwrap();
}

#[test]
fn a_request_the_worker_began_is_still_its_crash_after_a_resend() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    for _ in 0..20 {
        worker.benchmark(reply_then_exit(), LONG).unwrap();
        // Sent to the exiting worker, then (never begun there) to a fresh one, which it kills.
        let err = worker
            .benchmark(diag(DiagnosticTask::Exit { code: 3 }), LONG)
            .unwrap_err();
        assert!(
            matches!(
                err,
                ProcessError::WorkerCrashed {
                    exit_code: Some(3),
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[test]
fn on_worker_exit_wakes_the_owner_when_an_idle_worker_dies() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    worker.on_worker_exit(move || {
        let _ = tx.lock().unwrap().send(());
    });
    for _ in 0..3 {
        let pid = worker.pid().unwrap();
        kill(pid, 9);
        rx.recv_timeout(Duration::from_secs(5))
            .expect("woken within 5 s of the death");
        assert_eq!(worker.pid(), None);
        worker.ensure_running().unwrap();
        assert!(!pid_exists(pid), "reaped by ensure_running");
        assert!(worker.pid().is_some_and(|p| p != pid));
    }
    // Workers the handle ends itself need no waking; a call for nothing is harmless anyway.
    worker.kill();
    worker.ping(LONG).unwrap();
}

/// Signals `on_signal` handled.
static HANDLED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    HANDLED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A signal the application handles, arriving while the parent waits for a reply, interrupts
/// the wait (`poll` is never restarted): the wait goes on, and the reply is the task's. A
/// profiler's `SIGPROF`, a Python process's `SIGCHLD` or `SIGINT` handler do this.
#[test]
fn a_handled_signal_during_the_wait_is_no_broken_reply() {
    // SAFETY: an empty handler for SIGUSR2, which nothing else in these tests uses; only this
    // thread is sent it (`tgkill`).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        assert_eq!(
            libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut()),
            0
        );
    }
    // SAFETY: `gettid` takes nothing.
    let tid = unsafe { libc::gettid() };
    let pid = std::process::id() as libc::pid_t;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: a signal to one thread of this process, which handles it.
                unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR2) };
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let replies: Vec<_> = (0..3)
        .map(|_| worker.benchmark(diag(DiagnosticTask::Sleep { ms: 100 }), LONG))
        .collect();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    sender.join().unwrap();
    for reply in replies {
        reply.unwrap();
    }
    assert_eq!(worker.restarts(), 0);
    let handled = HANDLED.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        handled >= 3,
        "{handled} signals handled: the waits were hardly interrupted"
    );
}
