//! Round trips: the raw socketpair floor, `TuningProcess::ping` and the pool API's
//! `submit` + `wait`, measured in turn, block by block, so that all of them see the same machine
//! state (on a VM, cross-core wake-up latency drifts by tens of µs between runs).

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use tunebox_pool::PoolExecutor;
use tunebox_process::TuningProcess;

use crate::affinity;
use crate::children::ECHO_MESSAGE;
use crate::pool_figs::executor;
use crate::process_figs::warm_process;
use crate::report::{Figure, Kind, Target, Unit};
use crate::setup::{LONG, Setup, trivial, us};
use crate::stats::Summary;

/// Round trips per block: each contestant runs a block, then the next one does.
const BLOCK: usize = 500;

/// Where the two ends of a round trip run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Wherever the scheduler puts them (how tunebox is used, and the reference of the targets).
    Free,
    /// Both on CPU 0.
    SameCore,
    /// Parent on CPU 0, the other end on CPU 1.
    CrossCore,
}

impl Placement {
    /// `(parent cpu, child cpu)`; `None` when free.
    fn cpus(self) -> Option<(usize, usize)> {
        match self {
            Placement::Free => None,
            Placement::SameCore => Some((0, 0)),
            Placement::CrossCore => Some((0, 1)),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Placement::Free => "",
            Placement::SameCore => ", same core",
            Placement::CrossCore => ", across cores",
        }
    }

    /// `base` with a suffix naming the placement.
    fn key(self, base: &'static str) -> &'static str {
        match (base, self) {
            (_, Placement::Free) => base,
            ("floor_socketpair_rtt", Placement::SameCore) => "floor_socketpair_rtt_same_core",
            ("floor_socketpair_rtt", Placement::CrossCore) => "floor_socketpair_rtt_cross_core",
            ("ping_process", Placement::SameCore) => "ping_process_same_core",
            ("ping_process", Placement::CrossCore) => "ping_process_cross_core",
            _ => base,
        }
    }
}

/// The far end of the raw floor: this binary in `echo` mode, with one end of a
/// `UnixStream::pair()` as its stdin, echoing 8-byte messages.
struct EchoChild {
    socket: UnixStream,
    child: Child,
}

impl EchoChild {
    /// Starts the child, pinned to `cpu` if given.
    fn spawn(cpu: Option<usize>) -> Result<EchoChild> {
        let exe = std::env::current_exe().context("locating this executable")?;
        let (socket, theirs) = UnixStream::pair().context("creating a socketpair")?;
        let mut command = Command::new(exe);
        command.arg("echo");
        if let Some(cpu) = cpu {
            command.args(["--cpu", &cpu.to_string()]);
        }
        let child = command
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .spawn()
            .context("starting the echo child")?;
        Ok(EchoChild { socket, child })
    }

    /// One round trip of an 8-byte message, µs.
    fn round_trip(&mut self) -> Result<f64> {
        let message = [7u8; ECHO_MESSAGE];
        let mut reply = [0u8; ECHO_MESSAGE];
        let start = Instant::now();
        self.socket
            .write_all(&message)
            .context("writing to the echo child")?;
        self.socket
            .read_exact(&mut reply)
            .context("reading from the echo child")?;
        let elapsed = start.elapsed();
        if reply != message {
            bail!("the echo child answered {reply:?}");
        }
        Ok(us(elapsed))
    }

    /// Closes the socket and waits for the child, which exits on end of file.
    fn finish(self) -> Result<()> {
        let EchoChild { socket, mut child } = self;
        drop(socket);
        let status = child.wait().context("waiting for the echo child")?;
        if !status.success() {
            bail!("the echo child failed: {status}");
        }
        Ok(())
    }
}

/// One of the things whose round trip is measured.
enum Contestant {
    Floor(EchoChild),
    Process(Box<TuningProcess>),
    Pool(PoolExecutor),
}

impl Contestant {
    /// One round trip, µs.
    fn round_trip(&mut self) -> Result<f64> {
        match self {
            Contestant::Floor(echo) => echo.round_trip(),
            Contestant::Process(process) => {
                let start = Instant::now();
                process.ping(LONG).context("TuningProcess::ping")?;
                Ok(us(start.elapsed()))
            }
            Contestant::Pool(executor) => {
                let start = Instant::now();
                executor
                    .submit(trivial())
                    .context("PoolExecutor::submit")?
                    .wait()
                    .context("TaskHandle::wait")?;
                Ok(us(start.elapsed()))
            }
        }
    }
}

/// Runs a warmup block of each contestant, then blocks of [`BLOCK`] round trips in turn until
/// each has `n`; returns each contestant's samples.
fn interleave(contestants: &mut [Contestant], n: usize) -> Result<Vec<Vec<f64>>> {
    let mut samples: Vec<Vec<f64>> = contestants.iter().map(|_| Vec::with_capacity(n)).collect();
    for contestant in contestants.iter_mut() {
        for _ in 0..BLOCK.min(n) {
            contestant.round_trip()?;
        }
    }
    while samples[0].len() < n {
        for (contestant, samples) in contestants.iter_mut().zip(&mut samples) {
            for _ in 0..BLOCK.min(n - samples.len()) {
                samples.push(contestant.round_trip()?);
            }
        }
    }
    Ok(samples)
}

/// Measures one placement: the floor and `TuningProcess::ping`, plus the pool API when free.
fn measure(setup: &Setup, placement: Placement, n: usize) -> Result<Vec<Figure>> {
    let mut contestants = contestants(setup, placement)?;
    eprintln!(
        "bench: round trips{}: socketpair floor, TuningProcess::ping{} ({n} each, interleaved)",
        placement.label(),
        if placement == Placement::Free {
            ", PoolExecutor submit + wait (1 worker)"
        } else {
            ""
        }
    );
    let samples = match placement.cpus() {
        Some((parent_cpu, _)) => affinity::pinned(parent_cpu, || interleave(&mut contestants, n)),
        None => interleave(&mut contestants, n),
    }?;
    for contestant in contestants {
        if let Contestant::Floor(echo) = contestant {
            echo.finish()?;
        }
    }

    let floor = Summary::of(&samples[0])?;
    let mut figures = vec![
        floor_figure(placement, floor),
        ping_figure(placement, Summary::of(&samples[1])?, floor),
    ];
    if let Some(pool_samples) = samples.get(2) {
        figures.push(pool_figure(placement, Summary::of(pool_samples)?, floor));
    }
    Ok(figures)
}

/// The contestants of `placement`: the echo child and a warm worker, pinned to the child's CPU
/// when the placement pins, and a 1-worker `PoolExecutor` when free.
fn contestants(setup: &Setup, placement: Placement) -> Result<Vec<Contestant>> {
    let child_cpu = placement.cpus().map(|(_, child)| child);
    let mut contestants = vec![
        Contestant::Floor(EchoChild::spawn(child_cpu)?),
        Contestant::Process(Box::new(warm_process(setup)?)),
    ];
    if let (Some(cpu), Contestant::Process(process)) = (child_cpu, &contestants[1]) {
        let pid = process.pid().context("the worker has no pid")?;
        let pid = libc::pid_t::try_from(pid).context("pid out of range")?;
        // The worker serves requests on its main thread, whose thread id is its pid.
        affinity::set(pid, &affinity::only(cpu))?;
    }
    if placement == Placement::Free {
        contestants.push(Contestant::Pool(executor(setup, 1)?));
    }
    Ok(contestants)
}

/// The note of a round trip measured alongside `floor`: its median as a multiple of the floor's.
fn ratio_to_floor(summary: &Summary, floor: &Summary, placement: Placement) -> String {
    format!(
        "{:.2}× the raw socketpair floor{} ({:.1} µs) measured alongside",
        summary.median / floor.median,
        placement.label(),
        floor.median
    )
}

/// The raw socketpair floor of `placement`.
fn floor_figure(placement: Placement, floor: Summary) -> Figure {
    Figure::new(
        placement.key("floor_socketpair_rtt"),
        format!("floor: raw socketpair round trip, 8 B{}", placement.label()),
        Kind::Floor,
        Unit::Micros,
        floor,
    )
    .note(if placement == Placement::Free {
        "UnixStream::pair() to a child echoing 8 B; unpinned, as tunebox's round trips: the \
         reference of their targets"
    } else {
        ""
    })
}

/// `TuningProcess::ping` of `placement`: a target (1.5× the floor) when free, context when
/// pinned.
fn ping_figure(placement: Placement, ping: Summary, floor: Summary) -> Figure {
    let ping_figure = Figure::new(
        placement.key("ping_process"),
        format!("ping round trip, TuningProcess{}", placement.label()),
        if placement == Placement::Free {
            Kind::Target
        } else {
            Kind::Info
        },
        Unit::Micros,
        ping,
    )
    .note(ratio_to_floor(&ping, &floor, placement));
    if placement == Placement::Free {
        ping_figure
            .target(Target::at_most(
                1.5 * floor.median,
                "1.5× raw socketpair floor",
            ))
            .anchors("Inductor-style 51 µs, TVM 108 µs")
    } else {
        ping_figure
    }
}

/// The pool API's submit + wait of `placement` (only measured when free): a target, 2× the
/// floor.
fn pool_figure(placement: Placement, pool: Summary, floor: Summary) -> Figure {
    Figure::new(
        "ping_pool",
        "ping round trip, pool API (submit + wait)",
        Kind::Target,
        Unit::Micros,
        pool,
    )
    .target(Target::at_most(
        2.0 * floor.median,
        "2× raw socketpair floor",
    ))
    .anchors("Inductor-style 139 µs, TVM 168 µs")
    .note(ratio_to_floor(&pool, &floor, placement))
}

/// The round-trip figures: free placement (the targets), then pinned to one core and across two
/// when the machine has two.
///
/// # Errors
///
/// A child or worker cannot be started, pinned, or stops answering.
pub(crate) fn figures(setup: &Setup, cores: usize) -> Result<Vec<Figure>> {
    let n = setup.n(10_000, 2_000);
    let mut placements = vec![Placement::Free];
    if cores >= 2 {
        placements.extend([Placement::SameCore, Placement::CrossCore]);
    }
    let mut figures = Vec::new();
    for placement in placements {
        figures.extend(measure(setup, placement, n)?);
    }
    Ok(figures)
}
