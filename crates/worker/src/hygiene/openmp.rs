//! An OpenMP runtime's idle team, kept across tasks and never taken for threads a task left.
//!
//! GNU OpenMP (libgomp) keeps the threads of a parallel region's team in a pool after the
//! region ends, for the next region to reuse. A task whose team is larger than any before it in
//! the worker grows the pool, and the state checks took the new threads for threads the task
//! left running: the worker was replaced, so that the next window paid a fresh process (its
//! inputs mapped again, its outputs faulted in). With Kernel Tuner's `vector_add` (team sizes
//! 1-32 in shuffled order) that was one later window in four (docs/performance.md, "Issue 33,
//! sixteenth session").
//!
//! After such a task, the worker ends the pools of the OpenMP runtimes it has loaded
//! ([`tunebox_bench::end_openmp_pools`]: each joins its pool threads before it returns), so that
//! the threads left are the ones the task started otherwise, which the checks judge as before;
//! then, if the worker is kept, it starts libgomp's pool again at the size it had, with an empty
//! parallel region of its own. The next tasks find a pool as large as any team before them, as
//! in a worker that was never checked: their teams' threads exist and have run before (a window
//! whose team had just been started measured its reps less steadily: the histogram's 4-thread
//! choices' windows spread 3.8 % against 1.6 %), and the CPU backend's look for work left
//! running after the last call sees no new threads. LLVM's `libomp` and Intel's `libiomp5` are
//! ended too but not started again: their idle threads spin for `KMP_BLOCKTIME` (200 ms by
//! default) after a region, which would burn the CPUs the parent and the next window use; the
//! next task's first call, which is not timed, starts their team. (Where their threads spin
//! after a kernel's last call, the CPU backend has ended their pool already, before its look.)
//! The settings a task made (`omp_set_num_threads`, …) stay for the next in libgomp, as they
//! did; the LLVM family starts afresh from the environment.

use std::time::{Duration, Instant};

/// How long ended threads may take to leave `/proc/self/task`: `pthread_join` returns once a
/// thread cleared its thread id, which it does before the kernel has removed it. Waited out in
/// full only where threads other than the pools' stay (a task's own: the checks after this
/// judge them), so it is generous for a loaded machine.
const GONE_WITHIN: Duration = Duration::from_millis(200);

/// What ending the pools after a task did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    /// How many threads left (0 where no runtime is loaded or none had a pool).
    pub(crate) left: usize,
    /// Whether they were libgomp's alone, which the worker starts again at that size
    /// ([`tunebox_bench::start_gnu_openmp_pool`]).
    pub(crate) restartable: bool,
}

/// Ends the idle teams of the OpenMP runtimes this process has loaded, then waits until the
/// threads of this process (`before` of them now) are no more than `threads`, or at most
/// 200 ms. To be called on the thread that called the kernel, after its last call.
pub(crate) fn end_pools(threads: usize, before: usize) -> Ended {
    let ended = tunebox_bench::end_openmp_pools(tunebox_bench::Runtimes::All);
    if !ended.any() {
        return Ended {
            left: 0,
            restartable: false,
        };
    }
    let start = Instant::now();
    let mut now = before;
    while let Some(n) = tunebox_bench::thread_count() {
        now = n;
        if n <= threads || start.elapsed() >= GONE_WITHIN {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ended {
        left: before.saturating_sub(now),
        restartable: ended.gnu && !ended.llvm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_happens_where_no_openmp_runtime_is_loaded() {
        // The worker's own tests never load an OpenMP runtime (and run on threads of their
        // own, so the process's thread count is no measure here: `tests/kernels.rs` checks
        // the pools).
        let ended = end_pools(usize::MAX, 1);
        assert_eq!((ended.left, ended.restartable), (0, false));
    }
}
