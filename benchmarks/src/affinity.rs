//! Pinning threads to CPUs, for the same-core and cross-core variants of the round-trip figures.

use anyhow::{Result, bail};

/// The CPUs a thread may run on (`sched_getaffinity`).
#[derive(Clone, Copy)]
pub(crate) struct CpuSet(libc::cpu_set_t);

/// The affinity of thread `tid` (0: the calling thread).
///
/// # Errors
///
/// The OS error of `sched_getaffinity`.
pub(crate) fn get(tid: libc::pid_t) -> Result<CpuSet> {
    // SAFETY: `cpu_set_t` is a plain bit array; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live `cpu_set_t` and the size passed is its size.
    let rc = unsafe { libc::sched_getaffinity(tid, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        bail!(
            "sched_getaffinity({tid}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(CpuSet(set))
}

/// Restricts thread `tid` (0: the calling thread) to `set`.
///
/// # Errors
///
/// The OS error of `sched_setaffinity`.
pub(crate) fn set(tid: libc::pid_t, set: &CpuSet) -> Result<()> {
    // SAFETY: `set.0` is a live, initialized `cpu_set_t` and the size passed is its size.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set.0), &set.0) };
    if rc != 0 {
        bail!(
            "sched_setaffinity({tid}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// The set holding only `cpu`.
pub(crate) fn only(cpu: usize) -> CpuSet {
    // SAFETY: all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `CPU_SET` writes one bit inside `set`; it checks `cpu` against the set's size.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    CpuSet(set)
}

/// Pins the calling thread to `cpu`.
///
/// # Errors
///
/// As [`set`].
pub(crate) fn pin_current_thread(cpu: usize) -> Result<()> {
    set(0, &only(cpu))
}

/// Runs `f` with the calling thread pinned to `cpu`, then restores its affinity.
///
/// # Errors
///
/// The pinning errors, or `f`'s.
pub(crate) fn pinned<R>(cpu: usize, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let previous = get(0)?;
    pin_current_thread(cpu)?;
    let result = f();
    set(0, &previous)?;
    result
}
