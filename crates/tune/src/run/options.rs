//! What a run is asked to do: [`TuneOptions`], and the defaults of its rounds.

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
