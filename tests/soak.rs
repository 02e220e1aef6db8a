//! The soak: many tasks of every kind through a recycling pool, then a check that the parent is
//! back where it started. Shared by `tunebox-soak` (`cargo xtask soak`) and a short variant in
//! the hygiene tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tunebox_pool::{PoolConfig, PoolExecutor, StatusKind};
use tunebox_process::{Output, ProcessConfig};
use tunebox_protocol::{BenchmarkRequest, Bytes, DiagnosticTask, Kernel};

/// What a soak task is, and what it must end as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Ok,
    Error,
    Panic,
    Abort,
    Segfault,
    Timeout,
    Exit,
    Flood,
    Leak,
}

impl Kind {
    /// The mix: mostly quick tasks, a steady share of every failure.
    fn of(index: u64) -> Kind {
        match index % 100 {
            0..=69 => Kind::Ok,
            70..=79 => Kind::Error,
            80..=84 => Kind::Panic,
            85..=87 => Kind::Abort,
            88..=90 => Kind::Segfault,
            91 => Kind::Timeout,
            92..=93 => Kind::Exit,
            94..=96 => Kind::Flood,
            _ => Kind::Leak,
        }
    }

    fn request(self, index: u64) -> BenchmarkRequest {
        let task = match self {
            Kind::Ok => DiagnosticTask::Echo {
                bytes: Bytes::from_vec(index.to_le_bytes().to_vec()).expect("8 bytes"),
            },
            Kind::Error => DiagnosticTask::Fail {
                message: format!("task {index}"),
            },
            Kind::Panic => DiagnosticTask::Panic {
                message: format!("task {index}"),
            },
            Kind::Abort => DiagnosticTask::Abort,
            Kind::Segfault => DiagnosticTask::Segfault,
            Kind::Timeout => DiagnosticTask::Hang,
            Kind::Exit => DiagnosticTask::Exit { code: 3 },
            Kind::Flood => DiagnosticTask::Print {
                stdout_bytes: 64 * 1024,
                stderr_bytes: 64 * 1024,
            },
            Kind::Leak => DiagnosticTask::Leak { bytes: 4 << 20 },
        };
        BenchmarkRequest::new(Kernel::Diagnostic(task))
    }

    /// The status a task of this kind must end with.
    fn expected(self) -> StatusKind {
        match self {
            Kind::Ok | Kind::Flood | Kind::Leak => StatusKind::Complete,
            Kind::Error | Kind::Panic => StatusKind::Exception,
            Kind::Abort | Kind::Segfault | Kind::Exit => StatusKind::Crashed,
            Kind::Timeout => StatusKind::Timeout,
        }
    }
}

/// Process-wide resources of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resources {
    pub(crate) fds: usize,
    pub(crate) memfds: usize,
    pub(crate) threads: usize,
    pub(crate) rss_kib: u64,
    pub(crate) zombies: usize,
}

impl Resources {
    pub(crate) fn now() -> Resources {
        let fd_targets: Vec<PathBuf> = std::fs::read_dir("/proc/self/fd")
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .collect()
            })
            .unwrap_or_default();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Resources {
            fds: fd_targets.len(),
            memfds: fd_targets
                .iter()
                .filter(|t| t.to_string_lossy().starts_with("/memfd:"))
                .count(),
            threads: field("Threads:") as usize,
            rss_kib: field("VmRSS:"),
            zombies: zombie_children(),
        }
    }
}

/// Children of this process that exited and were not reaped.
fn zombie_children() -> usize {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
                .filter(|stat| {
                    let Some((_, rest)) = stat.rsplit_once(')') else {
                        return false;
                    };
                    let mut fields = rest.split_whitespace();
                    fields.next() == Some("Z") && fields.next() == Some(me.as_str())
                })
                .count()
        })
        .unwrap_or(0)
}

/// One-shot server sockets ipc-channel left in the temporary directory (`.tmpXXXXXX/socket`).
pub(crate) fn socket_files() -> std::collections::BTreeSet<std::path::PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("socket"))
                .filter(|socket| socket.exists())
                .collect()
        })
        .unwrap_or_default()
}

/// The socket files in `after` that were not in `before` and that no live socket is bound to
/// (none in `/proc/net/unix` has the path): what a leak leaves. Other processes on the machine
/// (another test suite running at the same time) create and remove socket files in the same
/// temporary directory; theirs are either gone, present before, or still bound.
pub(crate) fn leaked_sockets(
    before: &std::collections::BTreeSet<std::path::PathBuf>,
    after: &std::collections::BTreeSet<std::path::PathBuf>,
) -> Vec<std::path::PathBuf> {
    let bound = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    after
        .difference(before)
        .filter(|socket| {
            let path = socket.to_string_lossy();
            !bound.lines().any(|line| line.ends_with(&*path))
        })
        .cloned()
        .collect()
}

/// Core files in the working directory.
fn core_files(cwd: &Path) -> usize {
    std::fs::read_dir(cwd)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("core"))
                .count()
        })
        .unwrap_or(0)
}

/// The outcome of a soak.
#[derive(Debug)]
pub(crate) struct Soak {
    pub(crate) tasks: u64,
    pub(crate) elapsed: Duration,
    pub(crate) counts: BTreeMap<String, u64>,
    pub(crate) wrong: Vec<String>,
    pub(crate) before: Resources,
    pub(crate) after: Resources,
    /// One-shot server sockets the soak left behind (new, and bound by no live socket).
    pub(crate) leaked_sockets: Vec<PathBuf>,
    pub(crate) core_files: (usize, usize),
}

impl Soak {
    /// Every invariant, as a list of violations (empty: the soak passed).
    pub(crate) fn violations(&self) -> Vec<String> {
        let mut out = self.wrong.clone();
        let (b, a) = (self.before, self.after);
        if a.fds > b.fds + 4 {
            out.push(format!("descriptors grew from {} to {}", b.fds, a.fds));
        }
        if a.memfds > b.memfds + 2 {
            out.push(format!("memfds grew from {} to {}", b.memfds, a.memfds));
        }
        if a.threads > b.threads + 2 {
            out.push(format!("threads grew from {} to {}", b.threads, a.threads));
        }
        if a.rss_kib > b.rss_kib + 64 * 1024 {
            out.push(format!(
                "RSS grew from {} KiB to {} KiB",
                b.rss_kib, a.rss_kib
            ));
        }
        if a.zombies > 0 {
            out.push(format!("{} zombie children", a.zombies));
        }
        if !self.leaked_sockets.is_empty() {
            out.push(format!(
                "one-shot server sockets left: {:?}",
                self.leaked_sockets
            ));
        }
        if self.core_files.1 > self.core_files.0 {
            out.push(format!(
                "{} core files",
                self.core_files.1 - self.core_files.0
            ));
        }
        out
    }
}

/// Runs `tasks` tasks (the mix of [`Kind::of`]) through a pool of 2 workers that are replaced
/// every 200 uses, with a 100 ms timeout, and measures the parent before and after.
pub(crate) fn run(worker: &Path, tasks: u64) -> Soak {
    let cwd = std::env::current_dir().expect("a working directory");
    let (sockets_before, cores_before) = (socket_files(), core_files(&cwd));
    let config = ProcessConfig::new()
        .worker(worker)
        .stdout(Output::Null)
        .stderr(Output::Capture { tail_bytes: 4096 });
    let before = {
        // Warm up the process-wide threads (spawner, watchdog) before the baseline.
        let executor = PoolExecutor::new(
            PoolConfig::new()
                .max_workers(2)
                .process_config(config.clone()),
        )
        .expect("a pool");
        executor.map_with_error_catching((0..10).map(|i| Kind::Ok.request(i)));
        drop(executor);
        Resources::now()
    };
    let start = Instant::now();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut wrong = Vec::new();
    {
        let executor = PoolExecutor::new(
            PoolConfig::new()
                .max_workers(2)
                .timeout(Duration::from_millis(100))
                .maximum_process_uses(Some(200))
                .process_config(config),
        )
        .expect("a pool");
        const BATCH: u64 = 1000;
        let mut next = 0;
        while next < tasks {
            let end = (next + BATCH).min(tasks);
            let results =
                executor.map_with_error_catching((next..end).map(|i| Kind::of(i).request(i)));
            for (i, result) in (next..end).zip(results) {
                let kind = Kind::of(i);
                *counts.entry(format!("{kind:?}")).or_default() += 1;
                let mut ok = result.status() == kind.expected();
                if kind == Kind::Ok {
                    ok &= result
                        .value()
                        .is_some_and(|v| v.outputs[0].bytes == i.to_le_bytes().to_vec());
                }
                if !ok && wrong.len() < 20 {
                    wrong.push(format!(
                        "task {i} ({kind:?}): {:?}, {:?}",
                        result.status(),
                        result.error()
                    ));
                }
            }
            next = end;
        }
        executor.shutdown(true);
    }
    let elapsed = start.elapsed();
    // Give the drain threads of the last workers a moment to see their pipes close.
    std::thread::sleep(Duration::from_millis(200));
    let after = Resources::now();
    let (sockets_after, cores_after) = (socket_files(), core_files(&cwd));
    Soak {
        tasks,
        elapsed,
        counts,
        wrong,
        before,
        after,
        leaked_sockets: leaked_sockets(&sockets_before, &sockets_after),
        core_files: (cores_before, cores_after),
    }
}
