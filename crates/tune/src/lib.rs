//! The tunebox tuning engine: everything that makes a tuning run, as a library.
//!
//! `tunebox tune` is one thin client of this crate (argument parsing, progress bars, the
//! table); a downstream tool (an ML compiler, a service, a driver of its own) gets the same
//! manifests, search spaces, strategies, results cache, JSON/CSV formats and reports.
//!
//! # The life of a run
//!
//! [`tune`] (and [`run`], for a [`Plan`] of one's own) runs these stages in order; each is a
//! public function or type of its own, with its own tests, for a tool that drives a run itself.
//!
//! 1. **Plan** ([`plan`], or [`Manifest::load`] / [`Manifest::builder`] + [`Plan::new`]):
//!    read (or build in code) and check the manifest, build the [`SearchSpace`] (every choice
//!    that satisfies the restrictions, each with a stable index), and ask the [`Strategy`] for
//!    its first choices, keeping this shard's.
//! 2. **Cached lookup** ([`lookup_cached`], over a [`Setup`] and a [`ResultsCache`]): each
//!    choice's request and key (source, headers, flags, compiler, device, timing, …); what
//!    the results cache holds is taken from it ([`Lookup::done`]), the rest is a [`Todo`].
//! 3. **Compile** ([`compile()`]): a C choice compiles in the parent into the kernel cache; one
//!    that does not compile is a `compile_error` result ([`Compiled::Failed`]). CUDA choices
//!    compile in their workers.
//! 4. **Reference** ([`reference()`]): when the manifest verifies against a kernel, it runs
//!    once, alone, and its outputs are what every choice is judged by.
//! 5. **Measure** ([`measure()`], on its own): the pool
//!    ([`tunebox_pool::TuningProcessPool`]) measures the compiled choices one at a time in
//!    canonical order while the rest still compile (on the cores the workers leave); each result is verified, cached as it finishes, reported to the
//!    [`Observer`], and told to the strategy, which is asked again until it has no more.
//! 6. **Refine** ([`refine_order`]): optionally, the best `refine` choices are measured again
//!    with 4× the reps, and ranked by that.
//! 7. **Report**: a ranked [`Report`]: [`write_json`], [`write_csv`], [`load_reports`],
//!    [`merge`] for shards.
//!
//! A choice that fails (does not compile, crashes, hangs, computes garbage) is a result with
//! its status, never a [`TuneError`]. A [`Stop`] raised from any thread, or an [`Observer`] whose
//! [`Observer::should_stop`] answers `true`, ends the run early with the results so far; the
//! report lists the rest, those the strategy had yet to ask for included, as [`NotMeasured`].
//!
//! # Example
//!
//! Tune a small C kernel family built in code: the workers are `tunebox-worker` (any binary
//! that calls `tunebox_worker::run_if_worker` serves). It needs that binary and a C compiler,
//! so it is not run here; `tests/tune.rs` of the workspace runs the same manifest
//! (`a_manifest_built_in_code_runs_as_its_toml_does`) and each stage by hand
//! (`the_stages_one_by_one`).
//!
//! ```no_run
//! use tunebox_protocol::{DType, TensorSpec};
//! use tunebox_tune::{BruteForce, CacheMode, Manifest, Plan, Stop, TuneOptions};
//!
//! let manifest = Manifest::builder("scale")
//!     .c_source("scale.c", r#"
//!         #include <stdint.h>
//!         void scale(const float *x, float *y, int64_t n) {
//!             for (int64_t i = 0; i < n; i += UNROLL)
//!                 for (int k = 0; k < UNROLL && i + k < n; k++) y[i + k] = 2.0f * x[i + k];
//!         }"#, "scale")
//!     .tensor(TensorSpec::new("x", DType::F32, [4096]).random(0))
//!     .tensor(TensorSpec::new("y", DType::F32, [4096]).output())
//!     .scalar("n", 4096)
//!     .param("UNROLL", [1, 2, 4, 8])
//!     .verify_against_choice([("UNROLL", 1)])
//!     .build()?;
//! let options = TuneOptions::new()
//!     .worker("target/release/tunebox-worker")
//!     .cache(CacheMode::Off);
//! let plan = Plan::new(manifest, Box::new(BruteForce::new()), None)?;
//! // `()` ignores progress; the CLI passes its progress bars.
//! let report = tunebox_tune::run(plan, &options, &(), &Stop::new())?;
//! if let Some(best) = tunebox_tune::best(&report.results) {
//!     println!("best: {} at {:?} ms", best.choice.label(), best.median_ms());
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Besides brute force and random sampling, [`strategies`] holds adaptive searches (genetic
//! algorithm, simulated annealing, greedy iterated local search, differential evolution,
//! Bayesian optimization) behind the same trait, and [`replay`] runs any strategy on recorded
//! measurements (Kernel Tuner cache files, T4 files, results caches) in simulated time, as
//! `tunebox tune --replay` does (docs/search.md compares them).
//!
//! A manifest file reads the same way through [`tune`] (which takes its path); a
//! strategy of one's own implements [`Strategy`] and runs through [`Plan::new`] and [`run`].
#![deny(missing_docs)]

mod base;
mod manifest;
mod measure;
mod report;
mod results;
mod run;
mod search;
mod space;

pub use crate::manifest::formats;
pub use crate::search::{replay, strategies};

pub use crate::base::error::{Cause, Result, TuneError};
pub use crate::base::error_line::short_error;
pub use crate::base::observer::{Event, Observer, Phase};
pub use crate::base::shard::{
    ShardInfo, ShardSpec, parse as parse_shard, resolve as resolve_shard,
};
pub use crate::base::stop::Stop;
pub use crate::manifest::metrics::format_value;
pub use crate::manifest::objective::Objective;
pub use crate::manifest::{
    Manifest, builder::ManifestBuilder, count_file, env::WorkerEnv, files::ManifestFiles,
    load_space, source::compiler, timing::MAX_TIMEOUT_S,
};
pub use crate::measure::workers::PROBE_TIMEOUT;
pub use crate::report::compare::{BestMove, Comparison, Pair};
#[doc(hidden)]
pub use crate::report::html::synthetic::report as synthetic_report;
pub use crate::report::html::{CONTENT_SECURITY_POLICY, HtmlComparison, HtmlReport};
pub use crate::report::interchange::write_t4;
pub use crate::report::merge::merge;
pub use crate::report::ranking::{ErrorGroup, error_groups, rank_labels, ties, windowed};
pub use crate::report::{json_text, json_value, load as load_reports, write_csv, write_json};
pub use crate::results::cache::ResultsCache;
pub use crate::results::fingerprint::compiler_version;
pub use crate::results::interference::{BUSY_THRESHOLD, Conditions, STEAL_THRESHOLD};
pub use crate::results::windows::Windows;
pub use crate::results::{
    CacheInfo, Check, ChoiceResult, NotMeasured, RefineInfo, Report, RunConditions, RunHeader,
    RunInfo, Selection, best, define_line,
};
pub use crate::run::{
    Plan,
    compile::{Compiled, compile},
    lookup::{Lookup, Resumed, Setup, Todo, lookup_cached},
    measure::measure,
    options::{CacheMode, DEFAULT_RACE_LIMIT, DEFAULT_ROUNDS, TuneOptions},
    plan, plan_batched,
    reference::reference,
    refine::refine_order,
    run, tune,
};
pub use crate::search::strategy::{BruteForce, RandomSample, Strategy};
pub use crate::space::{
    Choice, SearchSpace, SpaceCount, choice_count, count_space, value::ParamValue,
};
