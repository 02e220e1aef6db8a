//! A space's params and restrictions as its solvers read them: what the depth-first walk
//! (`solver.rs`) and the component counter (`count.rs`) both need, below both.

use indexmap::IndexMap;
use tunebox_expr::Value as PyValue;

use super::restriction::Restriction;
use super::value::ParamValue;

/// How often (in partial choices visited) a walk reports its progress.
pub(super) const PROGRESS_EVERY: u64 = 1 << 16;

/// A progress callback: the fraction of the work done so far, 0.0 to 1.0.
pub(super) type Progress<'a> = &'a mut dyn FnMut(f64);

/// The params and restrictions of a space, as the solver walks them.
pub(crate) struct Problem<'a> {
    pub(super) names: Vec<&'a str>,
    pub(super) params: &'a IndexMap<String, Vec<ParamValue>>,
    pub(super) values: Vec<Vec<PyValue<'a>>>,
    pub(super) restrictions: &'a [Restriction],
    /// Each param's value count.
    pub(super) radix: Vec<u64>,
    /// Each param's weight in a choice's rank (the product of the later params' counts).
    pub(super) weight: Vec<u128>,
}

impl<'a> Problem<'a> {
    /// The problem of `params` (in manifest order) under `restrictions`.
    pub(crate) fn new(
        params: &'a IndexMap<String, Vec<ParamValue>>,
        restrictions: &'a [Restriction],
    ) -> Problem<'a> {
        let radix: Vec<u64> = params.values().map(|v| v.len() as u64).collect();
        let mut weight = vec![1u128; radix.len()];
        for p in (0..radix.len().saturating_sub(1)).rev() {
            weight[p] = weight[p + 1].saturating_mul(u128::from(radix[p + 1]));
        }
        Problem {
            names: params.keys().map(String::as_str).collect(),
            params,
            values: params
                .values()
                .map(|vs| vs.iter().map(ParamValue::to_python).collect())
                .collect(),
            restrictions,
            radix,
            weight,
        }
    }
}
