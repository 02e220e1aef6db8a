//! Busy loops that keep every core occupied while a test runs, as users' machines are:
//! `loaded-test` and `agreement --loaded` start them.

use std::process::{Child, Command, Stdio};

/// Busy loops, killed and reaped on drop.
pub(crate) struct Hogs(Vec<Child>);

impl Hogs {
    pub(crate) fn start(count: usize) -> Result<Hogs, String> {
        let mut hogs = Hogs(Vec::with_capacity(count));
        for _ in 0..count {
            let child = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start a busy loop: {e}"))?;
            hogs.0.push(child);
        }
        Ok(hogs)
    }

    /// How many busy loops run.
    pub(crate) fn count(&self) -> usize {
        self.0.len()
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
