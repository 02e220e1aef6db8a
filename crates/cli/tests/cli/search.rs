//! `tunebox tune --count`, `--replay` and the adaptive strategies, on the FAIR Benchmark Hub's
//! convolution kernel (its T1 file and a Kernel Tuner cache file recorded on an A100).

use std::path::PathBuf;

use crate::util::tunebox;

fn hub() -> PathBuf {
    let hub = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/benchmark_hub");
    assert!(
        hub.join("README.md").is_file(),
        "the FAIR Benchmark Hub data is missing at {}",
        hub.display()
    );
    hub
}

#[test]
fn count_prints_valid_and_raw_choices() {
    let dir = tempfile::tempdir().unwrap();
    let t1 = hub().join("kernels/convolution_milo.json");
    let out = tunebox(dir.path(), &["tune", t1.to_str().unwrap(), "--count"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "4362 valid choices (10240 before restrictions)\n"
    );
}

#[test]
fn replay_ranks_simulated_measurements_and_reports_the_simulated_time() {
    let dir = tempfile::tempdir().unwrap();
    let t1 = hub().join("kernels/convolution_milo.json");
    let cache = hub().join("cachefiles/convolution_milo/A100.json.gz");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "tune",
            t1.to_str().unwrap(),
            "--replay",
            cache.to_str().unwrap(),
            "--top",
            "3",
            "-q",
        ];
        args.extend(extra);
        let out = tunebox(dir.path(), &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let all = run(&[]);
    assert!(all.contains("replayed 4362 measurements"), "{all}");
    // The recorded best (Python: min of `time` over the cache), in µs as the table prints it.
    assert!(all.contains("best 553.6 µs"), "{all}");
    let ils = run(&["--strategy", "ils", "--budget", "50", "--seed", "3"]);
    assert!(ils.contains("replayed 50 measurements"), "{ils}");
    // The same choices and results; only the strategy's own (wall) time may differ, and the
    // simulated time that counts it (the lines that print it: a busy machine moves its tenths).
    let own = |s: &str| {
        s.lines()
            .filter(|l| !l.contains("simulated time") && !l.contains(" ok) in "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        own(&ils),
        own(&run(&[
            "--strategy",
            "ils",
            "--budget",
            "50",
            "--seed",
            "3"
        ]))
    );
    let timed = run(&["--strategy", "bayes", "--budget", "500", "--max-time", "60"]);
    let seconds: f64 = timed
        .split("simulated time ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{timed}"));
    // The measurement that crosses 60 s still counts; none of this space's costs a minute.
    assert!((60.0..120.0).contains(&seconds), "{timed}");
}

#[test]
fn adaptive_strategies_need_a_budget() {
    let dir = tempfile::tempdir().unwrap();
    let t1 = hub().join("kernels/convolution_milo.json");
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            t1.to_str().unwrap(),
            "--count",
            "--strategy",
            "genetic",
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--strategy genetic needs --budget N"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn auto_proposes_as_many_choices_at_once_as_there_are_workers() {
    let dir = tempfile::tempdir().unwrap();
    let t1 = hub().join("kernels/convolution_milo.json");
    let first = |workers: &str| {
        let out = tunebox(
            dir.path(),
            &[
                "tune",
                t1.to_str().unwrap(),
                "--list",
                "--strategy",
                "auto",
                "--budget",
                "20",
                "--workers",
                workers,
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    // `--list` prints the first proposals: one at a time for one worker, a batch for four.
    assert_eq!(first("1"), 1);
    assert_eq!(first("4"), 4);
}
