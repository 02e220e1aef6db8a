//! `tunebox tune` as the composition of its stages. [`plan`] selects (strategy, shard); a
//! private run context ([`context`]) then prepares (output checks, compilers, device, the one
//! place the timeout and the results cache are resolved, the header), screens in rounds
//! ([`round`]: cached lookup → [`pipeline`], compiling while measuring → record → tell the
//! strategy), measures the contenders again in rounds of short windows and races the top
//! ([`race`]), refines the best ([`refine`]) and finishes the report. The public stage
//! functions ([`lookup::lookup_cached`], [`compile::compile()`], [`reference::reference()`],
//! [`measure::measure()`]) are the same code: `measure` is the pipeline without its compile
//! threads.
//!
//! The area `run` is the top: it imports every other area, and none imports it.

use std::path::Path;

use anyhow::{Context, Result, ensure};

use crate::base::observer::Observer;
use crate::base::stop::Stop;
use crate::manifest::{Language, Manifest, WorkerEnv, compiler};
use crate::results::{Report, Selection, ShardInfo, choices as plural};
use crate::search::strategies;
use crate::search::strategy::Strategy;
use crate::space::{self, SearchSpace};

pub(crate) mod compile;
mod compile_threads;
mod context;
mod head_start;
pub(crate) mod lookup;
pub(crate) mod measure;
pub(crate) mod options;
mod pipeline;
mod race;
pub(crate) mod reference;
pub(crate) mod refine;
mod resume;
mod round;
mod spare;
mod stage;

use self::context::Run;
pub(crate) use self::options::TuneOptions;
use self::round::ask;

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
        let mut strategy: Box<dyn Strategy> =
            Box::new(crate::search::strategy::Guarded::new(strategy));
        let mut space = SearchSpace::new(&manifest.params, &manifest.restrictions)
            .with_context(|| format!("invalid manifest {}", manifest.path.display()))?;
        let mut notes: Vec<String> =
            space::prepare_unlisted(&mut space, strategy.name(), budget_given, shard)
                .with_context(|| format!("{}", manifest.path.display()))?
                .into_iter()
                .collect();
        // As Kernel Tuner: a block of more threads than the device allows is not a choice.
        if let Some(launch) = &manifest.launch
            && manifest.kernel.language == Language::Cuda
        {
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

    /// Checks, before the run, a file the caller will write its report to (`flag` names it in
    /// the error: `--t4`, `--html`): its folder exists and takes a new file, it is not a
    /// directory, and it is not the manifest or one of its sources. The same check a run makes
    /// of [`TuneOptions::json`] and [`TuneOptions::csv`] (and, but for the folder taking a file,
    /// of its results cache).
    ///
    /// # Errors
    ///
    /// [`crate::TuneError`] saying which it is and the fix.
    pub fn check_output(&self, flag: &str, path: &Path) -> crate::Result<()> {
        context::check_report_path(flag, path, &self.manifest)
            .map_err(crate::TuneError::invalid_options)
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

/// Reads the manifest and selects the choices to measure: the strategy's selection, then the
/// shard's part of it.
///
/// # Errors
///
/// An invalid manifest, or restrictions that leave no choice.
pub fn plan(path: &Path, selection: &Selection, shard: Option<ShardInfo>) -> crate::Result<Plan> {
    plan_batched(path, selection, shard, 1)
}

/// As [`plan`], for a run that measures `batch` choices at once (its workers): the strategy
/// proposes that many at a time where it can ([`crate::search::strategies::by_name_batched`]: `auto`),
/// so that every worker has a choice to measure. [`tune`] passes [`TuneOptions::workers`].
///
/// # Errors
///
/// As [`plan`].
pub fn plan_batched(
    path: &Path,
    selection: &Selection,
    shard: Option<ShardInfo>,
    batch: usize,
) -> crate::Result<Plan> {
    let strategy = strategies::from_selection(selection, batch)
        .map_err(|e| crate::TuneError::invalid_options(e.into()))?;
    let manifest = Manifest::load(path, &compiler())?;
    let budget_given = selection.budget.is_some();
    Plan::build(manifest, strategy, shard, budget_given).map_err(crate::TuneError::manifest)
}

/// Runs a tuning session as the manifest and options say.
///
/// # Errors
///
/// An invalid manifest, an empty space, unusable output paths, no usable cache directory,
/// workers that cannot start, or a reference that fails; a choice that fails is a result, not an
/// error, and so is a run stopped by `stop` or `--max-time` (its report lists what was not
/// measured).
pub fn tune(
    manifest: &Path,
    options: &TuneOptions,
    observer: &dyn Observer,
    stop: &Stop,
) -> crate::Result<Report> {
    let plan = plan_batched(manifest, &options.selection, options.shard, options.workers)?;
    run(plan, options, observer, stop)
}

/// Runs `plan` (a manifest and a strategy, from [`plan`] or [`Plan::new`]) as `options` say;
/// the manifest's path names it in reports and places the default results cache, and reports
/// record the plan's strategy by its [`Strategy::name`], with `options.selection`'s budget and
/// seed.
///
/// The run is its stages composed: prepare (checks, device, timeout, caches), screening
/// (rounds of lookup, compile and measure, record, tell, until the strategy has no more),
/// the race (rounds of short windows for the choices whose intervals overlap), refining, and
/// the report.
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
    let Plan {
        manifest,
        space,
        strategy,
        shard,
        selected,
        notes,
    } = plan;
    let composed = || -> Result<Report> {
        let mut run = Run::prepare(
            &manifest,
            (space, strategy, shard, notes),
            options,
            observer,
            stop,
        )?;
        run.screen(selected)?;
        run.race();
        run.ledger.cache_pending(observer);
        if let Some(top) = options.refine.filter(|&k| k > 0)
            && !stop.poll(observer)
        {
            run.refine(top)?;
        }
        Ok(run.finish())
    };
    composed().map_err(crate::TuneError::run)
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
            Box::new(crate::search::strategy::BruteForce::default()),
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
            Box::new(crate::search::strategy::BruteForce::default()),
            None,
        )
        .unwrap();
        assert_eq!((plan.space().len(), plan.notes().len()), (1, 0));
    }
}
