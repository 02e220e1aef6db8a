//! Snapshots of what people read: help texts, listings, error messages, a report's table.
//! Nothing here depends on timings. `UPDATE_EXPECT=1 cargo test -p tunebox-cli` rewrites them.

use expect_test::{Expect, expect};

use crate::util::{FAMILY, MANIFEST, examples, text, tunebox, tunebox_env};

/// The text with trailing spaces removed (clap pads blank lines of long help; expect-test
/// cannot keep whitespace-only lines).
fn trimmed(text: &str) -> String {
    text.lines()
        .map(|l| format!("{}\n", l.trim_end()))
        .collect()
}

fn stdout_of(args: &[&str], expected: Expect) {
    let dir = tempfile::tempdir().unwrap();
    let out = tunebox(dir.path(), args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    expected.assert_eq(&trimmed(&text(&out.stdout)));
}

#[test]
fn help() {
    stdout_of(
        &["--help"],
        expect![[r#"
            Benchmark kernel candidates in isolated worker processes and rank them.

            A manifest (TOML) names a kernel, its arguments and the params whose combinations are the choices; `tunebox tune` compiles every choice, measures each in a fresh worker process (a choice that crashes, hangs or computes garbage costs its own result only), verifies its outputs, and prints them ranked. See docs/manifest.md for every manifest field.

            Usage: tunebox [OPTIONS] <COMMAND>

            Commands:
              tune     Compile, benchmark and verify the choices of a manifest; print them ranked
              report   Print the ranked table of a JSON report, a results cache, a Kernel Tuner cache file or a FAIR T4 file (told apart by their content); with two files, compare them
              merge    Combine the results of shards (JSON reports or results caches) into one ranking
              doctor   Check the C compiler, the kernel cache, spawning a worker, a CPU benchmark, and the CUDA driver and NVRTC (through a worker); say how to fix what fails
              devices  List the GPUs a worker sees (name, compute capability, memory, L2, SMs, clocks, UUID), probed in a worker process: the `tunebox` process itself never loads a GPU library
              help     Print this message or the help of the given subcommand(s)

            Options:
              -v, --verbose...
                      Debug logs on stderr (-vv: trace); RUST_LOG works too

              -h, --help
                      Print help (see a summary with '-h')

              -V, --version
                      Print version

            Examples:
              tunebox tune examples/matmul-cpu.toml
              tunebox tune examples/matmul-cpu.toml --strategy random --budget 10 --refine 3
              tunebox tune big.toml --shard auto --json results/shard-$SLURM_ARRAY_TASK_ID.json
              tunebox merge results/*.json --json merged.json
              tunebox report merged.json
              tunebox doctor
        "#]],
    );
}

#[test]
fn tune_help() {
    stdout_of(
        &["tune", "--help"],
        expect![[r#"
            Compile, benchmark and verify the choices of a manifest; print them ranked

            Usage: tunebox tune [OPTIONS] <MANIFEST>

            Arguments:
              <MANIFEST>
                      The TOML manifest describing the kernel family, or a FAIR T1 file (JSON) (docs/manifest.md)

            Options:
                  --list
                      Only list the choices this run would measure (after restrictions, strategy and shard); compile and run nothing

              -v, --verbose...
                      Debug logs on stderr (-vv: trace); RUST_LOG works too

                  --count
                      Only print the number of valid choices (and of choices before restrictions); compile and run nothing

                  --replay <RECORDED>
                      Measure nothing: take every measurement from this recorded file (a Kernel Tuner cache file, `.json` or `.json.gz`; a T4 results file; a tunebox results cache) and account time as it was spent there (compile + verification + benchmark + framework time), as Kernel Tuner's simulation mode does. --max-time is then simulated time. See docs/search.md

                  --json <PATH>
                      Also write the results as JSON to this file

                  --csv <PATH>
                      Also write the results as CSV (one row per choice, a column per param and metric)

                  --t4 <PATH>
                      Also write the results as a FAIR T4 file (JSON, times in ms; docs/manifest.md, "T4 output")

                  --html <PATH>
                      Also write the report as one self-contained HTML page (figures of the ranking, each parameter's effect, the search and the measuring; nothing fetched from the network)

                  --top <N>
                      Show only the best N rows of the table (per device)

                  --errors
                      After the table, print each distinct error message whole (compiler output, the crashed worker's stderr), with the choices that gave it; the table shows its first line

                  --cache <PATH>
                      The results cache [default: the manifest's, beside it as NAME.tunebox-cache.jsonl (NAME.shard-K-of-N.tunebox-cache.jsonl for a shard), whatever --json says]

                  --no-cache
                      Neither read nor write a results cache

                  --fresh
                      Measure every choice again, ignoring the results cache (new results are still added)

                  --sandbox
                      Run the workers in a sandbox (no network, files limited to system paths, the manifest's folder, the cache and a scratch folder; seccomp; memory, task and file-size limits), as the manifest's [sandbox] table does; its allowances are set there. docs/sandbox.md

                  --workers <N>
                      Worker processes measuring in parallel. The default, 1, measures one choice at a time: concurrent CPU benchmarks share the last-level cache and memory bandwidth and perturb each other. Compilation is always parallel

                      [default: 1]

                  --timeout <SECS>
                      Per-choice timeout in seconds (overrides the manifest's `timeout_s`). It covers every call of the choice: the first call, the estimate, warmup and timed reps, and the final verification call

                  --max-process-uses <N>
                      Benchmarks a worker process runs before it is replaced (TVM's `maximum_process_uses`); 0 means unlimited. The default for C kernels, 1, gives every choice a fresh process, so that nothing a choice does to its process (floating-point modes, signal handlers, leaked threads or memory) can change the next choice's result. CUDA kernels run no host code, so their workers are kept (0; a sticky fault still replaces one): a fresh process would cost a new CUDA context per choice

                  --strategy <STRATEGY>
                      How to pick the choices: all of them, a random sample of --budget, or an adaptive search that measures --budget choices. For adaptive search pick `auto`: first of tunebox's strategies at full and quarter budgets on recorded spaces of six GPUs and two kernels, and not behind `bayes` beyond the noise with any GPU or kernel held out (docs/search.md). [default: brute-force; random with --budget]

                      Possible values:
                      - brute-force: Every choice, in canonical order
                      - auto:        The adaptive search to pick, at any budget: Bayesian optimization on ranks (failures ranked last, string params categorical, a batch for as many workers); after 64 results it takes turns with iterated local search from the best, each turn to the one that improved the best more. Not behind `bayes` in any held-out fold (docs/search.md)
                      - random:      A random sample of --budget choices (seeded by --seed), in sampled order
                      - genetic:     Genetic algorithm (Kernel Tuner's genetic_algorithm)
                      - annealing:   Simulated annealing (Kernel Tuner's simulated_annealing)
                      - ils:         Greedy iterated local search (Kernel Tuner's greedy_ils)
                      - de:          Differential evolution, best1bin (Kernel Tuner's diff_evo)
                      - bayes:       Bayesian optimization: Gaussian process, expected improvement (Kernel Tuner's bayes_opt)

                  --budget <N>
                      Measure N choices: a random sample unless --strategy names another

                  --seed <N>
                      Seed of the random sample or search (every shard of a run must use the same)

                      [default: 0]

                  --max-time <SECS>
                      Start no new choice after SECS seconds (finished ones are kept and cached; a re-run measures the rest)

                  --refine <K>
                      Re-measure the best K choices at the end with 4x rep_ms (and 4x the timeout) and rank them by that median (a quick screen, then a careful look at the candidates that matter); a choice whose re-measurement fails keeps its screening result

                  --rounds <N>
                      Rounds of short windows after screening: the manifest's reps are shared by the screening window and up to N more, in an order shuffled per round; a choice leaves the rounds once two of its windows agree within their reps' noise (or, far behind the best with no other choice near it, at screening); each choice's time is the fastest of its windows' medians, and the choices whose intervals overlap the best's are raced in more rounds. 0 measures each choice once, in one window (docs/performance.md)

                      [default: 3]

                  --race-time <SECS>
                      Seconds the race for the top may take after the rounds [default: a quarter as long as the rounds took, at most 10]

                  --fresh-windows
                      Measure every window in a fresh worker process. By default a choice's first window (where it is verified) runs in a fresh worker and its later windows (the rounds', the race's) in reused workers, which cost a window its calls rather than a process start; with --sandbox, or --max-process-uses other than 1, this is how windows are measured anyway

                  --shard <K/N|auto>
                      Measure only shard K of N (K = 0..N-1) of the choices, split round robin by their stable index; `auto` reads SLURM_ARRAY_TASK_ID/_COUNT (or _MIN/_MAX) or Kubernetes' JOB_COMPLETION_INDEX (with --shards N). The results go to --json [default: MANIFEST-STEM.shard-K-of-N.json in the current directory]; `tunebox merge` combines them

                  --shards <N>
                      The number of shards, for --shard auto: required in a Kubernetes Indexed Job (its `completions`); in a Slurm array it makes SLURM_ARRAY_TASK_ID the shard index (submit --array=0-N-1), so that failed shards can be submitted again alone (--array=3,7)

                  --env <NAME[=VALUE]>
                      Give the workers a variable of this environment (NAME), or set one (NAME=VALUE), on top of the manifest's `[env]`; repeat for more. Workers get only a documented part of the environment by default (docs/manifest.md, "[env]"); `--env '*'` passes all of it

              -q, --quiet
                      No progress on stderr

              -h, --help
                      Print help (see a summary with '-h')

              -V, --version
                      Print version

            Examples:
              tunebox tune examples/matmul-cpu.toml                  all choices, ranked
              tunebox tune examples/matmul-cpu.toml --list           the choices, nothing run
              tunebox tune m.toml --json r.json --csv r.csv          also write JSON and CSV
              tunebox tune m.toml --strategy random --budget 50      a seeded random sample of 50
              tunebox tune m.toml --strategy auto --budget 100       adaptive search, 100 choices
              tunebox tune m.toml --count                            how many choices, nothing run
              tunebox tune t1.json --replay cache.json.gz --strategy ils --budget 200
                                                                     simulate a search on recorded data
              tunebox tune m.toml --max-time 600 --refine 5          10 minutes, then the best 5 again
              tunebox tune m.toml --shard 2/8 --json shard-2.json    shard 2 of 8 (numbered from 0)
              tunebox tune m.toml --shard auto --json r-$SLURM_ARRAY_TASK_ID.json   in a Slurm array

            A re-run skips the choices its results cache already has (Ctrl-C, a kill or a lost node lose
            nothing finished); --fresh measures everything again.

            Exit status: 0 the run completed (even if choices failed); 1 an error (bad manifest or options,
            a reference that fails); 3 the run completed but some results could not be kept in the results
            cache (full or read-only file system: a re-run measures them again); 130 interrupted (Ctrl-C,
            SIGTERM).
        "#]],
    );
}

#[test]
fn list() {
    let out = tunebox(
        &examples(),
        &["tune", "--list", "matmul-cpu.toml", "--shard", "1/4"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    expect![[r#"
        BM=32 BN=64 BK=16 UNROLL=2
        BM=32 BN=64 BK=256 UNROLL=2
        BM=32 BN=512 BK=16 UNROLL=2
        BM=96 BN=64 BK=16 UNROLL=2
        BM=96 BN=64 BK=256 UNROLL=1
        BM=96 BN=64 BK=256 UNROLL=8
        BM=96 BN=512 BK=16 UNROLL=6
    "#]]
    .assert_eq(&trimmed(&text(&out.stdout)));
}

#[test]
fn errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("family.c"), FAMILY).unwrap();
    let bad = MANIFEST.replace(
        "dtype = \"f32\"\nshape = [1024]\n[[tensors]]",
        "dtype = \"f16\"\nshape = [1024]\n[[tensors]]",
    );
    std::fs::write(dir.path().join("bad.toml"), bad).unwrap();
    std::fs::write(dir.path().join("family.toml"), MANIFEST).unwrap();
    let mut all = String::new();
    for args in [
        &["tune", "bad.toml"][..],
        &["tune", "family.toml", "--shard", "4/4"],
        &["tune", "family.toml", "--shard", "auto"],
        &["tune", "family.toml", "--shards", "3"],
        &["tune", "family.toml", "--list", "--workers", "0"],
        &[
            "tune",
            "family.toml",
            "--budget",
            "3",
            "--strategy",
            "brute-force",
        ],
        &["report", "family.toml"],
    ] {
        let out = tunebox(dir.path(), args);
        assert!(!out.status.success(), "{args:?}");
        all.push_str(&format!(
            "$ tunebox {}\n{}\n",
            args.join(" "),
            text(&out.stderr)
        ));
    }
    expect![[r#"
        $ tunebox tune bad.toml
        tunebox: error: invalid manifest bad.toml: tensors[0].dtype = "f16": unknown dtype; use one of f32, f64, i32, i64, u8

        $ tunebox tune family.toml --shard 4/4
        error: invalid value '4/4' for '--shard <K/N|auto>': "4/4": shard 4 of 4 does not exist: shards are numbered from 0 to 3

        For more information, try '--help'.

        $ tunebox tune family.toml --shard auto
        tunebox: error: --shard auto: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) is set; outside a scheduler give --shard K/N

        $ tunebox tune family.toml --shards 3
        tunebox: error: --shards 3 needs --shard auto: it is the number of shards for the shard index a scheduler gives (Slurm, Kubernetes); outside a scheduler give --shard K/3

        $ tunebox tune family.toml --list --workers 0
        tunebox: error: --workers must be between 1 and 512

        $ tunebox tune family.toml --budget 3 --strategy brute-force
        tunebox: error: --budget samples choices at random; drop --strategy brute-force, or drop --budget to measure every choice

        $ tunebox report family.toml
        tunebox: error: family.toml is neither a tunebox JSON report (tune --json), a results cache (*.tunebox-cache.jsonl), a Kernel Tuner cache file nor a T4 file: expected ident at line 2 column 2

    "#]].assert_eq(&trimmed(&all));
}

/// A report as `tune --json` writes it, with every kind of row.
const REPORT: &str = r#"{
  "tunebox_version": "0.1.0",
  "manifest": "examples/matmul-cpu.toml",
  "manifest_hash": "5f0c0ffee5f0c0ffee5f0c0ffee5f0c0",
  "name": "matmul-512",
  "kernel": "matmul (kernels/matmul.c)",
  "backend": "cpu",
  "device": "AMD EPYC 7B13 (2 cores)",
  "space_size": 6,
  "selection": { "strategy": "brute-force", "seed": 0 },
  "metrics": ["GFLOP/s"],
  "elapsed_s": 12.34,
  "workers": 1,
  "refine": { "top": 1, "rep_factor": 4.0 },
  "cache": { "path": "examples/matmul-cpu.tunebox-cache.jsonl", "hits": 2 },
  "interrupted": true,
  "not_measured": [ { "index": 5, "choice": { "BM": 96, "UNROLL": 8 }, "reason": "interrupted" } ],
  "notes": ["the source ../family.c lies outside the manifest's folder"],
  "results": [
    { "index": 0, "choice": { "BM": 32, "UNROLL": 1 }, "status": "ok",
      "median_ms": 19.5, "mean_ms": 19.6, "min_ms": 19.1, "max_ms": 20.5, "p20_ms": 19.3,
      "p80_ms": 19.8, "stddev_ms": 0.3, "reps": 10, "error": null, "max_abs_error": 0.0,
      "max_rel_error": 0.0, "mismatches": 0, "metrics": { "GFLOP/s": 13.77 }, "cached": true },
    { "index": 1, "choice": { "BM": 32, "UNROLL": 4 }, "status": "wrong",
      "median_ms": 4.2, "mean_ms": 4.3, "min_ms": 4.1, "max_ms": 4.9, "p20_ms": 4.15,
      "p80_ms": 4.4, "stddev_ms": 0.1, "reps": 24,
      "error": "max abs error 2.000e0, max rel error 1.000e0, 262144 of 262144 elements differ",
      "max_abs_error": 2.0, "max_rel_error": 1.0, "mismatches": 262144 },
    { "index": 2, "choice": { "BM": 96, "UNROLL": 6 }, "status": "ok",
      "median_ms": 4.0321, "mean_ms": 4.05, "min_ms": 3.99, "max_ms": 4.3, "p20_ms": 4.01,
      "p80_ms": 4.06, "stddev_ms": 0.05, "reps": 99, "error": null, "mismatches": 0,
      "metrics": { "GFLOP/s": 66.57 }, "refined": true, "screen_median_ms": 3.9 },
    { "index": 3, "choice": { "BM": 96, "UNROLL": 1 }, "status": "compile_error",
      "median_ms": null, "mean_ms": null, "min_ms": null, "max_ms": null, "p20_ms": null,
      "p80_ms": null, "stddev_ms": null, "reps": null,
      "error": "compilation failed: `cc -O3 …`\nkernels/matmul.c:27:2: error: #error \"this choice does not compile, as intended by the test\"",
      "max_abs_error": null, "max_rel_error": null, "mismatches": null, "cached": true },
    { "index": 4, "choice": { "BM": 96, "UNROLL": 4 }, "status": "crashed",
      "median_ms": null, "mean_ms": null, "min_ms": null, "max_ms": null, "p20_ms": null,
      "p80_ms": null, "stddev_ms": null, "reps": null,
      "error": "the worker crashed: killed by signal 11 (SIGSEGV)\n--- stderr tail ---",
      "max_abs_error": null, "max_rel_error": null, "mismatches": null }
  ],
  "best": null
}
"#;

#[test]
fn report_of_a_json_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.json"), REPORT).unwrap();
    let wide = tunebox_env(dir.path(), &["report", "r.json"], &[("COLUMNS", "120")]);
    assert!(wide.status.success(), "{}", text(&wide.stderr));
    expect![[r#"
        matmul-512: matmul (kernels/matmul.c) on AMD EPYC 7B13 (2 cores)
        rank  choice             median  GFLOP/s  spread  status         error
           1  BM=96 UNROLL=6  4.032 ms*    66.57    1.2%  ok
           2  BM=32 UNROLL=1   19.50 ms    13.77    2.6%  ok
           -  BM=32 UNROLL=4   4.200 ms        -    6.0%  wrong          [1] max abs error 2.000e0, max rel error 1.000e0, 2621…
           -  BM=96 UNROLL=1          -        -       -  compile_error  [2] kernels/matmul.c:27:2: error: #error "this choice …
           -  BM=96 UNROLL=4          -        -       -  crashed        the worker crashed: killed by signal 11 (SIGSEGV)
        [1] max abs error 2.000e0, max rel error 1.000e0, 262144 of 262144 elements differ
        [2] kernels/matmul.c:27:2: error: #error "this choice does not compile, as intended by the test"
        whole error messages: run with --errors (or `tunebox report r.json --errors`); --json keeps them too

        5 choices (2 ok, 1 wrong, 1 compile_error, 1 crashed) in 12.3 s with 1 worker(s); spread = (p80 - p20) / median
        cache: 2 of them from examples/matmul-cpu.tunebox-cache.jsonl (measured earlier; --fresh re-measures)
        interrupted: 1 choice not measured; run the same command again to measure only those (finished choices are in the results cache)
        * re-measured with 4x rep_ms (--refine 1); these rank first, by the re-measured median
        note: the source ../family.c lies outside the manifest's folder
        best: BM=96 UNROLL=6 at 4.032 ms, 66.57 GFLOP/s
              -DBM=96 -DUNROLL=6
              best = { BM = 96, UNROLL = 6 }
    "#]].assert_eq(&trimmed(&text(&wide.stdout)));
    // A narrow terminal: the error column shrinks, nothing else does.
    let narrow = tunebox_env(
        dir.path(),
        &["report", "r.json", "--top", "3"],
        &[("COLUMNS", "72")],
    );
    assert!(narrow.status.success(), "{}", text(&narrow.stderr));
    expect![[r#"
        matmul-512: matmul (kernels/matmul.c) on AMD EPYC 7B13 (2 cores)
        rank  choice             median  GFLOP/s  spread  status  error
           1  BM=96 UNROLL=6  4.032 ms*    66.57    1.2%  ok
           2  BM=32 UNROLL=1   19.50 ms    13.77    2.6%  ok
           -  BM=32 UNROLL=4   4.200 ms        -    6.0%  wrong   [1] max abs err…
        … 2 more (--top shows 3)
        [1] max abs error 2.000e0, max rel error 1.000e0, 262144 of 262144 elements differ
        whole error messages: run with --errors (or `tunebox report r.json --errors`); --json keeps them too

        5 choices (2 ok, 1 wrong, 1 compile_error, 1 crashed) in 12.3 s with 1 worker(s); spread = (p80 - p20) / median
        cache: 2 of them from examples/matmul-cpu.tunebox-cache.jsonl (measured earlier; --fresh re-measures)
        interrupted: 1 choice not measured; run the same command again to measure only those (finished choices are in the results cache)
        * re-measured with 4x rep_ms (--refine 1); these rank first, by the re-measured median
        note: the source ../family.c lies outside the manifest's folder
        best: BM=96 UNROLL=6 at 4.032 ms, 66.57 GFLOP/s
              -DBM=96 -DUNROLL=6
              best = { BM = 96, UNROLL = 6 }
    "#]].assert_eq(&trimmed(&text(&narrow.stdout)));
    // The rows --top hides are in the files being written, and only those are named.
    let to_csv = tunebox(
        dir.path(),
        &["report", "r.json", "--top", "3", "--csv", "all.csv"],
    );
    assert!(to_csv.status.success(), "{}", text(&to_csv.stderr));
    assert!(
        text(&to_csv.stdout).contains("… 2 more (--top shows 3; all.csv has them all)\n"),
        "{}",
        text(&to_csv.stdout)
    );
}
