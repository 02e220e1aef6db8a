//! The run's private context: [`Run::prepare`] resolves everything once (output checks,
//! compilers, device, timeout, caches, the header), [`Ledger::record`] is the one place a
//! result is cached and kept, and [`Run::finish`] makes the report.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tunebox_cpu::{CompileControl, CpuError};
use tunebox_protocol::{BenchmarkRequest, Kernel};

use super::compile::KernelCache;
use super::lookup::{Resumed, Setup, Todo, adopt};
use super::options::{CacheMode, REFINE_FACTOR, TuneOptions};
use super::pipeline::Outcome;
use crate::base::error::TuneError;
use crate::base::observer::{Observer, ObserverExt, WarningKind, Warnings};
use crate::base::stop::Stop;
use crate::manifest::{Language, Manifest, Reference, Verify};
use crate::measure::workers::{self, Measuring};
use crate::results::cache::{self, CacheLine, Deps, ResultsCache};
use crate::results::fingerprint;
use crate::results::interference::{BackgroundWork, Topology};
use crate::results::{
    ChoiceResult, NotMeasured, RefineInfo, Report, RunConditions, RunHeader, RunInfo, Selection,
    ShardInfo, choices as plural, rank, set_objective,
};
use crate::search::strategy::Strategy;
use crate::space::SearchSpace;

/// A run under way: what [`Run::prepare`] resolved, the pool once started, and the ledger.
pub(super) struct Run<'a> {
    pub options: &'a TuneOptions,
    pub observer: &'a dyn Observer,
    pub stop: &'a Stop,
    pub start: Instant,
    /// `--max-time`: start no new choice after this.
    pub deadline: Option<Instant>,
    /// The manifest, device, timeout (resolved here, once) and key hash.
    pub setup: Setup<'a>,
    pub space: SearchSpace,
    pub strategy: Box<dyn Strategy>,
    pub shard: Option<ShardInfo>,
    /// The reference kernel's label and request, when verifying against one.
    pub reference: Option<(String, BenchmarkRequest)>,
    pub reference_compiled: bool,
    /// Where C kernels compile (a private folder when the user's cannot be written).
    pub kernel_cache: KernelCache,
    pub topology: Topology,
    /// How long compile threads have run (they may run beside windows, in the background).
    pub compile_clock: Arc<BackgroundWork>,
    /// How long the rounds' windows measured beside the compiles took (`spare.rs`): part of
    /// the rounds' time, which sizes the race.
    pub spare_windows: Duration,
    /// How many windows those were.
    pub beside_compiles: usize,
    /// The pool and the reference outputs, started when something needs measuring.
    pub measuring: Option<Measuring>,
    pub workers: usize,
    pub ledger: Ledger,
    pub notes: Vec<String>,
    /// How many results the strategy has been told.
    pub told: usize,
    /// What the rounds saw (set by [`Run::race`]).
    pub conditions: Option<RunConditions>,
    /// What workers printed on stdout (the report's note says where it went).
    pub stdout_log: Option<crate::measure::worker_stdout::Watch>,
    /// An adaptive search (asking a few choices at a time): cache hits are said at the end.
    pub adaptive: bool,
    /// The compiling note is said once, not every round.
    pub compile_noted: bool,
}

/// A result whose line in the results cache is written again once its rounds are done.
#[derive(Debug, Clone)]
pub(super) struct PendingLine {
    /// Its choice's stable index.
    pub index: usize,
    /// Its key in the results cache.
    pub key: String,
    /// How many windows its line there holds.
    pub windows: usize,
}

/// Every result of the run, and the results cache they go to.
pub(super) struct Ledger {
    pub cache: Option<ResultsCache>,
    pub results: Vec<ChoiceResult>,
    pub not_measured: Vec<NotMeasured>,
    /// The headers each C choice's line was recorded with (refined lines share them).
    pub deps_of: HashMap<usize, Deps>,
    /// The files the reference's compile read (a C reference): every line depends on them.
    pub reference_deps: Vec<PathBuf>,
    pub hits: usize,
    pub header: RunHeader,
    pub timeout: Duration,
    /// `ok` results to cache again once their rounds are done.
    pub pending: Vec<PendingLine>,
    /// The stable indices of the results whose rounds a stop cut short (set by the rounds):
    /// their lines say so, and a re-run gives them the rest.
    pub unfinished: Vec<usize>,
    /// Whether rounds follow screening.
    pub rounds_follow: bool,
    /// The keys whose line this run wrote.
    pub written: std::collections::HashSet<String>,
    /// The run's warnings, each kind said once.
    pub warnings: Warnings,
    /// Choices whose rounds an earlier run's stop cut short, resumed here.
    pub resumed: usize,
    /// The choices whose measurement left state behind in their worker, by label.
    pub left_by: Vec<String>,
}

impl<'a> Run<'a> {
    /// Checks the options against `manifest`, probes the device, resolves the timeout and the
    /// results cache, and writes the header.
    pub(super) fn prepare(
        manifest: &'a Manifest,
        (space, strategy, shard, space_notes): (
            SearchSpace,
            Box<dyn Strategy>,
            Option<ShardInfo>,
            Vec<String>,
        ),
        options: &'a TuneOptions,
        observer: &'a dyn Observer,
        stop: &'a Stop,
    ) -> Result<Run<'a>> {
        let start = Instant::now();
        let stdout_log = crate::measure::worker_stdout::Watch::start();
        let cache_path = check_outputs(options, manifest, shard)?;
        if !manifest.unsupported.is_empty() {
            bail!(
                "{} can be listed (--list) but not tuned:\n  {}",
                manifest.path.display(),
                manifest.unsupported.join("\n  ")
            );
        }
        // A GPU manifest needs a worker that sees a GPU: ask one first, so that a missing
        // driver is one clear error rather than an error per choice.
        let (device, backend) = match manifest.kernel.language {
            Language::Cuda => (workers::probe_gpu(options.worker.as_deref())?, "cuda"),
            Language::C => (workers::cpu_model(), "cpu"),
        };
        check_compilers(manifest)?;
        // Rounds compare choices: a space of one has none, and its one window gets the whole
        // timing (`min_reps` and all), not the screening window's share. The windows share the
        // timed reps, each window one at least: no more windows than `max_reps` (Kernel
        // Tuner's `iterations = 1` is one window of one rep, not one rep in each of four).
        let most = usize::try_from(manifest.timing.max_reps.max(1) - 1).unwrap_or(usize::MAX);
        let rounds = if space.len() > 1 {
            options.rounds.min(most)
        } else {
            0
        };
        let setup = Setup::new(manifest, device, options.timeout, options.max_process_uses)
            .with_rounds(rounds);
        let header = header(&setup, &space, strategy.name(), (options, shard), backend);
        let mut notes = space_notes;
        notes.extend(source_notes(manifest));
        notes.extend(manifest.notes.iter().cloned());
        let mut warnings = Warnings::default();
        let cache = open_cache(
            cache_path.as_deref(),
            options,
            manifest,
            &mut notes,
            (observer, &mut warnings),
        )?;
        let (kernel_cache, kernel_warning) = KernelCache::resolve()?;
        if let Some(warning) = kernel_warning {
            warnings.warn(observer, WarningKind::KernelCache, &warning);
            notes.push(warning);
        }
        Ok(Run {
            options,
            observer,
            stop,
            start,
            deadline: options.max_time.map(|t| start + t),
            reference: workers::reference_request(manifest)?,
            reference_compiled: false,
            kernel_cache,
            topology: Topology::detect(),
            compile_clock: Arc::default(),
            spare_windows: Duration::ZERO,
            beside_compiles: 0,
            measuring: None,
            workers: 1,
            ledger: Ledger {
                cache,
                results: Vec::new(),
                not_measured: Vec::new(),
                deps_of: HashMap::new(),
                reference_deps: Vec::new(),
                hits: 0,
                header,
                timeout: setup.timeout,
                pending: Vec::new(),
                unfinished: Vec::new(),
                rounds_follow: rounds > 0,
                written: Default::default(),
                warnings,
                resumed: 0,
                left_by: Vec::new(),
            },
            setup,
            space,
            strategy,
            shard,
            notes,
            told: 0,
            conditions: None,
            stdout_log: Some(stdout_log),
            adaptive: false,
            compile_noted: false,
        })
    }

    /// A stop was asked for, or the time budget is spent ([`Stop::reached`]).
    pub(super) fn should_stop(&self) -> bool {
        self.stop.reached(self.observer, self.deadline)
    }

    /// Readies measuring `todo`: the kernel cache exists, the reference is compiled, the pool
    /// is started (unless a stop came first). Meanwhile the CPUs this leaves idle compile the
    /// first of `todo`'s choices ([`super::head_start`]).
    pub(super) fn ready_to_measure(&mut self, todo: &[Todo]) -> Result<()> {
        let is_c = |r: &BenchmarkRequest| matches!(r.kernel, Kernel::C(_));
        let needs_c = todo.iter().any(|t| is_c(&t.request))
            || self.reference.as_ref().is_some_and(|(_, r)| is_c(r));
        if needs_c {
            super::compile::create(self.kernel_cache.dir())?;
        }
        let pending =
            self.measuring.is_none() || (!self.reference_compiled && self.reference.is_some());
        if !pending {
            return Ok(());
        }
        let cache = self.kernel_cache.dir().clone();
        let stop = self.stop;
        let cancel = || stop.requested();
        let control = CompileControl {
            timeout: self.setup.manifest.compile_timeout,
            cancel: Some(&cancel),
            ..CompileControl::default()
        };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        super::head_start::with_head_start(
            todo,
            &cache,
            &control,
            super::head_start::threads(cpus),
            || self.ready_reference_and_pool(todo),
        )
    }

    /// The reference compiled and the pool started, as [`Run::ready_to_measure`] needs them.
    fn ready_reference_and_pool(&mut self, todo: &[Todo]) -> Result<()> {
        if !self.reference_compiled
            && let Some((label, request)) = &self.reference
        {
            self.reference_compiled = true;
            let cancel = || self.stop.poll(self.observer);
            let control = CompileControl {
                timeout: self.setup.manifest.compile_timeout,
                cancel: Some(&cancel),
                ..CompileControl::default()
            };
            // Interrupted: no choice is measured either.
            self.ledger.reference_deps = super::reference::compile_reference(
                label,
                request,
                self.kernel_cache.dir(),
                &control,
            )?;
        }
        if self.measuring.is_some() {
            return Ok(());
        }
        let refine = self.options.refine.unwrap_or(1);
        self.workers = self.options.workers.clamp(1, todo.len().max(refine).max(1));
        if self.should_stop() {
            return Ok(());
        }
        match start_measuring(self, self.workers, self.setup.timeout) {
            Ok(b) => self.measuring = Some(b),
            Err(_) if self.stop.requested() => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// The report: the pool shut down, the results ranked, every note and figure in.
    pub(super) fn finish(mut self) -> Report {
        if let Some(measuring) = &self.measuring {
            measuring.shutdown(Duration::from_millis(500));
        }
        self.stop.unwatch();
        let unfinished = self.unfinished();
        self.notes.extend(self.ledger.left_behind_note());
        self.notes.extend(budget_note(
            &self.ledger.results,
            self.setup.manifest,
            self.setup.timeout,
        ));
        self.notes.extend(
            self.stdout_log
                .take()
                .and_then(crate::measure::worker_stdout::Watch::note),
        );
        for warning in self.strategy.take_warnings() {
            self.observer.note(&format!("warning: {warning}"));
            self.notes.push(warning);
        }
        let mut ledger = self.ledger;
        ledger.not_measured.sort_by_key(|n| n.index);
        set_objective(&mut ledger.results, ledger.header.objective.as_ref());
        rank(&mut ledger.results);
        let refine = self.options.refine.filter(|&k| k > 0);
        Report {
            info: RunInfo {
                elapsed_s: self.start.elapsed().as_secs_f64(),
                workers: if self.measuring.is_some() {
                    self.workers
                } else {
                    0
                },
                refine: refine.map(|top| RefineInfo {
                    top,
                    rep_factor: REFINE_FACTOR,
                }),
                cache: ledger.cache.as_ref().map(|c| c.info(ledger.hits)),
                interrupted: self.stop.requested(),
                not_measured: ledger.not_measured,
                unfinished,
                notes: self.notes,
                conditions: self.conditions,
                ..RunInfo::new(ledger.header)
            },
            results: ledger.results,
        }
    }
}

impl Ledger {
    /// Takes what the cached lookup answered: results, their headers, hits (lines read from
    /// another file of the manifest, a shard's, are copied into this one), and the choices
    /// whose rounds were cut short ([`Ledger::take_resumed`]). Returns what is left to measure,
    /// and those resumed.
    pub(super) fn take_cached(
        &mut self,
        mut lookup: super::lookup::Lookup,
        adaptive: bool,
        observer: &dyn Observer,
    ) -> (Vec<Todo>, Vec<Resumed>) {
        let resumed = std::mem::take(&mut lookup.resumed);
        self.results.extend(lookup.done);
        self.deps_of.extend(lookup.deps);
        if let Err(e) = adopt(&mut self.cache, &lookup.hit_keys) {
            self.warnings
                .warn(observer, WarningKind::ResultsCache, &format!("{e:#}"));
        }
        self.hits += lookup.hits;
        if lookup.hits > 0 {
            observer.cached(lookup.hits);
        }
        // Said once: an adaptive search, which may take one choice at a time from a full
        // cache, says it at the end.
        if lookup.hits > 0
            && !adaptive
            && let Some(c) = &self.cache
        {
            observer.note(&skipped_note(lookup.hits, c));
        }
        let resumed = self.take_resumed(resumed, adaptive, observer);
        (lookup.todo, resumed)
    }

    /// What became of `todo` in a pipeline: a result is recorded, a skipped choice noted.
    pub(super) fn settle(&mut self, todo: &Todo, outcome: Outcome, observer: &dyn Observer) {
        match outcome {
            Outcome::Done {
                result,
                cacheable,
                files,
                left,
            } => {
                self.left_behind(&result.choice.label(), &left, observer);
                let deps = self.deps_for(files);
                let key = cacheable.then_some(todo.key.as_str());
                self.record(*result, key, deps, observer);
            }
            Outcome::Skipped(reason) => self.not_measured.push(NotMeasured {
                index: todo.index,
                choice: todo.choice.clone(),
                reason: reason.to_owned(),
            }),
        }
    }

    /// A choice's measurement left `left` in its worker (descriptors, threads, processes,
    /// memory, or a resource it found used up), which could not be put back: the worker was
    /// replaced. Said once a run, naming the choice; every such choice is named in the report's
    /// notes ([`Ledger::left_behind_note`]).
    fn left_behind(
        &mut self,
        label: &str,
        left: &[tunebox_protocol::Leftover],
        observer: &dyn Observer,
    ) {
        if left.is_empty() {
            return;
        }
        let what: Vec<String> = left
            .iter()
            .map(|l| format!("{}: {}", l.what, l.detail))
            .collect();
        self.warnings.warn(
            observer,
            WarningKind::LeftBehind,
            &format!(
                "{label} left state behind in its reused worker ({}); the worker was replaced \
                 before the next choice, so no other choice pays for it",
                what.join("; ")
            ),
        );
        self.left_by.push(label.to_owned());
    }

    /// The report's note naming every choice that left state behind in its worker.
    pub(super) fn left_behind_note(&self) -> Option<String> {
        let (first, rest) = self.left_by.split_first()?;
        let names = if rest.is_empty() {
            first.clone()
        } else {
            format!("{first}, {}", rest.join(", "))
        };
        Some(format!(
            "{} left state behind in a reused worker, which was replaced after each: {names}",
            plural(self.left_by.len())
        ))
    }

    /// The headers a C choice's line depends on: those its compile read, and the reference's.
    pub(super) fn deps_for(&self, files: Option<Vec<PathBuf>>) -> Option<Deps> {
        files.filter(|f| !f.is_empty()).and_then(|mut files| {
            files.extend(self.reference_deps.iter().cloned());
            Deps::of(&files)
        })
    }

    /// Every result goes through here: cached under `key` (none: a transient failure, not
    /// cached) with the headers it depends on and its windows' conditions, then kept (in place
    /// of an earlier result of the same choice). A result without enough quiet windows is
    /// cached, but not taken as final by a later run (see `lookup::cached`).
    pub(super) fn record(
        &mut self,
        result: ChoiceResult,
        key: Option<&str>,
        deps: Option<Deps>,
        observer: &dyn Observer,
    ) {
        if let Some(deps) = &deps {
            self.deps_of.insert(result.index, deps.clone());
        }
        if let Some(key) = key {
            // Cached at once, so that a run killed later loses nothing; an `ok` result with
            // rounds to come is cached again with all its windows (the last line of a key
            // wins), and until then its line says that its windows are not complete.
            let rounds_follow = self.rounds_follow && result.windows.is_some();
            self.cache_line(&result, key, self.timeout, !rounds_follow, observer);
            if rounds_follow {
                self.pending.push(PendingLine {
                    index: result.index,
                    key: key.to_owned(),
                    windows: 1,
                });
            }
        }
        self.keep(result);
    }

    /// Keeps `result`, replacing an earlier result of the same choice.
    pub(super) fn keep(&mut self, result: ChoiceResult) {
        match self.results.iter_mut().find(|r| r.index == result.index) {
            Some(old) => *old = result,
            None => self.results.push(result),
        }
    }

    /// Appends `result`'s line (`timeout`: what it was measured with; `complete`: whether its
    /// windows are all it gets) to the results cache; a failed write is counted, with a
    /// warning.
    pub(super) fn cache_line(
        &mut self,
        result: &ChoiceResult,
        key: &str,
        timeout: Duration,
        complete: bool,
        observer: &dyn Observer,
    ) {
        let deps = self.deps_of.get(&result.index).cloned();
        let Some(c) = self.cache.as_mut() else {
            return;
        };
        let line = CacheLine::new(key.to_owned(), &self.header, timeout, result, deps)
            .with_windows_complete(complete);
        let failed_before = c.not_cached().0;
        if let Err(e) = c.append(line) {
            // Counted by the cache (the report and the exit status say it); the run goes on.
            self.warnings
                .warn(observer, WarningKind::ResultsCache, &format!("{e:#}"));
        }
        if c.not_cached().0 == failed_before {
            self.written.insert(key.to_owned());
        }
    }

    /// Caches the results measured in rounds again, each with all its windows (a result with
    /// too few quiet windows is cached with them, and is not taken as final: a quiet run
    /// measures it again). A result whose rounds a stop cut short ([`Ledger::unfinished`]) is
    /// cached with the windows it has when it has more than its line, saying that they are not
    /// complete; one whose rounds are done is cached as complete, also when no window was added
    /// (it was the only choice).
    pub(super) fn cache_pending(&mut self, observer: &dyn Observer) {
        for pending in std::mem::take(&mut self.pending) {
            let Some(result) = self
                .results
                .iter()
                .find(|r| r.index == pending.index)
                .cloned()
            else {
                continue;
            };
            let complete = result.status != tunebox_pool::Status::Ok
                || !self.unfinished.contains(&pending.index);
            let windows = result.windows.as_ref().map_or(0, |w| w.medians_ms.len());
            // A line that could not be written was counted; it is not tried again.
            if !(complete || windows > pending.windows) || !self.written.contains(&pending.key) {
                continue;
            }
            let deps = self.deps_of.get(&result.index).cloned();
            let line = CacheLine::new(pending.key, &self.header, self.timeout, &result, deps)
                .with_windows_complete(complete);
            if let Some(c) = self.cache.as_mut()
                && let Err(e) = c.update(line)
            {
                self.warnings.warn(
                    observer,
                    WarningKind::ResultsCache,
                    &format!(
                        "{e:#}; {} keeps its line with fewer windows",
                        result.choice.label()
                    ),
                );
            }
        }
    }
}

/// Starts the pool of `run` (`workers` workers, `timeout` per choice; watched by its stop) and
/// runs the reference.
pub(super) fn start_measuring(
    run: &Run<'_>,
    workers: usize,
    timeout: Duration,
) -> Result<Measuring> {
    let (options, stop) = (run.options, run.stop);
    workers::note_sandbox(run.setup.manifest, |m| run.observer.note(m));
    let worker = (options.worker.as_deref(), run.kernel_cache.worker_root());
    let reference = workers::reference_outputs(
        run.setup.manifest,
        run.reference.as_ref(),
        timeout,
        worker,
        |pool| stop.watch(pool),
        |m| run.observer.note(m),
    )?;
    let pool = workers::start_pool(
        run.setup.manifest,
        workers,
        timeout,
        options.max_process_uses,
        worker,
    )?;
    stop.watch(std::sync::Arc::clone(&pool));
    let warm = warm_windows(options, run.setup.manifest, run.setup.windows)
        .then(|| workers::start_warm_pool(&pool, run.setup.manifest, workers, timeout, worker))
        .transpose()?;
    if let Some(warm) = &warm {
        stop.watch_beside(std::sync::Arc::clone(warm));
    }
    let varied =
        workers::varied_reference(run.setup.manifest, run.reference.as_ref(), timeout, worker)?;
    if let Some(varied) = &varied {
        stop.watch_beside(std::sync::Arc::clone(varied.pool()));
    }
    let cuda_compilers = workers::CudaCompilers::new(run.setup.manifest, timeout, worker);
    Ok(Measuring {
        pool,
        warm,
        reference,
        varied,
        cuda_compilers,
    })
}

/// Whether a run measures the later windows of the choices that passed screening in reused
/// workers ([`workers::start_warm_pool`]): with rounds (`windows` per choice, more than one),
/// unless asked for fresh windows (`--fresh-windows`), the options already reuse every worker
/// (`max_process_uses` other than 1: then every window is measured in those), or the workers
/// are sandboxed (a candidate written to win must not share a process with another's windows,
/// or its own later ones).
fn warm_windows(options: &TuneOptions, manifest: &Manifest, windows: usize) -> bool {
    windows > 1
        && options.warm_windows
        && options.max_process_uses == Some(1)
        && manifest.sandbox().is_none()
}

/// What identifies the run's results.
fn header(
    setup: &Setup<'_>,
    space: &SearchSpace,
    strategy: &str,
    (options, shard): (&TuneOptions, Option<ShardInfo>),
    backend: &str,
) -> RunHeader {
    let manifest = setup.manifest;
    RunHeader {
        tunebox_version: env!("CARGO_PKG_VERSION").to_owned(),
        manifest: manifest.path.display().to_string(),
        manifest_hash: fingerprint::manifest_hash(&setup.hash, manifest, space),
        name: manifest.name.clone(),
        kernel: format!(
            "{} ({})",
            manifest.kernel.entry, manifest.kernel.source_name
        ),
        backend: backend.to_owned(),
        device: setup.device.clone(),
        space_size: space.len(),
        // The strategy that runs names itself; budget and seed are the options'.
        selection: Selection {
            strategy: strategy.to_owned(),
            ..options.selection.clone()
        },
        // The plan's shard: what this run measures (the options' only made the plan).
        shard,
        metrics: manifest.metrics.names(),
        objective: (!manifest.objective.is_time()).then(|| manifest.objective.clone()),
    }
}

/// Checks `--json`, `--csv` and the results cache's path (by default, `shard`'s beside the
/// manifest); returns the cache's path.
fn check_outputs(
    options: &TuneOptions,
    manifest: &Manifest,
    shard: Option<ShardInfo>,
) -> Result<Option<PathBuf>> {
    for (flag, path) in [("--json", &options.json), ("--csv", &options.csv)] {
        if let Some(path) = path {
            check_report_path(flag, path, manifest).map_err(TuneError::options)?;
        }
    }
    let cache_path = match &options.cache {
        CacheMode::Default => Some(cache::default_path(&manifest.path, shard)),
        CacheMode::Path(path) => Some(path.clone()),
        CacheMode::Off => None,
    };
    if let Some(path) = &cache_path {
        check_output_path("--cache", path, manifest).map_err(TuneError::options)?;
        for (flag, other) in [("--json", &options.json), ("--csv", &options.csv)] {
            if other.as_deref() == Some(path.as_path()) {
                return Err(TuneError::options(anyhow::anyhow!(
                    "--cache and {flag} are the same file {}; give them different paths",
                    path.display()
                )));
            }
        }
    }
    Ok(cache_path)
}

/// Opens the results cache at `path`, reading the manifest's other default caches (the
/// unsharded run's, every shard's) too.
fn open_cache(
    path: Option<&Path>,
    options: &TuneOptions,
    manifest: &Manifest,
    notes: &mut Vec<String>,
    (observer, warnings): (&dyn Observer, &mut Warnings),
) -> Result<Option<ResultsCache>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let others = match &options.cache {
        CacheMode::Default => cache::sibling_paths(&manifest.path, path),
        _ => Vec::new(),
    };
    let cache = ResultsCache::open(path, &others, options.fresh)?;
    for note in cache.notes() {
        observer.note(&note);
        notes.push(note);
    }
    if let Some(note) = cache.unwritable() {
        warnings.warn(observer, WarningKind::ResultsCache, &note);
        notes.push(note);
    }
    Ok(Some(cache))
}

/// The sources of the manifest: the kernel's, and a C reference's.
fn sources(manifest: &Manifest) -> Vec<&crate::manifest::KernelSource> {
    let mut sources = vec![&manifest.kernel];
    if let Some(Verify {
        reference: Reference::Source(source, _),
        ..
    }) = &manifest.verify
    {
        sources.push(source);
    }
    sources
}

/// The C compiler of the kernel (and of a C reference) must exist: one clear error before the
/// run, rather than a `compile_error` for every choice.
fn check_compilers(manifest: &Manifest) -> Result<()> {
    let control = CompileControl {
        timeout: manifest.compile_timeout,
        ..CompileControl::default()
    };
    for source in sources(manifest)
        .into_iter()
        .filter(|s| s.language == Language::C)
    {
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

/// A note naming the choices whose reps were cut to fit the timeout (`stopped = "budget"`).
fn budget_note(results: &[ChoiceResult], manifest: &Manifest, timeout: Duration) -> Option<String> {
    let cut: Vec<&ChoiceResult> = results
        .iter()
        .filter(|r| r.stats.as_ref().is_some_and(|s| s.stopped == "budget"))
        .collect();
    let first = cut.first()?;
    let reps = first.stats.as_ref().map_or(0, |s| s.reps);
    Some(format!(
        "{} measured with fewer reps than the timing asks for (e.g. {}: {reps} rep{}, min_reps \
         {}) to fit the {timeout:?} timeout; raise timeout_s (or --timeout) for full measurements",
        plural(cut.len()),
        first.choice.label(),
        if reps == 1 { "" } else { "s" },
        manifest.timing.min_reps
    ))
}

/// Notes about the sources (outside the manifest's folder).
fn source_notes(manifest: &Manifest) -> Vec<String> {
    sources(manifest)
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
    let mut inputs = vec![manifest.path.clone()];
    inputs.extend(sources(manifest).into_iter().map(|s| s.path.clone()));
    if let Some(input) = inputs.iter().find(|input| same(input)) {
        bail!(
            "{flag} {} would overwrite the input {}; write it elsewhere",
            path.display(),
            input.display()
        );
    }
    let dir = folder_of(path);
    ensure!(
        dir.is_dir(),
        "{flag} {}: the directory {} does not exist",
        path.display(),
        dir.display()
    );
    ensure!(
        !path.is_dir(),
        "{flag} {} is a directory; give the path of a file in it",
        path.display()
    );
    Ok(())
}

/// [`check_output_path`] for a report the run writes at its end (`--json`, `--csv`, `--t4`,
/// `--html`), and that its folder takes a new file: found before the run rather than after every
/// choice was measured. (Not for the results cache: one that cannot be written is still read,
/// and its losses counted.)
pub(crate) fn check_report_path(flag: &str, path: &Path, manifest: &Manifest) -> Result<()> {
    check_output_path(flag, path, manifest)?;
    let dir = folder_of(path);
    tempfile::Builder::new()
        .prefix(".tunebox-probe-")
        .tempfile_in(dir)
        .with_context(|| {
            format!(
                "{flag} {}: cannot write in {}; give a path in a folder you can write to",
                path.display(),
                dir.display()
            )
        })?;
    Ok(())
}

/// The folder a file at `path` is written in (`.` for a bare file name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// The note that `hits` choices came from `cache` and were not measured again.
pub(super) fn skipped_note(hits: usize, cache: &ResultsCache) -> String {
    format!(
        "skipped {} already measured (results cache {}; --fresh re-measures them)",
        plural(hits),
        cache.path().display()
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tunebox_pool::Status;

    use super::*;
    use crate::base::observer::Event;

    /// Keeps the notes it is told.
    #[derive(Default)]
    pub(crate) struct Notes(pub(crate) Mutex<Vec<String>>);

    impl Observer for Notes {
        fn on_event(&self, event: Event<'_>) {
            if let Event::Note(note) = event {
                self.0.lock().unwrap().push(note.to_owned());
            }
        }
    }

    pub(crate) fn header() -> RunHeader {
        RunHeader::for_tests(4)
    }

    pub(crate) fn ledger(cache: ResultsCache) -> Ledger {
        Ledger {
            cache: Some(cache),
            results: Vec::new(),
            not_measured: Vec::new(),
            deps_of: HashMap::new(),
            reference_deps: Vec::new(),
            hits: 0,
            header: header(),
            timeout: Duration::from_secs(1),
            pending: Vec::new(),
            unfinished: Vec::new(),
            rounds_follow: true,
            written: Default::default(),
            warnings: Warnings::default(),
            resumed: 0,
            left_by: Vec::new(),
        }
    }

    /// An `ok` result of choice `index` measured in `windows` windows of 0.5 ms.
    pub(crate) fn measured(index: usize, windows: usize) -> ChoiceResult {
        let stats = tunebox_protocol::TimingStats::unmeasured()
            .with_median_ms(0.5)
            .with_p20_ms(0.5)
            .with_p80_ms(0.5)
            .with_reps(10);
        let mut r = ChoiceResult::failed(
            index,
            crate::space::Choice::new(Default::default()),
            Status::Ok,
            String::new(),
            "cpu",
        );
        r.error = None;
        let mut w = crate::results::windows::Windows::first(&stats, Default::default());
        for _ in 1..windows {
            w.add(0.5, Default::default(), 0);
        }
        r.windows = Some(w);
        r.stats = Some(stats);
        r
    }

    /// A disk that fills during a run fails every later write alike: the first failure is said,
    /// the rest (screening lines, the lines of the rounds) only counted.
    #[test]
    fn a_full_disk_is_said_once_per_run() {
        let Ok(full) = std::fs::OpenOptions::new().append(true).open("/dev/full") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let cache = ResultsCache::open(&dir.path().join("c.jsonl"), &[], false).unwrap();
        let notes = Notes::default();
        let mut ledger = ledger(cache);
        // Two choices screened while there was room, then the disk fills.
        ledger.record(measured(0, 1), Some("a"), None, &notes);
        ledger.record(measured(1, 1), Some("b"), None, &notes);
        ledger.cache.as_mut().unwrap().write_to(full);
        for index in 2..4 {
            ledger.record(measured(index, 1), Some(&format!("k{index}")), None, &notes);
        }
        // Their rounds give every choice more windows: their lines cannot be written either.
        for r in &mut ledger.results {
            *r = measured(r.index, 3);
        }
        ledger.cache_pending(&notes);
        let notes = notes.0.into_inner().unwrap();
        let full: Vec<&String> = notes
            .iter()
            .filter(|n| n.contains("file system is full"))
            .collect();
        assert_eq!(full.len(), 1, "{notes:#?}");
        assert!(full[0].starts_with("warning: "), "{notes:#?}");
        assert_eq!(ledger.cache.as_ref().unwrap().not_cached().0, 2);
        // The first failed screening line, and the two lines of the rounds (the cache itself
        // counts the second failed screening line).
        assert_eq!(ledger.warnings.count(WarningKind::ResultsCache), 3);
    }

    /// Later windows are measured in reused workers only with rounds, by default, when every
    /// choice otherwise gets a fresh worker, and outside a sandbox.
    #[test]
    fn later_windows_reuse_workers_only_where_a_fresh_first_window_is_kept_apart() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.c"), "void k(float *x) {}\n").unwrap();
        let path = dir.path().join("m.toml");
        std::fs::write(&path, "[kernel]\nsource = \"k.c\"\nentry = \"k\"\n").unwrap();
        let manifest = Manifest::read(&path, "cc").unwrap();
        let options = TuneOptions::new();
        assert!(warm_windows(&options, &manifest, 4));
        assert!(!warm_windows(&options, &manifest, 1), "no rounds");
        let fresh = TuneOptions::new().warm_windows(false);
        assert!(!warm_windows(&fresh, &manifest, 4), "--fresh-windows");
        for uses in [None, Some(5)] {
            let reused = TuneOptions::new().max_process_uses(uses);
            assert!(
                !warm_windows(&reused, &manifest, 4),
                "every worker reused already"
            );
        }
        let sandbox = manifest.default_sandbox();
        let sandboxed = manifest.with_sandbox(Some(sandbox));
        assert!(!warm_windows(&options, &sandboxed, 4), "sandboxed");
    }
}
