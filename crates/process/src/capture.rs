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

#[cfg(test)]
mod tests {
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
