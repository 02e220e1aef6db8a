//! `tunebox tune`: select (strategy, shard), take what the results cache has, precompile,
//! benchmark, verify, cache each result as it finishes, refine the best, rank.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tunebox_cpu::{CompileControl, CpuError};
use tunebox_pool::Status;
use tunebox_protocol::{BenchmarkRequest, Kernel};

use crate::cache::{self, CacheLine, Deps, ResultsCache};
use crate::error::TuneError;
use crate::fingerprint;
use crate::manifest::{Language, Manifest, Reference, Verify, WorkerEnv, compiler};
use crate::measure::{self, Bench};
use crate::observer::{Observer, ObserverExt, Phase};
use crate::results::{
    ChoiceResult, NotMeasured, RefineInfo, Report, RunHeader, RunInfo, Selection, ShardInfo,
    choices as plural, rank, set_objective,
};
use crate::space::{self, SearchSpace};
use crate::stop::Stop;
use crate::strategies;
use crate::strategy::Strategy;

mod bench;
mod compile;
mod lookup;
mod reference;
mod refine;

pub use self::bench::measure;
pub use self::compile::{Compiled, compile};
use self::lookup::adopt;
pub use self::lookup::{Lookup, Setup, Todo, lookup_cached};
pub use self::reference::reference;
pub use self::refine::refine_order;
use self::refine::{REFINE_FACTOR, RefineContext, refine_best};

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
        Plan::build(manifest, strategy, shard, true).map_err(crate::TuneError::manifest)
    }

    fn build(
        manifest: Manifest,
        strategy: Box<dyn Strategy>,
        shard: Option<ShardInfo>,
        budget_given: bool,
    ) -> Result<Plan> {
        // A strategy's asks are held to its contract: no index twice, none outside the space.
        let mut strategy: Box<dyn Strategy> = Box::new(crate::strategy::Guarded::new(strategy));
        let mut space = SearchSpace::new(&manifest.params, &manifest.restrictions)
            .with_context(|| format!("invalid manifest {}", manifest.path.display()))?;
        let mut notes: Vec<String> =
            space::prepare_unlisted(&mut space, strategy.name(), budget_given, shard)
                .with_context(|| format!("{}", manifest.path.display()))?
                .into_iter()
                .collect();
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

    /// The plan with its workers in `sandbox` (`None`: not sandboxed), whatever the manifest's
    /// `[sandbox]` says: `tunebox tune --sandbox` ([`Manifest::with_sandbox`]).
    pub fn with_sandbox(mut self, sandbox: Option<tunebox_process::Sandbox>) -> Plan {
        self.manifest = self.manifest.with_sandbox(sandbox);
        self
    }

    /// The plan with `env` added to the manifest's `[env]` (its values win): what
    /// `tunebox tune --env` passes to the workers for one run. Part of the results-cache key,
    /// as `[env]` is.
    pub fn with_env(mut self, env: WorkerEnv) -> Plan {
        self.manifest.add_env(env);
        self
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
        .filter(|&i| space.contains(i) && space.owns(shard, i))
        .collect()
}

/// The choices `strategy` would still ask for, that `shard` owns, told nothing more: those a
/// stopped run never got to (at most as many as the space has).
fn unasked(
    strategy: &mut dyn Strategy,
    space: &SearchSpace,
    shard: Option<ShardInfo>,
    reason: &str,
) -> Vec<NotMeasured> {
    let mut left = Vec::new();
    let mut asked = 0usize;
    while asked < space.len() {
        let batch = strategy.ask(space, usize::MAX);
        if batch.is_empty() {
            break;
        }
        asked = asked.saturating_add(batch.len());
        left.extend(
            batch
                .into_iter()
                .filter(|&i| space.owns(shard, i))
                .filter_map(|index| {
                    Some(NotMeasured {
                        index,
                        choice: space.choice(index)?,
                        reason: reason.to_owned(),
                    })
                }),
        );
    }
    left
}

/// Reads the manifest and selects the choices to measure: the strategy's selection, then the
/// shard's part of it.
///
/// # Errors
///
/// An invalid manifest, or restrictions that leave no choice.
pub fn plan(path: &Path, selection: &Selection, shard: Option<ShardInfo>) -> crate::Result<Plan> {
    plan_inner(path, selection, shard).map_err(crate::TuneError::manifest)
}

fn plan_inner(path: &Path, selection: &Selection, shard: Option<ShardInfo>) -> Result<Plan> {
    let manifest = Manifest::read(path, &compiler())?;
    let budget_given = selection.budget.is_some();
    Plan::build(
        manifest,
        strategies::from_selection(selection),
        shard,
        budget_given,
    )
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
/// reports record the plan's strategy by its [`Strategy::name`], with `options.selection`'s budget
/// and seed.
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
    tune_inner(plan, options, observer, stop).map_err(crate::TuneError::run)
}

fn tune_inner(
    plan: Plan,
    options: &TuneOptions,
    observer: &dyn Observer,
    stop: &Stop,
) -> Result<Report> {
    let start = Instant::now();
    let stdout_log = crate::worker_stdout::Watch::start();
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
            check_output_path(flag, path, &manifest).map_err(TuneError::options)?;
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
        check_output_path("--cache", path, &manifest).map_err(TuneError::options)?;
        for (flag, other) in [("--json", &options.json), ("--csv", &options.csv)] {
            if other.as_deref() == Some(path.as_path()) {
                return Err(TuneError::options(format_args!(
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
    let stage = Setup::new(
        &manifest,
        device.clone(),
        Some(timeout),
        options.max_process_uses,
    );
    let setup = &stage.hash;
    let header = RunHeader {
        tunebox_version: env!("CARGO_PKG_VERSION").to_owned(),
        manifest: manifest.path.display().to_string(),
        manifest_hash: fingerprint::manifest_hash(setup, &manifest, &space),
        name: manifest.name.clone(),
        kernel: format!(
            "{} ({})",
            manifest.kernel.entry, manifest.kernel.source_name
        ),
        backend: backend.to_owned(),
        device: device.clone(),
        space_size: choices.len(),
        // The strategy that runs names itself; budget and seed are the options'.
        selection: Selection {
            strategy: strategy.name().to_owned(),
            ..options.selection.clone()
        },
        shard: options.shard,
        metrics: manifest.metrics.names(),
        objective: (!manifest.objective.is_time()).then(|| manifest.objective.clone()),
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
    // One count for the whole run, across the rounds of an adaptive search.
    let planned = planned_total(&options.selection, choices.len(), selected.len());
    let adaptive = planned > selected.len();
    progress.planned(planned);

    let mut cache = cache_path
        .as_deref()
        .map(|path| ResultsCache::open(path, &cache_others, options.fresh))
        .transpose()?;
    for note in cache.iter().flat_map(ResultsCache::notes) {
        progress.note(&note);
        notes.push(note);
    }

    let mut results: Vec<ChoiceResult> = Vec::with_capacity(selected.len());
    let mut not_measured: Vec<NotMeasured> = Vec::new();
    let mut hits = 0;
    let reference = measure::reference_request(&manifest)?;
    let kernel_cache = tunebox_cpu::default_cache_dir()?;
    // Each compile has the manifest's deadline, and Ctrl-C kills the compilers at once (they
    // run in process groups of their own, so the terminal's SIGINT reaches only us).
    let cancel = || stop.poll(observer);
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
    // The headers each C choice's line was recorded with (refined lines share them); those
    // of cached lines are checked as they are now by `stage`, each file hashed once.
    let mut deps_of: HashMap<usize, Deps> = HashMap::new();
    // Results the strategy has been told.
    let mut told = 0;
    // Whether the compiling note is still to be said (once, not every round).
    let mut first_compile_round = true;
    let mut batch = selected;
    // Ask, measure, tell, until the strategy has no more (brute force and random sampling
    // ask for everything at once: one round).
    loop {
        // Requests and cache keys; what the cache has is done.
        let Lookup {
            done,
            hits: round_hits,
            todo,
            deps,
            hit_keys,
        } = lookup_cached(&stage, &space, &batch, cache.as_ref());
        results.extend(done);
        // The headers each cached C line was recorded with (its refined line keeps them).
        deps_of.extend(deps);
        // Lines read from another file of the manifest (a shard's) are copied into this one.
        if let Err(e) = adopt(&mut cache, &hit_keys) {
            progress.note(&format!("warning: {e:#}"));
        }
        hits += round_hits;
        if round_hits > 0 {
            progress.cached(round_hits);
        }
        // Said once: an adaptive search, which may take one choice at a time from a full
        // cache, says it at the end.
        if round_hits > 0
            && !adaptive
            && let Some(c) = &cache
        {
            progress.note(&skipped_note(round_hits, c));
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
            // Interrupted: no choice is measured either (below).
            reference_deps = reference::compile_reference(label, request, &kernel_cache, &control)?;
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
                // Counted by the cache (the report and the exit status say it); the run goes on.
                progress.note(&format!("warning: {e:#}"));
            }
            results.push(result);
        };

        if bench.is_none() {
            workers = options
                .workers
                .clamp(1, todo.len().max(refine.unwrap_or(1)).max(1));
        }
        if bench.is_none() && !todo.is_empty() && !stop.poll(progress) && !past_deadline() {
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
            if !c_todo.is_empty() && std::mem::replace(&mut first_compile_round, false) {
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
                            let outcome = (!stop.poll(*progress) && !past_deadline()).then(|| {
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
                    || stop.poll(progress) || past_deadline(),
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
            match outcome {
                Some(Ok(())) if measured[p] => {}
                Some(Ok(())) | None => skipped.push((p, stop_reason(stop))),
                Some(Err(e)) => match compile::judge(&stage, &todo[p], Err(e)) {
                    // Killed by Ctrl-C: says nothing about the choice.
                    Compiled::Ready { .. } | Compiled::Cancelled => {
                        skipped.push((p, "interrupted"));
                    }
                    // Cached with the headers read before the error (none when one was
                    // missing: then the next run compiles it again).
                    Compiled::Failed {
                        result,
                        cacheable,
                        dependencies,
                    } => {
                        let key = cacheable.then_some(todo[p].key.as_str());
                        record(*result, key, Some(dependencies), &mut cache);
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
        set_objective(&mut results[told..], header.objective.as_ref());
        for result in &results[told..] {
            strategy.tell(result.index, result);
        }
        told = results.len();
        if stop.poll(progress) || past_deadline() {
            // What the strategy would still have asked for was not measured either.
            not_measured.extend(unasked(strategy.as_mut(), &space, shard, stop_reason(stop)));
            break;
        }
        batch = ask(strategy.as_mut(), &space, shard);
        if batch.is_empty() {
            break;
        }
    }

    if adaptive
        && hits > 0
        && let Some(c) = &cache
    {
        progress.note(&skipped_note(hits, c));
    }

    // Early elimination: the best few are measured again, longer, and ranked by that.
    if let Some(top) = refine
        && !stop.poll(progress)
    {
        refine_best(
            top,
            &mut results,
            &mut bench,
            RefineContext {
                setup: &stage,
                deps: &deps_of,
                header: &header,
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
    notes.extend(stdout_log.note());
    for warning in strategy.take_warnings() {
        progress.note(&format!("warning: {warning}"));
        notes.push(warning);
    }
    set_objective(&mut results, header.objective.as_ref());
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
            cache: cache.as_ref().map(|c| c.info(hits)),
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

/// The note that `hits` choices came from `cache` and were not measured again.
fn skipped_note(hits: usize, cache: &ResultsCache) -> String {
    format!(
        "skipped {} already measured (results cache {}; --fresh re-measures them)",
        plural(hits),
        cache.path().display()
    )
}

/// About how many choices a run finishes, cached ones included: what the strategy asked for
/// at once, or for an adaptive search asking a few at a time, its budget (at most the space).
fn planned_total(selection: &Selection, space: usize, first_batch: usize) -> usize {
    match selection.budget {
        Some(budget) if budget > first_batch => budget.min(space),
        _ => first_batch,
    }
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
pub(crate) fn open_bench(
    manifest: &Manifest,
    reference: Option<&(String, BenchmarkRequest)>,
    workers: usize,
    timeout: Duration,
    options: &TuneOptions,
    stop: &Stop,
    progress: &dyn Observer,
) -> Result<Bench> {
    measure::note_sandbox(manifest, |m| progress.note(m));
    let reference = measure::reference_outputs(
        manifest,
        reference,
        timeout,
        options.worker.as_deref(),
        |pool| stop.watch(pool),
        |m| progress.note(m),
    )?;
    let pool = measure::start_pool(
        manifest,
        workers,
        timeout,
        options.max_process_uses,
        options.worker.as_deref(),
    )?;
    stop.watch(std::sync::Arc::clone(&pool));
    Ok(Bench { pool, reference })
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
        let plan = Plan::new(
            manifest,
            Box::new(crate::strategy::BruteForce::default()),
            None,
        )
        .unwrap();
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
            Box::new(crate::strategy::BruteForce::default()),
            None,
        )
        .unwrap();
        assert_eq!((plan.space().len(), plan.notes().len()), (1, 0));
    }
}
