//! Stage 5 of a run, measuring: each choice runs in a worker, timed as its manifest says, and
//! is judged against the reference's outputs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tunebox_protocol::{BenchmarkRequest, TensorData};

use super::lookup::{Setup, Todo};
use crate::measure::{is_transient, judge, one_by_one, run_all, start_pool};
use crate::observer::{Observer, ObserverExt};
use crate::results::ChoiceResult;
use crate::stop::Stop;

/// Stage 5, on its own: measures `todo` (C choices compiled first: see [`super::compile()`])
/// on a pool of `workers` fresh workers (`worker`: their executable, as
/// [`crate::TuneOptions::worker`]), one choice per worker at a time in `todo`'s order, each
/// judged against `reference` (from [`super::reference()`]; `None`: unverified), reported to
/// `observer`, and returned in `todo`'s order. A raised `stop` (or `observer` asking to stop)
/// starts no new choice and kills those running; they are left out of the results.
///
/// [`crate::run`] does the same, compiling while it measures, and caches each result.
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
        workers.clamp(1, todo.len()),
        setup.timeout,
        setup.max_process_uses,
        worker,
        &setup.manifest.env,
    )
    .map_err(crate::TuneError::run)?;
    stop.watch(Arc::clone(&pool));
    let requests: Vec<BenchmarkRequest> = todo.iter().map(|t| t.request.clone()).collect();
    let mut results: Vec<(usize, ChoiceResult)> = Vec::with_capacity(todo.len());
    run_all(
        &pool,
        one_by_one(&requests),
        || stop.poll(observer),
        |p, result| {
            if matches!(&result, Err(e) if is_transient(e)) && stop.requested() {
                return; // Killed by the stop: says nothing about the choice.
            }
            let t = &todo[p];
            let r = judge(
                t.index,
                t.choice.clone(),
                result,
                reference,
                setup.manifest,
                &setup.device,
            );
            observer.finished(&r.choice.label(), r.status, r.median_ms());
            results.push((p, r));
        },
    );
    stop.unwatch();
    pool.shutdown(Duration::from_millis(500));
    results.sort_by_key(|(p, _)| *p);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}
