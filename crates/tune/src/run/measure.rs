//! Stage 5 of a run, measuring: each choice runs in a worker, timed as its manifest says, and
//! is judged against the reference's outputs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tunebox_protocol::TensorData;

use super::lookup::{Setup, Todo};
use super::pipeline::{Measured, Outcome, pipeline};
use super::stage::Stage;
use crate::base::observer::Observer;
use crate::base::stop::Stop;
use crate::measure::workers::start_pool;
use crate::results::ChoiceResult;

/// Stage 5, on its own: measures `todo` (C choices compiled first: see [`crate::compile()`])
/// on a pool of `workers` fresh workers (`worker`: their executable, as
/// [`crate::TuneOptions::worker`]), one choice per worker at a time in `todo`'s order, each
/// judged against `reference` (from [`crate::reference()`]; `None`: unverified), reported to
/// `observer`, and returned in `todo`'s order. A raised `stop` (or `observer` asking to stop)
/// starts no new choice and kills those running; they are left out of the results.
///
/// This is the pipeline [`crate::run`] measures with, without its compile threads: the same
/// choices and reference give the same results (each `ok` one with its first window).
///
/// # Errors
///
/// [`crate::TuneError::Run`]: the workers cannot start. A choice that fails is a result.
pub fn measure(
    setup: &Setup<'_>,
    todo: &[Todo],
    reference: Option<&[TensorData]>,
    workers: usize,
    worker: Option<&Path>,
    observer: &dyn Observer,
    stop: &Stop,
) -> crate::Result<Vec<ChoiceResult>> {
    if todo.is_empty() || stop.poll(observer) {
        return Ok(Vec::new());
    }
    let pool = start_pool(
        setup.manifest,
        workers.clamp(1, todo.len()),
        setup.timeout,
        setup.max_process_uses,
        (worker, None),
    )
    .map_err(crate::TuneError::run)?;
    stop.watch(Arc::clone(&pool));
    let stage = Stage {
        setup,
        pool: &pool,
        reference,
        varied: None,
        observer,
        stop,
        deadline: None,
    };
    let mut results: Vec<(usize, ChoiceResult)> = Vec::with_capacity(todo.len());
    pipeline(&stage, todo, None, |measured| {
        if let Measured::Choice(p, Outcome::Done { result, .. }) = measured {
            results.push((p, *result));
        }
    });
    stop.unwatch();
    pool.shutdown(Duration::from_millis(500));
    results.sort_by_key(|(p, _)| *p);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}
