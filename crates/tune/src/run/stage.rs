//! Where a pipeline ([`pipeline`](super::pipeline)) measures ([`Stage`]), below both the
//! pipeline and its compile threads, and a lock both use.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tunebox_pool::TuningProcessPool;
use tunebox_protocol::TensorData;

use super::lookup::Setup;
use crate::base::observer::Observer;
use crate::base::stop::Stop;
use crate::measure::workers;

/// Where a pipeline measures: the pool, the reference outputs, who watches, when to stop.
pub(crate) struct Stage<'s> {
    pub setup: &'s Setup<'s>,
    pub pool: &'s TuningProcessPool,
    pub reference: Option<&'s [TensorData]>,
    /// The reference that checks reps on varied inputs (`None`: none is checked).
    pub varied: Option<&'s workers::VariedReference>,
    pub observer: &'s dyn Observer,
    pub stop: &'s Stop,
    /// Start no new choice after this (`--max-time`).
    pub deadline: Option<Instant>,
}

impl Stage<'_> {
    /// A stop was asked for, or the time budget is spent ([`Stop::reached`]).
    pub(crate) fn should_stop(&self) -> bool {
        self.stop.reached(self.observer, self.deadline)
    }
}

/// Locks `mutex`, whatever a panicking holder left in it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
