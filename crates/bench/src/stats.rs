//! Summary statistics of timed reps.

use tunebox_protocol::TimingStats;

/// The `q` quantile (0 ≤ q ≤ 1) of ascending `sorted` samples, by linear interpolation between
/// the two nearest ranks (numpy's default, which triton's `do_bench` quantiles use). `NaN` for an
/// empty slice. ([`TimingStats::quantile`].)
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    TimingStats::quantile(sorted, q)
}

/// Summarizes rep times in ms. `samples` may be in any order; NaN samples sort last.
/// ([`TimingStats::from_samples`].)
pub fn summarize(samples: &[f64], warmup_reps: u32) -> TimingStats {
    TimingStats::from_samples(samples, warmup_reps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_like_numpy() {
        let s = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&s, 0.5), 2.5);
        assert!((quantile(&s, 0.2) - 1.6).abs() < 1e-12);
        assert!((quantile(&s, 0.8) - 3.4).abs() < 1e-12);
        assert_eq!(quantile(&s, 0.0), 1.0);
        assert_eq!(quantile(&s, 1.0), 4.0);
        assert_eq!(quantile(&[7.0], 0.2), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn summary_of_unsorted_samples() {
        let stats = summarize(&[3.0, 1.0, 2.0, 5.0, 4.0], 2);
        assert_eq!(stats.median_ms, 3.0);
        assert_eq!(stats.mean_ms, 3.0);
        assert_eq!(stats.min_ms, 1.0);
        assert_eq!(stats.max_ms, 5.0);
        assert_eq!(stats.reps, 5);
        assert_eq!(stats.warmup_reps, 2);
        assert!((stats.stddev_ms - 2.5f64.sqrt()).abs() < 1e-12);
        assert!((stats.noise() - (4.2 - 1.8) / 3.0).abs() < 1e-12);
    }
}
