//! What a worker answers.

use serde::{Deserialize, Serialize};

use crate::{Bytes, DType};

/// A successful measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BenchmarkResult {
    /// Statistics over the timed reps, in ms. For a [`Kernel::Task`](crate::Kernel::Task): those
    /// of the backend's last `do_bench` through its task context, or
    /// [`TimingStats::unmeasured`] when it timed nothing.
    pub stats: TimingStats,
    /// The typed result of a [`Kernel::Task`](crate::Kernel::Task), postcard-encoded
    /// ([`decode_output`](crate::decode_output)); `None` for the built-in kernels.
    #[serde(default)]
    pub value: Option<Bytes>,
    /// The tensors marked `output`, as they were after the first (untimed) call on freshly
    /// initialized tensors.
    pub outputs: Vec<TensorData>,
    /// The same tensors after one more call made once the timed reps are done, with the output
    /// tensors first filled with `0xFF` bytes (NaN for floats, -1 for signed integers). A kernel
    /// that does not overwrite its outputs completely on every call (accumulates into them, or
    /// stops writing after a few calls) shows here. Empty when the backend makes no such call.
    pub outputs_after_reps: Vec<TensorData>,
    /// Inputs (tensors not marked `output`) the kernel wrote on its first call. Each was restored
    /// to its initial contents before every later call, so the measurement is not corrupted; a
    /// caller may still want to know.
    pub mutated_inputs: Vec<String>,
    /// What the worker saw that the parent checks the measurement against (outputs on fresh
    /// inputs, the worker's own clock). Empty when the backend makes no such checks.
    #[serde(default)]
    pub integrity: Integrity,
    /// What this task left behind in its worker process that a later task would have inherited
    /// (a changed floating-point mode, signal handler or working directory, descriptors or
    /// threads left open, memory kept), as the worker found after it. Restorable state was put
    /// back; for the rest the worker was replaced before the next task. Empty for a task that
    /// left its worker as it found it. Filled by `TuningProcess` from
    /// [`Response::left_behind`](crate::Response::left_behind); backends leave it empty.
    #[serde(default)]
    pub left_behind: Vec<Leftover>,
}

/// Evidence a backend returns for the parent's integrity checks (docs/sandbox.md): what a
/// candidate that cheats the harness cannot make agree with the reference or the parent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Integrity {
    /// The outputs of the call after the reps made on fresh inputs (every randomly filled
    /// input refilled with [`TimingConfig::fresh_seed`](crate::TimingConfig::fresh_seed) mixed
    /// into its seed, in the same buffers, the outputs poisoned first), which must match the
    /// reference's on the same inputs: a memoized or replayed answer fails, and so does one
    /// that does not overwrite its outputs. `outputs_after_reps` is empty when this is not.
    /// Empty without a `fresh_seed` (or without random inputs to refill).
    pub fresh_outputs: Vec<TensorData>,
    /// How long the request took on the worker's own clock, in ms, from the moment it began
    /// it to the reply. The parent compares it with its own clock: a candidate that slows or
    /// stops the worker's clock shows as a worker that saw much less time pass than the parent.
    pub worker_ms: Option<f64>,
    /// The CPU time the worker process used during the request, all its threads together, in
    /// ms (from the moment it took the request to its reply, mapping the inputs and the state
    /// checks included; the worker fills it, whatever the backend). A multi-threaded kernel
    /// (OpenMP, a thread pool) keeps more than one CPU busy: the parent counts this much of the
    /// machine's busy time as the window's own, not as interference. `None` where the worker
    /// could not read its clock.
    pub worker_cpu_ms: Option<f64>,
    /// Threads the kernel started beyond those the worker process had when it took the
    /// request, counted after its last call (by the backend, before an OpenMP runtime's idle
    /// team is ended for its look for work left running, or else by the worker after the
    /// request): a kernel that starts a team of threads (OpenMP, a thread pool) on its first
    /// call in a fresh worker shows here, even when its threads wait for work between calls.
    /// `None` where neither could count threads.
    #[serde(default)]
    pub threads_started: Option<u32>,
    /// The timed reps picked for checking ([`TimingConfig::varied_reps`](crate::TimingConfig::varied_reps)),
    /// in the order they ran: each one's seed and the outputs it left. Empty without varied reps
    /// or without outputs.
    #[serde(default)]
    pub checked_reps: Vec<CheckedRep>,
}

/// A timed rep picked for checking: the seed its inputs were varied with
/// ([`TensorSpec::varied_block`](crate::TensorSpec::varied_block)) and the outputs it left, in
/// request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CheckedRep {
    /// The seed the rep's inputs were varied with.
    pub seed: u64,
    /// The outputs the rep left, in request order.
    pub outputs: Vec<TensorData>,
}

/// One piece of process state a task left changed in its worker (see
/// [`BenchmarkResult::left_behind`]), or, with `what = "resources"`, a task that failed for lack
/// of a resource in a worker that earlier tasks had used, with the likely culprit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Leftover {
    /// What changed: `"floating-point environment"`, `"signal dispositions"`, `"signal mask"`,
    /// `"working directory"`, `"umask"`, `"environment"`, `"rlimits"`, `"cpu affinity"`,
    /// `"scheduling priority"`, `"timer slack"`, `"descriptors"`, `"threads"`, `"processes"`,
    /// `"memory"`, or `"resources"`.
    pub what: String,
    /// How: the values before and after, the descriptors' targets, the threads' names, …
    pub detail: String,
    /// Whether the worker put it back. When not, the worker is replaced before the next task
    /// (`TuningProcess` retires it after this reply).
    pub restored: bool,
}

impl Leftover {
    /// A leftover of kind `what`.
    pub fn new(what: impl Into<String>, detail: impl Into<String>, restored: bool) -> Self {
        Leftover {
            what: what.into(),
            detail: detail.into(),
            restored,
        }
    }
}

impl std::fmt::Display for Leftover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let outcome = if self.restored {
            "restored"
        } else {
            "the worker was replaced"
        };
        write!(f, "{}: {} ({outcome})", self.what, self.detail)
    }
}

/// Statistics over the timed reps of one measurement. All times in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TimingStats {
    /// Median rep time: the figure to rank by (triton's `do_bench` default).
    pub median_ms: f64,
    /// Mean rep time.
    pub mean_ms: f64,
    /// Fastest rep.
    pub min_ms: f64,
    /// Slowest rep.
    pub max_ms: f64,
    /// 20th percentile (linear interpolation, as numpy and triton).
    pub p20_ms: f64,
    /// 80th percentile.
    pub p80_ms: f64,
    /// Sample standard deviation.
    pub stddev_ms: f64,
    /// Number of timed reps.
    pub reps: u32,
    /// Number of untimed warmup calls before them.
    pub warmup_reps: u32,
    /// Why sampling stopped: `"reps"` (the rep budget), `"noise"` (relative standard deviation
    /// below `max_noise`), `"time"` (`max_time_ms` reached), `"budget"` (the request's
    /// `budget_ms` left room for fewer reps than asked), or `"single"` (one measurement).
    pub stopped: String,
    /// How many of the timed reps were preempted or had time stolen, and so count their
    /// thread's CPU time rather than their wall time ([`RepClock::Preemption`]). Zero on a
    /// quiet machine, for device-timed reps and with [`RepClock::Wall`].
    ///
    /// [`RepClock::Preemption`]: crate::RepClock::Preemption
    /// [`RepClock::Wall`]: crate::RepClock::Wall
    #[serde(default)]
    pub preempted_reps: u32,
}

impl TimingStats {
    /// Summarizes the rep times `samples` (ms, any order; NaN sorts last) after `warmup_reps`
    /// untimed calls: median, mean, min, max, 20th and 80th percentiles (numpy's linear
    /// interpolation, as triton's `do_bench`), sample standard deviation, `stopped = "reps"`
    /// (`"single"` for one sample), no preempted reps. Every time is NaN for no samples.
    ///
    /// ```
    /// use tunebox_protocol::TimingStats;
    ///
    /// let stats = TimingStats::from_samples(&[3.0, 1.0, 2.0, 5.0, 4.0], 2).with_stopped("noise".into());
    /// assert_eq!((stats.median_ms, stats.min_ms, stats.max_ms, stats.reps), (3.0, 1.0, 5.0, 5));
    /// assert_eq!((stats.warmup_reps, stats.stopped.as_str()), (2, "noise"));
    /// ```
    pub fn from_samples(samples: &[f64], warmup_reps: u32) -> TimingStats {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let mean = if n == 0 {
            f64::NAN
        } else {
            sorted.iter().sum::<f64>() / n as f64
        };
        let stddev = if n < 2 {
            0.0
        } else {
            (sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        };
        TimingStats {
            median_ms: Self::quantile(&sorted, 0.5),
            mean_ms: mean,
            min_ms: sorted.first().copied().unwrap_or(f64::NAN),
            max_ms: sorted.last().copied().unwrap_or(f64::NAN),
            p20_ms: Self::quantile(&sorted, 0.2),
            p80_ms: Self::quantile(&sorted, 0.8),
            stddev_ms: stddev,
            reps: u32::try_from(n).unwrap_or(u32::MAX),
            warmup_reps,
            stopped: if n == 1 { "single" } else { "reps" }.into(),
            preempted_reps: 0,
        }
    }

    /// The `q` quantile (0 ≤ q ≤ 1) of ascending `sorted` samples, by linear interpolation
    /// between the two nearest ranks (numpy's default, which triton's `do_bench` quantiles
    /// use). `NaN` for an empty slice.
    pub fn quantile(sorted: &[f64], q: f64) -> f64 {
        match sorted {
            [] => f64::NAN,
            [only] => *only,
            _ => {
                let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
                let lo = pos.floor() as usize;
                let hi = pos.ceil() as usize;
                sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
            }
        }
    }

    /// Statistics of nothing: every time NaN, no reps, `stopped = "unmeasured"`. What a task
    /// that timed nothing reports, so that no ranking ever takes it for a fast one
    /// (`TuningProcessPool::benchmark_or_inf` gives it `+inf`).
    pub fn unmeasured() -> TimingStats {
        TimingStats {
            median_ms: f64::NAN,
            mean_ms: f64::NAN,
            min_ms: f64::NAN,
            max_ms: f64::NAN,
            p20_ms: f64::NAN,
            p80_ms: f64::NAN,
            stddev_ms: f64::NAN,
            reps: 0,
            warmup_reps: 0,
            stopped: "unmeasured".into(),
            preempted_reps: 0,
        }
    }

    /// Relative spread `(p80 - p20) / median`: about 0.01 for a quiet measurement, above 0.1 for a
    /// noisy one. Zero when the median is zero.
    pub fn noise(&self) -> f64 {
        if self.median_ms > 0.0 {
            (self.p80_ms - self.p20_ms) / self.median_ms
        } else {
            0.0
        }
    }
}

setters!(BenchmarkResult {
    with_stats => stats: TimingStats,
    with_value => value: Option<Bytes>,
    with_outputs => outputs: Vec<TensorData>,
    with_outputs_after_reps => outputs_after_reps: Vec<TensorData>,
    with_mutated_inputs => mutated_inputs: Vec<String>,
    with_integrity => integrity: Integrity,
    with_left_behind => left_behind: Vec<Leftover>,
});

setters!(Integrity {
    with_fresh_outputs => fresh_outputs: Vec<TensorData>,
    with_worker_ms => worker_ms: Option<f64>,
    with_worker_cpu_ms => worker_cpu_ms: Option<f64>,
    with_threads_started => threads_started: Option<u32>,
    with_checked_reps => checked_reps: Vec<CheckedRep>,
});

impl CheckedRep {
    /// The rep varied with `seed`, which left `outputs`.
    pub fn new(seed: u64, outputs: Vec<TensorData>) -> CheckedRep {
        CheckedRep { seed, outputs }
    }
}

setters!(TimingStats {
    with_median_ms => median_ms: f64,
    with_mean_ms => mean_ms: f64,
    with_min_ms => min_ms: f64,
    with_max_ms => max_ms: f64,
    with_p20_ms => p20_ms: f64,
    with_p80_ms => p80_ms: f64,
    with_stddev_ms => stddev_ms: f64,
    with_reps => reps: u32,
    with_warmup_reps => warmup_reps: u32,
    with_stopped => stopped: String,
    with_preempted_reps => preempted_reps: u32,
});

/// Contents of a tensor returned by the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TensorData {
    /// The tensor's name from its spec.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Raw element bytes in native byte order, row-major (shared memory when large).
    pub bytes: Bytes,
}

impl TensorData {
    /// The tensor `name` of `dtype` with `shape` (outermost first, in elements) holding `bytes`
    /// (native byte order, row-major).
    pub fn new(name: impl Into<String>, dtype: DType, shape: Vec<u64>, bytes: Bytes) -> TensorData {
        TensorData {
            name: name.into(),
            dtype,
            shape,
            bytes,
        }
    }
}

impl BenchmarkResult {
    /// A measurement with `stats` and nothing else: no typed value, no outputs, no mutated
    /// inputs, no integrity evidence, nothing left behind. Add the rest with the `with_*`
    /// setters.
    ///
    /// ```
    /// use tunebox_protocol::{BenchmarkResult, TimingStats};
    ///
    /// let result = BenchmarkResult::new(TimingStats::from_samples(&[1.0, 2.0, 3.0], 1))
    ///     .with_mutated_inputs(vec!["x".into()]);
    /// assert_eq!((result.stats.median_ms, result.mutated_inputs.len()), (2.0, 1));
    /// ```
    pub fn new(stats: TimingStats) -> BenchmarkResult {
        BenchmarkResult {
            stats,
            value: None,
            outputs: Vec::new(),
            outputs_after_reps: Vec::new(),
            mutated_inputs: Vec::new(),
            integrity: Integrity::default(),
            left_behind: Vec::new(),
        }
    }

    /// Reads every output the worker `pid` holds ([`crate::Bytes::read_held`]) out of its
    /// memory, once per copy (the same copy returned twice, as an output the reps left
    /// unchanged, is read once), into buffers of `spare` where it has them of the right sizes.
    ///
    /// # Errors
    ///
    /// The first read that failed (see [`crate::Bytes::read_held`]); the outputs not read yet
    /// are left held.
    pub fn read_held(&mut self, pid: u32, spare: &crate::SpareBuffers) -> std::io::Result<()> {
        // (as held, as read)
        let mut read: Vec<(Bytes, Bytes)> = Vec::new();
        let integrity = &mut self.integrity;
        let tensors = self
            .outputs
            .iter_mut()
            .chain(&mut self.outputs_after_reps)
            .chain(&mut integrity.fresh_outputs)
            .chain(
                integrity
                    .checked_reps
                    .iter_mut()
                    .flat_map(|r| &mut r.outputs),
            );
        let every = self.value.iter_mut().chain(tensors.map(|t| &mut t.bytes));
        for bytes in every.filter(|b| b.is_held()) {
            match read.iter().find(|(held, _)| held == bytes) {
                Some((_, done)) => *bytes = done.clone(),
                None => {
                    let held = bytes.clone();
                    bytes.read_held(pid, spare)?;
                    read.push((held, bytes.clone()));
                }
            }
        }
        Ok(())
    }

    /// How many of the outputs travel as shared memory (at most
    /// [`MAX_SHARED_PAYLOADS`](crate::MAX_SHARED_PAYLOADS) fit in one message).
    pub fn shared_payloads(&self) -> usize {
        self.outputs
            .iter()
            .chain(&self.outputs_after_reps)
            .filter(|o| o.bytes.is_shared())
            .count()
            + self
                .value
                .as_ref()
                .map_or(0, |v| usize::from(v.is_shared()))
    }
}
