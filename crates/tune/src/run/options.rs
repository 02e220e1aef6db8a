//! What a run is asked to do: [`TuneOptions`], its defaults (those of `tunebox tune`), its builder
//! for code, and the defaults of its rounds.

use std::path::PathBuf;
use std::time::Duration;

use crate::results::{Selection, ShardInfo};

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

/// What `tune` was asked to do (the manifest itself is the [`crate::Plan`]'s, or [`crate::tune`]'s path).
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
    /// Measure only this shard of the choices (`None`: all): what [`crate::tune`] plans with.
    /// A run of a [`crate::Plan`] measures, names and caches the plan's shard
    /// ([`crate::Plan::new`]), whatever this says.
    pub shard: Option<ShardInfo>,
    /// Rounds of short windows after screening (0: each choice is measured once, in one
    /// window of the manifest's `rep_ms`, as tunebox did before 0.2): see
    /// [`DEFAULT_ROUNDS`].
    pub rounds: usize,
    /// Time the race for the top may take after the rounds (`None`: a quarter as long as the
    /// rounds took, at most [`DEFAULT_RACE_LIMIT`]).
    pub race: Option<Duration>,
    /// Measure the later windows of the choices that passed screening (the rounds', the
    /// race's) in workers reused from window to window, while each choice's first window
    /// stays in a fresh worker (default `true`). Only with `max_process_uses` 1 and workers
    /// outside a sandbox; `false` (`--fresh-windows`): every window in a fresh worker.
    pub warm_windows: bool,
}

/// Rounds of short windows after screening, by default: with the screening window, four
/// windows a choice. Issue 23 measured 2 and 3 interleaved, 5 + 5 runs idle and under 2 × nproc
/// busy loops: 3 raised the worst pair's Spearman from 0.871 to 0.907 idle and from 0.777 to
/// 0.908 busy (docs/performance.md).
pub const DEFAULT_ROUNDS: usize = 3;
/// The race's default time, as a share of the time the rounds took (their windows measured
/// beside the compiles included).
pub(crate) const RACE_SHARE: f64 = 0.25;
/// The longest the race for the top takes by default.
pub const DEFAULT_RACE_LIMIT: Duration = Duration::from_secs(10);

/// `--refine` re-measures with this many times the manifest's `rep_ms` and rep bounds, and
/// gives each re-measurement this many times the per-choice timeout.
pub(crate) const REFINE_FACTOR: f64 = 4.0;

impl Default for Selection {
    /// Brute force: every choice, in canonical order.
    fn default() -> Selection {
        Selection {
            strategy: "brute-force".into(),
            budget: None,
            seed: 0,
        }
    }
}

impl Default for TuneOptions {
    /// What `tunebox tune` does without options for a C kernel: one worker, a fresh worker
    /// process per choice (`max_process_uses` 1; for a CUDA kernel `tunebox tune` keeps the
    /// worker instead, [`crate::Manifest::default_max_process_uses`]; the later windows of
    /// choices that passed screening in reused ones: `warm_windows`), the manifest's
    /// `timeout_s`, the worker found as [`TuneOptions::worker`] says, the default results
    /// cache, brute force, no time limit, no refinement, no shard, no JSON or CSV,
    /// [`DEFAULT_ROUNDS`] rounds of windows. The manifest is [`crate::tune`]'s path, or the
    /// [`crate::Plan`]'s.
    fn default() -> TuneOptions {
        TuneOptions {
            workers: 1,
            timeout: None,
            max_process_uses: Some(1),
            worker: None,
            json: None,
            csv: None,
            cache: CacheMode::Default,
            fresh: false,
            selection: Selection::default(),
            max_time: None,
            refine: None,
            shard: None,
            rounds: DEFAULT_ROUNDS,
            race: None,
            warm_windows: true,
        }
    }
}

impl TuneOptions {
    /// The defaults ([`TuneOptions::default`]); the methods below change one option each:
    ///
    /// ```
    /// use std::time::Duration;
    /// use tunebox_tune::{CacheMode, TuneOptions};
    ///
    /// let options = TuneOptions::new()
    ///     .workers(2)
    ///     .strategy("genetic")
    ///     .budget(100)
    ///     .seed(7)
    ///     .max_time(Duration::from_secs(600))
    ///     .cache(CacheMode::Off);
    /// assert_eq!(options.selection.strategy, "genetic");
    /// assert_eq!(options.max_process_uses, Some(1));
    /// ```
    pub fn new() -> TuneOptions {
        TuneOptions::default()
    }

    /// Rounds of short windows after screening (0: each choice measured once, in one window).
    pub fn rounds(mut self, rounds: usize) -> TuneOptions {
        self.rounds = rounds;
        self
    }

    /// Whether the rounds' and the race's windows of choices that passed screening are
    /// measured in reused workers ([`TuneOptions::warm_windows`](struct@TuneOptions); `false`:
    /// every window in a fresh worker, as `--fresh-windows`).
    pub fn warm_windows(mut self, warm: bool) -> TuneOptions {
        self.warm_windows = warm;
        self
    }

    /// The time the race for the top may take after the rounds.
    pub fn race(mut self, race: Duration) -> TuneOptions {
        self.race = Some(race);
        self
    }

    /// Worker processes measuring in parallel (at least 1).
    pub fn workers(mut self, workers: usize) -> TuneOptions {
        self.workers = workers;
        self
    }

    /// The per-choice timeout, instead of the manifest's `timeout_s`.
    pub fn timeout(mut self, timeout: Duration) -> TuneOptions {
        self.timeout = Some(timeout);
        self
    }

    /// Benchmarks per worker process before it is replaced (TVM's `maximum_process_uses`;
    /// `None`: never replaced while it works).
    pub fn max_process_uses(mut self, uses: Option<u64>) -> TuneOptions {
        self.max_process_uses = uses;
        self
    }

    /// The worker executable (by default `$TUNEBOX_WORKER`, else the current executable).
    pub fn worker(mut self, worker: impl Into<PathBuf>) -> TuneOptions {
        self.worker = Some(worker.into());
        self
    }

    /// Where the JSON report goes.
    pub fn json(mut self, path: impl Into<PathBuf>) -> TuneOptions {
        self.json = Some(path.into());
        self
    }

    /// Where the CSV table goes.
    pub fn csv(mut self, path: impl Into<PathBuf>) -> TuneOptions {
        self.csv = Some(path.into());
        self
    }

    /// Where the results cache is ([`CacheMode::Off`]: none).
    pub fn cache(mut self, cache: CacheMode) -> TuneOptions {
        self.cache = cache;
        self
    }

    /// Ignore what the results cache holds (new results are still kept).
    pub fn fresh(mut self, fresh: bool) -> TuneOptions {
        self.fresh = fresh;
        self
    }

    /// The built-in strategy by name (one of [`crate::search::strategies::NAMES`]).
    pub fn strategy(mut self, name: impl Into<String>) -> TuneOptions {
        self.selection.strategy = name.into();
        self
    }

    /// The most choices the strategy measures.
    pub fn budget(mut self, budget: usize) -> TuneOptions {
        self.selection.budget = Some(budget);
        self
    }

    /// The strategy's seed.
    pub fn seed(mut self, seed: u64) -> TuneOptions {
        self.selection.seed = seed;
        self
    }

    /// Start no new choice after this long.
    pub fn max_time(mut self, max_time: Duration) -> TuneOptions {
        self.max_time = Some(max_time);
        self
    }

    /// Measure the best `n` choices again with 4× the reps, and rank by that.
    pub fn refine(mut self, n: usize) -> TuneOptions {
        self.refine = Some(n);
        self
    }

    /// Measure only shard `index` of `count` (from 0).
    pub fn shard(mut self, index: usize, count: usize) -> TuneOptions {
        self.shard = Some(ShardInfo { index, count });
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_sets_one_option_each_over_the_cli_defaults() {
        let options = TuneOptions::new();
        assert_eq!(options.rounds, DEFAULT_ROUNDS);
        assert_eq!((options.workers, options.max_process_uses), (1, Some(1)));
        assert_eq!(options.cache, CacheMode::Default);
        assert_eq!(options.selection, Selection::default());
        let options = options
            .workers(3)
            .timeout(Duration::from_secs(5))
            .max_process_uses(None)
            .worker("w")
            .json("r.json")
            .csv("r.csv")
            .cache(CacheMode::Off)
            .fresh(true)
            .strategy("random")
            .budget(10)
            .seed(4)
            .max_time(Duration::from_secs(60))
            .refine(2)
            .shard(1, 4)
            .rounds(0)
            .race(Duration::from_secs(3));
        assert_eq!(options.workers, 3);
        assert_eq!(options.timeout, Some(Duration::from_secs(5)));
        assert_eq!(options.max_process_uses, None);
        assert_eq!(options.worker, Some(PathBuf::from("w")));
        assert_eq!(options.json, Some(PathBuf::from("r.json")));
        assert_eq!(options.csv, Some(PathBuf::from("r.csv")));
        assert_eq!(options.cache, CacheMode::Off);
        assert!(options.fresh);
        assert_eq!(
            options.selection,
            Selection {
                strategy: "random".into(),
                budget: Some(10),
                seed: 4
            }
        );
        assert_eq!(options.max_time, Some(Duration::from_secs(60)));
        assert_eq!(options.refine, Some(2));
        assert_eq!(options.shard, Some(ShardInfo { index: 1, count: 4 }));
        assert_eq!(
            (options.rounds, options.race),
            (0, Some(Duration::from_secs(3)))
        );
    }
}
