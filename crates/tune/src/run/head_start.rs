//! A head start for the compiles: while a run readies measuring (the reference compiled and
//! run, the pool and its workers started), mostly one CPU at a time, the other CPUs compile
//! the first choices into the kernel cache, and the pipeline finds them there.
//!
//! Nothing is timed then (the reference runs once, untimed), so the compiles disturb no
//! window. A head-start compile is only a cache fill: its outcome is not recorded, and the
//! pipeline compiles the choice as ever (a cache hit, or the same error again, reported
//! there). When the run is ready, no new head-start compile starts; one under way finishes
//! first, since its work is the pipeline's next.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tunebox_cpu::{CacheDir, CompileControl};
use tunebox_protocol::Kernel;

use super::lookup::Todo;
use crate::measure::workers;

/// Runs `ready` on the calling thread while `threads` threads compile the C choices of `todo`,
/// in order, into `cache` under `control`; returns what `ready` returned once the compiles
/// under way have finished. With no thread or no C choice, just `ready`.
pub(super) fn with_head_start<T>(
    todo: &[Todo],
    cache: &CacheDir,
    control: &CompileControl<'_>,
    threads: usize,
    ready: impl FnOnce() -> T,
) -> T {
    let c: Vec<&Todo> = todo
        .iter()
        .filter(|t| matches!(t.request.kernel, Kernel::C(_)))
        .collect();
    if threads == 0 || c.is_empty() {
        return ready();
    }
    let next = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..threads.min(c.len()) {
            scope.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    let Some(todo) = c.get(next.fetch_add(1, Ordering::AcqRel)) else {
                        return;
                    };
                    if let Err(e) = workers::precompile(&todo.request, cache, control) {
                        log::debug!(
                            "head start: {} did not compile ({e}); the pipeline will say so",
                            todo.choice.label()
                        );
                    }
                }
            });
        }
        // Raised however `ready` ends (a panic included): no new compile starts after it.
        let _done = RaiseOnDrop(&done);
        ready()
    })
}

/// Raises its flag when dropped: a "done" that holds however the work before it ends (a
/// panic included), for threads that wait on it.
pub(super) struct RaiseOnDrop<'f>(pub(super) &'f AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Threads for a head start on a machine of `cpus` CPUs: every CPU but the one readying the
/// run.
pub(super) fn threads(cpus: usize) -> usize {
    cpus.saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tunebox_protocol::{BenchmarkRequest, CKernel, DiagnosticTask};

    use super::*;
    use crate::space::Choice;

    fn todo(index: usize, kernel: Kernel) -> Todo {
        let mut request = BenchmarkRequest::new(DiagnosticTask::Sleep { ms: 0 });
        request.kernel = kernel;
        Todo {
            index,
            choice: Choice::new(Default::default()),
            request,
            key: index.to_string(),
        }
    }

    /// Finished shared objects in the kernel cache `dir`, at any depth (not the compiler's
    /// temporary `.tunebox-*` files, which exist from the start of a compile).
    fn shared_objects(dir: &std::path::Path) -> usize {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| {
                let path = e.path();
                if path.is_dir() {
                    shared_objects(&path)
                } else {
                    let temporary = path
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(".tunebox-"));
                    usize::from(!temporary && path.extension().is_some_and(|x| x == "so"))
                }
            })
            .sum()
    }

    #[test]
    fn the_first_choices_compile_into_the_cache_while_the_run_readies() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CacheDir::new(dir.path().join("cache"));
        let todo: Vec<Todo> = (0..2)
            .map(|i| {
                let source = format!("static volatile int v; void k(void) {{ v = {i}; }}\n");
                todo(i, Kernel::C(CKernel::new(source, "k")))
            })
            .chain([todo(2, Kernel::Diagnostic(DiagnosticTask::Sleep { ms: 0 }))])
            .collect();
        // Readying that outlasts the compiles: both C choices are in the cache by its end.
        let value = with_head_start(&todo, &cache, &CompileControl::default(), 1, || {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while shared_objects(dir.path()) < 2 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            7
        });
        assert_eq!(value, 7);
        assert_eq!(shared_objects(dir.path()), 2);
    }

    #[test]
    fn a_compile_error_in_the_head_start_is_left_to_the_pipeline() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CacheDir::new(dir.path().join("cache"));
        let good = "static volatile int v; void k(void) { v = 1; }\n";
        let todo = [
            todo(0, Kernel::C(CKernel::new("this is not C\n", "k"))),
            todo(1, Kernel::C(CKernel::new(good, "k"))),
        ];
        // One thread, readying until the good choice is in the cache: the error before it
        // stopped nothing.
        let value = with_head_start(&todo, &cache, &CompileControl::default(), 1, || {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while shared_objects(dir.path()) < 1 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            "ready"
        });
        assert_eq!(value, "ready");
        assert_eq!(shared_objects(dir.path()), 1);
    }

    #[test]
    fn no_head_start_without_a_spare_cpu() {
        assert_eq!(threads(1), 0);
        assert_eq!(threads(2), 1);
        assert_eq!(threads(16), 15);
    }
}
