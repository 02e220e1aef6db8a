//! Checks a candidate cannot pass by cheating the harness: a last call on fresh inputs, and
//! work still going on after its calls returned (docs/sandbox.md).

use std::time::{Duration, Instant};

use tunebox_bench::{HostTensor, Runtimes, end_openmp_pools};
use tunebox_protocol::{BenchError, BenchmarkRequest, TensorData};

/// The gap between two looks at the threads after the last call, when the kernel started
/// threads: a stretch reads their states [`SAMPLES`] times, [`WATCH`] apart. A stretch in which
/// no thread but the caller was runnable at every look, and the process used at most
/// [`IDLE_CPU_SHARE`] of a core, is quiet, and ends the watch: a runtime's idle threads
/// (libgomp spins for GOMP_SPINCOUNT, 300,000 rounds, after a parallel region: milliseconds on
/// a slow or busy machine) fall asleep in one of the first stretches, work left running never
/// does.
const WATCH: Duration = Duration::from_millis(1);

/// Looks per stretch (the first at its start, then one every [`WATCH`]).
const SAMPLES: u32 = 5;

/// How long the worker watches before it calls the work deferred: as long as the fixed
/// 30 ms settle and ten 10 ms windows it once always waited through, so a kernel is given no
/// less time to go quiet, while an honest one costs only the stretches its runtime needs.
const DEADLINE: Duration = Duration::from_millis(130);

/// How long ending an OpenMP runtime's idle team may take ([`end_pools_in_time`]): an honest
/// one joins its threads in well under a millisecond (0.1-0.2 ms for four on a 2-vCPU guest),
/// a few ms on a loaded machine. Longer, its threads ran something of the kernel's as they
/// exited (a thread-local destructor, say, that waits for work left running), which the look
/// would otherwise not see.
const PAUSE_GRACE: Duration = Duration::from_millis(50);

/// How long the outputs are watched when the kernel started no thread.
const QUICK_WATCH: Duration = Duration::from_millis(1);

/// What one stretch of [`SAMPLES`] looks saw.
struct Window {
    /// Threads (but the caller) runnable at every look.
    busy: Vec<u32>,
    /// The process's CPU time during the stretch.
    cpu: Duration,
    /// How long the stretch lasted.
    took: Duration,
}

impl Window {
    /// Reads the threads' states [`SAMPLES`] times, [`WATCH`] apart.
    fn watch() -> Window {
        let started = Instant::now();
        let cpu_before = cpu_time();
        let mut busy = other_runnable_threads();
        for _ in 1..SAMPLES {
            std::thread::sleep(WATCH);
            let now = other_runnable_threads();
            busy.retain(|t| now.contains(t));
        }
        Window {
            busy,
            cpu: cpu_time().saturating_sub(cpu_before),
            took: started.elapsed(),
        }
    }

    fn cpu_is_busy(&self) -> bool {
        self.cpu.as_secs_f64() > self.took.as_secs_f64() * IDLE_CPU_SHARE
    }

    fn is_quiet(&self) -> bool {
        self.busy.is_empty() && !self.cpu_is_busy()
    }
}

/// CPU time the process may use while it should be idle, as a share of a stretch's: more than
/// half a core busy after the call returned is work the kernel left running.
const IDLE_CPU_SHARE: f64 = 0.5;

/// Refills every randomly initialized input with `fresh` mixed into its seed, in place (the
/// same buffers, so a kernel that keys a memo on its pointers replays a stale answer): from
/// its `fresh_contents` when the caller made them ([`HostTensor::refill`]), else generated.
/// Returns whether any input changed; inputs given as data or constants cannot be refilled.
///
/// # Errors
///
/// An input cannot be allocated again (as [`HostTensor::allocate`]).
pub(crate) fn refill_fresh(
    request: &BenchmarkRequest,
    tensors: &mut [HostTensor],
    fresh: u64,
) -> Result<bool, BenchError> {
    let mut any = false;
    for (spec, tensor) in request.tensors.iter().zip(tensors.iter_mut()) {
        let Some(fresh_spec) = tunebox_bench::fresh_input_spec(spec, fresh) else {
            continue;
        };
        match &spec.fresh_contents {
            // Made by the caller: mapped in place of the input's pages.
            Some(contents) => tensor.refill(contents)?,
            None => {
                let refilled = HostTensor::allocate(&fresh_spec)?;
                tensor.bytes_mut().copy_from_slice(refilled.bytes());
            }
        }
        any = true;
    }
    Ok(any)
}

/// The number of this process's threads now.
pub(crate) fn thread_count() -> usize {
    tunebox_bench::thread_count().unwrap_or(0)
}

/// This process's thread ids, sorted; `None` where `/proc/self/task` cannot be read.
pub(crate) fn thread_ids() -> Option<Vec<u32>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let mut ids: Vec<u32> = tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect();
    ids.sort_unstable();
    Some(ids)
}

/// Fails with [`BenchError::Suspicious`] when, after the kernel's last call returned, the
/// process still has child processes it did not have before the first call
/// (`children_before`, [`child_processes`]: those belong to an earlier task of a reused worker,
/// never to this one), still burns CPU, or its outputs still change: work deferred past the
/// timed window. `threads_before` are the [`thread_ids`] before the first call: the look waits
/// only where a thread not among them is there after the call (by id, not by count: a kernel
/// whose smaller team let a kept OpenMP pool shrink could otherwise start a thread of its own
/// unseen).
///
/// Only in a worker process (one that reached the worker entry point), which runs nothing but
/// the request: a backend embedded in a program of its own (a test, a tool calling
/// `CpuBackend` directly) shares its threads and children with that program.
///
/// `copies`: the copies of the last call's outputs the worker made for its reply, if it made
/// them (else empty); the outputs are compared with them after the watch.
///
/// The idle threads of an OpenMP runtime that spin after a region are no work left
/// ([`tunebox_bench::end_openmp_pools`] ends a runtime's pool, joining its threads): LLVM's
/// `libomp` and Intel's `libiomp5` spin for `KMP_BLOCKTIME`, 200 ms by default, so their pools
/// are ended once the first stretch finds the process busy; GNU's `libgomp` spins for well
/// under a millisecond unless told to spin on (`OMP_WAIT_POLICY=active`), so its pool is kept
/// for the next task unless the process is still busy at the deadline, when it is ended and
/// looked at once more. Either way only threads of the kernel's own can keep it busy. Returns
/// how many threads not among `threads_before` were there when the look began, the pools'
/// included (`None` outside a worker, or where threads cannot be listed). Ending a pool that
/// takes longer than [`PAUSE_GRACE`] is work left running.
pub(crate) fn check_deferred_work(
    request: &BenchmarkRequest,
    tensors: &[HostTensor],
    (threads_before, children_before): (&[u32], &[u32]),
    copies: &[TensorData],
) -> Result<Option<usize>, BenchError> {
    if !tunebox_protocol::worker_entry_reached() {
        return Ok(None);
    }
    let new_children = || {
        let mut children = child_processes();
        children.retain(|pid| !children_before.contains(pid));
        children
    };
    let children = new_children();
    if !children.is_empty() {
        return Err(lingering_children(&children));
    }
    let started = thread_ids().map(|now| {
        now.iter()
            .filter(|t| threads_before.binary_search(t).is_err())
            .count()
    });
    if started.unwrap_or(0) == 0 {
        // No thread the kernel started: nothing can be working behind its back but a signal
        // handler, which the outputs would show.
        check_outputs_settle(request, tensors, copies, QUICK_WATCH)?;
        return Ok(started);
    }
    let returned = Instant::now();
    let snapshot = Snapshot::take(request, tensors, copies);
    let mut window = Window::watch();
    let mut ended = false;
    if !window.is_quiet() && end_pools_in_time(Runtimes::SpinningWhenIdle, returned)? {
        ended = true;
        window = Window::watch();
    }
    // Busy in every stretch up to the deadline: a runtime's spinning threads fall asleep in
    // one of them, work left running never does.
    while !window.is_quiet() && returned.elapsed() < DEADLINE {
        window = Window::watch();
    }
    if !window.is_quiet() && end_pools_in_time(Runtimes::All, returned)? {
        ended = true;
        window = Window::watch();
    }
    let elapsed = returned.elapsed();
    let children = new_children();
    if !children.is_empty() {
        return Err(lingering_children(&children));
    }
    outputs_unchanged(request, tensors, &snapshot, elapsed)?;
    still_running(&window, elapsed, threads_before.len(), ended)?;
    Ok(started)
}

/// Ends the idle teams of the OpenMP runtimes of `which` ([`end_openmp_pools`]); whether any
/// was ended. `returned`: when the kernel's last call returned.
///
/// # Errors
///
/// `threads_after_call` when ending them took longer than [`PAUSE_GRACE`]: the threads ran
/// something of the kernel's as they exited, and the look would see none of it.
fn end_pools_in_time(which: Runtimes, returned: Instant) -> Result<bool, BenchError> {
    let start = Instant::now();
    let ended = end_openmp_pools(which).any();
    let took = start.elapsed();
    if took > PAUSE_GRACE {
        return Err(suspicious(
            "threads_after_call",
            format!(
                "ending the OpenMP runtime's idle threads took {} ms ({} ms after the kernel's \
                 call returned): they ran code of the kernel's as they exited, work outside the \
                 timed window",
                took.as_millis(),
                returned.elapsed().as_millis()
            ),
        ));
    }
    Ok(ended)
}

/// Fails with `threads_after_call` when the last `window` watched, `elapsed` after the
/// kernel's call returned, saw threads still runnable, or with `cpu_after_call` when the
/// worker still used CPU in it (`threads_before`: the threads before the first call;
/// `ended_pools`: an OpenMP runtime's idle team was ended before that window).
fn still_running(
    window: &Window,
    elapsed: Duration,
    threads_before: usize,
    ended_pools: bool,
) -> Result<(), BenchError> {
    let threads = thread_count();
    if !window.busy.is_empty() {
        let hint = if ended_pools {
            "the OpenMP runtime's idle threads were ended first"
        } else {
            "a thread pool that spins while idle shows like this too: make it sleep"
        };
        return Err(suspicious(
            "threads_after_call",
            format!(
                "{} thread(s) still runnable {} ms after the kernel's call returned \
                 (thread ids {:?}; {threads} threads, {threads_before} before the first \
                 call): work is still running outside the timed window ({hint})",
                window.busy.len(),
                elapsed.as_millis(),
                window.busy
            ),
        ));
    }
    if window.cpu_is_busy() {
        return Err(suspicious(
            "cpu_after_call",
            format!(
                "the worker used {:.1} ms of CPU in {} ms, {} ms after the kernel's call \
                 returned ({threads} threads, {threads_before} before the first call): work \
                 is still running outside the timed window",
                window.cpu.as_secs_f64() * 1e3,
                window.took.as_millis(),
                elapsed.as_millis()
            ),
        ));
    }
    Ok(())
}

/// Snapshots the outputs, waits `watch`, and fails when they changed.
fn check_outputs_settle(
    request: &BenchmarkRequest,
    tensors: &[HostTensor],
    copies: &[TensorData],
    watch: Duration,
) -> Result<(), BenchError> {
    let snapshot = Snapshot::take(request, tensors, copies);
    if snapshot.is_empty() {
        // Nothing to watch (a tuning round's window returns no outputs): no wait either.
        return Ok(());
    }
    std::thread::sleep(watch);
    outputs_unchanged(request, tensors, &snapshot, watch)
}

/// The outputs as the last call left them, for a later look to compare with.
enum Snapshot<'c> {
    /// The copies the worker made of them for its reply (shared memory where large): compared
    /// byte for byte, one read of each output and of its copy.
    Copies(&'c [TensorData]),
    /// Where there are no copies (a round's window returns no outputs), the BLAKE3 digest of
    /// each output, in order. Hashing reads an output once (about 7 GB/s on one AVX-512 core);
    /// a copy made for the look would also fault in and zero as many fresh pages, and free
    /// them (a 288 MiB output: 85 ms for the two digests against 170 ms for the copy, the
    /// compare and the free).
    Digests(Vec<blake3::Hash>),
}

impl<'c> Snapshot<'c> {
    /// `copies` when they are the outputs' (one per output, in order, of the same sizes),
    /// else digests of the outputs now.
    fn take(request: &BenchmarkRequest, tensors: &[HostTensor], copies: &'c [TensorData]) -> Self {
        // `eq` also tells a different count.
        let sizes = outputs(request, tensors).map(|t| t.bytes().len());
        if sizes.eq(copies.iter().map(|c| c.bytes.len())) {
            return Snapshot::Copies(copies);
        }
        Snapshot::Digests(
            outputs(request, tensors)
                .map(|t| blake3::hash(t.bytes()))
                .collect(),
        )
    }

    fn is_empty(&self) -> bool {
        match self {
            Snapshot::Copies(copies) => copies.is_empty(),
            Snapshot::Digests(digests) => digests.is_empty(),
        }
    }

    /// Whether output `i` still holds `bytes`.
    fn holds(&self, i: usize, bytes: &[u8]) -> bool {
        match self {
            Snapshot::Copies(copies) => copies[i].bytes[..] == *bytes,
            Snapshot::Digests(digests) => blake3::hash(bytes) == digests[i],
        }
    }
}

/// Fails with `outputs_changed_after_call` when an output differs from its `snapshot`, taken
/// `after` since the call returned.
fn outputs_unchanged(
    request: &BenchmarkRequest,
    tensors: &[HostTensor],
    snapshot: &Snapshot<'_>,
    after: Duration,
) -> Result<(), BenchError> {
    let changed: Vec<&str> = outputs(request, tensors)
        .enumerate()
        .filter(|(i, t)| !snapshot.holds(*i, t.bytes()))
        .map(|(_, t)| t.name())
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    Err(suspicious(
        "outputs_changed_after_call",
        format!(
            "output(s) {} changed within {} ms after the kernel's call returned: work is still \
             being done outside the timed window",
            changed.join(", "),
            after.as_millis()
        ),
    ))
}

fn lingering_children(children: &[u32]) -> BenchError {
    suspicious(
        "children_after_call",
        format!(
            "{} child process(es) still running after the kernel's call returned (pids {:?})",
            children.len(),
            children
        ),
    )
}

fn suspicious(check: &str, seen: String) -> BenchError {
    BenchError::Suspicious {
        check: check.to_owned(),
        seen,
    }
}

/// The tensors the request returns ([`BenchmarkRequest::returns`]), in request order.
pub(crate) fn outputs<'a>(
    request: &'a BenchmarkRequest,
    tensors: &'a [HostTensor],
) -> impl Iterator<Item = &'a HostTensor> {
    request
        .tensors
        .iter()
        .zip(tensors)
        .filter(|(spec, _)| request.returns(spec))
        .map(|(_, t)| t)
}

/// The ids of this process's threads, other than the calling one, that are running or
/// runnable (state `R` in `/proc/self/task/<tid>/stat`).
fn other_runnable_threads() -> Vec<u32> {
    // SAFETY: `gettid` has no preconditions.
    let me = unsafe { libc::gettid() } as u32;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&tid| tid != me)
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    == Some("R")
            })
        })
        .collect()
}

/// User plus system CPU time of the whole process (all threads), from `getrusage`.
fn cpu_time() -> Duration {
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `getrusage` fills the struct it is given, a live local.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The pids of this process's living children (every thread's `children` list), zombies
/// excluded.
pub(crate) fn child_processes() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .filter(|pid| !is_zombie(*pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st == "Z"))
        })
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::{Bytes, CKernel, DType, TensorSpec};

    /// A request with one input and two outputs (one large enough for shared memory), and
    /// its tensors.
    fn outputs_and_tensors() -> (BenchmarkRequest, Vec<HostTensor>) {
        let request = BenchmarkRequest::new(CKernel::new("", "k"))
            .tensor(TensorSpec::new("x", DType::F32, [16]).ones())
            .tensor(TensorSpec::new("y", DType::F32, [1 << 16]).output())
            .tensor(TensorSpec::new("z", DType::U8, [8]).output());
        let tensors = request
            .tensors
            .iter()
            .map(|spec| HostTensor::allocate(spec).unwrap())
            .collect();
        (request, tensors)
    }

    /// What a reply carries: a copy of each output.
    fn copies(request: &BenchmarkRequest, tensors: &[HostTensor]) -> Vec<TensorData> {
        outputs(request, tensors)
            .map(|t| {
                let bytes = Bytes::copy_from_slice(t.bytes()).unwrap();
                TensorData::new(t.name(), DType::U8, vec![bytes.len() as u64], bytes)
            })
            .collect()
    }

    /// Outputs are watched against the reply's copies of them where those match them, else
    /// against digests; either way an output written after the snapshot is named, and one
    /// left alone is not.
    #[test]
    fn an_output_changed_after_the_snapshot_is_named_with_copies_or_digests() {
        let (request, mut tensors) = outputs_and_tensors();
        let made = copies(&request, &tensors);
        for with_copies in [true, false] {
            let given: &[TensorData] = if with_copies { &made } else { &made[..1] };
            let snapshot = Snapshot::take(&request, &tensors, given);
            assert_eq!(matches!(snapshot, Snapshot::Copies(_)), with_copies);
            assert!(outputs_unchanged(&request, &tensors, &snapshot, WATCH).is_ok());
            tensors[1].bytes_mut()[40_000] ^= 1;
            let Err(BenchError::Suspicious { check, seen }) =
                outputs_unchanged(&request, &tensors, &snapshot, WATCH)
            else {
                panic!("a changed output passed the look");
            };
            assert_eq!(check, "outputs_changed_after_call");
            assert!(seen.contains("output(s) y changed"), "{seen}");
            tensors[1].bytes_mut()[40_000] ^= 1;
        }
    }
}
