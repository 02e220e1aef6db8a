//! A reused worker's state between tasks: what a task changed or left behind, put back where it
//! can be, reported always, and a reason to replace the worker where it cannot.
//!
//! Before its first task the worker records its restorable state ([`Baseline`]: floating-point
//! modes, signal dispositions and mask, working directory, umask, environment, rlimits, CPU
//! affinity, priority, timer slack). After every benchmark or prepare request it compares the
//! state with that record and puts back what differs, so the next task runs as in a fresh
//! worker; and it compares descriptors, threads and anonymous memory with what they were
//! before the request, and the child processes it left running. Those it cannot take back
//! safely (closing a descriptor or stopping a thread that a loaded library still uses, a child
//! the task may still wait for): a leftover there is reported not `restored`, and the parent
//! replaces the worker before the next task (its process group, children included, goes with
//! it), so that what a task leaves is charged to that task, never to the next. Each request's reply carries its
//! leftovers, so the task that did it is named by its own result. An OpenMP runtime's idle
//! team is no leftover: a pool the task grew is ended before the state is checked and started
//! again after ([`openmp`]).
//!
//! The first request a backend serves in a worker may leave what the backend sets up for
//! itself (the CUDA driver's threads, device files and event descriptors; a cache-flush buffer):
//! those are not counted against it. A task that then fails for lack of a resource in a reused
//! worker ("Too many open files", "Cannot allocate memory") is told so, with the earlier task
//! that grew that resource most (the task itself, when it grew it more while it ran), and the
//! worker is replaced.

mod fpenv;
mod openmp;
mod resources;
mod restorable;

use std::collections::{BTreeMap, HashSet, VecDeque};

use tunebox_protocol::{BenchError, BenchmarkRequest, Kernel, Leftover};

use self::resources::{
    Resources, fd_target, is_backend_setup, is_plumbing, kib_words, process_name, thread_name,
};
use self::restorable::Baseline;

/// Anonymous memory a task may keep (after its first request, a backend keeps nothing that
/// large) before the worker is replaced: 256 MiB.
const MEMORY_GROWTH_LIMIT_KIB: u64 = 256 << 10;

/// How many earlier tasks the worker remembers, to name the likely culprit of an exhaustion.
const HISTORY: usize = 64;

/// The state keeper of one worker.
pub(crate) struct Hygiene {
    /// Benchmark requests left before the parent replaces the worker (`WORKER_USES_ENV`);
    /// `None`: no limit.
    uses_left: Option<u64>,
    /// Unless `TUNEBOX_WORKER_STATE_CHECKS=0`.
    enabled: bool,
    baseline: Baseline,
    /// Backends that have served a request in this worker.
    warmed: HashSet<String>,
    /// What the last tasks grew, oldest first.
    history: VecDeque<Growth>,
}

/// The resources one task left behind, whether or not they were counted against it.
struct Growth {
    label: String,
    fds: usize,
    /// Threads and child processes.
    threads: usize,
    anon_kib: u64,
}

/// The resources before a request, to compare with after it.
pub(crate) struct Before(Resources);

impl Hygiene {
    /// Records the worker's state now, before its first task.
    pub(crate) fn new() -> Hygiene {
        Hygiene {
            uses_left: std::env::var(tunebox_protocol::WORKER_USES_ENV)
                .ok()
                .and_then(|n| n.trim().parse().ok()),
            enabled: std::env::var_os("TUNEBOX_WORKER_STATE_CHECKS").is_none_or(|v| v != "0"),
            baseline: Baseline::capture(),
            warmed: HashSet::new(),
            history: VecDeque::new(),
        }
    }

    /// Called before a benchmark (`counts`: a use of the worker) or prepare request runs.
    /// `None` when the request is not checked: the worker's last use (nothing could inherit its
    /// state), a task of the `diagnostics` backend (tunebox's own scripted tasks, which change
    /// no state a later task sees), a backend that keeps state on purpose (`backend_checks`
    /// false: `Backend::checks_worker_state`), or checks turned off
    /// (`TUNEBOX_WORKER_STATE_CHECKS=0`).
    pub(crate) fn before(
        &mut self,
        request: &BenchmarkRequest,
        counts: bool,
        backend_checks: bool,
    ) -> Option<Before> {
        if counts && let Some(left) = &mut self.uses_left {
            *left = left.saturating_sub(1);
            if *left == 0 {
                // The worker's last request: what it drops serves no later one.
                tunebox_bench::keep_mappings(false);
                return None;
            }
        }
        if !self.enabled || !backend_checks || request.kernel.backend() == "diagnostics" {
            return None;
        }
        Some(Before(Resources::now()))
    }

    /// Called after `request` ran (and failed with `error`, if it did): puts back the state it
    /// changed and says what it left behind.
    pub(crate) fn after(
        &mut self,
        before: Option<Before>,
        request: &BenchmarkRequest,
        error: Option<&BenchError>,
    ) -> Vec<Leftover> {
        let Some(before) = before else {
            return Vec::new();
        };
        // A task that grew the worker's threads may have grown an OpenMP runtime's pool: ended
        // before the state is checked (what the threads' exit runs, a task's thread-local
        // destructors, is checked too), and libgomp's started again below if the worker is
        // kept. A task that failed keeps whatever its runtime holds: its worker goes anyway if
        // that is threads, and a runtime whose threads never came back could hang here.
        let pool = match tunebox_bench::thread_count() {
            Some(now) if now > before.0.threads.len() && error.is_none() => {
                Some(openmp::end_pools(before.0.threads.len(), now))
            }
            _ => None,
        };
        let mut found = self.baseline.check_and_restore();
        let after = Resources::now();
        let first = self.warmed.insert(request.kernel.backend().to_owned());
        let before = before.0;

        let fds: Vec<(i32, String)> = after
            .fds
            .difference(&before.fds)
            .filter_map(|&fd| Some((fd, fd_target(fd)?)))
            .filter(|(_, target)| !is_plumbing(target))
            .collect();
        let counted: Vec<&String> = fds
            .iter()
            .map(|(_, target)| target)
            .filter(|target| !(first && is_backend_setup(target)))
            .collect();
        if !counted.is_empty() {
            found.push(Leftover::new(
                "descriptors",
                format!("left {} open: {}", counted.len(), group(&counted)),
                false,
            ));
        }
        let threads: Vec<i32> = after.threads.difference(&before.threads).copied().collect();
        if !first && !threads.is_empty() {
            let names: Vec<String> = threads.iter().map(|&t| thread_name(t)).collect();
            let names: Vec<&String> = names.iter().collect();
            found.push(Leftover::new(
                "threads",
                format!("left {} running: {}", threads.len(), group(&names)),
                false,
            ));
        }
        // No backend starts a process that outlives its request: counted from the first one.
        let children: Vec<i32> = after
            .children
            .difference(&before.children)
            .copied()
            .collect();
        if !children.is_empty() {
            let names: Vec<String> = children.iter().map(|&p| process_name(p)).collect();
            found.push(Leftover::new(
                "processes",
                format!("left {} running: {}", children.len(), names.join(", ")),
                false,
            ));
        }
        let grown = after.anon_kib.saturating_sub(before.anon_kib);
        if !first && grown > MEMORY_GROWTH_LIMIT_KIB {
            found.push(Leftover::new(
                "memory",
                format!(
                    "kept {} more than before it ({} → {} of anonymous memory)",
                    kib_words(grown),
                    kib_words(before.anon_kib),
                    kib_words(after.anon_kib)
                ),
                false,
            ));
        }
        let growth = Growth {
            label: describe(request),
            fds: fds.len(),
            threads: threads.len() + children.len(),
            anon_kib: grown,
        };
        if let Some(exhausted) = error.and_then(|e| self.exhaustion(e, &growth)) {
            found.push(exhausted);
        }
        self.history.push_back(growth);
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
        if !found.is_empty() {
            // The reply carries them; a damaged worker is worth a line on its own stderr.
            let level = if found.iter().all(|l| l.restored) {
                log::Level::Info
            } else {
                log::Level::Warn
            };
            log::log!(
                level,
                "{} left behind: {}",
                describe(request),
                found
                    .iter()
                    .map(Leftover::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        if let Some(pool) = pool.filter(|p| p.left > 0 && p.restartable)
            && found.iter().all(|l| l.restored)
            && !tunebox_bench::start_gnu_openmp_pool(pool.left)
        {
            log::debug!(
                "libgomp's pool of {} threads could not be started again",
                pool.left
            );
        }
        found
    }

    /// When `error` says a resource ran out and earlier tasks ran in this worker: the
    /// leftover that names the likely culprit and has the worker replaced. The culprit is the
    /// task that grew the resource most: an earlier one, or this one (`own`, what it grew
    /// while it ran), which then fails the same way in a fresh worker.
    fn exhaustion(&self, error: &BenchError, own: &Growth) -> Option<Leftover> {
        let message = error.to_string();
        let resource = Resource::exhausted_in(&message)?;
        if self.history.is_empty() {
            return None;
        }
        let earlier = self
            .history
            .iter()
            .filter(|g| resource.growth(g) > 0)
            .max_by_key(|g| resource.growth(g));
        let blame = match earlier {
            Some(g) if resource.growth(g) >= resource.growth(own) => format!(
                "likely culprit: `{}`, which left {} behind",
                g.label,
                resource.amount(resource.growth(g))
            ),
            _ if resource.growth(own) > 0 => format!(
                "likely culprit: this task itself (`{}`), which left {} behind while it ran; \
                 the {} tasks before it left {}",
                own.label,
                resource.amount(resource.growth(own)),
                self.history.len(),
                earlier.map_or_else(
                    || "none".to_owned(),
                    |g| format!("at most {}", resource.amount(resource.growth(g)))
                )
            ),
            _ => format!(
                "none of the last {} tasks, this one included, left {} behind that the worker \
                 could see",
                self.history.len(),
                resource.noun()
            ),
        };
        Some(Leftover::new(
            "resources",
            format!(
                "this task ran out of {} (`{}`) in a worker that had run {} tasks before it; {blame}",
                resource.noun(),
                first_line(&message),
                self.history.len()
            ),
            false,
        ))
    }
}

/// A resource whose exhaustion an error message names.
#[derive(Clone, Copy)]
enum Resource {
    Descriptors,
    Memory,
    Threads,
}

impl Resource {
    fn exhausted_in(message: &str) -> Option<Resource> {
        let m = message.to_ascii_lowercase();
        if m.contains("too many open files")
            || m.contains("os error 24")
            || m.contains("os error 23")
        {
            Some(Resource::Descriptors)
        } else if m.contains("cannot allocate memory")
            || m.contains("out of memory")
            || m.contains("os error 12")
            || m.contains("memory allocation of")
        {
            Some(Resource::Memory)
        } else if m.contains("resource temporarily unavailable") || m.contains("os error 11") {
            Some(Resource::Threads)
        } else {
            None
        }
    }

    fn growth(self, g: &Growth) -> u64 {
        match self {
            Resource::Descriptors => g.fds as u64,
            Resource::Memory => g.anon_kib,
            Resource::Threads => g.threads as u64,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Resource::Descriptors => "file descriptors",
            Resource::Memory => "memory",
            Resource::Threads => "threads or processes",
        }
    }

    fn amount(self, n: u64) -> String {
        match self {
            Resource::Descriptors => format!("{n} descriptors"),
            Resource::Memory => kib_words(n),
            Resource::Threads => format!("{n} threads or processes"),
        }
    }
}

/// `/dev/null ×37, pipe ×2`: descriptor targets or thread names, counted.
fn group(items: &[&String]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for item in items {
        // `pipe:[1234]` and `socket:[99]` count as one kind each.
        let kind = item.split(":[").next().unwrap_or(item).to_owned();
        *counts.entry(kind).or_default() += 1;
    }
    let mut parts: Vec<String> = counts
        .into_iter()
        .map(|(kind, n)| {
            if n == 1 {
                kind
            } else {
                format!("{kind} ×{n}")
            }
        })
        .collect();
    if parts.len() > 6 {
        let more = parts.len() - 6;
        parts.truncate(6);
        parts.push(format!("{more} more"));
    }
    parts.join(", ")
}

fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or_default()
}

/// The task in words, as a results table names a choice: `matmul BM=96 BN=512`, a task kind's
/// type, a diagnostic task.
pub(crate) fn describe(request: &BenchmarkRequest) -> String {
    let with_defines = |entry: &str, defines: &[tunebox_protocol::Define]| {
        let mut words = vec![entry.to_owned()];
        words.extend(defines.iter().map(|d| format!("{}={}", d.name, d.value)));
        words.join(" ")
    };
    let text = match &request.kernel {
        Kernel::C(c) => with_defines(&c.entry, &c.defines),
        Kernel::Cuda(c) => with_defines(&c.entry, &c.defines),
        Kernel::Diagnostic(task) => format!("diagnostics {task:?}"),
        Kernel::Task(task) => format!("{} task `{}`", task.backend, task.task_type),
        other => format!("{} kernel", other.backend()),
    };
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(119).collect();
        format!("{cut}…")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use tunebox_protocol::DiagnosticTask;

    use super::*;

    fn task() -> BenchmarkRequest {
        tunebox_protocol::TaskRequest::new(Square(2))
            .encode()
            .unwrap()
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    pub(super) struct Square(pub(super) u64);

    impl tunebox_protocol::Task for Square {
        const BACKEND: &'static str = "squares";
        type Output = u64;
    }

    #[test]
    fn diagnostics_tasks_and_the_last_use_are_not_checked() {
        let mut hygiene = Hygiene::new();
        hygiene.uses_left = Some(2);
        let diagnostics =
            BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Sleep { ms: 0 }));
        assert!(hygiene.before(&diagnostics, false, true).is_none());
        assert!(
            hygiene.before(&task(), true, true).is_some(),
            "the first of two uses"
        );
        assert!(
            hygiene.before(&task(), true, true).is_none(),
            "the last use"
        );
        hygiene.uses_left = Some(2);
        assert!(
            hygiene.before(&task(), true, false).is_none(),
            "a backend that keeps its state"
        );
        assert!(
            hygiene.before(&task(), true, true).is_none(),
            "it counted as a use"
        );
    }

    #[test]
    fn a_task_that_changes_nothing_leaves_nothing() {
        let mut hygiene = Hygiene::new();
        for _ in 0..3 {
            let before = hygiene.before(&task(), true, true);
            let found = hygiene.after(before, &task(), None);
            // Other tests of this process start threads and open files meanwhile.
            let found: Vec<_> = found
                .iter()
                .filter(|l| !matches!(l.what.as_str(), "threads" | "descriptors" | "memory"))
                .collect();
            assert!(found.is_empty(), "{found:?}");
        }
    }

    #[test]
    fn an_exhaustion_names_the_task_that_grew_the_resource_most() {
        let mut hygiene = Hygiene::new();
        for (label, fds) in [("a", 0), ("leaky", 40), ("b", 2)] {
            hygiene.history.push_back(Growth {
                label: label.into(),
                fds,
                threads: 0,
                anon_kib: 0,
            });
        }
        let error = BenchError::Failed {
            message: "open x: Too many open files (os error 24)".into(),
        };
        let own = |fds| Growth {
            label: "k LEAK=1".into(),
            fds,
            threads: 0,
            anon_kib: 0,
        };
        let found = hygiene.exhaustion(&error, &own(0)).unwrap();
        assert!(!found.restored);
        assert!(
            found.detail.contains("ran out of file descriptors")
                && found
                    .detail
                    .contains("likely culprit: `leaky`, which left 40 descriptors"),
            "{found}"
        );
        // A task that opened more while it ran than any before it is its own culprit.
        let found = hygiene.exhaustion(&error, &own(1000)).unwrap();
        assert!(
            found.detail.contains(
                "likely culprit: this task itself (`k LEAK=1`), which left 1000 descriptors \
                 behind while it ran; the 3 tasks before it left at most 40 descriptors"
            ),
            "{found}"
        );
        let other = BenchError::Failed {
            message: "wrong answer".into(),
        };
        assert!(hygiene.exhaustion(&other, &own(0)).is_none());
    }

    /// A child process a task leaves running is its leftover (the worker is replaced, its
    /// process group with it), never the next task's.
    #[test]
    fn a_child_left_running_is_the_tasks_leftover() {
        let mut hygiene = Hygiene::new();
        let before = hygiene.before(&task(), true, true);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        // `spawn` returns once exec has closed the descriptors, which on a busy machine can
        // come before the kernel names the process after its new program.
        let comm = format!("/proc/{}/comm", child.id());
        let named = std::time::Instant::now();
        while std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() != "sleep")
            && named.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let found = hygiene.after(before, &task(), None);
        let processes = found
            .iter()
            .find(|l| l.what == "processes")
            .unwrap_or_else(|| panic!("{found:?}"));
        assert!(
            !processes.restored
                && processes
                    .detail
                    .contains(&format!("sleep (pid {})", child.id())),
            "{processes}"
        );
        // The next task finds it there before and after: nothing of its own.
        let before = hygiene.before(&task(), true, true);
        let found = hygiene.after(before, &task(), None);
        assert!(found.iter().all(|l| l.what != "processes"), "{found:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn groups_count_kinds() {
        let items: Vec<String> = ["/dev/null", "/dev/null", "pipe:[12]", "pipe:[13]", "/tmp/a"]
            .map(String::from)
            .to_vec();
        let refs: Vec<&String> = items.iter().collect();
        assert_eq!(group(&refs), "/dev/null ×2, /tmp/a, pipe ×2");
    }
}
/// What the checks cost: `cargo test --release -p tunebox-worker measure_state_check_cost --
/// --ignored --nocapture` prints the worker CPU time per request (best of 10 × 500) and fails
/// when a request's checks cost more than 2 ms of CPU. A benchmark, so ignored by default.
#[cfg(test)]
mod cost {
    fn cpu_us() -> f64 {
        tunebox_bench::thread_cpu_ms().expect("the thread's CPU clock") * 1e3
    }

    #[test]
    #[ignore = "a measurement, not a test: run it by name"]
    fn measure_state_check_cost() {
        let mut h = super::Hygiene::new();
        let r = tunebox_protocol::TaskRequest::new(super::tests::Square(2))
            .encode()
            .unwrap();
        let time = |f: &mut dyn FnMut()| {
            let mut best = f64::INFINITY;
            for _ in 0..10 {
                let t = cpu_us();
                for _ in 0..500 {
                    f();
                }
                best = best.min((cpu_us() - t) / 500.0);
            }
            best
        };
        assert!(
            h.baseline.check_and_restore().is_empty(),
            "an untouched process has nothing to put back"
        );
        eprintln!(
            "restorable state: {:.1} µs of CPU per check",
            time(&mut || {
                std::hint::black_box(h.baseline.check_and_restore());
            })
        );
        eprintln!(
            "resource snapshot: {:.1} µs",
            time(&mut || {
                std::hint::black_box(super::Resources::now());
            })
        );
        let whole = time(&mut || {
            let b = h.before(&r, true, true);
            std::hint::black_box(h.after(b, &r, None));
        });
        eprintln!("a whole request (two snapshots, one check): {whole:.1} µs");
        // 70 µs in release on a loaded 2-vCPU VM; the bound is what "small next to a
        // measurement" means (a choice's measurement takes 100 ms or more).
        assert!(
            whole < 2000.0,
            "the state checks cost {whole:.1} µs of CPU a request"
        );
    }
}
