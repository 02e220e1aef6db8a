//! A whole tuning run through the `tunebox-tune` library, outside the CLI: a small C kernel
//! family, measured by the test worker binary, observed, with a strategy of our own.

use std::sync::Mutex;

use serde_json::Value;

use tunebox_pool::Status;
use tunebox_protocol::{DType, TensorSpec, TimingConfig};
use tunebox_tune::{
    BruteForce, CacheMode, ChoiceResult, Compiled, Event, Observer, Plan, ResultsCache,
    SearchSpace, Selection, Setup, Stop, Strategy, TuneOptions,
};

use crate::util::{cache_root, worker_exe};

/// `y = 2 x`, unrolled SCALE times, except that SCALE=3 adds one: a wrong answer.
const KERNEL: &str = r#"#include <stdint.h>
void scale(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + SCALE <= n; i += SCALE)
        for (int k = 0; k < SCALE; k++) y[i + k] = 2.0f * x[i + k] + (SCALE == 3 ? 1.0f : 0.0f);
    for (; i < n; i++) y[i] = 2.0f * x[i];
}
"#;

const MANIFEST: &str = r#"
name = "scale"
timeout_s = 30
[kernel]
source = "scale.c"
entry = "scale"
flags = ["-O2"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [256]
[[tensors]]
name = "y"
dtype = "f32"
shape = [256]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 256
[params]
SCALE = [1, 2, 3, 4]
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
[verify]
reference = { choice = { SCALE = 1 } }
"#;

/// Records every event.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Observer for Recorder {
    fn on_event(&self, event: Event<'_>) {
        let line = match event {
            Event::Note(note) => format!("note {note}"),
            Event::PhaseStarted { phase, total, .. } => format!("start {} {total}", phase.name()),
            Event::ChoiceFinished { label, status, .. } => format!("finished {label} {status}"),
            Event::PhaseEnded => "end".to_owned(),
            _ => "other".to_owned(),
        };
        self.0.lock().unwrap().push(line);
    }
}

/// Asks for one choice at a time, from the last but one down, and stops after the first `ok` it is told
/// about: an adaptive loop, one round per choice.
#[derive(Default)]
struct UntilFirstOk {
    asked: Vec<usize>,
    told: Vec<(usize, Status)>,
}

impl Strategy for UntilFirstOk {
    fn name(&self) -> &str {
        "until-first-ok"
    }

    fn ask(&mut self, space: &SearchSpace, _n: usize) -> Vec<usize> {
        if self.told.iter().any(|(_, s)| *s == Status::Ok) || self.asked.len() + 1 >= space.len() {
            return Vec::new();
        }
        let next = space.len() - 2 - self.asked.len();
        self.asked.push(next);
        vec![next]
    }

    fn tell(&mut self, index: usize, result: &ChoiceResult) {
        self.told.push((index, result.status));
    }
}

fn options(dir: &std::path::Path) -> TuneOptions {
    TuneOptions {
        workers: 1,
        timeout: None,
        max_process_uses: Some(1),
        worker: Some(worker_exe().to_owned()),
        json: None,
        csv: None,
        cache: CacheMode::Path(dir.join("results.jsonl")),
        fresh: false,
        selection: Selection {
            strategy: "brute-force".into(),
            budget: None,
            seed: 0,
        },
        max_time: None,
        refine: None,
        shard: None,
        rounds: 0,
        race: None,
        warm_windows: true,
    }
}

fn setup() -> tempfile::TempDir {
    // SAFETY: set once, before any worker starts; every test sets the same values. The runs
    // see no interference (an empty /proc/stat: conditions unknown), so that what they cache
    // does not depend on what else this machine runs.
    unsafe {
        std::env::set_var("TUNEBOX_CACHE_DIR", cache_root());
        std::env::set_var("TUNEBOX_PROC_STAT", "/dev/null");
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scale.c"), KERNEL).unwrap();
    std::fs::write(dir.path().join("m.toml"), MANIFEST).unwrap();
    dir
}

#[test]
fn a_whole_run_through_the_library() {
    let dir = setup();
    let options = options(dir.path());
    let recorder = Recorder::default();
    let report = tunebox_tune::tune(
        &dir.path().join("m.toml"),
        &options,
        &recorder,
        &Stop::new(),
    )
    .unwrap();
    let statuses: Vec<(String, Status)> = report
        .results
        .iter()
        .map(|r| (r.choice.label(), r.status))
        .collect();
    // Ranked: the three correct ones first (in some order), the wrong one last.
    assert_eq!(statuses.len(), 4, "{statuses:?}");
    assert_eq!(
        statuses[3],
        ("SCALE=3".to_owned(), Status::Wrong),
        "{statuses:?}"
    );
    assert!(
        statuses[..3].iter().all(|(_, s)| *s == Status::Ok),
        "{statuses:?}"
    );
    let events = recorder.0.into_inner().unwrap();
    assert!(
        events.contains(&"start benchmarking 4".to_owned()),
        "{events:?}"
    );
    assert_eq!(
        events.iter().filter(|e| e.starts_with("finished")).count(),
        4
    );
    // The results cache has them: a second run measures nothing.
    let again =
        tunebox_tune::tune(&dir.path().join("m.toml"), &options, &(), &Stop::new()).unwrap();
    assert_eq!(again.info.cache.as_ref().map(|c| c.hits), Some(4));
    assert!(again.results.iter().all(|r| r.cached));
    // The JSON and CSV formats are the library's.
    let json = dir.path().join("r.json");
    tunebox_tune::write_json(&again, &json).unwrap();
    assert_eq!(
        tunebox_tune::load_reports(&json).unwrap()[0].results.len(),
        4
    );
}

#[test]
fn a_strategy_of_our_own_is_asked_and_told_round_by_round() {
    let dir = setup();
    let mut options = options(dir.path());
    options.cache = CacheMode::Off;
    let manifest = tunebox_tune::Manifest::load(&dir.path().join("m.toml"), "cc").unwrap();
    let plan = Plan::new(manifest, Box::new(UntilFirstOk::default()), None).unwrap();
    assert_eq!(plan.selected(), [2]);
    let report = tunebox_tune::run(plan, &options, &(), &Stop::new()).unwrap();
    // SCALE=3 (index 2) is wrong, so a second round asks for SCALE=2, which is ok: done.
    let measured: Vec<(String, Status)> = report
        .results
        .iter()
        .map(|r| (r.choice.label(), r.status))
        .collect();
    assert_eq!(
        measured,
        [
            ("SCALE=2".to_owned(), Status::Ok),
            ("SCALE=3".to_owned(), Status::Wrong)
        ]
    );
}

#[test]
fn errors_name_the_stage() {
    let dir = setup();
    std::fs::write(dir.path().join("m.toml"), "timeout_s = \"x\"").unwrap();
    let e = tunebox_tune::tune(
        &dir.path().join("m.toml"),
        &options(dir.path()),
        &(),
        &Stop::new(),
    )
    .unwrap_err();
    assert!(
        matches!(e, tunebox_tune::TuneError::Manifest { .. }),
        "{e:?}"
    );
    let dir = setup();
    let mut options = options(dir.path());
    options.json = Some(dir.path().join("missing/r.json"));
    let e =
        tunebox_tune::tune(&dir.path().join("m.toml"), &options, &(), &Stop::new()).unwrap_err();
    assert!(
        matches!(e, tunebox_tune::TuneError::Options { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("does not exist"), "{e}");
}

/// The manifest of [`MANIFEST`], built in code.
fn built(dir: &std::path::Path) -> tunebox_tune::Manifest {
    tunebox_tune::Manifest::builder("scale")
        .dir(dir)
        .c_source("scale.c", KERNEL, "scale")
        .flags(["-O2"])
        .compiler("cc")
        .timeout(std::time::Duration::from_secs(30))
        .tensor(TensorSpec::new("x", DType::F32, [256]).random(0))
        .tensor(TensorSpec::new("y", DType::F32, [256]).output())
        .scalar("n", 256)
        .param("SCALE", [1, 2, 3, 4])
        .timing(
            TimingConfig::default()
                .warmup_ms(1.0)
                .rep_ms(2.0)
                .flush_cache(false),
        )
        .verify_against_choice([("SCALE", 1)])
        .build()
        .unwrap()
}

fn statuses(report: &tunebox_tune::Report) -> Vec<(String, Status)> {
    let mut statuses: Vec<(String, Status)> = report
        .results
        .iter()
        .map(|r| (r.choice.label(), r.status))
        .collect();
    statuses.sort_by(|a, b| a.0.cmp(&b.0));
    statuses
}

/// Each choice's error, for an assertion's message.
fn errors(report: &tunebox_tune::Report) -> Vec<(String, Option<&str>)> {
    report
        .results
        .iter()
        .map(|r| (r.choice.label(), r.error.as_deref()))
        .collect()
}

#[test]
fn a_manifest_built_in_code_runs_as_its_toml_does() {
    let dir = setup();
    let mut options = options(dir.path());
    // CC may name another compiler: both manifests name `cc`.
    std::fs::write(
        dir.path().join("m.toml"),
        MANIFEST.replace("flags = [\"-O2\"]", "flags = [\"-O2\"]\ncompiler = \"cc\""),
    )
    .unwrap();
    let from_toml =
        tunebox_tune::tune(&dir.path().join("m.toml"), &options, &(), &Stop::new()).unwrap();
    // The built manifest is the same manifest: the same space, measured the same way, so the
    // results cache answers every choice of it.
    let plan = Plan::new(built(dir.path()), Box::new(BruteForce::new()), None).unwrap();
    let from_code = tunebox_tune::run(plan, &options, &(), &Stop::new()).unwrap();
    assert_eq!(
        from_code.info.header.manifest_hash,
        from_toml.info.header.manifest_hash
    );
    assert_eq!(from_code.info.cache.as_ref().map(|c| c.hits), Some(4));
    assert_eq!(statuses(&from_code), statuses(&from_toml));
    // Measured afresh, it gives the same statuses.
    options.cache = CacheMode::Off;
    let plan = Plan::new(built(dir.path()), Box::new(BruteForce::new()), None).unwrap();
    let fresh = tunebox_tune::run(plan, &options, &(), &Stop::new()).unwrap();
    assert_eq!(
        statuses(&fresh),
        statuses(&from_toml),
        "{:?}\n{:?}",
        errors(&fresh),
        errors(&from_toml)
    );
    assert!(fresh.results.iter().all(|r| !r.cached));
}

#[test]
fn the_stages_one_by_one() {
    let dir = setup();
    let plan = Plan::new(built(dir.path()), Box::new(BruteForce::new()), None).unwrap();
    let (manifest, space) = (plan.manifest(), plan.space());
    let setup = Setup::new(manifest, "test-cpu", None, Some(1));
    let stop = Stop::new();

    // Cached lookup, with nothing cached: all four are to do.
    let cache = ResultsCache::load(&dir.path().join("results.jsonl"), false).unwrap();
    let lookup = tunebox_tune::lookup_cached(&setup, space, &[0, 1, 2, 3], Some(&cache));
    assert_eq!((lookup.hits, lookup.todo.len()), (0, 4));

    // Compile: each C choice into the kernel cache.
    for todo in &lookup.todo {
        let compiled = tunebox_tune::compile(&setup, todo, &stop).unwrap();
        assert!(matches!(compiled, Compiled::Ready { .. }), "{compiled:?}");
    }

    // The reference (SCALE=1) runs once: y = 2 x.
    let outputs = tunebox_tune::reference(&setup, Some(worker_exe()), &(), &stop)
        .unwrap()
        .expect("the manifest verifies");
    // Its outputs, then its outputs on fresh inputs (docs/sandbox.md).
    assert_eq!(outputs.len(), 2);
    assert_eq!(outputs[0].name, "y");
    assert_eq!(outputs[1].name, "y");
    assert_ne!(
        outputs[0].bytes, outputs[1].bytes,
        "other inputs, other outputs"
    );
    let y: Vec<f32> = outputs[0]
        .bytes
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(y.len(), 256);
    // x is uniform in [-1, 1): y in [-2, 2), and not all zero.
    assert!(y.iter().all(|v| (-2.0..2.0).contains(v)), "{y:?}");
    assert!(y.iter().any(|v| *v != 0.0), "{y:?}");

    // Measure, judged by the reference: SCALE=3 is wrong.
    let results = tunebox_tune::measure(
        &setup,
        &lookup.todo,
        Some(&outputs),
        2,
        Some(worker_exe()),
        &(),
        &stop,
    )
    .unwrap();
    let statuses: Vec<(usize, Status)> = results.iter().map(|r| (r.index, r.status)).collect();
    assert_eq!(
        statuses,
        [
            (0, Status::Ok),
            (1, Status::Ok),
            (2, Status::Wrong),
            (3, Status::Ok)
        ]
    );

    // Refine: the fastest ok ones first, never the wrong one.
    let order = tunebox_tune::refine_order(&results, 2);
    assert_eq!(order.len(), 2);
    assert!(order.iter().all(|&p| results[p].status == Status::Ok));
    assert!(results[order[0]].median_ms() <= results[order[1]].median_ms());
}

/// Asks for one choice at a time, in canonical order.
#[derive(Default)]
struct OneByOne(usize);

impl Strategy for OneByOne {
    fn name(&self) -> &str {
        "one-by-one"
    }

    fn ask(&mut self, space: &SearchSpace, _n: usize) -> Vec<usize> {
        if self.0 >= space.len() {
            return Vec::new();
        }
        self.0 += 1;
        vec![self.0 - 1]
    }
}

/// Asks the run to stop once a choice has finished.
#[derive(Default)]
struct StopAfterOne(std::sync::atomic::AtomicBool);

impl Observer for StopAfterOne {
    fn on_event(&self, event: Event<'_>) {
        if matches!(event, Event::ChoiceFinished { .. }) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn should_stop(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[test]
fn an_observer_stops_the_run_and_what_was_never_asked_for_is_not_measured() {
    let dir = setup();
    let mut options = options(dir.path());
    options.cache = CacheMode::Off;
    let plan = Plan::new(built(dir.path()), Box::new(OneByOne::default()), None).unwrap();
    let report = tunebox_tune::run(plan, &options, &StopAfterOne::default(), &Stop::new()).unwrap();
    assert!(report.info.interrupted);
    let measured: Vec<usize> = report.results.iter().map(|r| r.index).collect();
    assert_eq!(measured, [0]);
    let not_measured: Vec<(usize, &str)> = report
        .info
        .not_measured
        .iter()
        .map(|n| (n.index, n.reason.as_str()))
        .collect();
    assert_eq!(
        not_measured,
        [(1, "interrupted"), (2, "interrupted"), (3, "interrupted")]
    );
}

/// The public stages are the run's code path: `measure` (the pipeline without its compile
/// threads) gives what the run gives for the same choices, and the run's results cache answers
/// a lookup with the run's results.
#[test]
fn measure_and_the_run_give_the_same_results() {
    let dir = setup();
    // Fixed reps, so that both measure the same number of calls.
    let fixed = MANIFEST.replace("rep_ms = 2\n", "rep_ms = 2\nmin_reps = 5\nmax_reps = 5\n");
    std::fs::write(dir.path().join("m.toml"), fixed).unwrap();
    let manifest_path = dir.path().join("m.toml");
    let options = options(dir.path());
    let report = tunebox_tune::tune(&manifest_path, &options, &(), &Stop::new()).unwrap();
    let mut by_run: Vec<&ChoiceResult> = report.results.iter().collect();
    by_run.sort_by_key(|r| r.index);

    let plan = tunebox_tune::plan(&manifest_path, &options.selection, None).unwrap();
    let setup = Setup::new(plan.manifest(), &report.info.header.device, None, Some(1));
    let all: Vec<usize> = (0..plan.space().len()).collect();
    let stop = Stop::new();
    // The run's cache answers every choice, with the run's results.
    let cache = ResultsCache::load(&dir.path().join("results.jsonl"), false).unwrap();
    let hits = tunebox_tune::lookup_cached(&setup, plan.space(), &all, Some(&cache));
    assert_eq!((hits.hits, hits.todo.len()), (4, 0));
    for (hit, run) in hits.done.iter().zip(&by_run) {
        assert_eq!((hit.index, hit.status), (run.index, run.status));
        assert_eq!(hit.median_ms(), run.median_ms());
        // (Ties are the report's: a choice's tie depends on the others of the run.)
        let windows = |r: &ChoiceResult| {
            r.windows
                .as_ref()
                .map(|w| (w.medians_ms.clone(), w.interval_ms))
        };
        assert_eq!(windows(hit), windows(run));
    }
    // `measure` on the same choices: the same statuses, reps, checks and windows' shape.
    let lookup = tunebox_tune::lookup_cached(&setup, plan.space(), &all, None);
    for todo in &lookup.todo {
        tunebox_tune::compile(&setup, todo, &stop).unwrap();
    }
    let outputs = tunebox_tune::reference(&setup, Some(worker_exe()), &(), &stop).unwrap();
    let measured = tunebox_tune::measure(
        &setup,
        &lookup.todo,
        outputs.as_deref(),
        1,
        Some(worker_exe()),
        &(),
        &stop,
    )
    .unwrap();
    assert_eq!(measured.len(), by_run.len());
    for (m, run) in measured.iter().zip(&by_run) {
        assert_eq!((m.index, m.status), (run.index, run.status), "{m:?}");
        assert_eq!(
            m.stats.as_ref().map(|s| s.reps),
            run.stats.as_ref().map(|s| s.reps)
        );
        assert_eq!(
            m.check.map(|c| c.mismatches),
            run.check.map(|c| c.mismatches)
        );
        assert_eq!(
            m.windows.as_ref().map(|w| w.medians_ms.len()),
            run.windows.as_ref().map(|w| w.medians_ms.len())
        );
    }
}

/// Asks for one choice at a time in index order, taking `.1` of wall time over every ask after
/// the first (the plan's).
struct Slow(usize, std::time::Duration);

impl Strategy for Slow {
    fn name(&self) -> &str {
        "slow"
    }

    fn ask(&mut self, space: &SearchSpace, _n: usize) -> Vec<usize> {
        if self.0 > 0 {
            std::thread::sleep(self.1);
        }
        if self.0 >= space.len() {
            return Vec::new();
        }
        self.0 += 1;
        vec![self.0 - 1]
    }
}

#[test]
fn the_strategys_own_time_is_on_the_runs_clock() {
    let dir = setup();
    let mut options = options(dir.path());
    options.cache = CacheMode::Off;
    // Measuring the 4 choices takes well under 1.5 s; the strategy's 0.8 s an ask does not fit
    // 4 times, and --max-time counts it (as Kernel Tuner's time_limit counts its strategies).
    options.max_time = Some(std::time::Duration::from_secs_f64(1.5));
    let manifest = tunebox_tune::Manifest::load(&dir.path().join("m.toml"), "cc").unwrap();
    let slow = Slow(0, std::time::Duration::from_millis(800));
    let plan = Plan::new(manifest, Box::new(slow), None).unwrap();
    let report = tunebox_tune::run(plan, &options, &(), &Stop::new()).unwrap();
    assert!(report.results.len() < 4, "{:?}", report.results.len());
    assert!(!report.info.not_measured.is_empty());
    assert!(
        report
            .info
            .not_measured
            .iter()
            .all(|n| n.reason == "max_time"),
        "{:?}",
        report.info.not_measured
    );
}

/// Asks the run to stop at its `n`-th poll once the rounds have started (the note that says
/// so): a run interrupted during its rounds, deterministically.
struct StopInRounds {
    started: std::sync::atomic::AtomicBool,
    polls: std::sync::atomic::AtomicUsize,
    n: usize,
}

impl Observer for StopInRounds {
    fn on_event(&self, event: Event<'_>) {
        if let Event::Note(note) = event
            && note.contains("rounds of short windows")
        {
            self.started
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn should_stop(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.started.load(SeqCst) && self.polls.fetch_add(1, SeqCst) + 1 >= self.n
    }
}

/// The windows an uninterrupted run gives an `ok` result with `rounds` rounds: one per round
/// after the screening window, or fewer when two windows agreed (confirmed early).
fn has_its_rounds(r: &ChoiceResult, rounds: usize) -> bool {
    let w = r.windows.as_ref().expect("an ok result has windows");
    w.medians_ms.len() == 1 + rounds || (w.medians_ms.len() >= 2 && w.confirmed())
}

/// The last line of each key of a results cache: (`windows_complete`, windows).
fn last_lines(path: &std::path::Path) -> std::collections::HashMap<String, (Value, usize)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            let windows = v["result"]["windows"]["medians_ms"]
                .as_array()
                .map_or(0, Vec::len);
            (
                v["key"].as_str().unwrap().to_owned(),
                (v["windows_complete"].clone(), windows),
            )
        })
        .collect()
}

/// A run interrupted during its rounds says what it left; run again, it gives the choices cut
/// short the rest of their rounds (not their screening window as final), so that it ends with
/// the windows of an uninterrupted run, and its cache says every choice is complete.
#[test]
fn a_run_interrupted_in_its_rounds_resumes_them() {
    let dir = setup();
    // Three correct choices: none can settle at screening (a choice settles after two windows
    // at the earliest), so each gets every round, two agreeing windows, or, once all three were
    // measured twice in one run, two windows and a settling (`conditions.settled`).
    let manifest = MANIFEST.replace("SCALE = [1, 2, 3, 4]", "SCALE = [1, 2, 4]");
    std::fs::write(dir.path().join("m.toml"), manifest).unwrap();
    let mut options = options(dir.path());
    options.rounds = 2;
    options.race = Some(std::time::Duration::ZERO);
    let cache = dir.path().join("results.jsonl");
    // Stopped after one window of the first round (the round's poll, the window's, the next).
    let stop_in_rounds = StopInRounds {
        started: Default::default(),
        polls: Default::default(),
        n: 3,
    };
    let first = tunebox_tune::tune(
        &dir.path().join("m.toml"),
        &options,
        &stop_in_rounds,
        &Stop::new(),
    )
    .unwrap();
    assert!(first.info.interrupted);
    assert!(first.info.not_measured.is_empty(), "{:?}", first.info);
    assert_eq!(first.results.len(), 3);
    let cut: Vec<usize> = first.info.unfinished.iter().map(|n| n.index).collect();
    assert!(cut.len() >= 2, "two choices had no round's window: {cut:?}");
    assert!(
        first
            .info
            .unfinished
            .iter()
            .all(|n| n.reason == "interrupted"),
        "{:?}",
        first.info.unfinished
    );
    for r in &first.results {
        assert_eq!(
            cut.contains(&r.index),
            !has_its_rounds(r, 2),
            "{}: {:?}",
            r.choice.label(),
            r.windows
        );
    }
    // The cache says which lines are not complete.
    let lines = last_lines(&cache);
    let incomplete = lines
        .values()
        .filter(|(complete, _)| *complete == Value::Bool(false))
        .count();
    assert_eq!(incomplete, cut.len(), "{lines:?}");

    let resumed =
        tunebox_tune::tune(&dir.path().join("m.toml"), &options, &(), &Stop::new()).unwrap();
    assert!(!resumed.info.interrupted);
    assert!(resumed.info.unfinished.is_empty());
    assert_eq!(resumed.results.len(), 3);
    let settled = resumed.info.conditions.as_ref().map_or(0, |c| c.settled);
    for r in &resumed.results {
        assert_eq!(r.status, Status::Ok, "{}", r.choice.label());
        let windows = r.windows.as_ref().map_or(0, |w| w.medians_ms.len());
        assert!(
            has_its_rounds(r, 2) || (settled > 0 && windows == 2),
            "{}: {:?}",
            r.choice.label(),
            r.windows
        );
        // Those cut short were measured on; the complete one came from the cache.
        assert_eq!(r.cached, !cut.contains(&r.index), "{}", r.choice.label());
    }
    assert_eq!(
        resumed.info.cache.as_ref().map(|c| c.hits),
        Some(3 - cut.len())
    );
    let lines = last_lines(&cache);
    assert!(
        lines
            .values()
            .all(|(complete, windows)| *complete == Value::Bool(true) && *windows >= 2),
        "{lines:?}"
    );
    // A third run takes everything from the cache, as it would after an uninterrupted run:
    // each choice's windows as the resumed run left them (a settled one's two included).
    let third =
        tunebox_tune::tune(&dir.path().join("m.toml"), &options, &(), &Stop::new()).unwrap();
    assert_eq!(third.info.cache.as_ref().map(|c| c.hits), Some(3));
    let medians = |r: &ChoiceResult| r.windows.as_ref().map(|w| w.medians_ms.clone());
    for r in &third.results {
        let before = resumed.results.iter().find(|b| b.index == r.index).unwrap();
        assert_eq!(medians(r), medians(before), "{}", r.choice.label());
    }
}

/// What a run measures is its plan's: a shard given to `Plan::new` (the options saying none)
/// is the shard the report's header names and the default results cache is named after.
#[test]
fn a_plans_shard_names_the_header_and_the_cache() {
    let dir = setup();
    let shard = tunebox_tune::ShardInfo { index: 1, count: 2 };
    let manifest = tunebox_tune::Manifest::load(&dir.path().join("m.toml"), "cc").unwrap();
    let plan = Plan::new(manifest, Box::new(BruteForce::new()), Some(shard)).unwrap();
    assert_eq!(plan.selected().len(), 2, "every other choice of four");
    let options = TuneOptions {
        cache: CacheMode::Default,
        ..options(dir.path())
    };
    assert_eq!(options.shard, None);
    let report = tunebox_tune::run(plan, &options, &(), &Stop::new()).unwrap();
    assert_eq!(report.info.header.shard, Some(shard));
    let cache = report.info.cache.expect("a results cache");
    assert!(
        cache.path.ends_with("m.shard-1-of-2.tunebox-cache.jsonl"),
        "{}",
        cache.path
    );
    assert_eq!(report.results.len(), 2);
}

/// An unknown strategy name is an error that lists the known ones, never a silent brute force.
#[test]
fn an_unknown_strategy_is_an_error_naming_the_known_ones() {
    let dir = setup();
    let options = TuneOptions {
        cache: CacheMode::Off,
        ..options(dir.path())
    }
    .strategy("gentic")
    .budget(2);
    let e =
        tunebox_tune::tune(&dir.path().join("m.toml"), &options, &(), &Stop::new()).unwrap_err();
    assert!(
        matches!(e, tunebox_tune::TuneError::Options { .. }),
        "{e:?}"
    );
    let listed = tunebox_tune::strategies::NAMES.join(", ");
    assert_eq!(
        e.to_string(),
        format!("unknown strategy `gentic`: use one of {listed}")
    );
}
