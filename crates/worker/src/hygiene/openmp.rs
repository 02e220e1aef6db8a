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
//! After such a task, the worker asks libgomp to end its pool (OpenMP 5.0's
//! `omp_pause_resource_all(omp_pause_hard)`: libgomp tells each pool thread to exit and joins
//! it before it returns), so that the threads left are the ones the task started otherwise,
//! which the checks judge as before; then, if the worker is kept, it starts the pool again at
//! the size it had, with an empty parallel region of its own (`GOMP_parallel`, the entry point
//! `#pragma omp parallel` compiles to). The next tasks find a pool as large as any team before
//! them, as in a worker that was never checked: their teams' threads exist and have run before
//! (a window whose team had just been started measured its reps less steadily: the histogram's
//! 4-thread choices' windows spread 3.8 % against 1.6 %), and the CPU backend's look for work
//! left running after the last call sees no new threads. Only the pool of the calling thread,
//! the one that called the kernel, is ended, and only once its threads are back in it: after a
//! kernel's call returned they are (a region ends at a barrier that waits for every thread), and
//! a pool thread a hostile kernel kept busy would hold the worker there until the parent's
//! timeout ends the task. The settings a task made (`omp_set_num_threads`, …) stay for the
//! next, as they did. Only libgomp is asked (the runtime of `gcc -fopenmp`, and the one tested):
//! another runtime's new threads still retire the worker.

use std::ffi::{CStr, c_int, c_uint, c_void};
use std::time::{Duration, Instant};

/// The OpenMP runtime whose pool is ended and started again, by soname.
const LIBGOMP: &CStr = c"libgomp.so.1";

/// `omp_pause_hard` of `omp.h`'s `omp_pause_resource_t`.
const OMP_PAUSE_HARD: c_int = 2;

/// How long ended threads may take to leave `/proc/self/task`: `pthread_join` returns once a
/// thread cleared its thread id, which it does before the kernel has removed it. Waited out in
/// full only where threads other than the pool's stay (a task's own: the checks after this
/// judge them), so it is generous for a loaded machine.
const GONE_WITHIN: Duration = Duration::from_millis(200);

/// Ends the idle team of libgomp if this process has it loaded, then waits until the threads
/// of this process (`before` of them now) are no more than `threads`, or at most 200 ms.
/// Returns how many threads left (the pool's size; 0 where libgomp is not loaded or had no
/// pool). To be called on the thread that called the kernel, after its last call.
pub(crate) fn end_pool(threads: usize, before: usize) -> usize {
    if !with_libgomp(|gomp| {
        // SAFETY: OpenMP 5.0 declares `int omp_pause_resource_all(omp_pause_resource_t kind)`,
        // an enum passed as an `int`.
        let pause: Option<extern "C" fn(c_int) -> c_int> =
            unsafe { symbol(gomp, c"omp_pause_resource_all") };
        pause.is_some_and(|pause| pause(OMP_PAUSE_HARD) == 0)
    }) {
        return 0;
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
    before.saturating_sub(now)
}

/// Starts libgomp's pool again with `threads` idle threads: one empty parallel region of
/// `threads + 1` (this thread leads it). Whether it ran (libgomp loaded, with `GOMP_parallel`).
pub(crate) fn start_pool(threads: usize) -> bool {
    let Ok(team) = c_uint::try_from(threads + 1) else {
        return false;
    };
    with_libgomp(|gomp| {
        // SAFETY: libgomp's `void GOMP_parallel(void (*fn)(void *), void *data, unsigned
        // num_threads, unsigned flags)` (GCC 4.9 on), what `#pragma omp parallel` calls: `fn`
        // runs on every thread of the team with `data`, and it returns once all have.
        let parallel: Option<
            extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, c_uint, c_uint),
        > = unsafe { symbol(gomp, c"GOMP_parallel") };
        parallel
            .map(|parallel| parallel(nothing, std::ptr::null_mut(), team, 0))
            .is_some()
    })
}

/// The work of the empty region [`start_pool`] runs.
extern "C" fn nothing(_: *mut c_void) {}

/// Runs `with` on a handle of libgomp if this process has it loaded (none is where no kernel
/// built with `-fopenmp` ran); `false` otherwise.
fn with_libgomp(with: impl FnOnce(*mut c_void) -> bool) -> bool {
    // SAFETY: `LIBGOMP` is NUL-terminated; `RTLD_NOLOAD` only looks the library up among those
    // loaded (no code of a library not yet loaded runs) and counts a reference to it, given
    // back below.
    let handle = unsafe { libc::dlopen(LIBGOMP.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return false;
    }
    let done = with(handle);
    // SAFETY: gives back the reference `dlopen` counted; the library was loaded before it (a
    // kernel library's dependency, never unloaded), so it stays loaded.
    unsafe { libc::dlclose(handle) };
    done
}

/// The function `name` of the library `handle` as `F`, if it has one.
///
/// # Safety
///
/// `handle` is a live `dlopen` handle, and `F` is a function pointer type matching the
/// symbol's C declaration.
unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &CStr) -> Option<F> {
    // SAFETY: as the caller promises; the name is NUL-terminated.
    let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
    // SAFETY: a non-null symbol of the declared type, by the caller's promise; `F` is a
    // function pointer, the size of an address.
    (!address.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_happens_where_libgomp_is_not_loaded() {
        // The worker's own tests never load libgomp (and run on threads of their own, so the
        // process's thread count is no measure here: `tests/kernels.rs` checks the pool).
        assert_eq!(end_pool(usize::MAX, 1), 0);
        assert!(!start_pool(3));
    }
}
