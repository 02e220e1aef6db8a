//! Every CPU's counters from `/proc/stat` (busy, steal and total time, in clock ticks): what
//! the clock check discounts as the host's steal ([`crate::TuningProcess`]'s replies) and what
//! the tuning engine's interference probe compares around each window. Read from
//! `$TUNEBOX_PROC_STAT` instead when set (a file in `/proc/stat`'s format, or a named pipe that
//! serves a snapshot per read), for tests and for simulating other machines.

use std::path::PathBuf;

/// Clock ticks per second in `/proc/stat`: `USER_HZ`, 100 on every Linux ABI (whatever the
/// kernel's own `HZ`).
pub const USER_HZ: f64 = 100.0;

/// One CPU's counters from `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// user + nice + system + irq + softirq.
    pub busy: u64,
    /// steal.
    pub steal: u64,
    /// Every field but guest time (already in user): busy + idle + iowait + steal.
    pub total: u64,
}

/// A snapshot of every CPU's counters (the `cpuN` lines, not the `cpu` sum).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuTimes(pub Vec<CpuTicks>);

impl CpuTimes {
    /// Parses `/proc/stat` text; lines other than `cpuN …` are ignored, and missing fields
    /// (older kernels have no steal) count as 0. A text of several snapshots, one after the
    /// other (a named pipe standing for `/proc/stat` read twice as one), counts its last.
    pub fn parse(text: &str) -> CpuTimes {
        let last = text.rfind("\ncpu ").map_or(text, |at| &text[at + 1..]);
        let cpus = last
            .lines()
            .filter(|l| {
                l.strip_prefix("cpu")
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .map(|line| {
                let f: Vec<u64> = line
                    .split_whitespace()
                    .skip(1)
                    .map(|v| v.parse().unwrap_or(0))
                    .collect();
                let at = |i: usize| f.get(i).copied().unwrap_or(0);
                let busy = at(0) + at(1) + at(2) + at(5) + at(6);
                let (idle, steal) = (at(3) + at(4), at(7));
                CpuTicks {
                    busy,
                    steal,
                    total: busy + idle + steal,
                }
            })
            .collect();
        CpuTimes(cpus)
    }

    /// The counters now (`$TUNEBOX_PROC_STAT`, else `/proc/stat`); `None` where unreadable.
    pub fn now() -> Option<CpuTimes> {
        let path = std::env::var_os("TUNEBOX_PROC_STAT")
            .map_or_else(|| PathBuf::from("/proc/stat"), PathBuf::from);
        let text = std::fs::read_to_string(path).ok()?;
        Some(CpuTimes::parse(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_several_snapshots_the_last_counts() {
        let one = "cpu  2 0 0 2 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n";
        let two = "cpu  6 0 0 6 0 0 0 0 0 0\ncpu0 3 0 0 3 0 0 0 0 0 0\n";
        assert_eq!(
            CpuTimes::parse(&format!("{one}{two}")),
            CpuTimes::parse(two)
        );
        assert_eq!(CpuTimes::parse(two).0.len(), 1);
    }

    #[test]
    fn proc_stat_parses_per_cpu_lines_only() {
        let t = CpuTimes::parse(
            "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 10 1 2 100 3 4 5 6 0 0\ncpu1 1 2 3\nintr 7\n",
        );
        assert_eq!(
            t.0,
            [
                CpuTicks {
                    busy: 10 + 1 + 2 + 4 + 5,
                    steal: 6,
                    total: 22 + 103 + 6
                },
                CpuTicks {
                    busy: 6,
                    steal: 0,
                    total: 6
                },
            ]
        );
    }
}
