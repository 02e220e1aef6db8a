//! `tunebox devices`: what a worker sees.

use std::time::Duration;

use anyhow::{Context, Result};
use tunebox_process::{Output, ProcessConfig, TuningProcess};
use tunebox_protocol::DeviceInfo;

/// How long the probe worker may take (creating a CUDA context can take seconds).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Probes a worker and prints its backends and devices.
///
/// # Errors
///
/// The worker cannot be started or does not answer.
pub(crate) fn print(json: bool) -> Result<()> {
    let mut worker =
        TuningProcess::spawn(ProcessConfig::new().stderr(Output::Capture { tail_bytes: 8192 }))
            .context("could not start a worker to probe")?;
    let probe = worker
        .probe(PROBE_TIMEOUT)
        .context("the probe worker failed")?;
    // The probe worker's exit status is of no interest.
    let _ = worker.shutdown(Duration::from_millis(500));
    if json {
        let devices: Vec<serde_json::Value> = probe.devices.iter().map(device_json).collect();
        let unavailable: Vec<serde_json::Value> = probe
            .unavailable
            .iter()
            .map(|(backend, why)| serde_json::json!({ "backend": backend, "error": why.to_string() }))
            .collect();
        let report = serde_json::json!({
            "backends": probe.backends,
            "devices": devices,
            "unavailable": unavailable,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("backends: {}", probe.backends.join(", "));
    if probe.devices.is_empty() {
        println!("GPUs: none");
    }
    for d in &probe.devices {
        println!(
            "GPU {}: {}, compute capability {}.{}, {:.1} GiB, L2 {:.1} MiB, {} SMs, {} MHz (memory {} MHz), {}",
            d.index,
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.total_memory_bytes as f64 / (1u64 << 30) as f64,
            d.l2_cache_bytes as f64 / (1u64 << 20) as f64,
            d.sm_count,
            d.clock_khz / 1000,
            d.memory_clock_khz / 1000,
            d.uuid
        );
    }
    for (backend, why) in &probe.unavailable {
        println!("{backend}: unavailable: {why}");
    }
    Ok(())
}

fn device_json(d: &DeviceInfo) -> serde_json::Value {
    serde_json::json!({
        "index": d.index,
        "name": d.name,
        "uuid": d.uuid,
        "compute_capability": format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
        "total_memory_bytes": d.total_memory_bytes,
        "l2_cache_bytes": d.l2_cache_bytes,
        "sm_count": d.sm_count,
        "clock_khz": d.clock_khz,
        "memory_clock_khz": d.memory_clock_khz,
    })
}
