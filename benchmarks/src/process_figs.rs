//! Figures of one worker process: `TuningProcess` from the outside.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tunebox_process::{Output, ProcessError, TuningProcess};
use tunebox_protocol::{
    BenchmarkRequest, CKernel, DType, DiagnosticTask, Init, Kernel, Scalar, SharedBuffer,
    TensorSpec, TimingConfig, checksum,
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
        let start = Instant::now();
        let mut process = TuningProcess::spawn(setup.config()).context("spawn")?;
        process
            .benchmark(trivial(), LONG)
            .context("first request")?;
        let cold = start.elapsed();
        let stop = Instant::now();
        process
            .shutdown(Duration::from_secs(1))
            .context("shutdown")?;
        shutdowns.push(ms(stop.elapsed()));
        Ok(ms(cold))
    })?;
    // The warmup runs' shutdowns are in front.
    let shutdowns = &shutdowns[shutdowns.len() - n..];
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
    ])
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
        let mut launcher = Command::new(&exe)
            .arg("launch-busy")
            .arg(&setup.worker)
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
        // Let the worker take its task.
        std::thread::sleep(Duration::from_millis(10));
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
        let elapsed = start.elapsed();
        launcher.wait().context("reaping the launcher")?;
        if !is_dead(worker) {
            survivors.push(worker);
            // Not ours to reap, but ours to stop.
            if let Ok(pid) = libc::pid_t::try_from(worker) {
                // SAFETY: kill(2) of the worker our launcher started; it is still alive.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        Ok(ms(elapsed))
    })?;
    let none_survived = survivors.is_empty();
    let figure = Figure::from_samples(
        "orphan_cleanup",
        "orphan cleanup: launcher SIGKILLed → worker dead",
        Kind::Target,
        Unit::Millis,
        &samples,
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
pub(crate) fn spin_request() -> BenchmarkRequest {
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
        let result = process
            .benchmark(spin_request(), LONG)
            .context("the 100 µs spin kernel (is a C compiler installed?)")?;
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
        let data = &source[..len];
        let expected = checksum(data);
        let buffer = SharedBuffer::from_slice(data).context("a shared buffer")?;
        // `Checksum` reads the buffer in place; a trivial task carrying it is the handoff alone.
        let mut round_trip = |buffer: &SharedBuffer| -> Result<f64> {
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
        };
        eprintln!("bench: {label} round trip, reused SharedBuffer ({n})");
        let trips = collect(1, n, || round_trip(&buffer))?;
        eprintln!("bench: {label} handoff, reused SharedBuffer ({n})");
        let handoffs = collect(1, n, || {
            let start = Instant::now();
            process
                .benchmark(request(DiagnosticTask::Sleep { ms: 0 }, &buffer), LONG)
                .context("handoff of a shared buffer")?;
            Ok(ms(start.elapsed()))
        })?;
        let scale = len as f64 / BIG as f64;
        let (trip_target, handoff_target) = if len == BIG {
            (
                Target::at_most(1.5 * memcpy_ms, "1.5× memcpy (issue 5)"),
                Target::at_most(5.0, "issue 5"),
            )
        } else {
            (
                Target::at_most(1.5 * memcpy_ms * scale, "1.5× memcpy of 16 MiB (issue 5)"),
                Target::at_most(5.0, "issue 5"),
            )
        };
        figures.push(
            Figure::from_samples(
                if len == BIG {
                    "big_roundtrip_reused"
                } else {
                    "mid_roundtrip_reused"
                },
                format!("{label} to worker and back (reused SharedBuffer, checksum back)"),
                if len == BIG { Kind::Target } else { Kind::Info },
                Unit::Millis,
                &trips,
            )?
            .target(trip_target)
            .anchors(if len == BIG {
                "Inductor-style pipe 281 ms, TVM 765 ms"
            } else {
                ""
            })
            .note(format!(
                "{label}: the handle crosses the socket, the worker reads every page in place \
                 (DiagnosticTask::Checksum) and sends its checksum back; the buffer is reused"
            )),
        );
        figures.push(
            Figure::from_samples(
                if len == BIG {
                    "big_handoff_reused"
                } else {
                    "mid_handoff_reused"
                },
                format!("{label} handoff only (reused SharedBuffer)"),
                if len == BIG { Kind::Target } else { Kind::Info },
                Unit::Millis,
                &handoffs,
            )?
            .target(handoff_target)
            .note(format!(
                "{label}: a trivial task carrying the buffer's handle, not reading it"
            )),
        );
    }
    eprintln!(
        "bench: 256 MiB round trip, fresh SharedBuffer each time ({})",
        setup.n(5, 2)
    );
    let fresh = collect(1, setup.n(5, 2), || {
        let start = Instant::now();
        let buffer = SharedBuffer::from_slice(source).context("a shared buffer")?;
        process
            .benchmark(request(DiagnosticTask::Checksum, &buffer), LONG)
            .context("checksum of a fresh buffer")?;
        Ok(ms(start.elapsed()))
    })?;
    figures.push(
        Figure::from_samples(
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
        ),
    );
    Ok(figures)
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
