//! How much a worker writes while it serves a request: a kernel printing in a loop writes its
//! stdout at the speed of the disk (5.1 GB in a 5 s timeout on a 2-vCPU EPYC guest, into the
//! `tunebox tune` log), and a file sink would take it until the timeout. The parent reads the
//! worker's own count of bytes written (`wchar` in `/proc/<pid>/io`: every `write` of every
//! thread, whatever the descriptor, so a flood is seen whether the stream goes to a file, a
//! pipe or `/dev/null`) while it waits for the reply, and kills the worker once the request
//! wrote more than [`ProcessConfig::write_limit`](crate::ProcessConfig::write_limit).
//!
//! The count includes what the processes the worker ran and reaped wrote (Linux adds a reaped
//! child's count to its parent's): a compiler run inside a request counts, a few MiB for a
//! kernel's source. What it does not see: a process the kernel forked and left running (its
//! own count), and a worker whose `/proc/<pid>/io` this process may not read (a kernel without
//! I/O accounting, a non-dumpable worker of another user): then the request runs to its
//! timeout, as before.

use std::time::{Duration, Instant};

/// How often a waiting receive reads the worker's count: at ~1-5 GB/s of writes, a flood
/// overshoots the limit by at most a few hundred MiB, for ~10 reads of a small file a second.
const WRITE_CHECK: Duration = Duration::from_millis(100);

/// The bytes process `pid` has written so far (`wchar` of `/proc/<pid>/io`), or `None` when
/// that cannot be read.
pub(crate) fn written_bytes(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    wchar(&io)
}

/// The `wchar:` figure of a `/proc/<pid>/io` text.
fn wchar(io: &str) -> Option<u64> {
    io.lines()
        .find_map(|line| line.strip_prefix("wchar:"))
        .and_then(|n| n.trim().parse().ok())
}

/// A worker's writes during one request, against a limit. The count it starts from is read at
/// the first look ([`WriteWatch::over_limit`]), which a waiting receive makes once it has
/// waited: a reply taken at once (a ping) costs no read of `/proc`.
pub(crate) struct WriteWatch {
    pid: u32,
    /// `None`: nothing is watched.
    limit: Option<u64>,
    start: Start,
    checked: Instant,
}

/// The count a [`WriteWatch`] starts from.
enum Start {
    NotRead,
    Read(u64),
    /// `/proc/<pid>/io` could not be read: nothing is watched.
    Unreadable,
}

impl WriteWatch {
    /// Watches worker `pid` from the first look on; `limit` `None` watches nothing.
    pub(crate) fn start(pid: u32, limit: Option<u64>) -> WriteWatch {
        WriteWatch {
            pid,
            limit,
            start: Start::NotRead,
            checked: Instant::now(),
        }
    }

    /// The bytes written since the first look, when more than the limit; read at most every
    /// [`WRITE_CHECK`].
    pub(crate) fn over_limit(&mut self) -> Option<u64> {
        let limit = self.limit?;
        let start = match self.start {
            Start::Read(start) => start,
            Start::Unreadable => return None,
            Start::NotRead => {
                self.start = written_bytes(self.pid).map_or(Start::Unreadable, Start::Read);
                self.checked = Instant::now();
                return None;
            }
        };
        if self.checked.elapsed() < WRITE_CHECK {
            return None;
        }
        self.checked = Instant::now();
        let written = written_bytes(self.pid)?.saturating_sub(start);
        (written > limit).then_some(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wchar_is_read_from_the_io_text() {
        let io = "rchar: 6976\nwchar: 123456789\nsyscr: 10\nsyscw: 0\n";
        assert_eq!(wchar(io), Some(123_456_789));
        assert_eq!(wchar("rchar: 1\n"), None);
    }

    #[test]
    fn this_process_s_writes_are_counted() {
        let Some(before) = written_bytes(std::process::id()) else {
            // A kernel without task I/O accounting: nothing to check here.
            return;
        };
        let mut sink = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        std::io::Write::write_all(&mut sink, &[0u8; 1 << 20]).unwrap();
        let after = written_bytes(std::process::id()).unwrap();
        assert!(after - before >= 1 << 20, "{before} -> {after}");
    }

    #[test]
    fn a_watch_past_its_limit_says_how_much_was_written() {
        let pid = std::process::id();
        if written_bytes(pid).is_none() {
            return;
        }
        // Other tests of this process write too, but not 64 MiB in a moment.
        let mut watch = WriteWatch::start(pid, Some(64 << 20));
        assert_eq!(
            watch.over_limit(),
            None,
            "the first look reads the count to start from"
        );
        watch.checked -= WRITE_CHECK;
        assert_eq!(watch.over_limit(), None, "nothing written yet");
        let mut sink = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        let block = vec![0u8; 1 << 20];
        for _ in 0..128 {
            std::io::Write::write_all(&mut sink, &block).unwrap();
        }
        assert_eq!(watch.over_limit(), None, "read at most every WRITE_CHECK");
        watch.checked -= WRITE_CHECK;
        assert!(watch.over_limit().is_some_and(|w| w >= 128 << 20));
        assert_eq!(WriteWatch::start(pid, None).over_limit(), None);
    }
}
