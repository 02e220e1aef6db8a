//! A whole tuning run through the `tunebox-tune` library, outside the CLI: a small C kernel
//! family, measured by the test worker binary, observed, with a strategy of our own.

use std::sync::Mutex;

use tunebox_pool::Status;
use tunebox_tune::{
    CacheMode, ChoiceResult, Event, Observer, Plan, SearchSpace, Selection, Stop, Strategy,
    TuneOptions,
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
        manifest: dir.join("m.toml"),
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
    }
}

fn setup() -> tempfile::TempDir {
    // SAFETY: set once, before any worker starts; every test sets the same value.
    unsafe { std::env::set_var("TUNEBOX_CACHE_DIR", cache_root()) };
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
    let report = tunebox_tune::tune(&options, &recorder, &Stop::new()).unwrap();
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
    let again = tunebox_tune::tune(&options, &(), &Stop::new()).unwrap();
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
    let manifest = tunebox_tune::Manifest::load(&options.manifest, "cc").unwrap();
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
    let e = tunebox_tune::tune(&options(dir.path()), &(), &Stop::new()).unwrap_err();
    assert!(matches!(e, tunebox_tune::Error::Manifest { .. }), "{e:?}");
    let dir = setup();
    let mut options = options(dir.path());
    options.json = Some(dir.path().join("missing/r.json"));
    let e = tunebox_tune::tune(&options, &(), &Stop::new()).unwrap_err();
    assert!(matches!(e, tunebox_tune::Error::Options { .. }), "{e:?}");
    assert!(e.to_string().contains("does not exist"), "{e}");
}
