#!/usr/bin/env python3
"""What a run's rounds buy: `tunebox tune --fresh MANIFEST` under each set of extra arguments,
interleaved, RUNS times each, every run with an empty results and kernel cache; for each set,
the wall time and how well its runs agree (Spearman's rank correlation of every pair of runs'
`ok` medians, and the top-1 regret: how much slower one run's best is in another run), min /
median / max.

    benchmarks/windows/rounds.py examples/histogram-omp.toml 4 "" "--rounds 2" "--rounds 0"

The binary is target/release/tunebox, or $TUNEBOX_BIN. An empty set ("") is the defaults."""

import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time


def run(binary: str, manifest: str, extra: list[str]) -> tuple[float, dict[str, float]]:
    """One fresh run: its wall time (s) and its `ok` choices' medians (ms) by choice."""
    with tempfile.TemporaryDirectory() as cache:
        report = os.path.join(cache, "report.json")
        started = time.monotonic()
        subprocess.run(
            [binary, "tune", "--fresh", manifest, "--json", report, *extra],
            env={**os.environ, "TUNEBOX_CACHE_DIR": cache},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
        )
        wall = time.monotonic() - started
        with open(report) as f:
            results = json.load(f)["results"]
    medians = {
        json.dumps(r["choice"], sort_keys=True): r["median_ms"]
        for r in results
        if r["status"] == "ok"
    }
    return wall, medians


def ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=values.__getitem__)
    rank = [0] * len(values)
    for position, index in enumerate(order):
        rank[index] = position
    return rank


def spearman(a: dict[str, float], b: dict[str, float]) -> float:
    keys = sorted(set(a) & set(b))
    n = len(keys)
    if n < 2:
        return 1.0
    ra, rb = ranks([a[k] for k in keys]), ranks([b[k] for k in keys])
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def regret(a: dict[str, float], b: dict[str, float]) -> float:
    """How much slower (%) run `a`'s best choice is in run `b` than `b`'s own best."""
    best = min(a, key=a.__getitem__)
    return 100 * (b[best] / min(b.values()) - 1) if best in b else float("nan")


def spread(values: list[float], unit: str = "") -> str:
    return " / ".join(
        f"{v:.3f}{unit}" for v in (min(values), statistics.median(values), max(values))
    )


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    manifest, runs = sys.argv[1], int(sys.argv[2])
    sets = [shlex.split(s) for s in sys.argv[3:]]
    binary = os.environ.get("TUNEBOX_BIN", "target/release/tunebox")
    measured: list[list[tuple[float, dict[str, float]]]] = [[] for _ in sets]
    for _ in range(runs):
        for i, extra in enumerate(sets):
            measured[i].append(run(binary, manifest, extra))
    for extra, results in zip(sets, measured):
        walls = [wall for wall, _ in results]
        pairs = list(itertools.combinations([m for _, m in results], 2))
        rho = [spearman(a, b) for a, b in pairs] or [1.0]
        lost = [regret(a, b) for a, b in itertools.permutations([m for _, m in results], 2)] or [
            0.0
        ]
        print(
            f"{' '.join(extra) or 'defaults':20s} wall {spread(walls, ' s')}  "
            f"Spearman {spread(rho)}  regret {spread(lost, ' %')}"
        )


if __name__ == "__main__":
    main()
