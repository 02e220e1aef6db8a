//! The code docs/extending.md shows besides examples/rust-fns: a whole tuning run from Rust, and
//! the protocol's types built as code outside tunebox builds them (constructors and setters:
//! the types are `#[non_exhaustive]`). A crate outside the workspace with the `tunebox` facade
//! as its only dependency, built and run by `tests/docs.rs` as a downstream user builds it (its
//! own lock file, its own features), which also checks that every code block of the page is
//! this file's or examples/rust-fns's code, so that the page cannot drift from what compiles.
//!
//! Usage: `tunebox-example-downstream` builds a request and a result and prints them;
//! `tunebox-example-downstream MANIFEST` tunes MANIFEST.

use std::path::Path;

use tunebox::protocol::Integrity;
use tunebox::{BenchmarkRequest, BenchmarkResult, CKernel, DType, TensorSpec, TimingConfig};
use tunebox::{CacheMode, Stop, TensorData, TimingStats, TuneOptions};

const SOURCE: &str = "#include <stdint.h>
void scale(float *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = 2 * x[i]; }";

fn request() -> BenchmarkRequest {
    BenchmarkRequest::new(CKernel::new(SOURCE, "scale").define("BLOCK", 64))
        .tensor(TensorSpec::new("x", DType::F32, [1024]).random(1))
        .tensor(TensorSpec::new("y", DType::F32, [1024]).output())
        .scalar("n", 1024)
        .timing(TimingConfig::default().rep_ms(20.0).max_noise(Some(0.01)))
}

/// What a backend of one's own answers for a request it timed.
fn answer(rep_ms: &[f64], outputs: Vec<TensorData>, worker_ms: f64) -> BenchmarkResult {
    let stats = TimingStats::from_samples(rep_ms, 3).with_stopped("noise".into());
    BenchmarkResult::new(stats)
        .with_outputs(outputs)
        .with_integrity(Integrity::default().with_worker_ms(Some(worker_ms)))
}

fn tune(manifest: &Path) -> Result<(), tunebox::tune::TuneError> {
    let options = TuneOptions::new() // the CLI's defaults, then:
        .strategy("genetic")
        .budget(200)
        .seed(1)
        .cache(CacheMode::Off);
    let report = tunebox::tune::tune(manifest, &options, &(), &Stop::new())?;
    if let Some(best) = tunebox::tune::best(&report.results) {
        let ms = best.median_ms().map_or("-".into(), |ms| format!("{ms:.4}"));
        println!("best: {} ({ms} ms)", best.choice.label());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A tuning run starts its workers from this same executable: in one, this serves requests
    // with the standard backends and exits.
    tunebox::run_if_worker(tunebox::Registry::standard);
    if let Some(manifest) = std::env::args_os().nth(1) {
        return Ok(tune(Path::new(&manifest))?);
    }
    let request = request();
    let result = answer(&[1.5, 1.0, 2.0], Vec::new(), 12.5);
    println!(
        "request: {} kernel, {} tensors, {} scalar, rep_ms {}",
        request.kernel.backend(),
        request.tensors.len(),
        request.scalars.len(),
        request.timing.rep_ms
    );
    println!(
        "result: median {} ms over {} reps (stopped: {}), worker {:?} ms",
        result.stats.median_ms, result.stats.reps, result.stats.stopped, result.integrity.worker_ms
    );
    Ok(())
}
