//! The share of a request's timeout its worker may spend measuring
//! ([`TimingConfig::BUDGET_SHARE`](crate::TimingConfig::BUDGET_SHARE)): one fact, read by the
//! timing config that sets the budget and by the error that suggests a timeout.

/// Share of a request's timeout that the worker's measurement gets as its budget.
pub(crate) const BUDGET_SHARE: f64 = 0.8;
