//! The engine's half of the integrity checks (docs/sandbox.md): the reference's outputs on
//! fresh inputs, and the physical floor below which a time cannot be real.
//!
//! The reference runs in a worker of its own and its outputs live only in this (the parent)
//! process; a candidate never sees them.

use std::sync::{Mutex, OnceLock, PoisonError};

use tunebox_bench::thread_cpu_ms;
use tunebox_pool::{Tolerance, Verification, verify_outputs};
use tunebox_protocol::{BenchmarkResult, TensorData, TimingConfig};

/// The seed mixed into every random input for the last, fresh-input call of this run: picked
/// once per process (so the reference and every candidate of the run share it), from the
/// clock and the pid, so that no candidate can have precomputed the answer.
pub(crate) fn fresh_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        (nanos ^ u64::from(std::process::id()).rotate_left(32)) | 1
    })
}

/// The reference as the run keeps it: its outputs, then (when it made them) its outputs on
/// fresh inputs. `outputs` is how many outputs a call returns.
pub(crate) fn split_reference(
    reference: &[TensorData],
    outputs: usize,
) -> (&[TensorData], Option<&[TensorData]>) {
    if outputs > 0 && reference.len() == 2 * outputs {
        let (first, fresh) = reference.split_at(outputs);
        (first, Some(fresh))
    } else {
        (reference, None)
    }
}

/// The reference's outputs followed by its fresh-input outputs, as [`split_reference`] reads
/// them back.
pub(crate) fn join_reference(result: BenchmarkResult) -> Vec<TensorData> {
    let mut outputs = result.outputs;
    if result.integrity.fresh_outputs.len() == outputs.len() {
        outputs.extend(result.integrity.fresh_outputs);
    }
    outputs
}

/// How a candidate that matched the reference on its first call failed the call after the
/// reps on fresh inputs.
pub(crate) struct FreshMismatch {
    /// That call's outputs against the reference's on the same inputs.
    pub(crate) verification: Verification,
    /// Whether it returned its first call's outputs again, bit for bit: a memoized, cached or
    /// replayed answer (rather than outputs it failed to overwrite).
    pub(crate) replayed: bool,
}

/// The fresh-input call's failure, if it failed.
pub(crate) fn fresh_mismatch(
    fresh_reference: Option<&[TensorData]>,
    measured: &BenchmarkResult,
    tolerance: Tolerance,
) -> Option<FreshMismatch> {
    let fresh_reference = fresh_reference?;
    let fresh = &measured.integrity.fresh_outputs;
    if fresh.is_empty() {
        return None;
    }
    let verification = verify_outputs(fresh_reference, fresh, tolerance);
    if verification.passed() {
        return None;
    }
    let replayed = fresh.len() == measured.outputs.len()
        && fresh
            .iter()
            .zip(&measured.outputs)
            .all(|(a, b)| a.bytes[..] == b.bytes[..]);
    Some(FreshMismatch {
        verification,
        replayed,
    })
}

/// The message for a [`FreshMismatch`]; `not_overwritten` words the other case (what the
/// judge says of a kernel wrong after the reps).
pub(crate) fn fresh_message(mismatch: &FreshMismatch, not_overwritten: String) -> String {
    if mismatch.replayed {
        format!(
            "correct on the first call, wrong on a call after the timed reps, made on fresh \
             inputs (seed {:#x}): it returned its first call's outputs again, a memoized, \
             cached or replayed answer instead of one computed from its inputs ({})",
            fresh_seed(),
            mismatch.verification.summary()
        )
    } else {
        format!(
            "{not_overwritten} (that call ran on fresh inputs, seed {:#x})",
            fresh_seed()
        )
    }
}

/// Why a candidate's checked reps on varied inputs fail, if one does
/// ([`tunebox_protocol::TimingConfig::varied_reps`]): each one's outputs against the reference's
/// on the same inputs (`reference(seed)` computes those). A reference that cannot be run on a
/// rep's inputs checks nothing (logged): the candidate is not blamed for it.
pub(crate) fn varied_mismatch<E: std::fmt::Display>(
    reference: impl Fn(u64) -> Result<Vec<TensorData>, E>,
    measured: &BenchmarkResult,
    tolerance: Tolerance,
) -> Option<String> {
    for (n, rep) in measured.integrity.checked_reps.iter().enumerate() {
        let reference = match reference(rep.seed) {
            Ok(outputs) => outputs,
            Err(e) => {
                log::warn!("the reference could not check a rep on varied inputs: {e}");
                return None;
            }
        };
        let verification = verify_outputs(&reference, &rep.outputs, tolerance);
        if !verification.passed() {
            let replayed = rep.outputs.len() == measured.outputs.len()
                && rep
                    .outputs
                    .iter()
                    .zip(&measured.outputs)
                    .all(|(a, b)| a.bytes[..] == b.bytes[..]);
            let how = if replayed {
                "it returned its first call's outputs again: an answer kept from earlier \
                 inputs (a memo keyed on part of them), not one computed from these"
            } else {
                "its outputs were not computed from the inputs it was given (a memo of \
                 earlier inputs, or work skipped on some reps)"
            };
            return Some(format!(
                "correct on the first call, wrong on a timed rep (checked rep {} of {}) whose \
                 inputs were varied from the first call's (seed {:#x}, every random input drawn \
                 again): {how} ({})",
                n + 1,
                measured.integrity.checked_reps.len(),
                rep.seed,
                verification.summary()
            ));
        }
    }
    None
}

/// Output bytes below which the floor is not checked: small outputs may be written to caches
/// faster than memory can take them.
const FLOOR_MIN_BYTES: usize = 1 << 20;

/// How far below the physical floor a time must be to count: the bandwidth is measured on a
/// machine that may be busy, which makes it look lower (and the floor higher) than it is.
const FLOOR_MARGIN: f64 = 4.0;

/// How many times the bandwidth is measured again before a time is called impossible.
const FLOOR_REMEASURES: usize = 2;

/// Why a time `median` (ms) of a kernel whose outputs hold `bytes` cannot be real, if it
/// cannot: writing the outputs' bytes (which the kernel must do on every call, into lines the
/// flush evicted) takes at least `bytes / bandwidth`, with the bandwidth measured in this
/// process ([`write_bandwidth`]). Only checked with a cache flush and at least 1 MiB of
/// outputs, and only when the time is a quarter of the floor or less, by the best bandwidth of
/// up to three measurements (a measurement taken while other work used the memory bus sees too
/// little). `bytes` is [`crate::measure::workers::floor_bytes`]: none for a GPU kernel.
pub(crate) fn below_floor_of(median: f64, bytes: usize, timing: &TimingConfig) -> Option<String> {
    if !floor_applies(bytes, timing) {
        return None;
    }
    let under = |bandwidth: f64| median * FLOOR_MARGIN < bytes as f64 / bandwidth * 1e3;
    let mut bandwidth = write_bandwidth(false);
    for _ in 0..FLOOR_REMEASURES {
        if !median.is_finite() || !under(bandwidth) {
            return None;
        }
        bandwidth = write_bandwidth(true);
    }
    under(bandwidth).then(|| {
        format!(
            "{median:.4} ms is below the physical floor: writing its {bytes} output bytes takes \
             at least {:.4} ms at this machine's measured write bandwidth ({:.1} GB/s); the time \
             cannot be real (a kernel that updates only some elements of an output on each \
             call, a histogram's, is held to no floor for it once the output is marked `reset = \
             true`)",
            bytes as f64 / bandwidth * 1e3,
            bandwidth / 1e9
        )
    })
}

/// Measures the write bandwidth now, before any worker runs, when a kernel writing `bytes` of
/// outputs under `timing` can be held to the floor ([`below_floor_of`]): measured on the first
/// judged result instead, its threads would write on every CPU beside a worker's timed window.
pub(crate) fn prepare_floor(bytes: usize, timing: &TimingConfig) {
    if floor_applies(bytes, timing) {
        write_bandwidth(false);
    }
}

/// Whether a kernel writing `bytes` of outputs under `timing` is held to the floor: with a
/// cache flush and at least [`FLOOR_MIN_BYTES`].
fn floor_applies(bytes: usize, timing: &TimingConfig) -> bool {
    timing.flush_cache && !timing.hot && bytes >= FLOOR_MIN_BYTES
}

/// The best memory write bandwidth measured in this process, in bytes per second: measured on
/// the first call, and again (keeping the best) when `again`.
fn write_bandwidth(again: bool) -> f64 {
    static BEST: Mutex<f64> = Mutex::new(0.0);
    let mut best = BEST.lock().unwrap_or_else(PoisonError::into_inner);
    if *best == 0.0 || again {
        *best = best.max(measure_write_bandwidth());
    }
    *best
}

/// Bytes each measuring thread writes: beyond any core's share of a last-level cache...
const BANDWIDTH_BYTES_PER_THREAD: usize = 32 << 20;
/// ...and at most this many in all (a many-core machine's threads write less each).
const BANDWIDTH_BYTES_MAX: usize = 1 << 30;
/// Measuring threads at most.
const BANDWIDTH_MAX_THREADS: usize = 64;
/// Passes over each thread's buffer that are timed, after one that faults its pages in.
const BANDWIDTH_PASSES: u8 = 4;

/// This machine's memory write bandwidth in bytes per second, as many threads as it has CPUs
/// (up to 64) writing at once, so that a multi-threaded kernel's outputs are held to what all
/// its cores can write, not one: the sum over the threads of each one's bytes over its fastest
/// of [`BANDWIDTH_PASSES`] passes, after an untimed pass that maps its pages. Each pass is
/// timed by its thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`), so the time a thread waited for
/// a CPU on a busy machine does not count: by the wall clock, with four threads spinning on the
/// same CPU, one thread measured 3.3-5.6 GB/s on a machine that writes 17-22 GB/s (the test
/// below). Threads that could not run at the same time each count as if alone: the figure
/// errs high, which only lowers the floor.
fn measure_write_bandwidth() -> f64 {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(BANDWIDTH_MAX_THREADS);
    let bytes = BANDWIDTH_BYTES_PER_THREAD.min(BANDWIDTH_BYTES_MAX / threads);
    let start = std::sync::Barrier::new(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| scope.spawn(|| thread_write_bandwidth(bytes, &start)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(f64::INFINITY))
            .sum()
    })
}

/// One thread's write bandwidth over a buffer of `bytes` (see [`measure_write_bandwidth`]),
/// its timed passes started with the other threads' at `start`; infinite when its clock is too
/// coarse to see a pass or cannot be read (then there is no floor at all).
fn thread_write_bandwidth(bytes: usize, start: &std::sync::Barrier) -> f64 {
    let mut buffer = vec![0u8; bytes];
    buffer.fill(1);
    start.wait();
    let fastest_ms = (0..BANDWIDTH_PASSES)
        .map(|pass| {
            let begin = thread_cpu_ms();
            buffer.fill(pass.wrapping_add(2));
            std::hint::black_box(&buffer);
            thread_cpu_ms()
                .zip(begin)
                .map_or(0.0, |(end, begin)| end - begin)
        })
        .fold(f64::INFINITY, f64::min);
    if fastest_ms > 0.0 {
        bytes as f64 / fastest_ms * 1e3
    } else {
        f64::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::{Bytes, DType, Integrity, TimingStats};

    fn tensor(name: &str, bytes: &[u8]) -> TensorData {
        TensorData::new(
            name,
            DType::U8,
            vec![bytes.len() as u64],
            Bytes::copy_from_slice(bytes).unwrap(),
        )
    }

    fn result(median_ms: f64, outputs: Vec<TensorData>, fresh: Vec<TensorData>) -> BenchmarkResult {
        let mut stats = TimingStats::unmeasured();
        stats.median_ms = median_ms;
        BenchmarkResult::new(stats)
            .with_outputs(outputs)
            .with_integrity(
                Integrity::default()
                    .with_fresh_outputs(fresh)
                    .with_worker_ms(None),
            )
    }

    #[test]
    fn the_reference_keeps_its_fresh_outputs_after_its_outputs() {
        let joined = join_reference(result(
            1.0,
            vec![tensor("y", &[1])],
            vec![tensor("y", &[2])],
        ));
        let (first, fresh) = split_reference(&joined, 1);
        assert_eq!(&first[0].bytes[..], &[1u8]);
        assert_eq!(&fresh.unwrap()[0].bytes[..], &[2u8]);
        let (first, fresh) = split_reference(&joined[..1], 1);
        assert_eq!(first.len(), 1);
        assert!(fresh.is_none());
    }

    #[test]
    fn a_replayed_answer_fails_on_fresh_inputs() {
        let reference = [tensor("y", &[9])];
        let replayed = result(1.0, vec![tensor("y", &[1])], vec![tensor("y", &[1])]);
        let mismatch = fresh_mismatch(Some(&reference), &replayed, Tolerance::default()).unwrap();
        assert!(mismatch.replayed);
        let message = fresh_message(&mismatch, String::new());
        assert!(message.contains("fresh inputs"), "{message}");
        assert!(message.contains("first call's outputs again"), "{message}");
        let unwritten = result(1.0, vec![tensor("y", &[1])], vec![tensor("y", &[255])]);
        let mismatch = fresh_mismatch(Some(&reference), &unwritten, Tolerance::default()).unwrap();
        assert!(!mismatch.replayed);
        assert_eq!(
            fresh_message(&mismatch, "told".into()),
            format!(
                "told (that call ran on fresh inputs, seed {:#x})",
                fresh_seed()
            )
        );
        let honest = result(1.0, vec![tensor("y", &[1])], vec![tensor("y", &[9])]);
        assert!(fresh_mismatch(Some(&reference), &honest, Tolerance::default()).is_none());
    }

    #[test]
    fn a_time_far_below_the_floor_is_named() {
        let timing = TimingConfig::default();
        assert!(below_floor_of(1e-6, 4 << 20, &timing).is_some());
        assert!(below_floor_of(1e3, 4 << 20, &timing).is_none());
        assert!(below_floor_of(1e-9, 64, &timing).is_none());
    }

    /// Four threads that spin on the measuring thread's CPU take it away for whole time
    /// slices; timed by the thread's CPU clock, the bandwidth still comes out near the quiet
    /// figure (a third of it, at the best of three tries, allows for a noisy machine). By the
    /// wall clock it came out at a fifth or less.
    #[test]
    fn the_bandwidth_holds_on_a_busy_cpu() {
        use rustix::thread::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
        use std::sync::atomic::{AtomicBool, Ordering};
        let quiet = measure_write_bandwidth();
        let allowed = sched_getaffinity(None).unwrap();
        let mut one = CpuSet::new();
        one.set(sched_getcpu());
        sched_setaffinity(None, &one).unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        // Spawned threads inherit the affinity: all four share the measuring thread's CPU.
        let hogs: Vec<_> = (0..4)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        // The best of three, as the floor itself keeps before it calls a time impossible:
        // other tests of this binary may be streaming memory at the same moment.
        let busy = (0..3)
            .map(|_| measure_write_bandwidth())
            .fold(0.0, f64::max);
        stop.store(true, Ordering::Relaxed);
        hogs.into_iter().for_each(|h| h.join().unwrap());
        sched_setaffinity(None, &allowed).unwrap();
        assert!(
            busy >= quiet / 3.0,
            "{:.1} GB/s on a busy CPU against {:.1} GB/s quiet",
            busy / 1e9,
            quiet / 1e9
        );
    }
}
