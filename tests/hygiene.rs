//! Process-wide hygiene: descriptors, threads and socket files after many failures.
//!
//! These tests read state shared by the whole test process (`/proc/self/fd`, `/proc/self/task`,
//! the temporary directory), so they live in their own test binary, run after the others, and
//! take turns through a mutex.

#[allow(dead_code)]
#[path = "util.rs"]
mod util;

#[allow(dead_code)]
#[path = "soak.rs"]
mod soak;

use std::os::unix::fs::PermissionsExt;
use std::sync::Mutex;
use std::time::Duration;

use tunebox_process::{ProcessError, TuningProcess};
use tunebox_protocol::DiagnosticTask;

use util::{LONG, config, diag};

static ALONE: Mutex<()> = Mutex::new(());

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .map(|n| n.trim().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// One-shot server sockets ipc-channel left in the temporary directory (`.tmpXXXXXX/socket`).
fn socket_files() -> usize {
    std::fs::read_dir(std::env::temp_dir())
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().join("socket").exists())
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_thousand_crash_cycles_leave_no_descriptors_behind() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let mut worker = TuningProcess::spawn(config()).unwrap();
    worker.ping(LONG).unwrap();
    let baseline = open_fds();
    for cycle in 0..1000 {
        let err = worker
            .benchmark(diag(DiagnosticTask::Abort), LONG)
            .unwrap_err();
        assert!(
            matches!(
                err,
                ProcessError::WorkerCrashed {
                    signal: Some(6),
                    ..
                }
            ),
            "cycle {cycle}: {err}"
        );
    }
    worker.ping(LONG).unwrap();
    assert_eq!(worker.restarts(), 1000);
    let after = open_fds();
    assert!(
        after <= baseline + 2,
        "open descriptors grew from {baseline} to {after} over 1000 crashes"
    );
}

#[test]
fn failed_handshakes_leave_no_accept_threads_or_socket_files() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let script = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    };
    let silent = script("silent.sh", "exec sleep 60");
    let quitter = script("quitter.sh", "exit 7");
    let sockets_before = socket_files();
    let fds_before = open_fds();
    for _ in 0..20 {
        let err = TuningProcess::spawn(
            config()
                .worker(&silent)
                .handshake_timeout(Duration::from_millis(50)),
        )
        .unwrap_err();
        assert!(
            matches!(err, ProcessError::HandshakeTimeout { .. }),
            "{err}"
        );
        let err = TuningProcess::spawn(config().worker(&quitter)).unwrap_err();
        assert!(
            matches!(
                err,
                ProcessError::ExitedBeforeHandshake {
                    exit_code: Some(7),
                    ..
                }
            ),
            "{err}"
        );
    }
    let blocked: Vec<String> = thread_names()
        .into_iter()
        .filter(|n| n.starts_with("tunebox-accept"))
        .collect();
    assert!(blocked.is_empty(), "threads left in accept: {blocked:?}");
    assert_eq!(socket_files(), sockets_before, "socket files left behind");
    assert!(open_fds() <= fds_before + 2);
}

/// Memory-backed files (`memfd:` links) among this process's descriptors.
fn memfds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|fds| {
            fds.filter_map(Result::ok)
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter(|target| target.to_string_lossy().starts_with("/memfd:"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn twenty_thousand_shared_buffers_leave_no_descriptors_or_memfds_behind() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let executor = tunebox_pool::PoolExecutor::builder()
        .max_workers(2)
        .timeout(LONG)
        .process_config(config())
        .build()
        .unwrap();
    let mut buffer = tunebox_protocol::SharedBuffer::new(64 * 1024).unwrap();
    buffer.get_mut().unwrap().fill(7);
    let task = || {
        let mut request = diag(DiagnosticTask::Checksum);
        request.tensors.push(tunebox_protocol::TensorSpec {
            name: "in".into(),
            dtype: tunebox_protocol::DType::U8,
            shape: vec![buffer.len() as u64],
            init: tunebox_protocol::Init::Data(buffer.share()),
            output: false,
            reset: false,
        });
        request
    };
    // Warm up, then count.
    for result in executor.map_with_error_catching((0..100).map(|_| task())) {
        assert!(result.value.is_some());
    }
    let (fds_before, memfds_before) = (open_fds(), memfds());
    for result in executor.map_with_error_catching((0..20_000).map(|_| task())) {
        assert!(result.value.is_some(), "{:?}", result.error);
    }
    let (fds_after, memfds_after) = (open_fds(), memfds());
    assert!(
        fds_after <= fds_before + 4,
        "descriptors: {fds_before} before, {fds_after} after 20,000 tasks"
    );
    assert!(
        memfds_after <= memfds_before + 4,
        "memfds: {memfds_before} before, {memfds_after} after 20,000 tasks"
    );
}

#[test]
fn a_short_soak_leaves_everything_as_it_was() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let soak = soak::run(util::worker_exe(), 2_000);
    let violations = soak.violations();
    assert!(violations.is_empty(), "{violations:#?}\n{soak:#?}");
    assert_eq!(soak.counts.values().sum::<u64>(), 2_000);
}
