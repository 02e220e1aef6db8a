//! `tunebox tune --count`: how many choices a space has, counted without listing them, with
//! the progress of a long count on stderr.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

/// A count that takes longer than this shows its progress.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// Prints `N valid choices (M before restrictions)` for the manifest or T1 file at `path`;
/// a count that takes over a second shows its progress (percent done, elapsed, and an
/// estimate of what is left) on stderr, in place on a terminal, a line every 10 s otherwise.
pub(crate) fn print_count(path: &Path, quiet: bool) -> Result<()> {
    let start = Instant::now();
    let terminal = std::io::stderr().is_terminal();
    let every = if terminal {
        Duration::from_millis(250)
    } else {
        Duration::from_secs(10)
    };
    let mut shown: Option<Instant> = None;
    let mut progress = |fraction: f64| {
        let elapsed = start.elapsed();
        if quiet || elapsed < QUIET_FOR || shown.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        shown = Some(Instant::now());
        let line = progress_line(fraction, elapsed);
        let mut err = std::io::stderr().lock();
        // Progress is best effort: a closed stderr must not stop the count.
        let _ = if terminal {
            write!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
    };
    let count = tunebox_tune::count_file(path, &mut progress);
    if shown.is_some() && terminal {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    let count = count?;
    writeln!(
        std::io::stdout(),
        "{} valid choices ({} before restrictions)",
        count.valid,
        count.raw
    )?;
    Ok(())
}

/// `counting choices: 42% (12 s, about 17 s left)`.
fn progress_line(fraction: f64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let left = if fraction > 0.01 {
        format!(", about {:.0} s left", secs * (1.0 - fraction) / fraction)
    } else {
        String::new()
    };
    format!(
        "counting choices: {:.0}% ({secs:.0} s{left})",
        (fraction * 100.0).clamp(0.0, 100.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_how_far_and_how_long() {
        assert_eq!(
            progress_line(0.25, Duration::from_secs(10)),
            "counting choices: 25% (10 s, about 30 s left)"
        );
        assert_eq!(
            progress_line(0.0, Duration::from_secs(2)),
            "counting choices: 0% (2 s)"
        );
    }
}
