"""Scores search traces with the `autotuning-methodology` package (Willemsen et al., FGCS 2024).

The reference scorer for `cargo xtask strategies` (docs/search.md): the package's own classes
compute the random baseline, the budget and each strategy's curve; only the loading is replaced,
because the traces come from tunebox's replay and Kernel Tuner's simulation mode rather than
from the package's experiment runner.

    methodology.py TRACES.json OUT.json [--bagging-seeds K]

TRACES.json (written by the Rust side, `strategies::score::write_traces`):

    {"cutoff": 0.95, "cutoff_start": 0.01, "resolution": 1000, "confidence": 0.95,
     "spaces": [{"name": ..., "performance": [ms or null per configuration],
                 "cost_s": [s per configuration],
                 "strategies": {NAME: [[[elapsed_s, best_ms or null], ...] per run]}}]}

OUT.json: per space and strategy the package's score (the mean over the time range of the
standardised curve, as `report_experiments.get_strategy_scores` computes it), once per bagging
seed (the package fits its curve with scikit-learn's BaggingRegressor, which draws from NumPy's
global generator: seeded here, seeds 0..K-1), with their mean.
"""

import argparse
import json
import sys
import warnings

import numpy as np
from autotuning_methodology.baseline import RandomSearchCalculatedBaseline
from autotuning_methodology.curves import StochasticOptimizationAlgorithm
from autotuning_methodology.searchspace_statistics import SearchspaceStatistics


class Stats(SearchspaceStatistics):
    """The package's searchspace statistics over given arrays instead of a T4 file."""

    def __init__(self, name, performance, cost_s):
        self.loaded = True
        self.application_name = name
        self.device_name = name
        self.minimization = True
        self.objective_time_keys = ["all"]
        self.objective_performance_keys = ["time"]
        perf = np.array([np.nan if p is None else p for p in performance], dtype=float)
        times = np.array(cost_s, dtype=float)
        self.size = perf.shape[0]
        self.objective_times = {"all": times}
        self.objective_times_array = times.reshape(1, -1)
        self.objective_performances = {"time": perf}
        self.objective_performances_array = perf.reshape(1, -1)
        self.objective_times_total = times
        self.objective_performances_total = perf
        self.objective_times_total_sorted = np.sort(times[~np.isnan(times)])
        nan = np.isnan(perf)
        self.objective_performances_number_of_nan = int(np.count_nonzero(nan))
        self.objective_performances_total_sorted = np.sort(perf[~nan])
        self.objective_performances_total_sorted_nan = np.concatenate(
            (self.objective_performances_total_sorted, [np.nan] * self.objective_performances_number_of_nan)
        )


class Runs(StochasticOptimizationAlgorithm):
    """The package's curve of a stochastic strategy over given runs instead of a results file."""

    def __init__(self, name, space, runs):
        self.name = name
        self.display_name = name
        self.device_name = space
        self.application_name = space
        self.stochastic = True
        self.minimization = True
        longest = max(len(r) for r in runs)
        shape = (longest, len(runs))
        self._x_fevals = np.full(shape, np.nan)
        self._x_time = np.full(shape, np.nan)
        self._y = np.full(shape, np.nan)
        for j, run in enumerate(runs):
            for i, (t, best) in enumerate(run):
                self._x_fevals[i, j] = i + 1
                self._x_time[i, j] = t
                if best is not None:
                    self._y[i, j] = best
        self._x_time_per_key = self._x_time.reshape(1, *shape)
        self._y_per_key = self._y.reshape(1, *shape)


def score(stats, curve, time_range, confidence):
    """The package's score of one strategy on one space (report_experiments.py's steps)."""
    baseline = RandomSearchCalculatedBaseline(stats)
    dist = stats.objective_performances_total_sorted
    parts = curve.get_curve_over_time(time_range, dist=dist, confidence_level=confidence)
    _, x_real, c_real, lo_real, up_real, x_fict, c_fict, lo_fict, up_fict = parts
    combine = x_fict.ndim > 0
    full = np.concatenate([c_real, c_fict]) if combine else c_real
    (standardised,) = baseline.get_standardised_curves(time_range, [full], x_type="time")
    return float(np.mean(standardised))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("traces")
    ap.add_argument("out")
    ap.add_argument("--bagging-seeds", type=int, default=5)
    a = ap.parse_args()
    with open(a.traces) as f:
        doc = json.load(f)
    out = {"bagging_seeds": a.bagging_seeds, "spaces": {}}
    for space in doc["spaces"]:
        stats = Stats(space["name"], space["performance"], space["cost_s"])
        f_start, f_end, t_start, t_end = stats.cutoff_point_fevals_time_start_end(
            doc.get("cutoff_start", 0.01), doc.get("cutoff", 0.95)
        )
        time_range = np.linspace(t_start, t_end, int(doc.get("resolution", 1000)))
        per = {"budget_s": [t_start, t_end], "fevals": [int(f_start), int(f_end)], "strategies": {}}
        for name, runs in space["strategies"].items():
            curve = Runs(name, space["name"], runs)
            seeds = []
            for seed in range(a.bagging_seeds):
                np.random.seed(seed)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    try:
                        seeds.append(score(stats, curve, time_range, doc.get("confidence", 0.95)))
                    except ValueError as e:
                        seeds.append(None)
                        per.setdefault("refused", {})[name] = str(e.args[0])[:200]
            ok = [s for s in seeds if s is not None]
            per["strategies"][name] = {
                "per_seed": seeds,
                "score": float(np.mean(ok)) if ok else None,
                "std": float(np.std(ok)) if ok else None,
            }
        out["spaces"][space["name"]] = per
        print(f"methodology: {space['name']} scored", file=sys.stderr)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
