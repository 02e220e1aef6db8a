//! Evicting a kernel's data from the CPU caches between timed reps.

use std::fs;
use std::hint::black_box;
use std::path::Path;

/// Cache line size assumed when touching the buffer (x86-64 and most arm64 cores).
const LINE_BYTES: usize = 64;

/// Last-level cache size assumed when sysfs cannot tell: 32 MiB.
const FALLBACK_LLC_BYTES: u64 = 32 << 20;

/// The flush buffer never exceeds this: 512 MiB.
const MAX_FLUSH_BYTES: u64 = 512 << 20;

/// Where Linux describes the first core's caches.
const SYSFS_CACHE_DIR: &str = "/sys/devices/system/cpu/cpu0/cache";

/// A buffer twice the size of the last-level cache whose every line [`CacheFlusher::flush`]
/// writes, so that a kernel's data is evicted before each timed rep (the CPU counterpart of the
/// L2 flush of triton's `do_bench`).
///
/// The last-level cache is the highest-level `Data` or `Unified` cache of cpu0 in
/// `/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}`; when that cannot be read,
/// 32 MiB is assumed. The buffer is capped at 512 MiB.
#[derive(Debug)]
pub struct CacheFlusher {
    buffer: Vec<u8>,
}

impl CacheFlusher {
    /// A flusher sized 2 × this machine's last-level cache (see the type's docs), with every page
    /// already touched so the first flush costs no page faults.
    pub fn new() -> Self {
        let llc = last_level_cache_bytes(Path::new(SYSFS_CACHE_DIR));
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
    fn this_machine_has_a_sane_flusher() {
        let flusher = CacheFlusher::new();
        assert!((2 * LINE_BYTES..=MAX_FLUSH_BYTES as usize).contains(&flusher.size()));
    }
}
