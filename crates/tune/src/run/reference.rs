//! Stage 4 of a run, the reference: when the manifest verifies against a kernel (a choice of
//! its own, or a separate source), that kernel runs once, alone, before any choice, and its
//! outputs are what every choice is judged by.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use tunebox_cpu::{CacheDir, CompileControl, CpuError};
use tunebox_protocol::{BenchmarkRequest, TensorData};

use super::compile::kernel_cache;
use super::lookup::Setup;
use crate::base::observer::{Observer, ObserverExt};
use crate::base::stop::Stop;
use crate::measure::workers;

/// Stage 4: the outputs every choice of `setup`'s manifest is judged by: those of its
/// reference kernel, compiled (C) and run once, untimed, in a worker of its own (`worker`: the
/// worker executable, as [`crate::TuneOptions::worker`]), with the reference's timeout
/// (`verify.timeout_s`); or the expected outputs read from files. `None` when the manifest
/// does not verify. A reference kernel is also called once on fresh inputs (docs/sandbox.md):
/// its outputs on them follow its outputs in the returned list (each output twice, in the same
/// order), and the measure stage judges the choices' last calls by them. `observer`
/// gets a note as it starts; a raised `stop` kills it.
///
/// # Errors
///
/// [`crate::TuneError::Run`]: the reference does not compile, cannot start, or fails: nothing
/// could be verified.
pub fn reference(
    setup: &Setup<'_>,
    worker: Option<&Path>,
    observer: &dyn Observer,
    stop: &Stop,
) -> crate::Result<Option<Vec<TensorData>>> {
    let run = || -> Result<Option<Vec<TensorData>>> {
        let request = workers::reference_request(setup.manifest)?;
        if let Some((label, request)) = &request {
            let cancel = || stop.poll(observer);
            let control = CompileControl {
                timeout: setup.manifest.compile_timeout,
                cancel: Some(&cancel),
                ..CompileControl::default()
            };
            compile_reference(label, request, &kernel_cache()?, &control)?;
        }
        let outputs = workers::reference_outputs(
            setup.manifest,
            request.as_ref(),
            setup.timeout,
            (worker, None),
            |pool| stop.watch(pool),
            |m| observer.note(m),
        );
        stop.unwatch();
        outputs
    };
    run().map_err(crate::TuneError::run)
}

/// Compiles the reference `request` (labelled `label`) into `cache`, and returns the files the
/// compiler read (every cached C line depends on them too); a cancelled compile is no error
/// (the run stops before measuring anything) and read nothing.
///
/// # Errors
///
/// It does not compile, or its compiler ran past `compile_timeout_s`.
pub(crate) fn compile_reference(
    label: &str,
    request: &BenchmarkRequest,
    cache: &CacheDir,
    control: &CompileControl<'_>,
) -> Result<Vec<PathBuf>> {
    match workers::precompile(request, cache, control) {
        Ok(dependencies) => Ok(dependencies),
        // Interrupted: no choice is measured either.
        Err(CpuError::CompileCancelled { .. }) => Ok(Vec::new()),
        Err(e) => match workers::compile_timeout_message(&e) {
            Some(message) => bail!("the reference {label} does not compile: {message}"),
            None => bail!(
                "the reference {label} does not compile: {:#}",
                anyhow::Error::new(e)
            ),
        },
    }
}
