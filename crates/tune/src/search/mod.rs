//! Search: which choices a run measures, and in what order. The [`strategy::Strategy`] trait
//! with brute force and random sampling, the adaptive [`strategies`], and [`replay`], which runs
//! a strategy on recorded measurements in simulated time.
//!
//! It imports the base, the search space, the manifest and the results (what a strategy is told);
//! never measuring, reporting or the run.

pub mod replay;
pub mod strategies;
pub(crate) mod strategy;
