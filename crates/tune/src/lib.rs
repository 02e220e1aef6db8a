//! The tunebox tuning engine: everything that makes a tuning run, as a library.
//!
//! `tunebox tune` is one client of this crate; a downstream tool (an ML compiler, a service, a
//! script driver) gets the same manifests, search spaces, results cache, JSON/CSV formats and
//! reports.

mod cache;
mod fingerprint;
pub mod formats;
mod launch;
mod manifest;
mod measure;
mod merge;
mod metrics;
mod observer;
mod report;
mod results;
mod run;
mod shard;
mod space;
mod stop;
mod strategy;

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
pub use crate::run::{CacheMode, Plan, TuneOptions, compiler, plan, tune};
pub use crate::shard::{ShardSpec, parse as parse_shard, resolve as resolve_shard};
pub use crate::space::{Choice, ParamValue};
pub use crate::stop::Stop;
