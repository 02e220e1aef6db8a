//! Figures of one worker process: `TuningProcess` from the outside.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tunebox_process::{Output, ProcessError, TuningProcess};
use tunebox_protocol::{
    BenchmarkRequest, BenchmarkResult, CKernel, DType, DiagnosticTask, Init, Kernel, Scalar,
    SharedBuffer, TensorSpec, TimingConfig, checksum,
};

use crate::floors::BIG;
use crate::report::{Figure, Kind, Target, Unit};
use crate::setup::{LONG, Setup, diag, ms, trivial};
use crate::stats::{Summary, collect};

/// A started worker that answered one trivial request.
pub(crate) fn warm_process(setup: &Setup) -> Result<TuningProcess> {
    let mut process = TuningProcess::spawn(setup.config()).context("starting a worker")?;
    process
        .benchmark(trivial(), LONG)
        .context("the first trivial request")?;
    Ok(process)
}

/// Makes sure `process` has a live, warm worker (after a crash or timeout killed the last one).
fn rewarm(process: &mut TuningProcess) -> Result<()> {
    process.ensure_running().context("restarting the worker")?;
    process.ping(LONG).context("ping after restart")?;
    Ok(())
}

/// Cold start: `TuningProcess::spawn` → first trivial result, and the clean shutdown after it.
///
/// # Errors
///
/// A worker fails to start or answer.
pub(crate) fn cold_start(setup: &Setup) -> Result<Vec<Figure>> {
    let n = setup.n(100, 20);
    eprintln!("bench: cold start ({n})");
    let mut shutdowns = Vec::with_capacity(n);
    let starts = collect(5, n, || {
        let (cold, shutdown) = cold_start_once(setup.config())?;
        shutdowns.push(shutdown);
        Ok(cold)
    })?;
    // The warmup runs' shutdowns are in front.
    let shutdowns = &shutdowns[shutdowns.len() - n..];
    let big_parent = cold_starts_beside(setup, 1 << 30, n / 4)?;
    Ok(vec![
        Figure::from_samples(
            "cold_start",
            "cold start: spawn → first trivial result",
            Kind::Target,
            Unit::Millis,
            &starts,
        )?
        .target(Target::at_most(3.0, "issue 9"))
        .anchors(
            "Inductor-style 73 ms (+ import torch), TVM 1461 ms, ProcessPoolExecutor(spawn) 87 ms",
        ),
        Figure::from_samples(
            "clean_shutdown",
            "clean shutdown of an idle worker",
            Kind::Info,
            Unit::Millis,
            shutdowns,
        )?
        .note("TuningProcess::shutdown: Shutdown message, wait for the exit, reap"),
        Figure::from_samples(
            "cold_start_big_parent",
            "cold start while this process holds 1 GiB",
            Kind::Info,
            Unit::Millis,
            &big_parent,
        )?
        .note(
            "compare cold_start: 1 GiB of private memory written (a Python process's arrays, a \
             compiler's heap); a fork would copy its page tables (~16 ms per GiB on a 2-vCPU KVM \
             guest), a worker born in the parent's memory does not",
        ),
    ])
}

/// `n` cold starts (as [`cold_start`]) while this process holds `bytes` of private memory,
/// every page written.
fn cold_starts_beside(setup: &Setup, bytes: usize, n: usize) -> Result<Vec<f64>> {
    eprintln!(
        "bench: cold start beside {} MiB of this process ({n})",
        bytes >> 20
    );
    let held = vec![1u8; bytes];
    let starts = collect(2, n.max(3), || Ok(cold_start_once(setup.config())?.0));
    std::hint::black_box(&held);
    starts
}

/// One cold start of a worker with `config`: ms from `TuningProcess::spawn` to the first
/// trivial result, and ms of the clean shutdown after it.
///
/// # Errors
///
/// The worker fails to start, answer or shut down.
pub(crate) fn cold_start_once(config: tunebox_process::ProcessConfig) -> Result<(f64, f64)> {
    let start = Instant::now();
    let mut process = TuningProcess::spawn(config).context("spawn")?;
    process
        .benchmark(trivial(), LONG)
        .context("first request")?;
    let cold = start.elapsed();
    let stop = Instant::now();
    process
        .shutdown(Duration::from_secs(1))
        .context("shutdown")?;
    Ok((ms(cold), ms(stop.elapsed())))
}

/// Time for an aborting task to come back as `WorkerCrashed` (`TuningProcess::benchmark`), with
/// stderr captured (the default) and, for comparison, discarded.
///
/// # Errors
///
/// A worker fails to start, or the abort is reported as something else than a crash.
pub(crate) fn crash_to_error(setup: &Setup) -> Result<Vec<Figure>> {
    let n = setup.n(60, 10);
    let mut figures = Vec::new();
    for capture in [true, false] {
        let how = if capture {
            "stderr captured"
        } else {
            "stderr discarded"
        };
        eprintln!("bench: crash → error, {how} ({n})");
        let config = if capture {
            setup.config()
        } else {
            setup.config().stderr(Output::Null)
        };
        let mut process = TuningProcess::spawn(config).context("starting a worker")?;
        let samples = collect(3, n, || {
            rewarm(&mut process)?;
            let start = Instant::now();
            let result = process.benchmark(diag(DiagnosticTask::Abort), LONG);
            let elapsed = start.elapsed();
            match result {
                Err(ProcessError::WorkerCrashed {
                    signal: Some(6), ..
                }) => Ok(ms(elapsed)),
                other => bail!("expected a SIGABRT crash, got {other:?}"),
            }
        })?;
        let summary = Summary::of(&samples)?;
        let figure = if capture {
            Figure::new(
                "crash_to_error",
                "crash → error (WorkerCrashed)",
                Kind::Target,
                Unit::Millis,
                summary,
            )
            .target(Target::at_most(1.0, "issue 9"))
            .anchors("Inductor-style 1.3 ms, TVM 13.7 ms")
            .note("abort() in the task → Err(WorkerCrashed { signal: 6 }), worker reaped; stderr captured (the default)")
        } else {
            Figure::new(
                "crash_to_error_no_capture",
                "crash → error, stderr discarded",
                Kind::Info,
                Unit::Millis,
                summary,
            )
            .note("as above with Output::Null for stderr: no drain thread to wait for")
        };
        figures.push(figure.samples(&samples));
    }
    Ok(figures)
}

/// Overshoot of a 100 ms timeout on a hung task, and whether the worker was reaped by the time
/// the error came back.
///
/// # Errors
///
/// A worker fails to start, or the hang is reported as something else than a timeout.
pub(crate) fn timeout_overshoot(setup: &Setup) -> Result<Figure> {
    let n = setup.n(20, 5);
    eprintln!("bench: timeout overshoot ({n})");
    let timeout = Duration::from_millis(100);
    let mut process = warm_process(setup)?;
    let mut unreaped = Vec::new();
    let samples = collect(1, n, || {
        rewarm(&mut process)?;
        let pid = process.pid().context("the worker has no pid")?;
        let start = Instant::now();
        let result = process.benchmark(diag(DiagnosticTask::Hang), timeout);
        let elapsed = start.elapsed();
        if !matches!(result, Err(ProcessError::Timeout { .. })) {
            bail!("expected a timeout, got {result:?}");
        }
        if Path::new(&format!("/proc/{pid}")).exists() {
            unreaped.push(pid);
        }
        Ok(ms(elapsed.saturating_sub(timeout)))
    })?;
    let reaped = unreaped.is_empty();
    let mut figure = Figure::from_samples(
        "timeout_overshoot",
        "timeout overshoot (100 ms on a hung task)",
        Kind::Target,
        Unit::Millis,
        &samples,
    )?
    .target(Target::at_most(5.0, "issue 9"))
    .condition("reaped", reaped)
    .anchors("Inductor-style 1 ms (child left a zombie), TVM 19 ms");
    figure = if reaped {
        figure.note("error time − 100 ms; /proc/<pid> gone when the error returned, every time")
    } else {
        figure.note(format!(
            "workers still in /proc after the error: {unreaped:?}"
        ))
    };
    Ok(figure)
}

/// Whether `pid` is dead: gone from `/proc`, or a zombie (an orphan re-parented to this
/// sandbox's init may stay a zombie for a while).
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// How long a worker outlives its launcher once the launcher is SIGKILLed mid-task.
///
/// # Errors
///
/// The launcher cannot be started or does not report its worker.
pub(crate) fn orphan_cleanup(setup: &Setup) -> Result<Figure> {
    let n = setup.n(20, 5);
    eprintln!("bench: orphan cleanup ({n})");
    let exe = std::env::current_exe().context("locating this executable")?;
    let limit = Duration::from_secs(2);
    let mut survivors = Vec::new();
    let samples = collect(1, n, || {
        let (mut launcher, worker) = launch_busy(&exe, &setup.worker)?;
        // Let the worker take its task.
        std::thread::sleep(Duration::from_millis(10));
        let elapsed = kill_and_watch(&launcher, worker, limit)?;
        launcher.wait().context("reaping the launcher")?;
        if !is_dead(worker) {
            survivors.push(worker);
            kill_survivor(worker);
        }
        Ok(ms(elapsed))
    })?;
    orphan_figure(&samples, &survivors)
}

/// Starts this binary in `launch-busy` mode with `worker`; returns the launcher and the pid of
/// the worker it started, read from its stdout.
fn launch_busy(exe: &Path, worker: &Path) -> Result<(Child, u32)> {
    let mut launcher = Command::new(exe)
        .arg("launch-busy")
        .arg(worker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the launcher")?;
    let stdout = launcher.stdout.take().context("the launcher's stdout")?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .context("reading the worker's pid")?;
    let worker: u32 = line
        .trim()
        .parse()
        .with_context(|| format!("the launcher printed {line:?}, not a pid"))?;
    Ok((launcher, worker))
}

/// SIGKILLs `launcher`, then waits until `worker` is dead or `limit` has passed; returns the
/// time since the kill.
fn kill_and_watch(launcher: &Child, worker: u32, limit: Duration) -> Result<Duration> {
    let launcher_pid = libc::pid_t::try_from(launcher.id()).context("pid out of range")?;
    let start = Instant::now();
    // SAFETY: kill(2) with a pid of our own child, which is not reaped yet.
    if unsafe { libc::kill(launcher_pid, libc::SIGKILL) } != 0 {
        bail!("kill: {}", std::io::Error::last_os_error());
    }
    // Poll every 20 µs: fine enough for a 50 ms target, without taking a CPU from the
    // processes that are exiting.
    while !is_dead(worker) && start.elapsed() < limit {
        std::thread::sleep(Duration::from_micros(20));
    }
    Ok(start.elapsed())
}

/// SIGKILLs a worker that outlived its launcher: not ours to reap, but ours to stop.
fn kill_survivor(worker: u32) {
    if let Ok(pid) = libc::pid_t::try_from(worker) {
        // SAFETY: kill(2) of the worker our launcher started; it is still alive.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// The orphan figure of `samples` (ms); its condition is that no worker is in `survivors`.
fn orphan_figure(samples: &[f64], survivors: &[u32]) -> Result<Figure> {
    let none_survived = survivors.is_empty();
    let figure = Figure::from_samples(
        "orphan_cleanup",
        "orphan cleanup: launcher SIGKILLed → worker dead",
        Kind::Target,
        Unit::Millis,
        samples,
    )?
    .target(Target::at_most(50.0, "issue 9"))
    .condition("all dead within 2 s", none_survived)
    .anchors("busy workers lived until their task ended (seconds)");
    Ok(if none_survived {
        figure.note(
            "from kill(launcher, SIGKILL) until /proc/<worker>/stat is gone or a zombie \
             (this sandbox's init may not reap orphans at once)",
        )
    } else {
        figure.note(format!(
            "workers alive 2 s after their launcher died: {survivors:?}"
        ))
    })
}

/// A C kernel that busy-waits `ns` nanoseconds on `CLOCK_MONOTONIC`.
const SPIN_SOURCE: &str = "#include <stdint.h>\n\
#include <time.h>\n\
static int64_t now_ns(void) {\n\
    struct timespec t;\n\
    clock_gettime(CLOCK_MONOTONIC, &t);\n\
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;\n\
}\n\
void spin(int64_t ns) {\n\
    int64_t start = now_ns();\n\
    while (now_ns() - start < ns) {}\n\
}\n";

/// The spin kernel for 100 µs, timed as triton's do_bench with 500 reps and no cache flush.
fn spin_request() -> BenchmarkRequest {
    let mut request = BenchmarkRequest::new(Kernel::C({
        let mut kernel = CKernel::new(SPIN_SOURCE, "spin")
            .source_name("spin.c")
            .compiler(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
        kernel.flags = vec!["-O2".into()];
        kernel
    }))
    .timing(
        TimingConfig::default()
            .warmup_ms(5.0)
            .rep_ms(50.0)
            .min_reps(10)
            .max_reps(1000)
            .flush_cache(false),
    );
    request.scalars = vec![Scalar::new("ns", 100_000)];
    request
}

/// The spin kernel ([`spin_request`]) on `process`.
///
/// # Errors
///
/// The kernel does not compile or run.
pub(crate) fn run_spin(process: &mut TuningProcess) -> Result<BenchmarkResult> {
    process
        .benchmark(spin_request(), LONG)
        .context("the 100 µs spin kernel (is a C compiler installed?)")
}

/// CPU timing overhead: median reported for a kernel that spins exactly 100 µs, minus 100 µs.
///
/// # Errors
///
/// The kernel does not compile or run.
pub(crate) fn cpu_timing_overhead(setup: &Setup) -> Result<Figure> {
    let n = setup.n(10, 3);
    eprintln!("bench: CPU timing overhead ({n} measurements of 500 reps)");
    let mut process = warm_process(setup)?;
    let mut reps = 0;
    let samples = collect(1, n, || {
        let result = run_spin(&mut process)?;
        reps = result.stats.reps;
        Ok((result.stats.median_ms - 0.1) * 1e3)
    })?;
    Ok(Figure::from_samples(
        "cpu_timing_overhead",
        "CPU timing overhead (100 µs spin kernel)",
        Kind::Target,
        Unit::Micros,
        &samples,
    )?
    .target(Target::at_most(2.0, "issue 9"))
    .note(format!(
        "each sample: the median of {reps} timed reps of one Kernel::C request, minus 100 µs"
    )))
}

/// Large caller data through a reused [`SharedBuffer`] (issue 5): the round trip (handoff, the
/// worker reading every page in place, its checksum back) and the handoff alone, for 16 and
/// 256 MiB; and, for context, the cost of a fresh buffer per request.
///
/// # Errors
///
/// A worker fails, or the checksum comes back wrong.
pub(crate) fn big_transfers(setup: &Setup, source: &[u8], memcpy_ms: f64) -> Result<Vec<Figure>> {
    let n = setup.n(20, 5);
    let mut process = warm_process(setup)?;
    let mut figures = Vec::new();
    for (len, label) in [(16 << 20, "16 MiB"), (BIG, "256 MiB")] {
        let transfer = Transfer { len, label };
        let (trips, handoffs) = transfer.reused_samples(&mut process, source, n)?;
        figures.push(transfer.round_trip_figure(&trips, memcpy_ms)?);
        figures.push(transfer.handoff_figure(&handoffs)?);
    }
    figures.push(fresh_buffer_figure(setup, &mut process, source)?);
    Ok(figures)
}

/// One size of [`big_transfers`]: 16 MiB (context) or [`BIG`] (the targets).
struct Transfer {
    /// Bytes of the buffer.
    len: usize,
    /// The size for people, e.g. `16 MiB`.
    label: &'static str,
}

impl Transfer {
    /// Whether this is the 256 MiB size, whose figures are targets.
    fn is_big(&self) -> bool {
        self.len == BIG
    }

    /// `n` checksum round trips, then `n` handoffs, of the first `len` bytes of `source` in one
    /// reused [`SharedBuffer`], ms.
    fn reused_samples(
        &self,
        process: &mut TuningProcess,
        source: &[u8],
        n: usize,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let label = self.label;
        let data = &source[..self.len];
        let expected = checksum(data);
        let buffer = SharedBuffer::from_slice(data).context("a shared buffer")?;
        eprintln!("bench: {label} round trip, reused SharedBuffer ({n})");
        let trips = collect(1, n, || checksum_round_trip(process, &buffer, expected))?;
        eprintln!("bench: {label} handoff, reused SharedBuffer ({n})");
        let handoffs = collect(1, n, || handoff(process, &buffer))?;
        Ok((trips, handoffs))
    }

    /// The round trip's figure; its target is 1.5× the memcpy of as many bytes.
    fn round_trip_figure(&self, trips: &[f64], memcpy_ms: f64) -> Result<Figure> {
        let label = self.label;
        let scale = self.len as f64 / BIG as f64;
        let target = if self.is_big() {
            Target::at_most(1.5 * memcpy_ms, "1.5× memcpy (issue 5)")
        } else {
            Target::at_most(1.5 * memcpy_ms * scale, "1.5× memcpy of 16 MiB (issue 5)")
        };
        Ok(Figure::from_samples(
            if self.is_big() {
                "big_roundtrip_reused"
            } else {
                "mid_roundtrip_reused"
            },
            format!("{label} to worker and back (reused SharedBuffer, checksum back)"),
            self.kind(),
            Unit::Millis,
            trips,
        )?
        .target(target)
        .anchors(if self.is_big() {
            "Inductor-style pipe 281 ms, TVM 765 ms"
        } else {
            ""
        })
        .note(format!(
            "{label}: the handle crosses the socket, the worker reads every page in place \
             (DiagnosticTask::Checksum) and sends its checksum back; the buffer is reused"
        )))
    }

    /// The handoff's figure; its target is 5 ms at either size.
    fn handoff_figure(&self, handoffs: &[f64]) -> Result<Figure> {
        let label = self.label;
        Ok(Figure::from_samples(
            if self.is_big() {
                "big_handoff_reused"
            } else {
                "mid_handoff_reused"
            },
            format!("{label} handoff only (reused SharedBuffer)"),
            self.kind(),
            Unit::Millis,
            handoffs,
        )?
        .target(Target::at_most(5.0, "issue 5"))
        .note(format!(
            "{label}: a trivial task carrying the buffer's handle, not reading it"
        )))
    }

    /// Targets at 256 MiB, context at 16 MiB.
    fn kind(&self) -> Kind {
        if self.is_big() {
            Kind::Target
        } else {
            Kind::Info
        }
    }
}

/// One `Checksum` request on `buffer` (the worker reads it in place), checked against
/// `expected`, ms.
fn checksum_round_trip(
    process: &mut TuningProcess,
    buffer: &SharedBuffer,
    expected: u64,
) -> Result<f64> {
    let start = Instant::now();
    let result = process
        .benchmark(request(DiagnosticTask::Checksum, buffer), LONG)
        .context("checksum of a shared buffer")?;
    let elapsed = ms(start.elapsed());
    let bytes = &result.outputs.first().context("no checksum")?.bytes;
    let sum = u64::from_ne_bytes(bytes[..8].try_into().context("a short checksum")?);
    if sum != expected {
        bail!("the worker read different bytes than were written");
    }
    Ok(elapsed)
}

/// One trivial task carrying `buffer` without reading it: the handoff alone, ms.
fn handoff(process: &mut TuningProcess, buffer: &SharedBuffer) -> Result<f64> {
    let start = Instant::now();
    process
        .benchmark(request(DiagnosticTask::Sleep { ms: 0 }, buffer), LONG)
        .context("handoff of a shared buffer")?;
    Ok(ms(start.elapsed()))
}

/// The 256 MiB round trip with a fresh [`SharedBuffer`] made from `source` each time (context:
/// why buffers are meant to be reused).
fn fresh_buffer_figure(
    setup: &Setup,
    process: &mut TuningProcess,
    source: &[u8],
) -> Result<Figure> {
    let n = setup.n(5, 2);
    eprintln!("bench: 256 MiB round trip, fresh SharedBuffer each time ({n})");
    let fresh = collect(1, n, || {
        let start = Instant::now();
        let buffer = SharedBuffer::from_slice(source).context("a shared buffer")?;
        process
            .benchmark(request(DiagnosticTask::Checksum, &buffer), LONG)
            .context("checksum of a fresh buffer")?;
        Ok(ms(start.elapsed()))
    })?;
    Ok(Figure::from_samples(
        "big_roundtrip_fresh",
        "256 MiB round trip, fresh SharedBuffer each time",
        Kind::Info,
        Unit::Millis,
        &fresh,
    )?
    .note(
        "creating the region (a new memfd faulted in and filled) dominates: why buffers are \
         meant to be reused"
            .to_owned(),
    ))
}

/// A diagnostic task carrying `buffer` as a `u8` tensor initialized from it (not an output).
fn request(task: DiagnosticTask, buffer: &SharedBuffer) -> BenchmarkRequest {
    let mut request = diag(task);
    request.tensors.push(
        TensorSpec::new("data", DType::U8, vec![buffer.len() as u64])
            .init(Init::Data(buffer.share())),
    );
    request
}
