//! Summary statistics of timed reps.

use tunebox_protocol::TimingStats;

/// The `q` quantile (0 ≤ q ≤ 1) of ascending `sorted` samples, by linear interpolation between
/// the two nearest ranks (numpy's default, which triton's `do_bench` quantiles use). `NaN` for an
/// empty slice.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted {
        [] => f64::NAN,
        [only] => *only,
        _ => {
            let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = pos.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        }
    }
}

/// Summarizes rep times in ms. `samples` may be in any order; NaN samples sort last.
pub fn summarize(samples: &[f64], warmup_reps: u32) -> TimingStats {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let mean = if n == 0 {
        f64::NAN
    } else {
        sorted.iter().sum::<f64>() / n as f64
    };
    let stddev = if n < 2 {
        0.0
    } else {
        (sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    };
    TimingStats {
        median_ms: quantile(&sorted, 0.5),
        mean_ms: mean,
        min_ms: sorted.first().copied().unwrap_or(f64::NAN),
        max_ms: sorted.last().copied().unwrap_or(f64::NAN),
        p20_ms: quantile(&sorted, 0.2),
        p80_ms: quantile(&sorted, 0.8),
        stddev_ms: stddev,
        reps: u32::try_from(n).unwrap_or(u32::MAX),
        warmup_reps,
        stopped: if n == 1 { "single" } else { "reps" }.into(),
        preempted_reps: 0,
    }
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
