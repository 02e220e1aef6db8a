//! Measuring: the workers that time the choices ([`workers`]), where their stdout goes
//! ([`worker_stdout`]), and the engine's half of the integrity checks ([`integrity`]).
//!
//! It imports the base, the search space, the manifest and the results (what a measurement
//! becomes); never search, reporting or the run.

pub(crate) mod integrity;
pub(crate) mod worker_stdout;
pub(crate) mod workers;
