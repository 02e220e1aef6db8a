//! Bayesian optimization with a Gaussian process, after Kernel Tuner's `bayes_opt` strategy
//! (`kernel_tuner/strategies/bayes_opt.py`; Willemsen, van Nieuwpoort, van Werkhoven, "Bayesian
//! Optimization for auto-tuning GPU kernels", PMBS 2021) and Snoek, Larochelle, Adams,
//! "Practical Bayesian Optimization of Machine Learning Algorithms", 2012:
//!
//! - a choice is the vector of its value indices, each scaled to [0, 1];
//! - the model is a Gaussian process with an RBF kernel on the logarithm of the times
//!   (standardized), a failed choice taking the worst time seen; the length scale is picked
//!   from a small grid by marginal likelihood at every fit, the noise is fixed at 1e-4;
//! - the first 10 choices are random (Kernel Tuner starts from a random sample too); then each
//!   next choice maximizes expected improvement (ξ = 0.01) over a pool of 128 random unvisited
//!   choices and the unvisited adjacent neighbours of the 5 best so far;
//! - the model is fitted on at most 128 points (the best half and the most recent half), so
//!   that a step stays cheap under large budgets.

use super::{Core, ask_one};
use crate::results::ChoiceResult;
use crate::search::strategy::Strategy;
use crate::space::SearchSpace;

const INITIAL: usize = 10;
const POOL: usize = 128;
const MAX_POINTS: usize = 128;
const XI: f64 = 0.01;
const NOISE: f64 = 1e-4;
const LENGTH_SCALES: [f64; 4] = [0.1, 0.2, 0.4, 0.8];

/// Bayesian optimization with a Gaussian process and expected improvement (see the module
/// docs).
#[derive(Debug, Clone)]
pub struct BayesianOptimization {
    core: Core,
    pending: Option<usize>,
    /// Every told choice and its objective, in the order told.
    history: Vec<(usize, f64)>,
    /// The length scale chosen at the last selection, and the history length then.
    length: Option<(usize, f64)>,
}

impl BayesianOptimization {
    /// At most `budget` choices, seeded by `seed`.
    pub fn new(budget: usize, seed: u64) -> BayesianOptimization {
        BayesianOptimization {
            core: Core::new(budget, seed),
            pending: None,
            history: Vec::new(),
            length: None,
        }
    }
}

/// The scaled value indices of choice `index`.
fn point(space: &SearchSpace, counts: &[usize], index: usize) -> Vec<f64> {
    space
        .value_indices(index)
        .expect("a choice of the space")
        .iter()
        .zip(counts)
        .map(|(&i, &c)| {
            if c > 1 {
                i as f64 / (c - 1) as f64
            } else {
                0.0
            }
        })
        .collect()
}

pub(crate) fn rbf(a: &[f64], b: &[f64], length: f64) -> f64 {
    let d2: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    (-d2 / (2.0 * length * length)).exp()
}

/// The lower Cholesky factor of `k` (n×n, row-major), `None` when not positive definite.
fn cholesky(k: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = (0..j).map(|m| l[i * n + m] * l[j * n + m]).sum();
            if i == j {
                let v = k[i * n + i] - s;
                if v <= 0.0 {
                    return None;
                }
                l[i * n + i] = v.sqrt();
            } else {
                l[i * n + j] = (k[i * n + j] - s) / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// Solves `L x = b` in place.
fn forward(l: &[f64], n: usize, b: &mut [f64]) {
    for i in 0..n {
        let s: f64 = (0..i).map(|m| l[i * n + m] * b[m]).sum();
        b[i] = (b[i] - s) / l[i * n + i];
    }
}

/// Solves `Lᵀ x = b` in place.
fn backward(l: &[f64], n: usize, b: &mut [f64]) {
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|m| l[m * n + i] * b[m]).sum();
        b[i] = (b[i] - s) / l[i * n + i];
    }
}

/// A fitted Gaussian process.
pub(crate) struct Gp {
    xs: Vec<Vec<f64>>,
    l: Vec<f64>,
    alpha: Vec<f64>,
    length: f64,
}

impl Gp {
    /// Fits `ys` (standardized) at `xs` with length scale `length`, or with the one of
    /// [`LENGTH_SCALES`] (times √dims) of highest marginal likelihood.
    pub(crate) fn fit(
        xs: Vec<Vec<f64>>,
        ys: &[f64],
        dims: usize,
        length: Option<f64>,
    ) -> Option<Gp> {
        let n = xs.len();
        let scale = (dims.max(1) as f64).sqrt();
        let grid: Vec<f64> = match length {
            Some(l) => vec![l],
            None => LENGTH_SCALES.iter().map(|l| l * scale).collect(),
        };
        let mut best: Option<(f64, Gp)> = None;
        for length in grid {
            let mut k = vec![0.0; n * n];
            for i in 0..n {
                for j in 0..=i {
                    let v = rbf(&xs[i], &xs[j], length);
                    k[i * n + j] = v;
                    k[j * n + i] = v;
                }
                k[i * n + i] += NOISE;
            }
            let Some(l) = cholesky(&k, n) else {
                continue;
            };
            let mut alpha = ys.to_vec();
            forward(&l, n, &mut alpha);
            let fit: f64 = alpha.iter().map(|a| a * a).sum();
            let log_det: f64 = (0..n).map(|i| l[i * n + i].ln()).sum();
            let likelihood = -0.5 * fit - log_det;
            backward(&l, n, &mut alpha);
            if best.as_ref().is_none_or(|(b, _)| likelihood > *b) {
                best = Some((
                    likelihood,
                    Gp {
                        xs: Vec::new(),
                        l,
                        alpha,
                        length,
                    },
                ));
            }
        }
        best.map(|(_, mut gp)| {
            gp.xs = xs;
            gp
        })
    }

    /// The length scale it was fitted with.
    pub(crate) fn length(&self) -> f64 {
        self.length
    }

    /// Mean and standard deviation at `x`.
    pub(crate) fn predict(&self, x: &[f64]) -> (f64, f64) {
        let n = self.xs.len();
        let mut k: Vec<f64> = self.xs.iter().map(|xi| rbf(xi, x, self.length)).collect();
        let mean: f64 = k.iter().zip(&self.alpha).map(|(a, b)| a * b).sum();
        forward(&self.l, n, &mut k);
        let var = 1.0 + NOISE - k.iter().map(|v| v * v).sum::<f64>();
        (mean, var.max(1e-12).sqrt())
    }
}

/// The standard normal density and distribution function (erf by Abramowitz & Stegun 7.1.26,
/// error below 1.5e-7).
pub(crate) fn normal(z: f64) -> (f64, f64) {
    let pdf = (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-x * x).exp();
    let cdf = if z >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    };
    (pdf, cdf)
}

impl BayesianOptimization {
    /// The unvisited choice of highest expected improvement.
    fn propose(
        core: &mut Core,
        history: &[(usize, f64)],
        chosen_length: &mut Option<(usize, f64)>,
        space: &SearchSpace,
    ) -> Option<usize> {
        let finite: Vec<f64> = history
            .iter()
            .map(|&(_, v)| v)
            .filter(|v| v.is_finite())
            .collect();
        if history.len() < INITIAL || finite.len() < 2 {
            return core.random_unvisited(space);
        }
        let chosen = training_set(history);
        let ys = standardised_logs(&chosen, &finite);
        let y_best = ys.iter().copied().fold(f64::INFINITY, f64::min);
        let counts = super::counts(space);
        let xs: Vec<Vec<f64>> = chosen
            .iter()
            .map(|&(i, _)| point(space, &counts, i))
            .collect();
        // The length scale is chosen again every 10 points (each choice costs four fits).
        let reuse = chosen_length
            .filter(|&(at, _)| history.len() < at + 10)
            .map(|(_, l)| l);
        let gp = Gp::fit(xs, &ys, counts.len(), reuse)?;
        if reuse.is_none() {
            *chosen_length = Some((history.len(), gp.length));
        }
        candidates(core, space, chosen)
            .into_iter()
            .map(|j| {
                let (mu, sigma) = gp.predict(&point(space, &counts, j));
                let improvement = y_best - mu - XI;
                let z = improvement / sigma;
                let (pdf, cdf) = normal(z);
                (improvement * cdf + sigma * pdf, j)
            })
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
            .map(|(_, j)| j)
    }
}

/// The training set: the whole history, or when it is longer than `MAX_POINTS` its best half
/// and its most recent choices up to `MAX_POINTS`.
fn training_set(history: &[(usize, f64)]) -> Vec<(usize, f64)> {
    if history.len() <= MAX_POINTS {
        return history.to_vec();
    }
    let mut by_value = history.to_vec();
    by_value.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut set: Vec<(usize, f64)> = by_value[..MAX_POINTS / 2].to_vec();
    for &h in history.iter().rev() {
        if set.len() >= MAX_POINTS {
            break;
        }
        if !set.iter().any(|s| s.0 == h.0) {
            set.push(h);
        }
    }
    set
}

/// The training set's objectives as the model fits them: a failure as the worst finite value
/// of the history (`finite`), through [`super::log_cost`], standardised to mean 0 and standard
/// deviation 1.
fn standardised_logs(chosen: &[(usize, f64)], finite: &[f64]) -> Vec<f64> {
    let worst = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let log = super::log_cost(finite);
    let logs: Vec<f64> = chosen
        .iter()
        .map(|&(_, v)| log(if v.is_finite() { v } else { worst }))
        .collect();
    let mean = logs.iter().sum::<f64>() / logs.len() as f64;
    let sd = (logs.iter().map(|y| (y - mean) * (y - mean)).sum::<f64>() / logs.len() as f64)
        .sqrt()
        .max(1e-12);
    logs.iter().map(|y| (y - mean) / sd).collect()
}

/// The candidates the expected improvement is computed for: the unvisited neighbours of the
/// best 5 of the training set, then up to `POOL` random unvisited choices.
fn candidates(core: &mut Core, space: &SearchSpace, mut chosen: Vec<(usize, f64)>) -> Vec<usize> {
    chosen.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut pool: Vec<usize> = Vec::new();
    for &(i, _) in chosen.iter().take(5) {
        for j in Core::neighbours(space, i) {
            if !core.is_visited(j) && !pool.contains(&j) {
                pool.push(j);
            }
        }
    }
    for _ in 0..POOL {
        match core.random_unvisited(space) {
            Some(j) if !pool.contains(&j) => pool.push(j),
            Some(_) => {}
            None => break,
        }
    }
    pool
}

impl Strategy for BayesianOptimization {
    fn name(&self) -> &str {
        "bayes"
    }

    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        let (history, length) = (&self.history, &mut self.length);
        ask_one(
            &mut self.core,
            &mut self.pending,
            space,
            n,
            |core, space| Self::propose(core, history, length, space),
        )
    }

    fn tell(&mut self, index: usize, result: &ChoiceResult) {
        let value = self.core.record(index, result);
        self.history.push((index, value));
        if self.pending == Some(index) {
            self.pending = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_distribution_is_right() {
        let (pdf, cdf) = normal(0.0);
        assert!((pdf - 0.398_942_28).abs() < 1e-6 && (cdf - 0.5).abs() < 1e-6);
        assert!((normal(1.96).1 - 0.975).abs() < 1e-4);
        assert!((normal(-1.0).1 - 0.158_655_25).abs() < 1e-6);
    }

    #[test]
    fn the_gp_interpolates() {
        let xs = vec![vec![0.0], vec![0.5], vec![1.0]];
        let ys = [1.0, -1.0, 0.5];
        let gp = Gp::fit(xs, &ys, 1, None).unwrap();
        for (x, y) in [(0.0, 1.0), (0.5, -1.0), (1.0, 0.5)] {
            let (mu, sigma) = gp.predict(&[x]);
            assert!((mu - y).abs() < 0.05, "{x}: {mu}");
            assert!(sigma < 0.1);
        }
        assert!(gp.predict(&[0.25]).1 > gp.predict(&[0.5]).1);
    }
}
