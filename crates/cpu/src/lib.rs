//! The CPU backend of tunebox: compile C kernels into cached shared objects, load and time them.
//!
//! [`compile`] turns a [`CKernel`](tunebox_protocol::CKernel) called with a [`Signature`] into an
//! [`Artifact`]: a shared object in a content-addressed [`CacheDir`], built by the system C
//! compiler (C, or C++: [`Language`]) together with a generated trampoline that calls the
//! kernel's entry with its tensor pointers and typed scalars in the request's argument order (so
//! the compiler checks the call, and any number of arguments works). The parent
//! (`tunebox-tune`) calls it in parallel to surface compile errors early; the worker calls it
//! again and gets a cache hit. [`compile_with`] takes a [`CompileControl`]: a
//! deadline ([`DEFAULT_COMPILE_TIMEOUT`] for [`compile`]) and a cancel check, at which the
//! compiler's process group is killed and reaped. [`CpuBackend`] is the worker's
//! [`Backend`](tunebox_bench::Backend) for [`Kernel::C`](tunebox_protocol::Kernel::C) requests:
//! it loads the artifact, allocates the tensors ([`HostTensor`](tunebox_bench::HostTensor)),
//! calls the kernel once for its outputs and times it with
//! [`do_bench`](tunebox_bench::do_bench), evicting the tensors' cache lines ([`evict`]; or the
//! whole last-level cache with a [`CacheFlusher`]) before every timed rep. Compile failures are
//! [`CpuError`]s, which become [`BenchError`](tunebox_protocol::BenchError)s on the wire.
//!
//! Modules: `compile.rs` ([`compile`], [`compile_with`], [`Artifact`], [`CompileControl`], the
//! cache key), `trampoline.rs` ([`Signature`], the generated call), `depfile.rs` (the compiler's
//! `-MD` dependency list and the header digests that key an artifact's variant),
//! `toolchain.rs` (the compiler command split as a shell splits `CC`, [`Language`],
//! [`compiler_version`], the host CPU, command lines and logs), `subprocess.rs` (a compiler run
//! under a deadline, its output bounded), `cache.rs` ([`CacheDir`]), `backend.rs`
//! ([`CpuBackend`]), `flush.rs` ([`evict`], [`CacheFlusher`]), `error.rs` ([`CpuError`]).
//!
//! # Example
//!
//! ```
//! use tunebox_bench::Backend;
//! use tunebox_cpu::{CacheDir, CpuBackend};
//! use tunebox_protocol::{BenchmarkRequest, CKernel, DType, TensorSpec, TimingConfig};
//!
//! const SCALE: &str = "#include <stdint.h>
//! void scale(const float *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = FACTOR * x[i]; }";
//! let request = BenchmarkRequest::new(CKernel::new(SCALE, "scale").define("FACTOR", "2.0f"))
//!     .tensor(TensorSpec::new("x", DType::F32, [4]).ones())
//!     .tensor(TensorSpec::new("y", DType::F32, [4]).output())
//!     .scalar("n", 4)
//!     .timing(TimingConfig::default().warmup_ms(1.0).rep_ms(2.0).flush_cache(false));
//!
//! let cache = tempfile::tempdir()?;
//! let mut backend = CpuBackend::new(CacheDir::new(cache.path()));
//! let result = backend.benchmark(&request)?;
//! assert_eq!(result.outputs[0].bytes, [2f32.to_ne_bytes(); 4].concat());
//! assert!(result.stats.reps >= 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod backend;
mod cache;
mod compile;
mod depfile;
mod error;
mod flush;
mod integrity;
mod subprocess;
mod toolchain;
mod trampoline;

pub use backend::CpuBackend;
pub use cache::default_cache_dir;
pub use compile::{
    Artifact, CompileControl, DEFAULT_COMPILE_TIMEOUT, can_compile_in_background, compile,
    compile_with, compiler_version, known_compiler_version,
};
pub use error::CpuError;
pub use flush::{CacheFlusher, EVICTS_LINES, LLC_BYTES_ENV, evict};
pub use toolchain::Language;
pub use trampoline::Signature;
pub use tunebox_bench::CacheDir;
pub use tunebox_protocol::CACHE_DIR_ENV;
