//! The tunebox tuning engine: everything that makes a tuning run, as a library.
//!
//! `tunebox tune` is one thin client of this crate (argument parsing, progress bars, the
//! table); a downstream tool (an ML compiler, a service, a driver of its own) gets the same
//! manifests, search spaces, strategies, results cache, JSON/CSV formats and reports.
//!
//! # The life of a run
//!
//! 1. **Plan** ([`plan`], or [`Manifest::load`] + [`Plan::new`]): read and check the
//!    manifest, build the [`SearchSpace`] (every choice that satisfies the restrictions, each
//!    with a stable index), and ask the [`Strategy`] for its first choices, keeping this shard's.
//! 2. **Cached lookup**: a choice whose key (source, headers, flags, compiler, device,
//!    timing, …) the results cache holds is taken from it, not measured.
//! 3. **Reference**: when the manifest verifies against a kernel, it runs once, alone, and its
//!    outputs are what every choice is judged by.
//! 4. **Compile and measure**: C choices compile in the parent on the cores the workers leave
//!    while the pool ([`tunebox_pool::TuningProcessPool`]) measures those compiled before them
//!    in canonical order; CUDA choices compile in the workers. Each result is verified,
//!    cached as it finishes, reported to the [`Observer`], and told to the strategy, which
//!    is asked again until it has no more choices.
//! 5. **Refine**: optionally, the best `refine` choices are measured again with 4× the reps.
//! 6. **Report**: a ranked [`Report`]: [`write_json`], [`write_csv`], [`load_reports`],
//!    [`merge`] for shards.
//!
//! A choice that fails (does not compile, crashes, hangs, computes garbage) is a result with
//! its status, never an [`Error`]; a [`Stop`] raised from any thread ends the run early with
//! the results so far.
//!
//! # Example
//!
//! Tune a small C kernel family: the workers are `tunebox-worker` (any binary that calls
//! `tunebox_worker::run_if_worker` serves).
//!
//! ```no_run
//! use std::path::PathBuf;
//! use tunebox_tune::{CacheMode, Selection, Stop, TuneOptions};
//!
//! std::fs::write("scale.c", r#"
//!     #include <stdint.h>
//!     void scale(const float *x, float *y, int64_t n) {
//!         for (int64_t i = 0; i < n; i += UNROLL)
//!             for (int k = 0; k < UNROLL && i + k < n; k++) y[i + k] = 2.0f * x[i + k];
//!     }"#)?;
//! std::fs::write("scale.toml", r#"
//!     [kernel]
//!     source = "scale.c"
//!     entry = "scale"
//!     [[tensors]]
//!     name = "x"
//!     dtype = "f32"
//!     shape = [4096]
//!     [[tensors]]
//!     name = "y"
//!     dtype = "f32"
//!     shape = [4096]
//!     output = true
//!     [[scalars]]
//!     name = "n"
//!     value = 4096
//!     [params]
//!     UNROLL = [1, 2, 4, 8]
//!     "#)?;
//! let options = TuneOptions {
//!     manifest: PathBuf::from("scale.toml"),
//!     workers: 1,
//!     timeout: None,
//!     max_process_uses: Some(1),
//!     worker: Some(PathBuf::from("target/release/tunebox-worker")),
//!     json: None,
//!     csv: None,
//!     cache: CacheMode::Off,
//!     fresh: false,
//!     selection: Selection { strategy: "brute-force".into(), budget: None, seed: 0 },
//!     max_time: None,
//!     refine: None,
//!     shard: None,
//! };
//! // `()` ignores progress; the CLI passes its progress bars.
//! let report = tunebox_tune::tune(&options, &(), &Stop::new())?;
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
//! A strategy of one's own implements [`Strategy`] and runs through [`Plan::new`] and [`run`];
//! `tests/tune.rs` of the workspace runs both (through the test worker binary).
#![deny(missing_docs)]

mod cache;
mod community;
mod error;
mod fingerprint;
pub mod formats;
mod launch;
mod manifest;
mod measure;
mod merge;
mod metrics;
mod observer;
pub mod replay;
mod report;
mod results;
mod run;
mod shard;
mod space;
mod stop;
pub mod strategies;
mod strategy;

pub use crate::community::{t4_invalidity, to_t4, write_t4};
pub use crate::error::{Error, Result};
pub use crate::fingerprint::compiler_version;
pub use crate::manifest::{MAX_TIMEOUT_S, Manifest};
pub use crate::measure::PROBE_TIMEOUT;
pub use crate::merge::merge;
pub use crate::metrics::format_value;
pub use crate::observer::{Event, Observer, Phase};
pub use crate::report::{
    load as load_reports, short_error, short_error_line, write_csv, write_json,
};
pub use crate::results::{
    CacheInfo, Check, ChoiceResult, NotMeasured, RefineInfo, Report, RunHeader, RunInfo, Selection,
    ShardInfo, best, choices as choice_count, define_line,
};
pub use crate::run::{CacheMode, Plan, TuneOptions, compiler, cxx_compiler, plan, run, tune};
pub use crate::shard::{ShardSpec, parse as parse_shard, resolve as resolve_shard};
pub use crate::space::{Choice, ParamValue, SearchSpace, load_space};
pub use crate::stop::Stop;
pub use crate::strategy::{BruteForce, RandomSample, Strategy};
