//! A whole tuning run from Python: `tunebox._native.tune`, the engine behind `tunebox tune`
//! (`tunebox_tune::run`), in memory; `engine_worker`, the Rust worker it starts; and
//! `serve_engine_worker`, the Python-launched worker used only where that binary is missing.
//!
//! `tunebox.kernel_tuner.tune_kernel` writes the user's call as manifest text in Kernel Tuner's
//! spelling and hands it here with the kernel source and the arrays it names (the arrays as
//! buffers the caller holds): the manifest is checked by the same code as a file given to
//! `tunebox tune` ([`tunebox_tune::Manifest::parse`], its files given as
//! [`tunebox_tune::ManifestFiles`]), the choices compile in parallel in the parent, are
//! measured in isolated workers, verified, cached in the results cache and ranked, and the
//! report comes back as Python objects (dicts, lists, numbers, strings: docs/cli.md's JSON schema,
//! built from the engine's value, never through text). Nothing is written to disk for it, and
//! nothing read back.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use tunebox_protocol::{SharedBuffer, SharedData};
use tunebox_tune::{
    BruteForce, CacheMode, Event, Manifest, ManifestFiles, Observer, Plan, Stop, TuneError,
    TuneOptions,
};
use tunebox_worker::Registry;

/// Runs the manifest `manifest` (TOML text, as a manifest file would hold it) through
/// tunebox-tune's engine and returns its report as a `dict` of docs/cli.md's JSON schema (lists,
/// `int`, `float`, `str`, `bool` and `None` inside, as `json.loads` of the `--json` file gives).
///
/// `path` is the manifest's name as if it were a file (it need not exist: relative paths in
/// the manifest are resolved against its folder, and the report names it); `files` gives the
/// files the manifest names, in memory, by the path it writes: a value is a `str` (a kernel
/// source) or `(address, length)`, the bytes of a buffer the caller holds alive and unchanged
/// for the call (a C-contiguous numpy array's `ctypes.data` and `nbytes`: a tensor's data or an
/// expected output, native byte order), copied once into shared memory before the run.
///
/// `worker` is the worker executable ([`engine_worker`], or the `tunebox-engine-worker`
/// launcher), `cache` the results cache (`None`: none), `strategy` one of the engine's names
/// (`brute-force`, `random`, `genetic`, …) with `budget` (choices, `None`: the strategy's own)
/// or `fraction` (a share of the valid choices, rounded half to even, at least 1, when `budget`
/// is `None`)
/// and `seed`, `workers` the worker processes measuring in parallel, `max_time_s` the time
/// after which no new choice starts, `timeout_s` the per-choice timeout (`None`: the
/// manifest's). `on_choice` is called as `on_choice(label, status, median_ms)` when a choice
/// finishes, `on_note(line)` for each of the run's notes; `max_process_uses` the measurements a
/// worker process makes before it is replaced (1: a fresh process for each; 0: no limit;
/// `None`: `tunebox tune`'s default for the kernel, 1 for C and no limit for CUDA,
/// `Manifest::default_max_process_uses`). The GIL is released while the run goes; Ctrl-C
/// stops it (the choices being measured are killed) and raises `KeyboardInterrupt`.
///
/// # Errors
///
/// `ValueError` for a manifest the engine refuses (its message names the field), an unknown
/// strategy, a `fraction` outside (0, 1]; `TypeError` for a `files` value that is neither a
/// `str` nor `(address, length)`; `OSError` when shared memory for a buffer cannot be had;
/// `RuntimeError` for a run that cannot go on (no GPU for a CUDA kernel, workers that cannot
/// start, an unusable cache).
#[pyfunction]
#[pyo3(signature = (manifest, path, files, worker, cache=None, strategy="brute-force".to_owned(), budget=None, fraction=None, seed=0, workers=1, max_time_s=None, timeout_s=None, on_choice=None, on_note=None, max_process_uses=None))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments, one per option
pub(crate) fn tune(
    py: Python<'_>,
    manifest: String,
    path: PathBuf,
    files: &Bound<'_, PyDict>,
    worker: PathBuf,
    cache: Option<PathBuf>,
    strategy: String,
    budget: Option<usize>,
    fraction: Option<f64>,
    seed: u64,
    workers: usize,
    max_time_s: Option<f64>,
    timeout_s: Option<f64>,
    on_choice: Option<Py<PyAny>>,
    on_note: Option<Py<PyAny>>,
    max_process_uses: Option<u64>,
) -> PyResult<Py<PyAny>> {
    if !tunebox_tune::strategies::NAMES.contains(&strategy.as_str()) {
        return Err(PyValueError::new_err(format!(
            "strategy {strategy:?}: use one of {}",
            tunebox_tune::strategies::NAMES.join(", ")
        )));
    }
    if let Some(f) = fraction.filter(|f| !(*f > 0.0 && *f <= 1.0)) {
        return Err(PyValueError::new_err(format!(
            "fraction={f}: give the share of the space to measure, above 0 and at most 1"
        )));
    }
    let files = manifest_files(files)?;
    let mut options = TuneOptions::new()
        .worker(worker)
        .workers(workers.max(1))
        .strategy(strategy.clone())
        .seed(seed)
        .cache(cache.map_or(CacheMode::Off, CacheMode::Path));
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
        let parse = || Manifest::parse(&manifest, &path, &tunebox_tune::compiler(), &files);
        let budget = match (budget, fraction) {
            (Some(budget), _) => Some(budget),
            (None, Some(fraction)) => {
                // Kernel Tuner's `fraction`: a share of the valid choices, rounded half to
                // even as Python's `round` (what tune_kernel computed before).
                let valid = Plan::new(parse()?, Box::new(BruteForce::new()), None)?
                    .space()
                    .len();
                Some(((fraction * valid as f64).round_ties_even() as usize).max(1))
            }
            (None, None) => None,
        };
        let options = match budget {
            Some(budget) => options.budget(budget),
            None => options,
        };
        let chosen = tunebox_tune::strategies::by_name_batched(
            &strategy,
            budget.unwrap_or(usize::MAX),
            seed,
            options.workers,
        )
        .unwrap_or_else(|| Box::new(BruteForce::new()));
        let manifest = parse()?;
        let uses = match max_process_uses {
            Some(uses) => (uses > 0).then_some(uses),
            None => manifest.default_max_process_uses(),
        };
        let options = options.max_process_uses(uses);
        let plan = Plan::new(manifest, chosen, None)?;
        // The manifest holds what it needs of them (tensor data by handle, expected outputs
        // copied): the expected outputs' shared memory goes now, not after the run.
        drop(files);
        tunebox_tune::run(plan, &options, &observer, &stop)
            .and_then(|report| tunebox_tune::json_value(&report))
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
    python_value(py, &outcome.map_err(to_python)?).map(Bound::unbind)
}

/// `value` as the Python objects `json.loads` would give for its text: objects as `dict`s
/// (keys sorted, as serde_json's map keeps them), arrays as `list`s, integers as `int`, other
/// numbers as `float`.
fn python_value<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            (None, None) => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(python_value(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(fields) => {
            let dict = PyDict::new(py);
            for (key, field) in fields {
                dict.set_item(key, python_value(py, field)?)?;
            }
            dict.into_any()
        }
    })
}

/// `files` as the engine takes them: each `str` as its UTF-8 text, each `(address, length)`
/// copied into shared memory of its own.
fn manifest_files(files: &Bound<'_, PyDict>) -> PyResult<ManifestFiles> {
    let mut given = ManifestFiles::new();
    for (name, value) in files.iter() {
        let name: String = name.extract()?;
        let data = if value.is_instance_of::<PyString>() {
            shared(value.extract::<String>()?.as_bytes(), &name)?
        } else if let Ok((address, length)) = value.extract::<(usize, usize)>() {
            if length == 0 {
                shared(&[], &name)?
            } else {
                // SAFETY: the caller's contract (see `tune`): `address..address + length` is a
                // buffer it holds alive and unchanged for this call; the GIL is held while it
                // is copied.
                let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, length) };
                shared(bytes, &name)?
            }
        } else {
            return Err(PyTypeError::new_err(format!(
                "files[{name:?}] = {}: give a str (source text) or (address, length) of a buffer",
                value.repr()?
            )));
        };
        given.insert(name, data);
    }
    Ok(given)
}

fn shared(bytes: &[u8], name: &str) -> PyResult<SharedData> {
    SharedBuffer::from_slice(bytes)
        .map(|buffer| buffer.share())
        .map_err(|e| {
            PyOSError::new_err(format!(
                "{name}: cannot hold {} bytes in shared memory: {e}",
                bytes.len()
            ))
        })
}

/// The path of tunebox's Rust worker (`tunebox-worker`: the `cpu`, `cuda` and `diagnostics`
/// backends), built into this extension and written once, on first use, into tunebox's cache
/// (`$TUNEBOX_CACHE_DIR/worker`, else `$XDG_CACHE_HOME/tunebox/worker`, else
/// `~/.cache/tunebox/worker`, private to the user), under a name that carries a hash of its
/// bytes: what `tune` starts for every worker process, without a Python interpreter.
///
/// # Errors
///
/// `FileNotFoundError` when this build of the extension holds no worker (built by cargo
/// without the `worker-binary` feature, as the workspace builds it; maturin builds it with);
/// `OSError` when the cache cannot hold it (no cache directory, one that is not private, a full
/// disk) or it is not executable there (a `noexec` mount). `tunebox.kernel_tuner` then falls
/// back to the Python launcher.
#[pyfunction]
pub(crate) fn engine_worker(py: Python<'_>) -> PyResult<PathBuf> {
    py.detach(crate::worker_binary::path)
}

/// Serves the engine's requests (`cpu`, `cuda`, `diagnostics`) as a tunebox worker until the
/// parent shuts it down or goes away; returns the exit code. What the `tunebox-engine-worker`
/// launcher runs where [`engine_worker`] is not available.
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

/// `error` as Python's exception: a bad manifest or option is a `ValueError`, the rest a
/// `RuntimeError`; its text is the whole chain (`{:#}`), as `tunebox` prints it.
fn to_python(error: TuneError) -> PyErr {
    let text = format!("{error:#}");
    match error {
        TuneError::Manifest { .. } | TuneError::Options { .. } => PyValueError::new_err(text),
        _ => PyRuntimeError::new_err(text),
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
