//! What evicting a kernel's data costs per timed rep (issue 13): the default, evicting the
//! lines of the kernel's tensors, against reading those tensors once, and against the
//! last-level-cache flush of earlier versions, sized from this machine's sysfs and from a
//! 32 MiB cache.

use std::hint::black_box;
use std::time::Instant;

use anyhow::Result;
use tunebox_cpu::{CacheFlusher, evict};

use crate::report::{Figure, Kind, Unit};
use crate::setup::{Setup, ms};
use crate::stats::{Summary, collect};

/// The tensors of `examples/matmul-cpu.toml`: three 512 × 512 f32 matrices, 3 MiB.
const TENSORS: usize = 3;
const TENSOR_BYTES: usize = 512 * 512 * 4;

/// The flush figures.
pub(crate) fn flush_costs(setup: &Setup) -> Result<Vec<Figure>> {
    eprintln!("bench: cache flush per rep");
    let n = setup.n(101, 21);
    let mut tensors: Vec<Vec<u8>> = (0..TENSORS)
        .map(|t| vec![t as u8 + 1; TENSOR_BYTES])
        .collect();
    let evict_samples = evict_samples(&mut tensors, n)?;
    let evict_summary = Summary::of(&evict_samples)?;
    let read_samples = read_samples(&tensors, n)?;
    let read_summary = Summary::of(&read_samples)?;
    let mut figures = tensor_figures(&evict_samples, evict_summary, &read_samples, read_summary);
    figures.extend(llc_figures(setup, evict_summary)?);
    Ok(figures)
}

/// `n` times (after 3 warmups): dirty every line of `tensors` as a kernel writing them would,
/// then time evicting them (dirty lines are written back), ms.
fn evict_samples(tensors: &mut [Vec<u8>], n: usize) -> Result<Vec<f64>> {
    collect(3, n, || {
        for tensor in tensors.iter_mut() {
            tensor
                .iter_mut()
                .step_by(64)
                .for_each(|b| *b = b.wrapping_add(1));
        }
        let start = Instant::now();
        tensors.iter().for_each(|t| evict(t));
        Ok(ms(start.elapsed()))
    })
}

/// `n` times (after 3 warmups): evict `tensors`, then time reading them once from memory (what
/// a cold kernel pays), ms.
fn read_samples(tensors: &[Vec<u8>], n: usize) -> Result<Vec<f64>> {
    collect(3, n, || {
        tensors.iter().for_each(|t| evict(t));
        let start = Instant::now();
        let mut sum = 0u64;
        for tensor in tensors {
            for chunk in tensor.chunks_exact(8) {
                sum = sum.wrapping_add(u64::from_ne_bytes(chunk.try_into().expect("8 bytes")));
            }
        }
        black_box(sum);
        Ok(ms(start.elapsed()))
    })
}

/// The tensor eviction (the default flush, noted as a multiple of the read) and the read itself.
fn tensor_figures(
    evict_samples: &[f64],
    evict_summary: Summary,
    read_samples: &[f64],
    read_summary: Summary,
) -> Vec<Figure> {
    vec![
        Figure::new(
            "flush_tensors_3mib",
            "cache flush per rep: evict 3 MiB of tensors (default)",
            Kind::Info,
            Unit::Millis,
            evict_summary,
        )
        .note(format!(
            "{:.2} x the time to read them once ({:.3} ms)",
            evict_summary.median / read_summary.median,
            read_summary.median
        ))
        .samples(evict_samples),
        Figure::new(
            "read_tensors_3mib",
            "reading those 3 MiB once, from memory",
            Kind::Floor,
            Unit::Millis,
            read_summary,
        )
        .samples(read_samples),
    ]
}

/// The last-level cache flush: this machine's (sysfs or TUNEBOX_LLC_BYTES), and a 32 MiB one;
/// each noted as a multiple of the tensor eviction `evict_summary`.
fn llc_figures(setup: &Setup, evict_summary: Summary) -> Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for (key, name, mut flusher) in [
        (
            "flush_llc_this_machine",
            "cache flush per rep: 2 x this machine's LLC (cache_flush = \"llc\")",
            CacheFlusher::new(),
        ),
        (
            "flush_llc_32mib",
            "cache flush per rep: 2 x a 32 MiB LLC",
            CacheFlusher::with_size(64 << 20),
        ),
    ] {
        let samples = collect(2, setup.n(21, 5), || {
            let start = Instant::now();
            flusher.flush();
            Ok(ms(start.elapsed()))
        })?;
        let summary = Summary::of(&samples)?;
        figures.push(
            Figure::new(key, name, Kind::Info, Unit::Millis, summary)
                .note(format!(
                    "{} MiB buffer held by every worker; {:.0} x the tensor eviction",
                    flusher.size() >> 20,
                    summary.median / evict_summary.median
                ))
                .samples(&samples),
        );
    }
    Ok(figures)
}
