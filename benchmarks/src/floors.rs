//! The physical floors tunebox's figures are compared with, measured in the same run:
//! fork+exec+wait of a static binary and memcpy bandwidth. (The raw socketpair round trip is
//! measured interleaved with tunebox's own round trips, in `round_trips`.)

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::report::{Figure, Kind, Unit};
use crate::setup::{Setup, ms};
use crate::stats::{Summary, collect};

/// Size of the large-buffer figures: 256 MiB.
pub(crate) const BIG: usize = 256 << 20;

/// A statically linked `int main(void) { return 0; }` built with `cc -static` in `dir`, or
/// `/bin/true` (with a note saying so) when that fails.
fn static_true(dir: &Path) -> (PathBuf, String) {
    let source = dir.join("true.c");
    let exe = dir.join("true-static");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::fs::write(&source, "int main(void) { return 0; }\n").is_ok()
        && Command::new(&compiler)
            .args(["-static", "-O2", "-o"])
            .arg(&exe)
            .arg(&source)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if built {
        (
            exe,
            format!("`{compiler} -static` of `int main(){{return 0;}}`"),
        )
    } else {
        (
            PathBuf::from("/bin/true"),
            format!("`{compiler} -static` failed: /bin/true (dynamic) instead"),
        )
    }
}

/// Spawn-and-wait time of `exe` with every stream closed, in ms.
fn spawn_wait_ms(exe: &Path, warmup: usize, n: usize) -> Result<Vec<f64>> {
    collect(warmup, n, || {
        let start = Instant::now();
        // The exit status is of no interest: the worker started without a parent exits with an
        // error at once, and that is the point.
        Command::new(exe)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .with_context(|| format!("running {}", exe.display()))?;
        Ok(ms(start.elapsed()))
    })
}

/// fork+exec+wait of a static binary (the floor of a cold start), and of the worker executable
/// started without a parent, which exits at once (dynamic loading and Rust runtime start-up).
///
/// # Errors
///
/// A binary cannot be run.
pub(crate) fn spawn_figures(setup: &Setup) -> Result<Vec<Figure>> {
    let n = setup.n(300, 50);
    let dir = tempfile::tempdir().context("a temporary directory for the static binary")?;
    let (exe, how) = static_true(dir.path());
    eprintln!("bench: fork+exec+wait of a static binary ({n})");
    let static_samples = spawn_wait_ms(&exe, n / 10, n)?;
    eprintln!("bench: fork+exec+wait of tunebox-worker without a parent ({n})");
    let worker_samples = spawn_wait_ms(&setup.worker, n / 10, n)?;
    Ok(vec![
        Figure::from_samples(
            "floor_fork_exec_static",
            "floor: fork+exec+wait, static binary",
            Kind::Floor,
            Unit::Millis,
            &static_samples,
        )?
        .note(format!("std::process::Command::status() of {how}")),
        Figure::from_samples(
            "exec_worker_no_parent",
            "spawn+wait of tunebox-worker exiting at once",
            Kind::Info,
            Unit::Millis,
            &worker_samples,
        )?
        .note(
            "the worker started without bootstrap variables: exec, dynamic loading, Rust and \
             env_logger start-up, exit; the part of a cold start that is not tunebox's protocol",
        ),
    ])
}

/// A 256 MiB buffer filled with a pattern, every page touched.
pub(crate) fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(31) >> 3) as u8).collect()
}

/// memcpy of 256 MiB between two buffers whose pages are already mapped, in ms, with the
/// bandwidth in the note.
///
/// # Errors
///
/// Never in practice; a statistics error if no sample was taken.
pub(crate) fn memcpy_figure(setup: &Setup, source: &[u8]) -> Result<Figure> {
    let n = setup.n(15, 4);
    eprintln!("bench: memcpy 256 MiB ({n})");
    let mut destination = vec![0u8; source.len()];
    // Touch every page of the destination, so the copy measures bandwidth, not page faults.
    destination.iter_mut().step_by(4096).for_each(|b| *b = 1);
    let samples = collect(2, n, || {
        let start = Instant::now();
        destination.copy_from_slice(std::hint::black_box(source));
        std::hint::black_box(&mut destination);
        Ok(ms(start.elapsed()))
    })?;
    let summary = Summary::of(&samples)?;
    let gbps = source.len() as f64 / (summary.median / 1e3) / 1e9;
    Ok(Figure::new(
        "floor_memcpy_256mib",
        "floor: memcpy 256 MiB (pages mapped)",
        Kind::Floor,
        Unit::Millis,
        summary,
    )
    .note(format!("{gbps:.1} GB/s"))
    .samples(&samples))
}
