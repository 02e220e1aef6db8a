//! Measuring: the workers that time the choices ([`workers`]), where their stdout goes
//! ([`worker_stdout`]), the engine's half of the integrity checks ([`integrity`]), and letting
//! go of a window's large outputs off the engine's path ([`release`]).
//!
//! It imports the base, the search space, the manifest and the results (what a measurement
//! becomes); never search, reporting or the run.

pub(crate) mod integrity;
pub(crate) mod release;
pub(crate) mod worker_stdout;
pub(crate) mod workers;
