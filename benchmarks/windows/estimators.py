#!/usr/bin/env python3
"""Re-estimates each choice's time from the windows recorded in tunebox's JSON reports (the
runs `cargo xtask agreement` leaves in target/agreement/run-*.json) with other statistics, and
prints how well the runs then agree: Spearman's rank correlation over every pair of runs, and
the top-1 regret (run i's best as run j measured it, against run j's best), min / median / max.

    benchmarks/windows/estimators.py target/agreement/run-idle-?.json

Statistics: the fastest window (tunebox's estimate), the median window, and both after dividing
each window by the machine's slowdown at its time, taken from the other choices' windows that
ended within TAU seconds of it (their median ratio to their own estimate): the comparison of
issue 33, whether the run's own windows can take out the machine's drift."""

import itertools
import json
import statistics
import sys
from typing import Callable

Windows = dict[str, list[tuple[float, float]]]  # choice -> [(ended_s, median_ms)]


def load(path: str) -> Windows:
    report = json.load(open(path))
    runs: Windows = {}
    for result in report["results"]:
        windows = result.get("windows")
        if result["status"] != "ok" or not windows:
            continue
        label = " ".join(f"{k}={v}" for k, v in result["choice"].items())
        runs[label] = list(zip(windows["ended_s"], windows["medians_ms"]))
    return runs


def fastest(run: Windows) -> dict[str, float]:
    return {c: min(ms for _, ms in w) for c, w in run.items()}


def median(run: Windows) -> dict[str, float]:
    return {c: statistics.median(ms for _, ms in w) for c, w in run.items()}


def drift_corrected(
    tau: float, pick: Callable[[list[float]], float]
) -> Callable[[Windows], dict[str, float]]:
    def estimate(run: Windows) -> dict[str, float]:
        est = fastest(run)
        every = [(t, c, ms) for c, w in run.items() for t, ms in w]
        for _ in range(3):
            corrected = {}
            for c, w in run.items():
                values = []
                for t, ms in w:
                    near = [m / est[o] for (u, o, m) in every if o != c and abs(u - t) <= tau]
                    slowdown = statistics.median(near) if len(near) >= 3 else 1.0
                    values.append(ms / slowdown)
                corrected[c] = pick(values)
            est = corrected
        return est

    return estimate


def ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0] * len(values)
    for rank, i in enumerate(order):
        out[i] = rank
    return out


def spearman(a: dict[str, float], b: dict[str, float]) -> float:
    keys = sorted(set(a) & set(b))
    x, y = ranks([a[k] for k in keys]), ranks([b[k] for k in keys])
    n = len(keys)
    return 1 - 6 * sum((p - q) ** 2 for p, q in zip(x, y)) / (n * (n * n - 1))


def regret(a: dict[str, float], b: dict[str, float]) -> float:
    return b[min(a, key=a.get)] / b[min(b, key=b.get)] - 1


def main() -> None:
    runs = [load(path) for path in sys.argv[1:]]
    if len(runs) < 2:
        sys.exit("usage: estimators.py RUN.json RUN.json...")
    statistics_ = {
        "fastest window (tunebox)": fastest,
        "median window": median,
        "drift-corrected fastest, 0.15 s": drift_corrected(0.15, min),
        "drift-corrected median, 0.15 s": drift_corrected(0.15, statistics.median),
        "drift-corrected fastest, 0.3 s": drift_corrected(0.3, min),
        "drift-corrected median, 0.3 s": drift_corrected(0.3, statistics.median),
    }
    for name, estimate in statistics_.items():
        est = [estimate(run) for run in runs]
        rho = [spearman(a, b) for a, b in itertools.combinations(est, 2)]
        lost = [100 * regret(a, b) for a, b in itertools.permutations(est, 2)]
        print(
            f"{name:34s} Spearman {min(rho):.3f} / {statistics.median(rho):.3f} / "
            f"{max(rho):.3f}   regret {min(lost):.1f} / {statistics.median(lost):.1f} / "
            f"{max(lost):.1f} % (mean {statistics.mean(lost):.2f} %)"
        )


if __name__ == "__main__":
    main()
