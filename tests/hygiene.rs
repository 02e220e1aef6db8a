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

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tunebox_pool::{Devices, PoolConfig, PoolExecutor, TuningProcessPool};
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
    let sockets_before = soak::socket_files();
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
    let leaked = soak::leaked_sockets(&sockets_before, &soak::socket_files());
    assert!(leaked.is_empty(), "socket files left behind: {leaked:?}");
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
    let executor = tunebox_pool::PoolExecutor::new(
        tunebox_pool::PoolConfig::new()
            .max_workers(2)
            .timeout(LONG)
            .process_config(config()),
    )
    .unwrap();
    let mut buffer = tunebox_protocol::SharedBuffer::new(64 * 1024).unwrap();
    buffer.get_mut().unwrap().fill(7);
    let task = || {
        let mut request = diag(DiagnosticTask::Checksum);
        request.tensors.push(
            tunebox_protocol::TensorSpec::new(
                "in",
                tunebox_protocol::DType::U8,
                vec![buffer.len() as u64],
            )
            .init(tunebox_protocol::Init::Data(buffer.share())),
        );
        request
    };
    // Warm up, then count.
    for result in executor.map_with_error_catching((0..100).map(|_| task())) {
        assert!(result.value().is_some());
    }
    let (fds_before, memfds_before) = (open_fds(), memfds());
    for result in executor.map_with_error_catching((0..20_000).map(|_| task())) {
        assert!(result.value().is_some(), "{:?}", result.error());
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

/// A pipe without close-on-exec, as an application (or a make jobserver) may leave one:
/// `(read end, write end)`.
fn inheritable_pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `pipe` writes two new descriptors into the array it is given, a live local.
    let status = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(status, 0, "pipe: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just created and are owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// What descriptor `fd` of process `pid` (or `self`) refers to.
fn fd_target(pid: &str, fd: i32) -> String {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .map(|t| t.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The descriptors of `pid` from 3 up, by kind (`socket`, `memfd`, or what else they are), and
/// the targets of all of them.
fn descriptors(pid: u32) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut kinds = BTreeMap::new();
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
    {
        let Ok(entry) = entry else { continue };
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let target = fd_target(&pid.to_string(), fd);
        if fd > 2 {
            let kind = if target.starts_with("socket:") {
                "socket".to_owned()
            } else if target.starts_with("/memfd:") {
                "memfd".to_owned()
            } else {
                target.clone()
            };
            *kinds.entry(kind).or_default() += 1;
        }
        targets.push(target);
    }
    (kinds, targets)
}

/// Waits (up to 2 s: a worker drops the channel ends it sent in `Hello` a moment after sending
/// it) until `pid` holds the descriptors of a lone worker, `expected`, and none of `foreign`.
fn assert_holds_only_its_own(pid: u32, expected: &BTreeMap<String, usize>, foreign: &[String]) {
    let start = Instant::now();
    loop {
        let (kinds, targets) = descriptors(pid);
        let leaked: Vec<&String> = targets.iter().filter(|t| foreign.contains(t)).collect();
        assert!(
            leaked.is_empty(),
            "worker {pid} holds the parent's {leaked:?}"
        );
        if &kinds == expected {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "worker {pid} holds {kinds:?} beyond 0-2; a lone worker holds {expected:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_pipe_the_parent_leaves_inheritable_reaches_eof_while_workers_run() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let (read, write) = inheritable_pipe();
    let pool = TuningProcessPool::new(
        PoolConfig::new()
            .devices(Devices::Cpu(4))
            .timeout(LONG)
            .process_config(config()),
    )
    .unwrap();
    drop(write);
    let mut fds = [libc::pollfd {
        fd: read.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: `fds` is a live array of one initialized pollfd.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, 5_000) };
    assert_eq!(
        ready, 1,
        "no EOF within 5 s of closing the write end: the workers hold it"
    );
    let mut byte = [0u8; 1];
    assert_eq!(std::fs::File::from(read).read(&mut byte).unwrap(), 0, "EOF");
    assert!(pool.benchmark(&[diag(DiagnosticTask::Pid)])[0].is_ok());
}

#[test]
fn workers_hold_only_their_standard_streams_and_their_own_channel() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    // What a worker started with nothing else going on holds.
    let mut lone = TuningProcess::spawn(config()).unwrap();
    lone.ping(LONG).unwrap();
    let lone_pid = lone.pid().unwrap();
    let expected = {
        let start = Instant::now();
        loop {
            let (kinds, _) = descriptors(lone_pid);
            if kinds.keys().all(|k| k == "socket" || k == "memfd") || start.elapsed().as_secs() > 2
            {
                break kinds;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    assert!(
        expected.keys().all(|k| k == "socket" || k == "memfd"),
        "a lone worker holds {expected:?}"
    );
    drop(lone);

    // Descriptors of the parent's that lack close-on-exec.
    let (pipe_read, pipe_write) = inheritable_pipe();
    let file = tempfile::tempfile().unwrap();
    // SAFETY: clearing the flags of a descriptor this test owns.
    let cleared = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFD, 0) };
    assert_eq!(cleared, 0);
    let me = "self";
    let foreign: Vec<String> = [
        pipe_read.as_raw_fd(),
        pipe_write.as_raw_fd(),
        file.as_raw_fd(),
    ]
    .iter()
    .map(|&fd| fd_target(me, fd))
    .collect();

    // 30 pools of 4 started from 6 threads while another pool replaces a worker after every
    // task: sockets accepted for one worker's handshake must not reach another.
    let churning = PoolExecutor::new(
        PoolConfig::new()
            .max_workers(2)
            .timeout(LONG)
            .maximum_process_uses(Some(1))
            .process_config(config()),
    )
    .unwrap();
    let pools: Vec<TuningProcessPool> = std::thread::scope(|scope| {
        let churn = scope.spawn(|| {
            let results =
                churning.map_with_error_catching((0..100).map(|_| diag(DiagnosticTask::Pid)));
            assert!(results.iter().all(|r| r.value().is_some()));
        });
        let builders: Vec<_> = (0..6)
            .map(|_| {
                scope.spawn(|| {
                    (0..5)
                        .map(|_| {
                            TuningProcessPool::new(
                                PoolConfig::new()
                                    .devices(Devices::Cpu(4))
                                    .timeout(LONG)
                                    .process_config(config()),
                            )
                            .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let pools = builders
            .into_iter()
            .flat_map(|b| b.join().unwrap())
            .collect();
        churn.join().unwrap();
        pools
    });
    let mut checked = 0;
    for pool in &pools {
        for pid in pool.worker_pids().into_iter().flatten() {
            assert_holds_only_its_own(pid, &expected, &foreign);
            checked += 1;
        }
    }
    assert_eq!(checked, 120);
    drop(pools);
    drop((pipe_read, pipe_write, file));
}
