//! Order statistics over samples, and the loop that collects them.

use anyhow::{Result, bail};

/// Median, 90th percentile and minimum (plus mean and maximum) of a set of samples.
///
/// Percentiles interpolate linearly between the closest ranks, as numpy's default
/// (`numpy.percentile(x, q, method="linear")`), so the median of an even count is the mean of the
/// two middle samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Summary {
    /// Number of samples.
    pub(crate) n: usize,
    /// 50th percentile.
    pub(crate) median: f64,
    /// 90th percentile.
    pub(crate) p90: f64,
    /// Smallest sample.
    pub(crate) min: f64,
    /// Largest sample.
    pub(crate) max: f64,
    /// Arithmetic mean.
    pub(crate) mean: f64,
}

impl Summary {
    /// Summarizes `samples` (in any order).
    ///
    /// # Errors
    ///
    /// No samples, or a sample that is NaN.
    pub(crate) fn of(samples: &[f64]) -> Result<Summary> {
        if samples.is_empty() {
            bail!("no samples to summarize");
        }
        if samples.iter().any(|s| s.is_nan()) {
            bail!("a sample is NaN");
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Ok(Summary {
            n: sorted.len(),
            median: percentile_sorted(&sorted, 50.0),
            p90: percentile_sorted(&sorted, 90.0),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
        })
    }
}

/// The `q`-th percentile (0..=100) of `sorted` (ascending, not empty), interpolating linearly
/// between the closest ranks.
fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    let rank = q / 100.0 * (sorted.len() - 1) as f64;
    let lower = rank.floor() as usize;
    let upper = rank.ceil() as usize;
    let fraction = rank - lower as f64;
    sorted[lower] + (sorted[upper] - sorted[lower]) * fraction
}

/// Runs `measure` `warmup` times (results discarded) and then `n` times, returning the `n`
/// values it measured. Stops at the first error.
///
/// # Errors
///
/// The first error of `measure`, with the sample's index as context.
pub(crate) fn collect(
    warmup: usize,
    n: usize,
    mut measure: impl FnMut() -> Result<f64>,
) -> Result<Vec<f64>> {
    for i in 0..warmup {
        measure().map_err(|e| e.context(format!("warmup run {i}")))?;
    }
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        samples.push(measure().map_err(|e| e.context(format!("sample {i} of {n}")))?);
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_count_median_is_the_middle_sample() {
        let s = Summary::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!(s.median, 3.0);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 5.0);
        assert_eq!(s.mean, 3.0);
        assert_eq!(s.n, 3);
    }

    #[test]
    fn even_count_median_interpolates() {
        let s = Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
    }

    #[test]
    fn p90_matches_numpy() {
        // numpy.percentile(range(1, 11), 90) == 9.1
        let samples: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = Summary::of(&samples).unwrap();
        assert!((s.p90 - 9.1).abs() < 1e-12, "{}", s.p90);
        // numpy.percentile(range(0, 101), 90) == 90.0
        let samples: Vec<f64> = (0..=100).map(f64::from).collect();
        assert_eq!(Summary::of(&samples).unwrap().p90, 90.0);
    }

    #[test]
    fn one_sample_is_every_statistic() {
        let s = Summary::of(&[7.5]).unwrap();
        assert_eq!((s.median, s.p90, s.min, s.max), (7.5, 7.5, 7.5, 7.5));
    }

    #[test]
    fn empty_and_nan_are_errors() {
        assert!(Summary::of(&[]).is_err());
        assert!(Summary::of(&[1.0, f64::NAN]).is_err());
    }

    #[test]
    fn collect_discards_warmup_and_reports_errors() {
        let mut calls = 0;
        let samples = collect(2, 3, || {
            calls += 1;
            Ok(f64::from(calls))
        })
        .unwrap();
        assert_eq!(samples, vec![3.0, 4.0, 5.0]);
        let err = collect(0, 3, || bail!("boom")).unwrap_err();
        assert!(format!("{err:#}").contains("sample 0 of 3"), "{err:#}");
    }
}
