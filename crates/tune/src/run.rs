//! `tunebox tune`: select (strategy, shard), take what the results cache has, precompile,
//! benchmark, verify, cache each result as it finishes, refine the best, rank.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::manifest::{Manifest, compiler};
use crate::observer::Observer;
use crate::results::{NotMeasured, Report, Selection, ShardInfo, choices as plural};
use crate::shard;
use crate::space::SearchSpace;
use crate::stop::Stop;
use crate::strategy::{self, Strategy};

mod bench;
mod compile;
mod context;
mod lookup;
mod pipeline;
mod race;
mod reference;
mod refine;
mod round;

pub use self::bench::measure;
pub use self::compile::{Compiled, compile};
use self::context::Run;
pub use self::lookup::{Lookup, Setup, Todo, lookup_cached};
pub use self::reference::reference;
pub use self::refine::refine_order;

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

/// What `tune` was asked to do (the manifest itself is the [`Plan`]'s, or [`tune`]'s path).
#[derive(Debug)]
pub struct TuneOptions {
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
    /// Rounds of short windows after screening (0: each choice is measured once, in one
    /// window of the manifest's `rep_ms`, as tunebox did before 0.2): see
    /// [`DEFAULT_ROUNDS`].
    pub rounds: usize,
    /// Time the race for the top may take after the rounds (`None`: as long as the rounds
    /// took, at most [`DEFAULT_RACE_LIMIT`]).
    pub race: Option<Duration>,
}

/// Rounds of short windows after screening, by default.
pub const DEFAULT_ROUNDS: usize = 2;
/// The longest the race for the top takes by default.
pub const DEFAULT_RACE_LIMIT: Duration = Duration::from_secs(10);

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
                .filter(|&i| shard::owns(shard, i))
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
    plan_inner(path, selection, shard).map_err(crate::Error::manifest)
}

fn plan_inner(path: &Path, selection: &Selection, shard: Option<ShardInfo>) -> Result<Plan> {
    let manifest = Manifest::read(path, &compiler())?;
    Plan::build(manifest, strategy::from_selection(selection), shard)
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
    let plan = plan(manifest, &options.selection, options.shard)?;
    run(plan, options, observer, stop)
}

/// Runs `plan` (a manifest and a strategy, from [`plan`] or [`Plan::new`]) as `options` say;
/// the manifest's path names it in reports and places the default results cache, and
/// `options.selection` is what reports record as the strategy.
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
    composed().map_err(crate::Error::run)
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
}
