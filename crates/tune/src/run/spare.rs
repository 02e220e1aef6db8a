//! Spare windows: while the next choice in order is still compiling, a worker measures a
//! round's window of a choice screened earlier (its first round's, then its next ones')
//! instead of waiting for it.
//!
//! Compiles overlap measuring (`compile_threads.rs`); on a machine with few CPUs they take
//! longer than screening, and a worker would wait for each next choice to compile. The rounds
//! of short windows come after screening anyway; those that can run in this spare time do, so
//! the time after the last compile (when a worker measures alone and the other CPUs idle)
//! holds fewer windows. A choice's spare window waits for half a round of other windows after its
//! screening, so that its two windows are not taken back to back. The windows themselves are
//! the rounds' (`race.rs`): the same request, counted as a first round's window is, checked
//! the same way (one that would need checking is dropped and measured again in the first
//! round, which checks it).

use std::collections::VecDeque;
use std::sync::Mutex;

use tunebox_protocol::BenchmarkRequest;

use super::stage::lock;

/// Windows measured after a choice's screening window before its spare window may run, at
/// least: and half the choices being screened (half a round) when that is more, so that the
/// two windows do not share one stretch of the machine's speed ([`super::race`] counts two
/// agreeing windows as confirming only that far apart).
const SPACING: u64 = 2;

/// The spare windows on offer, by the choice's stable index, oldest first.
#[derive(Debug)]
pub(crate) struct Spare {
    queue: Mutex<Queue>,
    /// Windows after a screening before its spare window is due.
    spacing: u64,
}

#[derive(Debug, Default)]
struct Queue {
    offered: VecDeque<Offer>,
    /// Windows handed out so far (screening and spare ones).
    handed: u64,
}

#[derive(Debug)]
struct Offer {
    index: usize,
    request: BenchmarkRequest,
    /// [`Queue::handed`] when it was offered.
    at: u64,
}

impl Spare {
    /// Spare windows for a round screening `choices` choices: each due half a round after its
    /// screening, [`SPACING`] windows at least.
    pub(crate) fn for_round(choices: usize) -> Spare {
        Spare {
            queue: Mutex::default(),
            spacing: SPACING.max(choices as u64 / 2),
        }
    }

    /// Offers the first round's window of the choice of stable index `index` (just screened).
    pub(crate) fn offer(&self, index: usize, request: BenchmarkRequest) {
        let mut queue = lock(&self.queue);
        let at = queue.handed;
        queue.offered.push_back(Offer { index, request, at });
    }

    /// Counts a window handed out to a worker (a screening one: spare ones count themselves).
    pub(crate) fn handed(&self) {
        lock(&self.queue).handed += 1;
    }

    /// The oldest spare window due (its screening at least [`Spare::for_round`]'s spacing of
    /// windows ago), taken off
    /// the offer: the choice's stable index and the request.
    pub(crate) fn take(&self) -> Option<(usize, BenchmarkRequest)> {
        let mut queue = lock(&self.queue);
        let handed = queue.handed;
        let due = queue
            .offered
            .iter()
            .position(|o| handed >= o.at + self.spacing)?;
        let offer = queue.offered.remove(due)?;
        queue.handed += 1;
        Some((offer.index, offer.request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_window_waits_for_other_windows_after_its_screening() {
        let spare = Spare::for_round(4);
        let request = BenchmarkRequest::new(tunebox_protocol::DiagnosticTask::Sleep { ms: 1 });
        spare.offer(7, request.clone());
        assert!(spare.take().is_none(), "just screened");
        spare.handed();
        assert!(spare.take().is_none());
        spare.handed();
        spare.offer(8, request);
        assert_eq!(spare.take().map(|(i, _)| i), Some(7));
        // 8 was offered after two windows; the spare window of 7 counts as one more.
        assert!(spare.take().is_none());
        spare.handed();
        assert_eq!(spare.take().map(|(i, _)| i), Some(8));
        assert!(spare.take().is_none());
    }

    /// Screening 20 choices, a spare window waits for 10 other windows: half a round.
    #[test]
    fn a_spare_window_waits_half_a_round_of_a_large_screening() {
        let spare = Spare::for_round(20);
        let request = BenchmarkRequest::new(tunebox_protocol::DiagnosticTask::Sleep { ms: 1 });
        spare.offer(3, request);
        for _ in 0..9 {
            spare.handed();
            assert!(spare.take().is_none());
        }
        spare.handed();
        assert_eq!(spare.take().map(|(i, _)| i), Some(3));
    }
}
