//! A whole tuning run from Python: `tunebox._native.tune`, the engine behind `tunebox tune`
//! (`tunebox_tune::tune`), and `serve_engine_worker`, the worker it runs.
//!
//! `tunebox.kernel_tuner.tune_kernel` writes the user's call as a manifest in Kernel Tuner's
//! spelling (with the arrays as data files beside it) and hands its path here: the manifest is
//! read by the same code as a file given to `tunebox tune`, the choices compile in parallel in
//! the parent, are measured one at a time in isolated workers, verified, cached in the results
//! cache and ranked, and the JSON report (docs/cli.md's schema) is written for Python to read.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use tunebox_tune::{CacheMode, Event, Observer, Stop, TuneError, TuneOptions};
use tunebox_worker::Registry;

/// Runs the manifest at `manifest` through tunebox-tune's engine and writes its JSON report
/// to `json`.
///
/// `worker` is the worker executable (the `tunebox-engine-worker` launcher), `cache` the
/// results cache (`None`: none), `strategy` one of the engine's names (`brute-force`,
/// `random`, `genetic`, …) with `budget` (choices, `None`: the strategy's own) and `seed`,
/// `workers` the worker processes measuring in parallel, `max_time_s` the time after which no
/// new choice starts, `timeout_s` the per-choice timeout (`None`: the manifest's). `on_choice`
/// is called as `on_choice(label, status, median_ms)` when a choice finishes, `on_note(line)`
/// for each of the run's notes; `max_process_uses` the measurements a worker process makes
/// before it is replaced (1: a fresh process for each, `tunebox tune`'s default; 0: no limit). The GIL is released while the run goes; Ctrl-C stops it (the
/// choices being measured are killed) and raises `KeyboardInterrupt`.
///
/// # Errors
///
/// `ValueError` for a manifest the engine refuses (its message names the field), an unknown
/// strategy; `RuntimeError` for a run that cannot go on (no GPU for a CUDA kernel, workers that
/// cannot start, an unusable cache).
#[pyfunction]
#[pyo3(signature = (manifest, worker, json, cache=None, strategy="brute-force".to_owned(), budget=None, seed=0, workers=1, max_time_s=None, timeout_s=None, on_choice=None, on_note=None, max_process_uses=1))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments, one per option
pub(crate) fn tune(
    py: Python<'_>,
    manifest: PathBuf,
    worker: PathBuf,
    json: PathBuf,
    cache: Option<PathBuf>,
    strategy: String,
    budget: Option<usize>,
    seed: u64,
    workers: usize,
    max_time_s: Option<f64>,
    timeout_s: Option<f64>,
    on_choice: Option<Py<PyAny>>,
    on_note: Option<Py<PyAny>>,
    max_process_uses: u64,
) -> PyResult<()> {
    if !tunebox_tune::strategies::NAMES.contains(&strategy.as_str()) {
        return Err(PyValueError::new_err(format!(
            "strategy {strategy:?}: use one of {}",
            tunebox_tune::strategies::NAMES.join(", ")
        )));
    }
    let mut options = TuneOptions::new()
        .worker(worker)
        .json(&json)
        .workers(workers.max(1))
        .strategy(strategy)
        .seed(seed)
        .max_process_uses((max_process_uses > 0).then_some(max_process_uses))
        .cache(cache.map_or(CacheMode::Off, CacheMode::Path));
    if let Some(budget) = budget {
        options = options.budget(budget);
    }
    if let Some(max_time) = seconds(max_time_s, "max_time_s")? {
        options = options.max_time(max_time);
    }
    if let Some(timeout) = seconds(timeout_s, "timeout_s")? {
        options = options.timeout(timeout);
    }
    let observer = PyObserver {
        on_choice,
        on_note,
        interrupted: Mutex::new(None),
    };
    let stop = Stop::new();
    let outcome = py.detach(|| {
        tunebox_tune::tune(&manifest, &options, &observer, &stop)
            .and_then(|report| tunebox_tune::write_json(&report, &json))
    });
    if let Some(error) = observer
        .interrupted
        .lock()
        .map(|mut e| e.take())
        .ok()
        .flatten()
    {
        return Err(error);
    }
    outcome.map_err(to_python)
}

/// The number of choices of the manifest at `manifest` that satisfy its restrictions, as
/// `tunebox tune --count` counts them.
///
/// # Errors
///
/// `ValueError`: the manifest cannot be read or its restrictions do not parse.
#[pyfunction]
pub(crate) fn count(py: Python<'_>, manifest: PathBuf) -> PyResult<u64> {
    py.detach(|| tunebox_tune::count_file(&manifest, &mut |_| {}))
        .map(|count| count.valid)
        .map_err(to_python)
}

/// Serves the engine's requests (`cpu`, `cuda`, `diagnostics`) as a tunebox worker until the
/// parent shuts it down or goes away; returns the exit code. What `tunebox-engine-worker` runs.
#[pyfunction]
pub(crate) fn serve_engine_worker(py: Python<'_>) -> i32 {
    py.detach(|| tunebox_worker::run_from_env(Registry::standard()))
}

fn seconds(value: Option<f64>, name: &str) -> PyResult<Option<Duration>> {
    value
        .map(|s| {
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    PyValueError::new_err(format!("{name}={s}: give a positive number of seconds"))
                })
        })
        .transpose()
}

fn to_python(error: TuneError) -> PyErr {
    match error {
        TuneError::Manifest { message } | TuneError::Options { message } => {
            PyValueError::new_err(message)
        }
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// Hands the run's events to Python callbacks, and stops the run on Ctrl-C.
struct PyObserver {
    on_choice: Option<Py<PyAny>>,
    on_note: Option<Py<PyAny>>,
    /// The `KeyboardInterrupt` (or a callback's exception) that stopped the run.
    interrupted: Mutex<Option<PyErr>>,
}

impl PyObserver {
    fn keep(&self, error: PyErr) {
        if let Ok(mut slot) = self.interrupted.lock() {
            slot.get_or_insert(error);
        }
    }
}

impl Observer for PyObserver {
    fn on_event(&self, event: Event<'_>) {
        let call = match event {
            Event::ChoiceFinished {
                label,
                status,
                median_ms,
            } => self.on_choice.as_ref().map(|f| {
                Python::attach(|py| f.call1(py, (label, status.as_str(), median_ms)).map(drop))
            }),
            Event::Note(line) => self
                .on_note
                .as_ref()
                .map(|f| Python::attach(|py| f.call1(py, (line,)).map(drop))),
            _ => None,
        };
        if let Some(Err(error)) = call {
            self.keep(error);
        }
    }

    fn should_stop(&self) -> bool {
        if self.interrupted.lock().map(|e| e.is_some()).unwrap_or(true) {
            return true;
        }
        match Python::attach(|py| py.check_signals()) {
            Ok(()) => false,
            Err(error) => {
                self.keep(error);
                true
            }
        }
    }
}
