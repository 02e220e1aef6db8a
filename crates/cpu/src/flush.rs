//! Evicting a kernel's data from the CPU caches between timed reps.
//!
//! Two methods ([`CacheFlush`](tunebox_protocol::CacheFlush)): [`evict`] the lines of the
//! kernel's own tensors (the default; its cost grows with the tensors), or write a
//! [`CacheFlusher`] buffer twice the last-level cache (its cost grows with the machine).

use std::fs;
use std::hint::black_box;
use std::path::Path;

/// Cache line size assumed when touching the buffer (x86-64 and most arm64 cores).
const LINE_BYTES: usize = 64;

/// Last-level cache size assumed when sysfs cannot tell: 32 MiB.
const FALLBACK_LLC_BYTES: u64 = 32 << 20;

/// The flush buffer never exceeds this: 512 MiB.
const MAX_FLUSH_BYTES: u64 = 512 << 20;

/// Tensors larger than this in all are flushed by writing a [`CacheFlusher`] buffer rather
/// than by evicting their lines: more than the buffer ever is (it is capped at the same
/// 512 MiB), so that a line flush would cost more than the buffer's write, and more than any
/// cache holds, so that most of their lines are out of the caches anyway.
pub(crate) const EVICT_MAX_BYTES: usize = MAX_FLUSH_BYTES as usize;

/// Where Linux describes the first core's caches.
const SYSFS_CACHE_DIR: &str = "/sys/devices/system/cpu/cpu0/cache";

/// Overrides the last-level cache size that sysfs reports (bytes, or with a `K`/`M`/`G`
/// suffix): to simulate another machine in tests, or to correct a VM that reports its host's
/// cache.
pub const LLC_BYTES_ENV: &str = "TUNEBOX_LLC_BYTES";

/// Whether [`evict`] evicts lines itself on this architecture (x86-64: `clflush`); elsewhere
/// the CPU backend flushes with a [`CacheFlusher`] instead.
pub const EVICTS_LINES: bool = cfg!(target_arch = "x86_64");

/// Evicts every cache line of `region` from every level of the cache hierarchy of every core,
/// as TVM's `cache_flush_cpu_non_first_arg` does for a kernel's arguments: on x86-64,
/// `clflushopt` on each 64-byte line where the CPU has it (else `clflush`, which is serialized
/// and about 20 times slower), dirty lines written back, then `mfence`, so that all of it is
/// done before the caller's timer starts. The contents are unchanged. The cost grows with
/// `region.len()`; with `clflushopt` it is below the time to read the region once from memory
/// (docs/performance.md). Does nothing on architectures without a user-level line flush
/// ([`EVICTS_LINES`] is false there).
pub fn evict(region: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_clflush, _mm_mfence};
        let lines = (0..region.len()).step_by(LINE_BYTES);
        if has_clflushopt() {
            for offset in lines {
                // SAFETY: `offset < region.len()`, so the address is inside `region`, which is
                // borrowed for the whole call. `clflushopt` only moves the line out of the
                // caches (no observable read or write of the bytes), and this CPU implements it
                // (CPUID, see `has_clflushopt`).
                unsafe {
                    std::arch::asm!(
                        "clflushopt [{0}]",
                        in(reg) region.as_ptr().add(offset),
                        options(nostack, preserves_flags)
                    );
                }
            }
        } else {
            for offset in lines {
                // SAFETY: as above; `clflush` is part of SSE2, in the x86-64 baseline.
                unsafe { _mm_clflush(region.as_ptr().add(offset)) };
            }
        }
        // SAFETY: `mfence` has no operands; SSE2 is part of the x86-64 baseline. It orders the
        // flushes before every later load and store, so they are done before timing starts.
        unsafe { _mm_mfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    black_box(region);
}

/// Whether this x86-64 CPU implements `clflushopt` (CPUID leaf 7, EBX bit 23), asked once.
#[cfg(target_arch = "x86_64")]
fn has_clflushopt() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let leaves = std::arch::x86_64::__cpuid(0).eax;
        leaves >= 7 && (std::arch::x86_64::__cpuid_count(7, 0).ebx >> 23) & 1 == 1
    })
}

/// A buffer twice the size of the last-level cache whose every line [`CacheFlusher::flush`]
/// writes, so that a kernel's data is evicted before each timed rep (the CPU counterpart of the
/// L2 flush of triton's `do_bench`).
///
/// The last-level cache is the highest-level `Data` or `Unified` cache of cpu0 in
/// `/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}`, unless [`LLC_BYTES_ENV`]
/// says otherwise; when neither can be read, 32 MiB is assumed. The buffer is capped at
/// 512 MiB. This is the [`CacheFlush::LastLevelCache`](tunebox_protocol::CacheFlush) method;
/// the default evicts the tensors' own lines ([`evict`]) instead.
#[derive(Debug)]
pub struct CacheFlusher {
    buffer: Vec<u8>,
}

impl CacheFlusher {
    /// A flusher sized 2 × this machine's last-level cache (see the type's docs), with every page
    /// already touched so the first flush costs no page faults.
    pub fn new() -> Self {
        let llc = llc_override(std::env::var(LLC_BYTES_ENV).ok().as_deref())
            .or_else(|| last_level_cache_bytes(Path::new(SYSFS_CACHE_DIR)));
        if llc.is_none() {
            log::debug!("cpu: last-level cache size unknown; assuming {FALLBACK_LLC_BYTES} bytes");
        }
        Self::with_size(flush_bytes(llc))
    }

    /// A flusher of `bytes` bytes (at least one cache line), pages touched.
    pub fn with_size(bytes: usize) -> Self {
        let mut flusher = Self {
            buffer: vec![0; bytes.max(LINE_BYTES)],
        };
        flusher.flush();
        flusher
    }

    /// Size of the buffer in bytes.
    pub fn size(&self) -> usize {
        self.buffer.len()
    }

    /// Reads and writes one byte of every cache line of the buffer, which pulls each line into
    /// the cache hierarchy and so evicts what was there. Plain loads and stores are used, never a
    /// `memset`, whose non-temporal stores would bypass the caches.
    pub fn flush(&mut self) {
        for byte in self.buffer.iter_mut().step_by(LINE_BYTES) {
            *byte = byte.wrapping_add(1);
        }
        // The buffer escapes, so the compiler must perform every store above.
        black_box(self.buffer.as_mut_slice());
    }
}

impl Default for CacheFlusher {
    fn default() -> Self {
        Self::new()
    }
}

/// The size [`LLC_BYTES_ENV`] gives, if it is set to a valid size above zero (an invalid one is
/// logged and ignored).
fn llc_override(value: Option<&str>) -> Option<u64> {
    let value = value?;
    let size = parse_cache_size(value).filter(|&s| s > 0);
    if size.is_none() {
        log::warn!("cpu: {LLC_BYTES_ENV}={value:?} is not a size such as 262144K or 256M; ignored");
    }
    size
}

/// 2 × the last-level cache (or the fallback), capped.
fn flush_bytes(llc: Option<u64>) -> usize {
    let bytes = llc
        .unwrap_or(FALLBACK_LLC_BYTES)
        .saturating_mul(2)
        .min(MAX_FLUSH_BYTES);
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// Size in bytes of the highest-level data or unified cache described under `dir` (a sysfs
/// `cpuN/cache` directory), or `None` when none can be read.
fn last_level_cache_bytes(dir: &Path) -> Option<u64> {
    let mut best: Option<(u32, u64)> = None;
    for entry in fs::read_dir(dir).ok()?.flatten() {
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let read = |name: &str| fs::read_to_string(entry.path().join(name)).ok();
        let Some(kind) = read("type") else { continue };
        if !matches!(kind.trim(), "Data" | "Unified") {
            continue;
        }
        let Some(level) = read("level").and_then(|l| l.trim().parse::<u32>().ok()) else {
            continue;
        };
        let Some(size) = read("size").and_then(|s| parse_cache_size(&s)) else {
            continue;
        };
        if size > 0 && best.is_none_or(|(l, s)| (level, size) > (l, s)) {
            best = Some((level, size));
        }
    }
    best.map(|(_, size)| size)
}

/// Parses a sysfs cache size: a number of bytes, or a number with a `K`, `M` or `G` suffix
/// (binary multiples), e.g. `32768K`, `1M`.
fn parse_cache_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, multiplier) = match text.char_indices().last()? {
        (i, 'K' | 'k') => (&text[..i], 1u64 << 10),
        (i, 'M' | 'm') => (&text[..i], 1 << 20),
        (i, 'G' | 'g') => (&text[..i], 1 << 30),
        _ => (text, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(multiplier)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sysfs_sizes() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M\n"), Some(1 << 20));
        assert_eq!(parse_cache_size("512K"), Some(512 << 10));
        assert_eq!(parse_cache_size("2G"), Some(2 << 30));
        assert_eq!(parse_cache_size("4096"), Some(4096));
        for bad in ["", "K", "x12K", "-1K", "99999999999999999999G"] {
            assert_eq!(parse_cache_size(bad), None, "{bad:?}");
        }
    }

    fn write_index(dir: &Path, index: u32, level: &str, kind: &str, size: &str) {
        let d = dir.join(format!("index{index}"));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("level"), format!("{level}\n")).unwrap();
        fs::write(d.join("type"), format!("{kind}\n")).unwrap();
        fs::write(d.join("size"), format!("{size}\n")).unwrap();
    }

    #[test]
    fn picks_the_highest_data_or_unified_level() {
        let dir = tempfile::tempdir().unwrap();
        write_index(dir.path(), 0, "1", "Data", "32K");
        write_index(dir.path(), 1, "1", "Instruction", "32K");
        write_index(dir.path(), 2, "2", "Unified", "512K");
        write_index(dir.path(), 3, "3", "Unified", "32768K");
        fs::create_dir_all(dir.path().join("uevent_not_an_index")).unwrap();
        assert_eq!(last_level_cache_bytes(dir.path()), Some(32 << 20));

        let dir = tempfile::tempdir().unwrap();
        write_index(dir.path(), 0, "1", "Data", "48K");
        write_index(dir.path(), 1, "2", "Unified", "1M");
        write_index(dir.path(), 2, "3", "Instruction", "64M");
        write_index(dir.path(), 3, "3", "Unified", "garbage");
        assert_eq!(last_level_cache_bytes(dir.path()), Some(1 << 20));
    }

    #[test]
    fn unreadable_sysfs_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(last_level_cache_bytes(dir.path()), None);
        assert_eq!(last_level_cache_bytes(&dir.path().join("missing")), None);
        assert_eq!(flush_bytes(None), 64 << 20);
        assert_eq!(flush_bytes(Some(32 << 20)), 64 << 20);
        assert_eq!(flush_bytes(Some(1 << 30)), 512 << 20);
    }

    #[test]
    fn flush_touches_every_line() {
        let mut flusher = CacheFlusher::with_size(1000);
        assert_eq!(flusher.size(), 1000);
        flusher.flush();
        let touched = flusher.buffer.iter().step_by(LINE_BYTES);
        assert!(touched.clone().count() == 16 && touched.into_iter().all(|&b| b == 2));
        assert_eq!(CacheFlusher::with_size(0).size(), LINE_BYTES);
    }

    #[test]
    fn the_environment_overrides_the_reported_cache() {
        // A cloud VM that reports its host's 260 MiB L3 gets a 512 MiB (capped) LLC flush buffer.
        assert_eq!(llc_override(Some("266240K")), Some(260 << 20));
        assert_eq!(flush_bytes(llc_override(Some("260M"))), 512 << 20);
        assert_eq!(flush_bytes(llc_override(Some("8M"))), 16 << 20);
        for bad in ["", "0", "lots", "-3M"] {
            assert_eq!(llc_override(Some(bad)), None, "{bad:?}");
        }
        assert_eq!(llc_override(None), None);
    }

    #[test]
    fn evicting_keeps_the_contents() {
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let copy = data.clone();
        evict(&data);
        evict(&data[1..4097]);
        evict(&[]);
        assert_eq!(data, copy);
    }

    #[test]
    fn this_machine_has_a_sane_flusher() {
        let flusher = CacheFlusher::new();
        assert!((2 * LINE_BYTES..=MAX_FLUSH_BYTES as usize).contains(&flusher.size()));
    }
}
