//! `tunebox tune`: select (strategy, shard), take what the results cache has, precompile,
//! benchmark, verify, cache each result as it finishes, refine the best, rank.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tunebox_cpu::{CacheDir, CompileControl, CpuError};
use tunebox_pool::Status;
use tunebox_protocol::{BenchmarkRequest, Kernel, TimingConfig};

use crate::cache::{self, CacheLine, Deps, DepsCheck, ResultsCache};
use crate::error::Error;
use crate::fingerprint;
use crate::manifest::{Language, Manifest, Reference, Verify};
use crate::measure::{self, Bench};
use crate::observer::{Observer, ObserverExt, Phase};
use crate::report;
use crate::results::{
    CacheInfo, ChoiceResult, NotMeasured, RefineInfo, Report, RunHeader, RunInfo, Selection,
    ShardInfo, choices as plural, rank,
};
use crate::shard;
use crate::space::{Choice, SearchSpace};
use crate::stop::Stop;
use crate::strategy::{self, Strategy};

/// `--refine` re-measures with this many times the manifest's `rep_ms` and rep bounds, and
/// gives each re-measurement this many times the per-choice timeout.
const REFINE_FACTOR: f64 = 4.0;
/// Most timed reps a refined measurement may ask for.
const MAX_REPS: u32 = 1_000_000;

/// Where results are cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheMode {
    /// Beside the JSON report, else beside the manifest.
    Default,
    /// At this path.
    Path(PathBuf),
    /// No results cache: nothing is read or written.
    Off,
}

/// What `tune` was asked to do.
#[derive(Debug)]
pub struct TuneOptions {
    /// The manifest's path (it places the default results cache and names the manifest in reports).
    pub manifest: PathBuf,
    /// Worker processes measuring in parallel (at least 1; compiles are always parallel).
    pub workers: usize,
    /// The per-choice timeout (`None`: the manifest's `timeout_s`).
    pub timeout: Option<Duration>,
    /// Benchmarks per worker process before it is replaced (`None`: unlimited).
    pub max_process_uses: Option<u64>,
    /// The worker executable (`None`: `$TUNEBOX_WORKER`, else the current executable, which
    /// must then call `tunebox_worker::run_if_worker` first thing in `main`).
    pub worker: Option<PathBuf>,
    /// Where the JSON report will go (checked before the run).
    pub json: Option<PathBuf>,
    /// Where the CSV table will go (checked before the run).
    pub csv: Option<PathBuf>,
    /// Where the results cache is.
    pub cache: CacheMode,
    /// Ignore what the cache holds (new results are still appended).
    pub fresh: bool,
    /// How the choices are picked (and what reports record).
    pub selection: Selection,
    /// Start no new choice after this long.
    pub max_time: Option<Duration>,
    /// Re-measure the best this many choices with more reps.
    pub refine: Option<usize>,
    /// Measure only this shard of the choices (`None`: all).
    pub shard: Option<ShardInfo>,
}

/// The C compiler: `$CC`, else `cc`.
pub fn compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// The C++ compiler, for C++ sources whose manifest names no compiler: `$CXX`, else `g++`
/// (Kernel Tuner's default for `lang = "C"`).
pub fn cxx_compiler() -> String {
    std::env::var("CXX")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "g++".into())
}

/// The first stage of a run: a manifest, its search space, the strategy that searches it, and
/// the choices the strategy asked for first (this shard's part of them).
pub struct Plan {
    manifest: Manifest,
    space: SearchSpace,
    strategy: Box<dyn Strategy>,
    shard: Option<ShardInfo>,
    selected: Vec<usize>,
    notes: Vec<String>,
}

/// The most threads a CUDA block may have on every GPU tunebox can compile for (compute
/// capability 2.0 and later; CUDA 13's NVRTC targets 7.5 and later): the device's
/// `MAX_THREADS_PER_BLOCK`, which Kernel Tuner reads to drop larger blocks from its space.
pub(crate) const CUDA_MAX_THREADS_PER_BLOCK: u64 = 1024;

impl Plan {
    /// Builds the space of `manifest` and asks `strategy` for its first choices, keeping those
    /// of `shard` (all when `None`).
    ///
    /// # Errors
    ///
    /// Restrictions that fail to evaluate, or leave no choice.
    pub fn new(
        manifest: Manifest,
        strategy: Box<dyn Strategy>,
        shard: Option<ShardInfo>,
    ) -> crate::Result<Plan> {
        Plan::build(manifest, strategy, shard).map_err(crate::Error::manifest)
    }

    fn build(
        manifest: Manifest,
        mut strategy: Box<dyn Strategy>,
        shard: Option<ShardInfo>,
    ) -> Result<Plan> {
        let mut space = SearchSpace::new(&manifest.params, &manifest.restrictions)
            .with_context(|| format!("invalid manifest {}", manifest.path.display()))?;
        let mut notes = Vec::new();
        // As Kernel Tuner: a block of more threads than the device allows is not a choice.
        if let Some(launch) = &manifest.launch {
            let removed = space.retain(|choice| {
                launch.config(choice).map_or(true, |c| {
                    c.block.iter().map(|&d| u64::from(d)).product::<u64>()
                        <= CUDA_MAX_THREADS_PER_BLOCK
                })
            });
            if removed > 0 {
                notes.push(format!(
                    "{} left out of the space: their block has more than \
                     {CUDA_MAX_THREADS_PER_BLOCK} threads, the most a CUDA block may have (as \
                     Kernel Tuner leaves them out)",
                    plural(removed)
                ));
            }
        }
        ensure!(
            !space.is_empty(),
            "{}: no choice satisfies the restrictions{}; loosen `restrictions` or add values to \
             `params`",
            manifest.path.display(),
            if notes.is_empty() {
                ""
            } else {
                " and the GPU's block limit"
            }
        );
        let selected = ask(strategy.as_mut(), &space, shard);
        Ok(Plan {
            manifest,
            space,
            strategy,
            shard,
            selected,
            notes,
        })
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The search space (every valid choice, by stable index).
    pub fn space(&self) -> &SearchSpace {
        &self.space
    }

    /// What building the space left out, in words (e.g. CUDA blocks over the thread limit).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The stable indices of the choices the strategy asked for first, in order (this shard's
    /// part of them). Brute force and random sampling ask for every choice they will measure
    /// at once, so this is the whole run (what `tunebox tune --list` prints).
    pub fn selected(&self) -> &[usize] {
        &self.selected
    }
}

/// The strategy's next choices, as many as it names, that `shard` owns.
fn ask(strategy: &mut dyn Strategy, space: &SearchSpace, shard: Option<ShardInfo>) -> Vec<usize> {
    strategy
        .ask(space, usize::MAX)
        .into_iter()
        .filter(|&i| i < space.len() && shard::owns(shard, i))
        .collect()
}

/// Reads the manifest and selects the choices to measure: the strategy's selection, then the
/// shard's part of it.
///
/// # Errors
///
/// An invalid manifest, or restrictions that leave no choice.
pub fn plan(path: &Path, selection: &Selection, shard: Option<ShardInfo>) -> crate::Result<Plan> {
    plan_inner(path, selection, shard).map_err(crate::Error::manifest)
}

fn plan_inner(path: &Path, selection: &Selection, shard: Option<ShardInfo>) -> Result<Plan> {
    let manifest = Manifest::read(path, &compiler())?;
    Plan::build(manifest, strategy::from_selection(selection), shard)
}

/// A choice still to measure.
struct Todo {
    index: usize,
    request: BenchmarkRequest,
    key: String,
}

/// Runs a tuning session as the manifest and options say.
///
/// # Errors
///
/// An invalid manifest, an empty space, unusable output paths, no usable cache directory,
/// workers that cannot start, or a reference that fails; a choice that fails is a result, not an
/// error, and so is a run stopped by `stop` or `--max-time` (its report lists what was not
/// measured).
pub fn tune(options: &TuneOptions, observer: &dyn Observer, stop: &Stop) -> crate::Result<Report> {
    let plan = plan(&options.manifest, &options.selection, options.shard)?;
    run(plan, options, observer, stop)
}

/// Runs `plan` (a manifest and a strategy, from [`plan`] or [`Plan::new`]) as `options` say;
/// `options.manifest` names the manifest in reports and places the default results cache, and
/// `options.selection` is what reports record as the strategy.
///
/// # Errors
///
/// As [`tune`], but for the manifest, which `plan` has read.
pub fn run(
    plan: Plan,
    options: &TuneOptions,
    observer: &dyn Observer,
    stop: &Stop,
) -> crate::Result<Report> {
    tune_inner(plan, options, observer, stop).map_err(crate::Error::run)
}

fn tune_inner(
    plan: Plan,
    options: &TuneOptions,
    observer: &dyn Observer,
    stop: &Stop,
) -> Result<Report> {
    let start = Instant::now();
    let deadline = options.max_time.map(|t| start + t);
    let past_deadline = || deadline.is_some_and(|d| Instant::now() >= d);
    let Plan {
        manifest,
        space,
        mut strategy,
        shard,
        selected,
        notes: space_notes,
    } = plan;
    let choices = &space;
    for (flag, path) in [("--json", &options.json), ("--csv", &options.csv)] {
        if let Some(path) = path {
            check_output_path(flag, path, &manifest).map_err(Error::options)?;
        }
    }
    let cache_path = match &options.cache {
        CacheMode::Default => Some(cache::default_path(&options.manifest, options.shard)),
        CacheMode::Path(path) => Some(path.clone()),
        CacheMode::Off => None,
    };
    // The manifest's other default caches (the unsharded run's, every shard's) are read too.
    let cache_others = match (&options.cache, &cache_path) {
        (CacheMode::Default, Some(own)) => cache::sibling_paths(&options.manifest, own),
        _ => Vec::new(),
    };
    if let Some(path) = &cache_path {
        check_output_path("--cache", path, &manifest).map_err(Error::options)?;
        for (flag, other) in [("--json", &options.json), ("--csv", &options.csv)] {
            if other.as_deref() == Some(path.as_path()) {
                return Err(Error::options(format_args!(
                    "--cache and {flag} are the same file {}; give them different paths",
                    path.display()
                )));
            }
        }
    }
    if !manifest.unsupported.is_empty() {
        bail!(
            "{} can be listed (--list) but not tuned:\n  {}",
            manifest.path.display(),
            manifest.unsupported.join("\n  ")
        );
    }
    let progress = observer;
    let timeout = options.timeout.unwrap_or(manifest.timeout);

    // A GPU manifest needs a worker that sees a GPU: ask one first, so that a missing driver is
    // one clear error rather than an error per choice.
    let (device, backend) = match manifest.kernel.language {
        Language::Cuda => (measure::probe_gpu(options.worker.as_deref())?, "cuda"),
        Language::C => (measure::cpu_model(), "cpu"),
    };
    check_compilers(&manifest)?;
    let setup = fingerprint::setup_hash(&manifest);
    let header = RunHeader {
        tunebox_version: env!("CARGO_PKG_VERSION").to_owned(),
        manifest: manifest.path.display().to_string(),
        manifest_hash: fingerprint::manifest_hash(&setup, &manifest, space.choices()),
        name: manifest.name.clone(),
        kernel: format!(
            "{} ({})",
            manifest.kernel.entry, manifest.kernel.source_name
        ),
        backend: backend.to_owned(),
        device: device.clone(),
        space_size: choices.len(),
        selection: options.selection.clone(),
        shard: options.shard,
        metrics: manifest.metrics.names(),
    };
    let mut notes = space_notes;
    notes.extend(source_notes(&manifest));
    notes.extend(manifest.notes.iter().cloned());
    if let Some(shard) = options.shard {
        progress.note(&format!(
            "shard {shard}: {} of the {} choices",
            selected.len(),
            choices.len()
        ));
    }

    let mut cache = cache_path
        .as_deref()
        .map(|path| ResultsCache::open(path, &cache_others, options.fresh))
        .transpose()?;
    if let Some(c) = &cache
        && c.unreadable() > 0
    {
        notes.push(format!(
            "{} unreadable lines of the results cache {} were ignored (cut short by a kill?)",
            c.unreadable(),
            c.path().display()
        ));
    }

    let mut results: Vec<ChoiceResult> = Vec::with_capacity(selected.len());
    let mut not_measured: Vec<NotMeasured> = Vec::new();
    let mut hits = 0;
    let reference = measure::reference_request(&manifest)?;
    let kernel_cache = CacheDir::from_env()?;
    // Each compile has the manifest's deadline, and Ctrl-C kills the compilers at once (they
    // run in process groups of their own, so the terminal's SIGINT reaches only us).
    let cancel = || stop.requested();
    let control = CompileControl {
        timeout: manifest.compile_timeout,
        cancel: Some(&cancel),
        ..CompileControl::default()
    };
    let refine = options.refine.filter(|&k| k > 0);
    // The pool, started only when something needs measuring.
    let mut bench: Option<Bench> = None;
    let mut workers = 1;
    let mut reference_compiled = false;
    // The files the reference's compile read (a C reference): every line depends on them.
    let mut reference_deps: Vec<PathBuf> = Vec::new();
    // Headers of cached C lines are checked as they are now, each file hashed once.
    let deps_check = DepsCheck::default();
    // The headers each C choice's line was recorded with (refined lines share them).
    let mut deps_of: HashMap<usize, Deps> = HashMap::new();
    // Results the strategy has been told.
    let mut told = 0;
    let mut batch = selected;
    // Ask, measure, tell, until the strategy has no more (brute force and random sampling
    // ask for everything at once: one round).
    loop {
        // Requests and cache keys; what the cache has is done.
        let mut todo: Vec<Todo> = Vec::new();
        let mut round_hits = 0;
        for &index in &batch {
            let choice = &choices.choice(index).expect("a choice of the space");
            let request = match measure::request(
                &manifest,
                &manifest.kernel,
                manifest.launch.as_ref(),
                choice,
            ) {
                Ok(request) => request,
                // A choice whose request cannot be built (its launch fails) is an error at once.
                Err(e) => {
                    let error = format!("{e:#}");
                    results.push(ChoiceResult::failed(
                        index,
                        choice.clone(),
                        Status::Error,
                        error,
                        &device,
                    ));
                    continue;
                }
            };
            let key = fingerprint::key(
                &setup,
                &device,
                &request,
                &choice.label(),
                options.max_process_uses,
            );
            let check = matches!(request.kernel, Kernel::C(_)).then_some(&deps_check);
            if let Some((result, deps)) = cached(
                cache.as_ref(),
                (&key, check),
                timeout,
                index,
                choice,
                &manifest,
                &device,
            ) {
                if let Some(deps) = deps {
                    deps_of.insert(index, deps);
                }
                if let Some(c) = cache.as_mut()
                    && let Err(e) = c.adopt(&key)
                {
                    progress.note(&format!("warning: {e:#}; results are no longer cached"));
                    cache = None;
                }
                results.push(result);
                round_hits += 1;
                continue;
            }
            todo.push(Todo {
                index,
                request,
                key,
            });
        }
        hits += round_hits;
        if round_hits > 0
            && let Some(c) = &cache
        {
            progress.note(&format!(
                "skipped {} already measured (results cache {}; --fresh re-measures them)",
                plural(round_hits),
                c.path().display()
            ));
        }

        // C kernels compile in the parent, on the cores the workers leave, while the choices
        // compiled before them are measured: workers only load cached objects, and a run takes about
        // the longer of compiling and measuring, not their sum. CUDA kernels compile in the workers
        // (below).
        let c_todo: Vec<usize> = (0..todo.len())
            .filter(|&p| matches!(todo[p].request.kernel, Kernel::C(_)))
            .collect();
        let needs_c = !c_todo.is_empty()
            || reference
                .as_ref()
                .is_some_and(|(_, r)| matches!(r.kernel, Kernel::C(_)));
        if needs_c && !todo.is_empty() {
            std::fs::create_dir_all(kernel_cache.path()).with_context(|| {
            format!(
                "cannot create the kernel cache {}; set TUNEBOX_CACHE_DIR to a writable directory",
                kernel_cache.path().display()
            )
        })?;
        }
        if !todo.is_empty()
            && !reference_compiled
            && let Some((label, request)) = &reference
        {
            reference_compiled = true;
            match measure::precompile(request, &kernel_cache, &control) {
                Ok(deps) => reference_deps = deps,
                // Interrupted: no choice is measured either (below).
                Err(CpuError::CompileCancelled { .. }) => {}
                Err(e) => match measure::compile_timeout_message(&e) {
                    Some(message) => bail!("the reference {label} does not compile: {message}"),
                    None => bail!(
                        "the reference {label} does not compile: {:#}",
                        anyhow::Error::new(e)
                    ),
                },
            }
        }
        let mut skipped: Vec<(usize, &str)> = Vec::new();
        // Every result goes through here: cached (with its key, and for a C choice the
        // headers its compile read, `files`) unless transient, then kept.
        let mut record = |result: ChoiceResult,
                          key: Option<&str>,
                          files: Option<Vec<PathBuf>>,
                          cache: &mut Option<ResultsCache>| {
            let deps = files.filter(|f| !f.is_empty()).and_then(|mut files| {
                files.extend(reference_deps.iter().cloned());
                Deps::of(&files)
            });
            if let Some(deps) = &deps {
                deps_of.insert(result.index, deps.clone());
            }
            if let (Some(c), Some(key)) = (cache.as_mut(), key)
                && let Err(e) = c.append(CacheLine::new(
                    key.to_owned(),
                    &header,
                    timeout,
                    &result,
                    deps,
                ))
            {
                progress.note(&format!("warning: {e:#}; results are no longer cached"));
                *cache = None;
            }
            results.push(result);
        };

        if bench.is_none() {
            workers = options
                .workers
                .clamp(1, todo.len().max(refine.unwrap_or(1)).max(1));
        }
        if bench.is_none() && !todo.is_empty() && !stop.requested() && !past_deadline() {
            match open_bench(
                &manifest,
                reference.as_ref(),
                workers,
                timeout,
                options,
                stop,
                progress,
            ) {
                Ok(b) => bench = Some(b),
                Err(_) if stop.requested() => {}
                Err(e) => return Err(e),
            }
        }

        // What each C compile gave, and the files each successful compile read (set before its
        // position settles, so before it is measured).
        let compiled: Mutex<Vec<(usize, CompileOutcome)>> = Mutex::new(Vec::new());
        let compiled_deps: Mutex<Vec<Option<Vec<PathBuf>>>> = Mutex::new(vec![None; todo.len()]);
        // Positions that got a measurement (or a transient failure) from the pool.
        let mut measured: Vec<bool> = vec![false; todo.len()];
        if let Some(bench) = &bench {
            // GPU kernels compile in the workers (a compiler can crash too), spread over the pool.
            let mut ready_now: Vec<usize> = (0..todo.len())
                .filter(|&p| !matches!(todo[p].request.kernel, Kernel::C(_)))
                .collect();
            let cuda: Vec<usize> = ready_now
                .iter()
                .copied()
                .filter(|&p| matches!(todo[p].request.kernel, Kernel::Cuda(_)))
                .collect();
            if !cuda.is_empty() {
                progress.note(&format!(
                    "compiling {} on {workers} worker(s)…",
                    plural(cuda.len())
                ));
                let batch: Vec<BenchmarkRequest> =
                    cuda.iter().map(|&p| todo[p].request.clone()).collect();
                for (&p, outcome) in cuda.iter().zip(bench.pool.prepare(&batch)) {
                    let Err(e) = outcome else { continue };
                    ready_now.retain(|&q| q != p);
                    if measure::is_transient(&e) {
                        skipped.push((p, stop_reason(stop)));
                        continue;
                    }
                    let t = &todo[p];
                    let result = ChoiceResult::failed(
                        t.index,
                        choices.choice(t.index).expect("a choice of the space"),
                        e.status(),
                        format!("{:#}", anyhow::Error::new(e)),
                        &device,
                    );
                    record(result, Some(&t.key), None, &mut cache);
                }
            }

            // Compiles overlap measuring on the cores the workers leave; with none left they all
            // finish first (on every core), so that no compile shares a worker's core.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let overlap = cores > workers;
            let compile_threads = if overlap { cores - workers } else { cores };
            progress.phase(
                Phase::Benchmarking,
                ready_now.len() + c_todo.len(),
                &format!(
                    "benchmarking {} on {workers} worker(s), timeout {timeout:?}…",
                    plural(ready_now.len() + c_todo.len())
                ),
            );
            if !c_todo.is_empty() {
                progress.note(&format!(
                    "compiling {} on {}{}…",
                    plural(c_todo.len()),
                    if compile_threads == 1 {
                        "1 thread".to_owned()
                    } else {
                        format!("{compile_threads} threads")
                    },
                    if overlap {
                        " while measuring"
                    } else {
                        ", then measuring"
                    }
                ));
            }
            // Measured in the space's order, each choice once its compile has settled.
            let mut measurable = vec![false; todo.len()];
            for &p in ready_now.iter().chain(&c_todo) {
                measurable[p] = true;
            }
            let order: Vec<usize> = (0..todo.len()).filter(|&p| measurable[p]).collect();
            let gate = measure::InOrder::new(order, todo.len());
            for &p in &ready_now {
                gate.settle(p, true);
            }
            let next_compile = AtomicUsize::new(0);
            std::thread::scope(|scope| {
                let mut compilers = Vec::with_capacity(compile_threads);
                for _ in 0..compile_threads {
                    let (c_todo, next_compile, compiled, gate) =
                        (&c_todo, &next_compile, &compiled, &gate);
                    let compiled_deps = &compiled_deps;
                    let (todo, choices, progress, control) = (&todo, &choices, &progress, &control);
                    let (past_deadline, kernel_cache) = (&past_deadline, &kernel_cache);
                    compilers.push(scope.spawn(move || {
                        while let Some(&p) = c_todo.get(next_compile.fetch_add(1, Ordering::SeqCst))
                        {
                            let outcome = (!stop.requested() && !past_deadline()).then(|| {
                                measure::precompile(&todo[p].request, kernel_cache, control)
                            });
                            let outcome = outcome.map(|o| {
                                o.map(|deps| {
                                    lock(compiled_deps)[p] = Some(deps);
                                })
                            });
                            gate.settle(p, matches!(outcome, Some(Ok(()))));
                            match &outcome {
                                Some(Err(e)) if !matches!(e, CpuError::CompileCancelled { .. }) => {
                                    let status = if measure::compile_timeout_message(e).is_some() {
                                        Status::Timeout
                                    } else {
                                        Status::CompileError
                                    };
                                    progress.finished(
                                        &choices
                                            .choice(todo[p].index)
                                            .expect("a choice of the space")
                                            .label(),
                                        status,
                                        None,
                                    );
                                }
                                _ => {}
                            }
                            lock(compiled).push((p, outcome));
                        }
                    }));
                }
                // Once every compile thread is done (or panicked), nothing is left pending.
                let closer = scope.spawn(|| {
                    for compiler in compilers {
                        let _ = compiler.join();
                    }
                    gate.settle_rest(false);
                });
                if !overlap {
                    let _ = closer.join();
                }
                measure::run_all(
                    &bench.pool,
                    || gate.next().map(|p| (p, &todo[p].request)),
                    || stop.requested() || past_deadline(),
                    |p, result| {
                        measured[p] = true;
                        let t = &todo[p];
                        if matches!(&result, Err(e) if measure::is_transient(e)) && stop.requested()
                        {
                            skipped.push((p, "interrupted"));
                            return;
                        }
                        let transient = matches!(&result, Err(e) if measure::is_transient(e));
                        let r = measure::judge(
                            t.index,
                            choices.choice(t.index).expect("a choice of the space"),
                            result,
                            bench.reference.as_deref(),
                            &manifest,
                            &device,
                        );
                        progress.finished(&r.choice.label(), r.status, r.median_ms());
                        let files = lock(&compiled_deps)[p].clone();
                        record(r, (!transient).then_some(t.key.as_str()), files, &mut cache);
                    },
                );
            });
            progress.end_phase();
            for p in ready_now {
                if !measured[p] {
                    skipped.push((p, stop_reason(stop)));
                }
            }
        } else {
            for (p, t) in todo.iter().enumerate() {
                if !matches!(t.request.kernel, Kernel::C(_)) {
                    skipped.push((p, stop_reason(stop)));
                }
            }
        }
        // C choices: a compile failure is a result; one compiled but never measured, or never
        // compiled, was not started.
        let mut outcomes = compiled.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut reported = vec![false; todo.len()];
        for (p, _) in &outcomes {
            reported[*p] = true;
        }
        outcomes.extend(c_todo.iter().filter(|&&p| !reported[p]).map(|&p| (p, None)));
        outcomes.sort_by_key(|(p, _)| *p);
        for (p, outcome) in outcomes {
            let t = &todo[p];
            let failed = |status, error| {
                ChoiceResult::failed(
                    t.index,
                    choices.choice(t.index).expect("a choice of the space"),
                    status,
                    error,
                    &device,
                )
            };
            match outcome {
                Some(Ok(())) if measured[p] => {}
                Some(Ok(())) | None => skipped.push((p, stop_reason(stop))),
                // Killed by Ctrl-C: says nothing about the choice.
                Some(Err(CpuError::CompileCancelled { .. })) => skipped.push((p, "interrupted")),
                // Killed at compile_timeout_s: a `timeout`, not cached (a slow compiler, a loaded
                // machine or a larger compile_timeout_s may let the next run compile it).
                Some(Err(e)) => match measure::compile_timeout_message(&e) {
                    Some(message) => {
                        record(failed(Status::Timeout, message), None, None, &mut cache);
                    }
                    None => {
                        // The headers read before the error (none when one was missing: then
                        // the next run compiles it again).
                        let files = match &e {
                            CpuError::Compile { dependencies, .. } => Some(dependencies.clone()),
                            _ => None,
                        };
                        let error = format!("{:#}", anyhow::Error::new(e));
                        record(
                            failed(Status::CompileError, error),
                            Some(&t.key),
                            files,
                            &mut cache,
                        );
                    }
                },
            }
        }

        for (p, reason) in skipped {
            let t = &todo[p];
            not_measured.push(NotMeasured {
                index: t.index,
                choice: choices.choice(t.index).expect("a choice of the space"),
                reason: reason.to_owned(),
            });
        }
        for result in &results[told..] {
            strategy.tell(result.index, result);
        }
        told = results.len();
        if stop.requested() || past_deadline() {
            break;
        }
        batch = ask(strategy.as_mut(), &space, shard);
        if batch.is_empty() {
            break;
        }
    }

    // Early elimination: the best few are measured again, longer, and ranked by that.
    if let Some(top) = refine
        && !stop.requested()
    {
        refine_best(
            top,
            &mut results,
            &mut bench,
            RefineContext {
                manifest: &manifest,
                deps: &deps_of,
                deps_check: &deps_check,
                setup: &setup,
                device: &device,
                header: &header,
                timeout,
                reference: reference.as_ref(),
                options,
                stop,
                progress,
            },
            &mut cache,
            &mut notes,
        )?;
    }
    if let Some(bench) = &bench {
        bench.pool.shutdown(Duration::from_millis(500));
    }
    stop.unwatch();

    not_measured.sort_by_key(|n| n.index);
    notes.extend(budget_note(&results, &manifest, timeout));
    rank(&mut results);
    Ok(Report {
        info: RunInfo {
            header,
            elapsed_s: start.elapsed().as_secs_f64(),
            workers: if bench.is_some() { workers } else { 0 },
            refine: refine.map(|top| RefineInfo {
                top,
                rep_factor: REFINE_FACTOR,
            }),
            cache: cache_path.map(|path| CacheInfo {
                path: path.display().to_string(),
                hits,
            }),
            interrupted: stop.requested(),
            not_measured,
            notes,
            merged_from: Vec::new(),
            missing: Vec::new(),
            across_devices: false,
        },
        results,
    })
}

/// What compiling one C choice gave: `None` when it was not started (the run was stopped).
type CompileOutcome = Option<Result<(), CpuError>>;

/// Locks `mutex`, whatever a panicking holder left in it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a choice was not started: the run was interrupted, else the time budget ran out.
fn stop_reason(stop: &Stop) -> &'static str {
    if stop.requested() {
        "interrupted"
    } else {
        "max_time"
    }
}

/// The cached result of `key`, re-labelled for this run (and its metrics recomputed: the
/// manifest's metrics may have changed since), with the headers it was recorded with. With a
/// [`DepsCheck`] (a C choice), only a result whose headers are unchanged.
fn cached(
    cache: Option<&ResultsCache>,
    (key, check): (&str, Option<&DepsCheck>),
    timeout: Duration,
    index: usize,
    choice: &Choice,
    manifest: &Manifest,
    device: &str,
) -> Option<(ChoiceResult, Option<Deps>)> {
    let line = cache?.lookup(key, timeout, check)?;
    let mut result = line.result.clone().into_result(device).ok()?;
    result.index = index;
    result.choice = choice.clone();
    result.cached = true;
    result.device = device.to_owned();
    if let Some(median) = result.median_ms() {
        result.metrics = manifest.metrics.evaluate(choice, median);
    }
    Some((result, line.deps.clone()))
}

/// The C compiler of the kernel (and of a C reference) must exist: one clear error before the
/// run, rather than a `compile_error` for every choice.
fn check_compilers(manifest: &Manifest) -> Result<()> {
    let mut sources = vec![&manifest.kernel];
    if let Some(Verify {
        reference: Reference::Source(source, _),
        ..
    }) = &manifest.verify
    {
        sources.push(source);
    }
    let control = CompileControl {
        timeout: manifest.compile_timeout,
        ..CompileControl::default()
    };
    for source in sources.into_iter().filter(|s| s.language == Language::C) {
        // A compiler that hangs or fails on --version says why per choice, as before.
        if let Err(e @ (CpuError::CompilerNotFound { .. } | CpuError::CompilerSpawn { .. })) =
            tunebox_cpu::compiler_version(&source.compiler, &control)
        {
            bail!(
                "{:#} (the compiler command is `{}`); nothing was measured",
                anyhow::Error::new(e),
                source.compiler
            )
        }
    }
    Ok(())
}

/// Starts the pool (watched by `stop`) and runs the reference.
fn open_bench(
    manifest: &Manifest,
    reference: Option<&(String, BenchmarkRequest)>,
    workers: usize,
    timeout: Duration,
    options: &TuneOptions,
    stop: &Stop,
    progress: &dyn Observer,
) -> Result<Bench> {
    let reference = measure::reference_outputs(
        manifest,
        reference,
        timeout,
        options.worker.as_deref(),
        |pool| stop.watch(pool),
        |m| progress.note(m),
    )?;
    let pool = measure::start_pool(
        workers,
        timeout,
        options.max_process_uses,
        options.worker.as_deref(),
    )?;
    stop.watch(std::sync::Arc::clone(&pool));
    Ok(Bench { pool, reference })
}

/// What refining needs from the run.
struct RefineContext<'a> {
    manifest: &'a Manifest,
    /// The headers each C choice's screening line was recorded with.
    deps: &'a HashMap<usize, Deps>,
    deps_check: &'a DepsCheck,
    setup: &'a str,
    device: &'a str,
    header: &'a RunHeader,
    timeout: Duration,
    reference: Option<&'a (String, BenchmarkRequest)>,
    options: &'a TuneOptions,
    stop: &'a Stop,
    progress: &'a dyn Observer,
}

/// The manifest's timing, stretched for a refined measurement.
pub(crate) fn refined_timing(timing: &TimingConfig) -> TimingConfig {
    let scale = |reps: u32| ((f64::from(reps) * REFINE_FACTOR) as u32).clamp(1, MAX_REPS);
    let mut refined = timing.clone();
    refined.rep_ms *= REFINE_FACTOR;
    if timing.min_reps == timing.max_reps {
        refined.min_reps = scale(timing.min_reps);
    }
    refined.max_reps = scale(timing.max_reps).max(refined.min_reps);
    refined.max_time_ms = timing.max_time_ms.map(|t| t * REFINE_FACTOR);
    refined
}

/// The timeout of a refined measurement: its work, and so its time, grows with
/// [`REFINE_FACTOR`] (and cache flushes can stretch the reps to 10x `rep_ms`).
pub(crate) fn refine_timeout(timeout: Duration) -> Duration {
    timeout.mul_f64(REFINE_FACTOR)
}

/// The note for a choice whose refined measurement `failed`: it keeps its screening result.
fn refine_failed_note(failed: &ChoiceResult, cached: bool) -> String {
    let why = failed
        .error
        .as_deref()
        .map(report::short_error_line)
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| failed.status.to_string());
    format!(
        "refine of {} failed{} ({}: {why}); kept its screening result (ranked as unrefined)",
        failed.choice.label(),
        if cached { " (results cache)" } else { "" },
        failed.status
    )
}

/// Re-measures the `top` best `ok` results with [`refined_timing`] and [`refine_timeout`]
/// (from the cache when it has them), replacing their results and keeping the screening
/// median. A choice whose re-measurement fails keeps its screening result, with a note.
fn refine_best(
    top: usize,
    results: &mut [ChoiceResult],
    bench: &mut Option<Bench>,
    cx: RefineContext<'_>,
    cache: &mut Option<ResultsCache>,
    notes: &mut Vec<String>,
) -> Result<()> {
    let timeout = refine_timeout(cx.timeout);
    let mut best: Vec<usize> = (0..results.len())
        .filter(|&p| results[p].status == Status::Ok && results[p].stats.is_some())
        .collect();
    best.sort_by(|&a, &b| {
        let (a, b) = (&results[a], &results[b]);
        a.median_ms()
            .unwrap_or(f64::INFINITY)
            .total_cmp(&b.median_ms().unwrap_or(f64::INFINITY))
            .then(a.index.cmp(&b.index))
    });
    best.truncate(top);
    let mut todo: Vec<(usize, BenchmarkRequest, String)> = Vec::new();
    for p in best {
        let screen = results[p].median_ms();
        let choice = results[p].choice.clone();
        let mut request = measure::request(
            cx.manifest,
            &cx.manifest.kernel,
            cx.manifest.launch.as_ref(),
            &choice,
        )?;
        request.timing = refined_timing(&request.timing);
        let key = fingerprint::key(
            cx.setup,
            cx.device,
            &request,
            &choice.label(),
            cx.options.max_process_uses,
        );
        let check = matches!(request.kernel, Kernel::C(_)).then_some(cx.deps_check);
        let hit = cached(
            cache.as_ref(),
            (&key, check),
            timeout,
            results[p].index,
            &choice,
            cx.manifest,
            cx.device,
        )
        .map(|(result, _)| result);
        if hit.is_some()
            && let Some(c) = cache.as_mut()
            && let Err(e) = c.adopt(&key)
        {
            notes.push(format!("warning: {e:#}"));
        }
        match hit {
            Some(mut refined) if refined.status == Status::Ok => {
                refined.screen_median_ms = screen;
                results[p] = refined;
            }
            Some(failed) => notes.push(refine_failed_note(&failed, true)),
            None => todo.push((p, request, key)),
        }
    }
    if todo.is_empty() {
        return Ok(());
    }
    // The screening pool's timeout is the choice's: refining needs a pool of its own.
    let workers = cx.options.workers.clamp(1, todo.len());
    match bench.as_mut() {
        Some(screening) => {
            cx.stop.unwatch();
            screening.pool.shutdown(Duration::from_millis(500));
            if cx.stop.requested() {
                return Ok(());
            }
            let pool = match measure::start_pool(
                workers,
                timeout,
                cx.options.max_process_uses,
                cx.options.worker.as_deref(),
            ) {
                Ok(pool) => pool,
                Err(_) if cx.stop.requested() => return Ok(()),
                Err(e) => return Err(e),
            };
            cx.stop.watch(std::sync::Arc::clone(&pool));
            // The reference's outputs stay.
            screening.pool = pool;
        }
        None => match open_bench(
            cx.manifest,
            cx.reference,
            workers,
            timeout,
            cx.options,
            cx.stop,
            cx.progress,
        ) {
            Ok(b) => *bench = Some(b),
            Err(_) if cx.stop.requested() => return Ok(()),
            Err(e) => return Err(e),
        },
    }
    let bench = bench.as_ref().expect("started above");
    cx.progress.phase(
        Phase::Refining,
        todo.len(),
        &format!(
            "re-measuring the best {} with {REFINE_FACTOR}x rep_ms, timeout {timeout:?}…",
            plural(todo.len())
        ),
    );
    let requests: Vec<BenchmarkRequest> = todo.iter().map(|(_, r, _)| r.clone()).collect();
    measure::run_all(
        &bench.pool,
        measure::one_by_one(&requests),
        || cx.stop.requested(),
        |i, result| {
            if matches!(&result, Err(e) if measure::is_transient(e)) {
                return; // The screening result stands.
            }
            let (p, _, key) = &todo[i];
            let screen = results[*p].median_ms();
            let mut refined = measure::judge(
                results[*p].index,
                results[*p].choice.clone(),
                result,
                bench.reference.as_deref(),
                cx.manifest,
                cx.device,
            );
            cx.progress
                .finished(&refined.choice.label(), refined.status, refined.median_ms());
            refined.screen_median_ms = screen;
            if let Some(c) = cache.as_mut()
                && let Err(e) = c.append(CacheLine::new(
                    key.clone(),
                    cx.header,
                    timeout,
                    &refined,
                    cx.deps.get(&refined.index).cloned(),
                ))
            {
                cx.progress
                    .note(&format!("warning: {e:#}; results are no longer cached"));
                *cache = None;
            }
            if refined.status == Status::Ok {
                results[*p] = refined;
            } else {
                // A choice that was ok keeps its rank: the screening result stands.
                notes.push(refine_failed_note(&refined, false));
            }
        },
    );
    cx.progress.end_phase();
    Ok(())
}

/// A note naming the choices whose reps were cut to fit the timeout (`stopped = "budget"`).
fn budget_note(results: &[ChoiceResult], manifest: &Manifest, timeout: Duration) -> Option<String> {
    let cut: Vec<&ChoiceResult> = results
        .iter()
        .filter(|r| r.stats.as_ref().is_some_and(|s| s.stopped == "budget"))
        .collect();
    let first = cut.first()?;
    let reps = first.stats.as_ref().map_or(0, |s| s.reps);
    Some(format!(
        "{} measured with fewer reps than the timing asks for (e.g. {}: {reps} reps, min_reps \
         {}) to fit the {timeout:?} timeout; raise timeout_s (or --timeout) for full measurements",
        plural(cut.len()),
        first.choice.label(),
        manifest.timing.min_reps
    ))
}

/// Notes about the sources (outside the manifest's folder).
fn source_notes(manifest: &Manifest) -> Vec<String> {
    let mut sources = vec![&manifest.kernel];
    if let Some(Verify {
        reference: Reference::Source(source, _),
        ..
    }) = &manifest.verify
    {
        sources.push(source);
    }
    sources
        .into_iter()
        .filter(|s| s.outside)
        .map(|s| {
            format!(
                "the source {} lies outside the manifest's folder",
                s.source_name
            )
        })
        .collect()
}

/// Refuses an output path (`flag` names it) that would overwrite the manifest or a kernel
/// source, or whose directory does not exist, before any time is spent.
pub(crate) fn check_output_path(flag: &str, path: &Path, manifest: &Manifest) -> Result<()> {
    let same = |other: &Path| {
        path.canonicalize()
            .ok()
            .zip(other.canonicalize().ok())
            .is_some_and(|(a, b)| a == b)
    };
    let mut inputs = vec![manifest.path.clone(), manifest.kernel.path.clone()];
    if let Some(Verify {
        reference: Reference::Source(source, _),
        ..
    }) = &manifest.verify
    {
        inputs.push(source.path.clone());
    }
    if let Some(input) = inputs.iter().find(|input| same(input)) {
        bail!(
            "{flag} {} would overwrite the input {}; write it elsewhere",
            path.display(),
            input.display()
        );
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    ensure!(
        dir.is_dir(),
        "{flag} {}: the directory {} does not exist",
        path.display(),
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernel Tuner drops blocks of more threads than the device allows when it builds its
    /// space; so does a plan, with a note (no GPU needed: the limit is every GPU's).
    #[test]
    fn cuda_blocks_over_the_thread_limit_are_left_out_of_the_space() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("k.cu"),
            "extern \"C\" __global__ void k(float *x) {}\n",
        )
        .unwrap();
        let path = dir.path().join("m.toml");
        std::fs::write(
            &path,
            "problem_size = [4096]\n[kernel]\nsource = \"k.cu\"\nentry = \"k\"\n\
             [params]\nblock_size_x = [256, 512, 1024, 2048]\nblock_size_y = [1, 2]\n",
        )
        .unwrap();
        let manifest = Manifest::read(&path, "cc").unwrap();
        let plan = Plan::new(manifest, Box::new(strategy::BruteForce::default()), None).unwrap();
        // 256x1, 256x2, 512x1, 512x2, 1024x1 stay; 1024x2, 2048x1, 2048x2 go.
        assert_eq!(plan.space().len(), 5);
        assert_eq!(plan.selected().len(), 5);
        let labels: Vec<String> = plan.space().choices().map(|c| c.label()).collect();
        assert_eq!(labels[4], "block_size_x=1024 block_size_y=1");
        assert_eq!(
            plan.notes(),
            [
                "3 choices left out of the space: their block has more than 1024 threads, the \
              most a CUDA block may have (as Kernel Tuner leaves them out)"
            ]
        );
        // A C kernel has no such limit.
        std::fs::write(dir.path().join("k.c"), "void k(float *x) {}\n").unwrap();
        std::fs::write(
            &path,
            "[kernel]\nsource = \"k.c\"\nentry = \"k\"\n[params]\nblock_size_x = [2048]\n",
        )
        .unwrap();
        let plan = Plan::new(
            Manifest::read(&path, "cc").unwrap(),
            Box::new(strategy::BruteForce::default()),
            None,
        )
        .unwrap();
        assert_eq!((plan.space().len(), plan.notes().len()), (1, 0));
    }

    #[test]
    fn refined_timing_stretches_the_budget() {
        let t = TimingConfig::default();
        let r = refined_timing(&t);
        assert_eq!(r.rep_ms, 4.0 * t.rep_ms);
        assert_eq!(r.min_reps, t.min_reps);
        assert_eq!(r.max_reps, 4 * t.max_reps);
        // Kernel Tuner's fixed iterations: four times as many.
        let fixed = TimingConfig {
            min_reps: 7,
            max_reps: 7,
            ..TimingConfig::default()
        };
        let r = refined_timing(&fixed);
        assert_eq!((r.min_reps, r.max_reps), (28, 28));
        // Four times the work gets four times the time.
        assert_eq!(
            refine_timeout(Duration::from_millis(2500)),
            Duration::from_secs(10)
        );
    }
}
