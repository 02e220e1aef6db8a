//! Captured worker output: a drain thread per stream, feeding a bounded ring buffer.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The last bytes a worker wrote to one stream.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    closed: Condvar,
}

#[derive(Debug)]
struct State {
    bytes: VecDeque<u8>,
    capacity: usize,
    closed: bool,
}

impl Tail {
    /// Starts a thread that reads `stream` to its end, keeping the last `capacity` bytes.
    pub(crate) fn drain(stream: impl Read + Send + 'static, capacity: usize, name: &str) -> Tail {
        let tail = Tail {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    bytes: VecDeque::with_capacity(capacity.min(64 * 1024)),
                    capacity,
                    closed: false,
                }),
                closed: Condvar::new(),
            }),
        };
        let writer = tail.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("tunebox-{name}-drain"))
            .spawn(move || writer.read_to_end(stream));
        if let Err(e) = spawned {
            // Without a thread the pipe is never read and the child could block on it; the
            // stream is closed instead (the child gets EPIPE) and the tail says why.
            log::warn!("could not start a thread to drain the worker's {name}: {e}");
            tail.push(format!("[tunebox: {name} not captured: {e}]").as_bytes());
            tail.close();
        }
        tail
    }

    fn read_to_end(&self, mut stream: impl Read) {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        self.close();
    }

    fn push(&self, bytes: &[u8]) {
        let mut state = self.lock();
        let capacity = state.capacity;
        let keep = &bytes[bytes.len().saturating_sub(capacity)..];
        let overflow = (state.bytes.len() + keep.len()).saturating_sub(capacity);
        state.bytes.drain(..overflow);
        state.bytes.extend(keep);
    }

    fn close(&self) {
        self.lock().closed = true;
        self.shared.closed.notify_all();
    }

    /// The captured bytes as text, after waiting up to `grace` for the stream to reach its end
    /// (so that what a dying worker wrote last is included).
    pub(crate) fn text(&self, grace: Duration) -> String {
        let deadline = crate::worker::deadline_after(grace);
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
        let (a, b) = state.bytes.as_slices();
        let mut bytes = Vec::with_capacity(a.len() + b.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_tail() {
        let data: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let expected = String::from_utf8(data[data.len() - 1000..].to_vec()).unwrap();
        let tail = Tail::drain(std::io::Cursor::new(data), 1000, "test");
        assert_eq!(tail.text(Duration::from_secs(5)), expected);
    }

    #[test]
    fn short_streams_are_kept_whole() {
        let tail = Tail::drain(std::io::Cursor::new(b"hello\n".to_vec()), 1000, "test");
        assert_eq!(tail.text(Duration::from_secs(5)), "hello\n");
    }
}
