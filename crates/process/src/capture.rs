//! Captured worker output: a drain thread per stream, feeding a bounded ring buffer.
//!
//! The ring counts every byte it was ever given, so a position in the stream (a *mark*) stays
//! meaningful after older bytes are dropped. The parent marks the stderr stream each time it
//! sends a request, and a crash quotes only what the worker wrote from that mark on: not the
//! panic message of the task before, nor what the worker wrote between tasks.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

/// Put before a quoted tail when the ring dropped part of what was written after the mark.
pub(crate) const DROPPED: &str = "[… earlier output dropped]\n";

/// The last bytes a worker wrote to one stream.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    closed: Condvar,
    /// The read end of the pipe, while it is drained: a mark counts what is still in it.
    pipe: Option<Arc<OwnedFd>>,
}

#[derive(Debug)]
struct State {
    bytes: VecDeque<u8>,
    capacity: usize,
    closed: bool,
    /// Bytes pushed since the stream was opened (the ring holds the last `bytes.len()`).
    written: u64,
    /// Stream position of the last mark.
    mark: u64,
}

impl State {
    fn push(&mut self, bytes: &[u8]) {
        self.written += bytes.len() as u64;
        let capacity = self.capacity;
        let keep = &bytes[bytes.len().saturating_sub(capacity)..];
        let overflow = (self.bytes.len() + keep.len()).saturating_sub(capacity);
        self.bytes.drain(..overflow);
        self.bytes.extend(keep);
    }
}

impl Tail {
    /// Starts a thread that reads `stream` (the read end of a pipe) to its end, keeping the last
    /// `capacity` bytes.
    pub(crate) fn drain(stream: impl Into<OwnedFd>, capacity: usize, name: &str) -> Tail {
        let pipe = Arc::new(stream.into());
        let tail = Tail {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    bytes: VecDeque::with_capacity(capacity.min(64 * 1024)),
                    capacity,
                    closed: false,
                    written: 0,
                    mark: 0,
                }),
                closed: Condvar::new(),
                pipe: Some(pipe.clone()),
            }),
        };
        let writer = tail.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("tunebox-{name}-drain"))
            .spawn(move || writer.read_to_end(&pipe));
        if let Err(e) = spawned {
            // Without a thread the pipe is never read and the child could block on it; the
            // stream is closed instead (the child gets EPIPE) and the tail says why.
            log::warn!("could not start a thread to drain the worker's {name}: {e}");
            let mut state = tail.lock();
            state.push(format!("[tunebox: {name} not captured: {e}]").as_bytes());
            drop(state);
            tail.close();
        }
        tail
    }

    /// Reads the pipe until its end. Each read is made (without blocking: the pipe is
    /// non-blocking and polled first) and pushed under the state lock, so that a mark sees every
    /// byte either in the ring or still in the pipe, never in flight between the two.
    fn read_to_end(&self, pipe: &OwnedFd) {
        set_nonblocking(pipe);
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let mut fds = [PollFd::new(pipe, PollFlags::IN)];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
            let mut state = self.lock();
            match rustix::io::read(pipe, &mut buf[..]) {
                Ok(0) => break,
                Ok(n) => state.push(&buf[..n]),
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
        self.close();
    }

    fn close(&self) {
        self.lock().closed = true;
        self.shared.closed.notify_all();
    }

    /// Marks the current end of the stream, counting what the worker wrote that is still in the
    /// pipe: [`Tail::text_since_mark`] returns only what comes after it.
    pub(crate) fn mark(&self) {
        let mut state = self.lock();
        let pending = self
            .shared
            .pipe
            .as_ref()
            .filter(|_| !state.closed)
            .map_or(0, |pipe| unread_bytes(pipe));
        state.mark = state.written + pending;
    }

    /// The captured bytes as text, after waiting up to `grace` for the stream to reach its end
    /// (so that what a dying worker wrote last is included).
    pub(crate) fn text(&self, grace: Duration) -> String {
        self.text_from(grace, None)
    }

    /// What was written after the last [`mark`](Tail::mark) (all of it when there was none),
    /// waiting up to `grace` as [`Tail::text`] does. Starts with [`DROPPED`] when the ring no
    /// longer holds the beginning of it.
    pub(crate) fn text_since_mark(&self, grace: Duration) -> String {
        let mark = self.lock().mark;
        self.text_from(grace, Some(mark))
    }

    fn text_from(&self, grace: Duration, mark: Option<u64>) -> String {
        let deadline = crate::pids::deadline_after(grace);
        let mut state = self.lock();
        while !state.closed {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = self
                .shared
                .closed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        // Stream position of the ring's first byte.
        let first = state.written - state.bytes.len() as u64;
        let mark = mark.unwrap_or(first);
        let dropped = mark < first;
        let skip = usize::try_from(mark.saturating_sub(first))
            .unwrap_or(usize::MAX)
            .min(state.bytes.len());
        let kept: Vec<u8> = state.bytes.range(skip..).copied().collect();
        let text = String::from_utf8_lossy(&kept);
        if dropped && !kept.is_empty() {
            format!("{DROPPED}{text}")
        } else {
            text.into_owned()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Makes reads of `pipe` return `EAGAIN` instead of blocking (only this process's open file
/// description changes: the worker's write end is another one).
fn set_nonblocking(pipe: &OwnedFd) {
    let fd = pipe.as_raw_fd();
    // SAFETY: `fcntl` with F_GETFL / F_SETFL on a descriptor we own only reads and sets its
    // status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

/// How many bytes wait in `pipe` to be read (0 when that cannot be told).
fn unread_bytes(pipe: &OwnedFd) -> u64 {
    let mut count: libc::c_int = 0;
    // SAFETY: FIONREAD writes one `int` through the pointer, a live local.
    let ok = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut count) } == 0;
    if ok {
        u64::try_from(count).unwrap_or(0)
    } else {
        0
    }
}

/// The lines of a worker's stderr tail that a crash error quotes: at most `max` (and a line
/// saying how many were left out), the last ones, with each run of backtrace frames (Rust's `  12: path` / `at file:line`, a
/// sanitizer's `#3 0x…`, glibc's `[0x…]`) collapsed into one line, and the lines that say what
/// happened (a panic, an allocation failure, an abort, a sanitizer's or glibc's report) kept
/// even when they came earlier, so that `RUST_BACKTRACE=1` cannot push the cause out.
pub(crate) fn quote_lines(tail: &str, max: usize) -> Vec<String> {
    let lines = collapse_frames(tail);
    if lines.len() <= max {
        return lines;
    }
    let causes: Vec<usize> = (0..lines.len() - max)
        .filter(|&i| is_cause(&lines[i]))
        .take(max / 4)
        .collect();
    let start = lines.len() - (max - causes.len());
    let mut quoted: Vec<String> = causes.iter().map(|&i| lines[i].clone()).collect();
    quoted.push(format!(
        "[… {} earlier lines left out]",
        start - causes.len()
    ));
    quoted.extend(lines[start..].iter().cloned());
    quoted
}

/// The lines of `tail`, each run of backtrace frames replaced by one line saying how many.
fn collapse_frames(tail: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut frames = 0usize;
    let flush = |frames: &mut usize, out: &mut Vec<String>| {
        if *frames > 0 {
            out.push(format!("   [… {} backtrace frame lines]", *frames));
            *frames = 0;
        }
    };
    for line in tail.lines() {
        if is_frame(line) {
            frames += 1;
        } else {
            flush(&mut frames, &mut out);
            out.push(line.to_owned());
        }
    }
    flush(&mut frames, &mut out);
    out
}

/// Whether `line` is one line of a backtrace.
fn is_frame(line: &str) -> bool {
    let trimmed = line.trim_start();
    if trimmed.starts_with("at ") && line.len() > trimmed.len() {
        return true;
    }
    // `  12: std::rt::lang_start` (Rust), `    #3 0x55d0 in main` (sanitizers).
    let numbered = trimmed.strip_prefix('#').unwrap_or(trimmed);
    let digits = numbered.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        let rest = &numbered[digits..];
        return (rest.starts_with(": ") && line.len() > trimmed.len())
            || (trimmed.starts_with('#') && rest.starts_with(" 0x"));
    }
    // glibc's `./prog(+0x1234)[0x55d0]` lines under "Backtrace:".
    trimmed.ends_with(']') && trimmed.contains("[0x")
}

/// Whether `line` says what happened to the worker.
fn is_cause(line: &str) -> bool {
    const CAUSES: [&str; 20] = [
        "panicked at",
        "memory allocation of",
        "fatal runtime error",
        "has overflowed its stack",
        "ERROR: AddressSanitizer",
        "ERROR: LeakSanitizer",
        "WARNING: ThreadSanitizer",
        "runtime error:",
        "SUMMARY: ",
        "*** ",
        "malloc(): ",
        "free(): ",
        "double free",
        "corrupted",
        "Fatal glibc error",
        "terminate called",
        "Assertion `",
        "assertion failed",
        "Segmentation fault",
        "out of memory",
    ];
    CAUSES.iter().any(|c| line.contains(c))
}

#[cfg(test)]
mod tests {
    use super::quote_lines;

    #[test]
    fn a_backtrace_is_collapsed_and_the_cause_kept() {
        let mut tail = String::from("memory allocation of 4294967296 bytes failed\n");
        for i in 0..60 {
            tail.push_str(&format!("  {i:>2}: std::alloc::frame_{i}\n"));
            tail.push_str(&format!(
                "             at /rustc/library/std/src/alloc.rs:{i}:5\n"
            ));
        }
        tail.push_str("note: Some details are omitted, run with `RUST_BACKTRACE=full`\n");
        let quoted = quote_lines(&tail, 20);
        assert_eq!(
            quoted,
            [
                "memory allocation of 4294967296 bytes failed",
                "   [… 120 backtrace frame lines]",
                "note: Some details are omitted, run with `RUST_BACKTRACE=full`",
            ]
        );
    }

    #[test]
    fn causes_before_a_long_tail_are_quoted_first() {
        let mut tail = String::from("thread 'main' panicked at src/k.rs:3:5:\nboom\n");
        tail.push_str("==12==ERROR: AddressSanitizer: heap-buffer-overflow\n");
        for i in 0..100 {
            tail.push_str(&format!("chatter {i}\n"));
            tail.push_str(&format!("    #{i} 0x55d0{i:04x} in f{i} k.c:{i}\n"));
        }
        let quoted = quote_lines(&tail, 20);
        assert_eq!(quoted.len(), 21, "{quoted:#?}");
        assert_eq!(quoted[0], "thread 'main' panicked at src/k.rs:3:5:");
        assert!(quoted[1].contains("AddressSanitizer"));
        assert!(quoted[2].starts_with("[… ") && quoted[2].contains("earlier lines"));
        assert_eq!(quoted[20], "   [… 1 backtrace frame lines]");
        assert_eq!(quoted[19], "chatter 99");
    }
    use std::io::Write;

    use super::*;

    const GRACE: Duration = Duration::from_secs(5);

    /// A tail draining a pipe, and the pipe's write end.
    fn piped(capacity: usize) -> (Tail, std::io::PipeWriter) {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        (Tail::drain(reader, capacity, "test"), writer)
    }

    #[test]
    fn keeps_only_the_tail() {
        let data: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let expected = String::from_utf8(data[data.len() - 1000..].to_vec()).unwrap();
        let (tail, mut writer) = piped(1000);
        let feeder = std::thread::spawn(move || writer.write_all(&data));
        feeder.join().unwrap().unwrap();
        assert_eq!(tail.text(GRACE), expected);
    }

    #[test]
    fn short_streams_are_kept_whole() {
        let (tail, mut writer) = piped(1000);
        writer.write_all(b"hello\n").unwrap();
        drop(writer);
        assert_eq!(tail.text(GRACE), "hello\n");
        assert_eq!(tail.text_since_mark(GRACE), "hello\n");
    }

    #[test]
    fn a_mark_counts_what_is_still_in_the_pipe() {
        let (tail, mut writer) = piped(1000);
        // Written before the mark, whether or not the drain thread has read it yet.
        writer.write_all(b"before\n").unwrap();
        tail.mark();
        writer.write_all(b"after\n").unwrap();
        drop(writer);
        assert_eq!(tail.text_since_mark(GRACE), "after\n");
        assert_eq!(tail.text(GRACE), "before\nafter\n");
    }

    #[test]
    fn nothing_after_the_mark_is_an_empty_tail() {
        let (tail, mut writer) = piped(1000);
        writer.write_all(b"old panic\n").unwrap();
        tail.mark();
        drop(writer);
        assert_eq!(tail.text_since_mark(GRACE), "");
    }

    #[test]
    fn a_mark_the_ring_dropped_says_so() {
        let (tail, mut writer) = piped(10);
        writer.write_all(b"before").unwrap();
        tail.mark();
        writer.write_all(b"0123456789abcdef").unwrap();
        drop(writer);
        assert_eq!(tail.text_since_mark(GRACE), format!("{DROPPED}6789abcdef"));
    }
}
