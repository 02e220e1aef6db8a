//! What the machine has that the parent and its workers size buffers by: its physical memory.

/// Total physical memory from `/proc/meminfo` (`MemTotal`), in bytes, or `None` where it cannot
/// be read.
pub fn physical_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
