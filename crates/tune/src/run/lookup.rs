//! Stage 2 of a run, the cached lookup: the request and results-cache key of each choice a
//! strategy asked for, and the choices the results cache already answers.

use std::collections::HashMap;
use std::time::Duration;

use tunebox_pool::Status;
use tunebox_protocol::{BenchmarkRequest, Kernel, TimingConfig};

use crate::manifest::Manifest;
use crate::measure::workers;
use crate::results::ChoiceResult;
use crate::results::cache::{Deps, DepsCheck, ResultsCache};
use crate::results::fingerprint;
use crate::space::{Choice, SearchSpace};

/// What every stage of a run shares: the manifest, the device it measures on, the hash of
/// the manifest's setup that the results cache's keys start from, the per-choice timeout and
/// worker reuse (both in the keys), and the check of the headers cached C lines were recorded
/// with.
#[derive(Debug)]
pub struct Setup<'m> {
    pub(crate) manifest: &'m Manifest,
    pub(crate) device: String,
    /// The setup hash (see `fingerprint::setup_hash`), computed once.
    pub(crate) hash: String,
    pub(crate) timeout: Duration,
    pub(crate) max_process_uses: Option<u64>,
    /// Checks the headers of cached C lines as they are now, each file hashed once.
    pub(crate) deps_check: DepsCheck,
    /// Windows each choice is measured in (1: once, with the manifest's timing; more: the
    /// screening window and rounds, sharing the manifest's reps, see [`window_timing`]).
    pub(crate) windows: usize,
}

impl<'m> Setup<'m> {
    /// The stages' view of `manifest` measured on `device` (a CPU model or a GPU's name, as
    /// reports show it, e.g. [`crate::RunHeader::device`]), with `timeout` per choice (`None`:
    /// the manifest's `timeout_s`) and workers replaced after `max_process_uses` choices
    /// (`None`: never). Hashes the kernel, its headers and the compiler's version once.
    pub fn new(
        manifest: &'m Manifest,
        device: impl Into<String>,
        timeout: Option<Duration>,
        max_process_uses: Option<u64>,
    ) -> Setup<'m> {
        Setup {
            manifest,
            device: device.into(),
            hash: fingerprint::setup_hash(manifest),
            timeout: timeout.unwrap_or(manifest.timeout),
            max_process_uses,
            deps_check: DepsCheck::default(),
            windows: 1,
        }
    }

    /// The same, with `rounds` rounds of short windows after screening (as
    /// [`crate::TuneOptions::rounds`]): the manifest's reps and time are shared by the
    /// screening window and the rounds' windows, so each window is short.
    pub(crate) fn with_rounds(mut self, rounds: usize) -> Setup<'m> {
        self.windows = rounds.saturating_add(1);
        self
    }

    /// The manifest.
    pub fn manifest(&self) -> &'m Manifest {
        self.manifest
    }

    /// The device results are recorded for.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The per-choice timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// A choice still to compile and measure.
#[derive(Debug, Clone)]
pub struct Todo {
    /// Its stable index in the search space.
    pub index: usize,
    /// The choice.
    pub choice: Choice,
    /// What a worker is asked to run.
    pub request: BenchmarkRequest,
    /// Its results-cache key (everything that determines its measurement).
    pub key: String,
}

/// A choice measured in fewer windows than its rounds give, as the results cache holds it.
#[derive(Debug, Clone)]
pub struct Resumed {
    /// What compiling and measuring it again would take.
    pub todo: Todo,
    /// Its result so far: its screening window and the rounds' windows it had (not `cached`:
    /// the run goes on measuring it).
    pub result: ChoiceResult,
    /// How many windows its line in the results cache holds.
    pub(crate) windows: usize,
}

/// What the cached lookup of a batch gave.
#[derive(Debug, Default)]
pub struct Lookup {
    /// Choices finished without measuring, in the batch's order: taken from the results cache
    /// (`cached` set), or failed at once (a launch that cannot be evaluated: `error`).
    pub done: Vec<ChoiceResult>,
    /// How many of `done` the cache answered.
    pub hits: usize,
    /// The rest, in the batch's order: to compile and measure.
    pub todo: Vec<Todo>,
    /// Choices whose rounds a stop cut short (the results cache holds their screening window,
    /// and the windows of the rounds they had): a run gives them the rest of their rounds; a
    /// caller that measures each choice once measures them as [`Lookup::todo`]'s.
    pub resumed: Vec<Resumed>,
    /// The headers each cached C choice of `done` was recorded with, by stable index (a
    /// refined line records them too).
    pub(crate) deps: HashMap<usize, Deps>,
    /// The keys of the cache's answers (lines read from another file are copied into the
    /// run's own: see [`adopt`]).
    pub(crate) hit_keys: Vec<String>,
}

/// Stage 2: builds the request and key of each choice of `batch` (stable indices of `space`;
/// indices outside it are ignored) and takes from `cache` what it holds for that key (a cached
/// `timeout` only when measured with at least `setup`'s timeout; for a C kernel, only while
/// every header its compile read, as recorded in the cache, is unchanged), re-labelled for
/// this run with its metrics recomputed (the manifest's metrics may have changed since). A
/// line whose windows are not complete (its rounds were cut short) is [`Lookup::resumed`].
pub fn lookup_cached(
    setup: &Setup<'_>,
    space: &SearchSpace,
    batch: &[usize],
    cache: Option<&ResultsCache>,
) -> Lookup {
    let manifest = setup.manifest;
    let mut lookup = Lookup::default();
    for &index in batch {
        let Some(choice) = space.choice(index) else {
            continue;
        };
        let request = match workers::request(
            manifest,
            &manifest.kernel,
            manifest.launch.as_ref(),
            &choice,
        ) {
            Ok(mut request) => {
                request.timing = window_timing(&request.timing, setup.windows, 0);
                request
            }
            // A choice whose request cannot be built (its launch fails) is an error at once.
            Err(e) => {
                lookup.done.push(ChoiceResult::failed(
                    index,
                    choice,
                    Status::Error,
                    format!("{e:#}"),
                    &setup.device,
                ));
                continue;
            }
        };
        let key = fingerprint::key(
            &setup.hash,
            &setup.device,
            &request,
            &choice.label(),
            setup.max_process_uses,
            manifest.sandbox(),
        );
        let check = matches!(request.kernel, Kernel::C(_)).then_some(&setup.deps_check);
        let hit = cached(cache, (&key, check), setup, setup.timeout, index, &choice);
        let todo = Todo {
            index,
            choice,
            request,
            key,
        };
        let Some(hit) = hit else {
            lookup.todo.push(todo);
            continue;
        };
        if let Some(deps) = hit.deps {
            lookup.deps.insert(index, deps);
        }
        lookup.hit_keys.push(todo.key.clone());
        match hit.unfinished {
            Some(windows) => {
                let mut result = hit.result;
                result.cached = false;
                lookup.resumed.push(Resumed {
                    todo,
                    result,
                    windows,
                });
            }
            None => {
                lookup.done.push(hit.result);
                lookup.hits += 1;
            }
        }
    }
    lookup
}

/// What the results cache holds for a key ([`cached`]).
#[derive(Debug)]
pub(crate) struct Hit {
    pub(crate) result: ChoiceResult,
    /// The headers it was recorded with.
    pub(crate) deps: Option<Deps>,
    /// Its windows are not complete (its rounds were cut short): how many it has.
    pub(crate) unfinished: Option<usize>,
}

/// The cached result of `key` (a timeout only when measured with at least `timeout`),
/// re-labelled for this run (and its metrics recomputed: the manifest's metrics may have
/// changed since), with the headers it was recorded with, and whether its windows are complete
/// ([`crate::results::cache::CacheLine::windows_complete`]). With a [`DepsCheck`] (a C choice), only a
/// result whose headers are unchanged.
pub(crate) fn cached(
    cache: Option<&ResultsCache>,
    (key, check): (&str, Option<&DepsCheck>),
    setup: &Setup<'_>,
    timeout: Duration,
    index: usize,
    choice: &Choice,
) -> Option<Hit> {
    let line = cache?.lookup(key, timeout, check)?;
    let mut result = line.result.clone().into_result(&setup.device).ok()?;
    let unfinished = (!line.windows_complete(setup.windows))
        .then(|| result.windows.as_ref().map_or(0, |w| w.medians_ms.len()));
    // Never luck: a result measured under interference, without enough quiet windows, is
    // not final; this run measures it again (one cut short gets its rounds, which judge that).
    if unfinished.is_none() && result.windows.as_ref().is_some_and(|w| !w.settled()) {
        return None;
    }
    result.index = index;
    result.choice = choice.clone();
    result.cached = true;
    result.device = setup.device.clone();
    if let Some(median) = result.median_ms() {
        result.metrics = setup.manifest.metrics.evaluate(choice, median);
    }
    Some(Hit {
        result,
        deps: line.deps.clone(),
        unfinished,
    })
}

/// The timing of window `window` (0: the screening window) of `windows` that share the
/// manifest's `timing`: `rep_ms` and `max_time_ms` split evenly, `warmup_ms` likewise for the
/// first (screening) window and none for the later ones (their first call warms), `min_reps` and
/// `max_reps` split so that the windows' reps add up to the manifest's (Kernel Tuner's
/// `iterations = 7` over 3 windows: 3, 2 and 2 reps), at least one each; a window runs no
/// estimate runs of its own (`estimate_runs = 0`: the backend's first call is the estimate).
/// One window: `timing`, with no estimate runs either when its reps are fixed (`min_reps ==
/// max_reps`, Kernel Tuner's `iterations`): nothing is sized from the estimate but the warmup,
/// and Kernel Tuner's `iterations = 1` is then 3 calls (the first, a warmup, the rep), not 8.
pub(crate) fn window_timing(timing: &TimingConfig, windows: usize, window: usize) -> TimingConfig {
    if windows <= 1 {
        let mut one = timing.clone();
        if timing.min_reps == timing.max_reps {
            one.estimate_runs = Some(0);
        }
        return one;
    }
    let n = windows as u32;
    let i = window.min(windows - 1) as u32;
    let share = |reps: u32| (reps / n + u32::from(i < reps % n)).max(1);
    let scale = 1.0 / f64::from(n);
    let mut w = timing.clone();
    w.rep_ms *= scale;
    // A later window's first call has warmed the kernel: its warmup share is spared (one call
    // fewer per window; do_bench runs no warmup when the first call is the estimate and
    // `warmup_ms` is 0).
    w.warmup_ms = if i == 0 {
        timing.warmup_ms * scale
    } else {
        0.0
    };
    w.min_reps = share(timing.min_reps);
    w.max_reps = share(timing.max_reps).max(w.min_reps);
    w.max_time_ms = timing.max_time_ms.map(|t| t * scale);
    w.estimate_runs = Some(0);
    w
}

/// Copies the cache's lines of `keys` into its own file when they came from another one (a
/// shard's cache of the same manifest), so that the file holds every result of the run that
/// uses it. The lines that cannot be written stay in the other file.
///
/// # Errors
///
/// The first write that fails (the rest are not tried).
pub(crate) fn adopt(cache: &mut Option<ResultsCache>, keys: &[String]) -> anyhow::Result<()> {
    if let Some(c) = cache.as_mut() {
        for key in keys {
            c.adopt(key)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tunebox_protocol::{DType, TensorSpec};

    use super::*;
    use crate::results::RunHeader;
    use crate::results::cache::CacheLine;

    #[test]
    fn windows_share_the_reps_and_only_the_first_warms_up() {
        let timing = TimingConfig::default()
            .warmup_ms(12.0)
            .rep_ms(60.0)
            .min_reps(7)
            .max_reps(7);
        let w: Vec<TimingConfig> = (0..4).map(|i| window_timing(&timing, 3, i)).collect();
        assert_eq!(
            w.iter().map(|t| t.min_reps).collect::<Vec<_>>(),
            [3, 2, 2, 2]
        );
        assert!(
            w.iter()
                .all(|t| t.rep_ms == 20.0 && t.estimate_runs == Some(0))
        );
        assert_eq!(
            w.iter().map(|t| t.warmup_ms).collect::<Vec<_>>(),
            [4.0, 0.0, 0.0, 0.0]
        );
        // One window: the manifest's timing as it is, but for the estimate runs, which fixed
        // reps do not need.
        assert_eq!(
            window_timing(&timing, 1, 0),
            timing.clone().estimate_runs(Some(0))
        );
        let sized = timing.clone().min_reps(5).max_reps(100);
        assert_eq!(window_timing(&sized, 1, 0), sized);
    }

    /// 10 reps of exactly 0.5 ms.
    fn steady_stats() -> tunebox_protocol::TimingStats {
        tunebox_protocol::TimingStats::unmeasured()
            .with_median_ms(0.5)
            .with_mean_ms(0.5)
            .with_min_ms(0.5)
            .with_max_ms(0.5)
            .with_p20_ms(0.5)
            .with_p80_ms(0.5)
            .with_stddev_ms(0.0)
            .with_reps(10)
            .with_warmup_reps(1)
            .with_stopped("reps".into())
            .with_preempted_reps(0)
    }

    fn manifest() -> Manifest {
        Manifest::builder("k")
            .c_source("k.c", "void k(float *y) { y[0] = X; }", "k")
            .compiler("cc")
            .tensor(TensorSpec::new("y", DType::F32, [1]).output())
            .param("X", [1, 2, 3])
            .metric("twice", "2 * X")
            .build()
            .unwrap()
    }

    fn header() -> RunHeader {
        RunHeader {
            tunebox_version: "0".into(),
            manifest: "k".into(),
            manifest_hash: "h".into(),
            name: "k".into(),
            kernel: "k (k.c)".into(),
            backend: "cpu".into(),
            device: "test-cpu".into(),
            space_size: 3,
            selection: crate::Selection {
                strategy: "brute-force".into(),
                budget: None,
                seed: 0,
            },
            shard: None,
            metrics: vec!["twice".into()],
            objective: None,
        }
    }

    #[test]
    fn the_cache_answers_what_it_holds_and_the_rest_is_todo() {
        let manifest = manifest();
        let space = SearchSpace::new(&manifest.params, &manifest.restrictions).unwrap();
        let setup = Setup::new(&manifest, "test-cpu", None, Some(1));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.jsonl");
        let mut cache = ResultsCache::open(&path, &[], false).unwrap();

        // Nothing cached: everything is to do, in the batch's order (out-of-space indices
        // are ignored).
        let first = lookup_cached(&setup, &space, &[2, 0, 9, 1], Some(&cache));
        assert_eq!(first.hits, 0);
        assert!(first.done.is_empty());
        let order: Vec<usize> = first.todo.iter().map(|t| t.index).collect();
        assert_eq!(order, [2, 0, 1]);
        assert_eq!(first.todo[0].choice.label(), "X=3");

        // Choice 0 measured, its compile having read `h.h`: the next lookup takes it from the
        // cache, with its metrics and the headers it was recorded with.
        let t = &first.todo[1];
        let h = dir.path().join("h.h");
        std::fs::write(&h, "#define Y 1\n").unwrap();
        let deps = Deps::of(std::slice::from_ref(&h)).unwrap();
        let stats = steady_stats();
        let mut measured = ChoiceResult::failed(
            t.index,
            t.choice.clone(),
            Status::Ok,
            String::new(),
            "test-cpu",
        );
        measured.error = None;
        measured.stats = Some(stats);
        cache
            .append(CacheLine::new(
                t.key.clone(),
                &header(),
                setup.timeout,
                &measured,
                Some(deps.clone()),
            ))
            .unwrap();
        let cache = ResultsCache::open(&path, &[], false).unwrap();
        let again = lookup_cached(&setup, &space, &[0, 1], Some(&cache));
        assert_eq!(again.hits, 1);
        assert_eq!(again.done.len(), 1);
        let hit = &again.done[0];
        assert!(
            hit.cached && hit.status == Status::Ok && hit.index == 0,
            "{hit:?}"
        );
        assert_eq!(hit.median_ms(), Some(0.5));
        assert_eq!(hit.metrics.get("twice"), Some(&2.0), "{hit:?}");
        assert_eq!(again.todo.iter().map(|t| t.index).collect::<Vec<_>>(), [1]);
        assert_eq!(again.deps.get(&0), Some(&deps));
        assert_eq!(again.hit_keys, std::slice::from_ref(&t.key));

        // Another device, or no cache, or a fresh one: nothing is taken.
        let other = Setup::new(&manifest, "other-cpu", None, Some(1));
        assert_eq!(lookup_cached(&other, &space, &[0], Some(&cache)).hits, 0);
        assert_eq!(lookup_cached(&setup, &space, &[0], None).hits, 0);
        let fresh = ResultsCache::open(&path, &[], true).unwrap();
        assert_eq!(lookup_cached(&setup, &space, &[0], Some(&fresh)).hits, 0);

        // The header edited: the line no longer holds (a C kernel compiles again).
        std::fs::write(&h, "#define Y 2\n").unwrap();
        let edited = Setup::new(&manifest, "test-cpu", None, Some(1));
        let after = lookup_cached(&edited, &space, &[0], Some(&cache));
        assert_eq!((after.hits, after.todo.len()), (0, 1));

        // A C line recorded without headers (an older tunebox's) is compiled again too.
        let mut cache = ResultsCache::open(&path, &[], false).unwrap();
        cache
            .append(CacheLine::new(
                t.key.clone(),
                &header(),
                setup.timeout,
                &measured,
                None,
            ))
            .unwrap();
        let cache = ResultsCache::open(&path, &[], false).unwrap();
        assert_eq!(lookup_cached(&setup, &space, &[0], Some(&cache)).hits, 0);
    }

    /// Never luck: a result measured under interference is cached with its windows'
    /// conditions and not taken as final; the quiet re-measurement's line replaces it.
    #[test]
    fn a_result_measured_under_interference_is_not_final() {
        let manifest = manifest();
        let space = SearchSpace::new(&manifest.params, &manifest.restrictions).unwrap();
        let setup = Setup::new(&manifest, "test-cpu", None, Some(1));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.jsonl");
        let t = lookup_cached(&setup, &space, &[0], None).todo.remove(0);
        let h = dir.path().join("h.h");
        std::fs::write(&h, "#define Y 1\n").unwrap();
        let deps = Deps::of(std::slice::from_ref(&h)).unwrap();
        let stats = steady_stats();
        let line = |disturbed: &[bool]| {
            let mut r = ChoiceResult::failed(
                t.index,
                t.choice.clone(),
                Status::Ok,
                String::new(),
                "test-cpu",
            );
            r.error = None;
            r.stats = Some(stats.clone());
            let busy = |d: bool| crate::results::interference::Conditions {
                other_busy: if d { 1.0 } else { 0.0 },
                steal: 0.0,
                disturbed: d,
                ended_s: 0.0,
                took_s: 0.0,
            };
            let mut w = crate::results::windows::Windows::first(&stats, busy(disturbed[0]));
            for &d in &disturbed[1..] {
                w.add(0.5, busy(d), 0);
            }
            r.windows = Some(w);
            CacheLine::new(
                t.key.clone(),
                &header(),
                setup.timeout,
                &r,
                Some(deps.clone()),
            )
        };
        let hits = |path: &std::path::Path| {
            let cache = ResultsCache::open(path, &[], false).unwrap();
            lookup_cached(&setup, &space, &[0], Some(&cache)).hits
        };
        let mut cache = ResultsCache::open(&path, &[], false).unwrap();
        // Every window disturbed, or only one quiet one of three: measured again.
        cache.append(line(&[true])).unwrap();
        assert_eq!(hits(&path), 0);
        cache.append(line(&[true, false, true])).unwrap();
        assert_eq!(hits(&path), 0);
        // Two quiet windows of three: final; so is one quiet window measured alone.
        cache.append(line(&[true, false, false])).unwrap();
        assert_eq!(hits(&path), 1);
        cache.append(line(&[false])).unwrap();
        assert_eq!(hits(&path), 1);
    }
}
