//! A synthetic report of any size, shaped like a long brute-force run: what the page of a
//! 100,000-choice report is measured on (`cargo xtask html-bench`) and what the tests check the
//! page's bounds with.

use indexmap::IndexMap;
use tunebox_pool::Status;
use tunebox_protocol::TimingStats;

use crate::results::windows::Windows;
use crate::results::{
    ChoiceResult, Report, RunConditions, RunHeader, RunInfo, Selection, rank_by_device,
};
use crate::space::{Choice, ParamValue};

/// Values of each synthetic parameter (the space is their product, cut to the size asked).
const VALUES: [(&str, &[i64]); 5] = [
    ("BLOCK_X", &[16, 32, 64, 128, 256, 512, 1024, 24, 48, 96]),
    ("BLOCK_Y", &[1, 2, 4, 8, 16, 32, 3, 6, 12, 24]),
    ("TILE", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
    ("UNROLL", &[1, 2, 4, 8, 16, 3, 5, 6, 7, 9]),
    ("VECTOR", &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512]),
];

/// A report of `choices` choices (at most 100,000) measured over about three hours: each
/// parameter's value changes the time by a factor of its own; about 6 % fail (compile errors
/// with messages of their own, crashes, timeouts); the `ok` ones were measured in two to four
/// windows, about one in ten disturbed, with the machine's speed drifting slowly through the
/// run. Seeded: the same report for the same `seed`.
pub fn report(choices: usize, seed: u64) -> Report {
    let mut rng = fastrand::Rng::with_seed(seed);
    let device = "Synthetic CPU (64 cores)";
    let start = 1.8e9;
    let run_s = 3.0 * 3600.0;
    let n = choices.min(100_000);
    let mut results = Vec::with_capacity(n);
    for index in 0..n {
        let (choice, factor) = choice(index);
        let roll = rng.f64();
        let result = match failure(roll, index) {
            Some((status, error)) => ChoiceResult::failed(index, choice, status, error, device),
            None => {
                let at = start + run_s * index as f64 / n as f64;
                measured(choice, index, 0.8 * factor, at, run_s, &mut rng, device)
            }
        };
        results.push(result);
    }
    rank_by_device(&mut results);
    let mut info = RunInfo::new(header(n, device));
    info.elapsed_s = run_s;
    info.workers = 1;
    info.conditions = Some(conditions(&results, n));
    Report { info, results }
}

/// Choice `index` of the synthetic space (its params' values in mixed radix), and the factor
/// its values change the time by: each parameter has a best value of its own, the first
/// matters most.
fn choice(index: usize) -> (Choice, f64) {
    let mut values = IndexMap::new();
    let mut factor = 1.0;
    let mut rest = index;
    for (p, (name, options)) in VALUES.iter().enumerate() {
        let k = rest % options.len();
        rest /= options.len();
        values.insert((*name).to_owned(), ParamValue::Int(options[k]));
        let distance = (k as f64 - (p + 2) as f64).abs();
        factor *= 1.0 + distance * 0.12 / (p + 1) as f64;
    }
    (Choice::new(values), factor)
}

/// How choice `index` failed, by its `roll` (0 to 1): 3 % compile errors (each with a message
/// of its own), 2 % crashes, 1 % timeouts; `None`: it was measured.
fn failure(roll: f64, index: usize) -> Option<(Status, String)> {
    if roll < 0.03 {
        Some((
            Status::CompileError,
            format!(
                "kernel.c:{}:5: error: 'tile' undeclared (first use in this function)\n\
                 kernel.c: In function 'kernel':\n",
                40 + index % 37
            ),
        ))
    } else if roll < 0.05 {
        Some((
            Status::Crashed,
            format!(
                "worker {} crashed: killed by signal 11 (SIGSEGV)",
                1000 + index
            ),
        ))
    } else if roll < 0.06 {
        Some((
            Status::Timeout,
            "timed out after 10s in the first call of the kernel (no call returned)".into(),
        ))
    } else {
        None
    }
}

/// The header of a synthetic run of `n` choices on `device`.
fn header(n: usize, device: &str) -> RunHeader {
    RunHeader {
        tunebox_version: env!("CARGO_PKG_VERSION").to_owned(),
        manifest: "synthetic.toml".into(),
        manifest_hash: "synthetic".into(),
        name: format!("synthetic-{n}"),
        kernel: "kernel (kernel.c)".into(),
        backend: "cpu".into(),
        device: device.into(),
        space_size: n,
        selection: Selection {
            strategy: "brute-force".into(),
            budget: None,
            seed: 0,
        },
        shard: None,
        metrics: Vec::new(),
        objective: None,
    }
}

/// How the windows of `results` (of `n` choices) went: their counts, a third of the disturbed
/// ones measured again, busy when more than one in ten was disturbed.
fn conditions(results: &[ChoiceResult], n: usize) -> RunConditions {
    let windows: usize = results
        .iter()
        .filter_map(|r| r.windows.as_ref())
        .map(|w| w.medians_ms.len())
        .sum();
    let disturbed: usize = results
        .iter()
        .filter_map(|r| r.windows.as_ref())
        .map(Windows::disturbed_count)
        .sum();
    RunConditions {
        rounds: 3,
        windows,
        disturbed,
        remeasured: disturbed / 3,
        raced: 12,
        settled: 0,
        settle_margin: 0.0,
        confirmed_early: n / 2,
        beside_compiles: 0,
        probe_ratio: 1.04,
        drift: 0.06,
        load: [1.1, 1.4],
        busy: disturbed * 10 > windows,
        confidence: "synthetic".into(),
        ties: 0,
    }
}

/// An `ok` result of true time `ms`, measured in 2 to 4 windows from `at` (Unix s) on, the
/// machine slowing by up to 6 % in the middle of the run and one window in ten disturbed.
fn measured(
    choice: Choice,
    index: usize,
    ms: f64,
    at: f64,
    run_s: f64,
    rng: &mut fastrand::Rng,
    device: &str,
) -> ChoiceResult {
    let count = 2 + rng.usize(0..3);
    let mut medians_ms = Vec::with_capacity(count);
    let mut ended_s = Vec::with_capacity(count);
    let mut disturbed = Vec::with_capacity(count);
    for j in 0..count {
        let ended = at + j as f64 * rng.f64() * 600.0;
        let phase = ((ended - 1.8e9) / run_s * std::f64::consts::PI).sin();
        let slowed = rng.f64() < 0.1;
        let slow = 1.0
            + 0.06 * phase.max(0.0)
            + rng.f64() * 0.02
            + if slowed { rng.f64() * 0.3 } else { 0.0 };
        medians_ms.push(ms * slow);
        ended_s.push(ended);
        disturbed.push(slowed);
    }
    // The estimate is the fastest window (as `Windows::estimate`); the interval here is the
    // fastest two, not a bootstrap: cheap for a hundred thousand choices.
    let mut sorted = medians_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let windows = Windows {
        noise: vec![0.01; count],
        worst_busy: if disturbed.contains(&true) { 0.6 } else { 0.02 },
        estimate_ms: sorted[0],
        interval_ms: [sorted[0], sorted[1]],
        remeasured: 0,
        tie: false,
        medians_ms,
        disturbed,
        ended_s,
    };
    ChoiceResult {
        stats: Some(
            TimingStats::unmeasured()
                .with_median_ms(windows.estimate_ms)
                .with_mean_ms(ms)
                .with_min_ms(ms * 0.98)
                .with_max_ms(ms * 1.3)
                .with_p20_ms(ms * 0.99)
                .with_p80_ms(ms * 1.02)
                .with_stddev_ms(ms * 0.02)
                .with_reps(20 * count as u32)
                .with_warmup_reps(2)
                .with_stopped("reps".into()),
        ),
        error: None,
        windows: Some(windows),
        ..ChoiceResult::failed(index, choice, Status::Ok, String::new(), device)
    }
}
