"""Makes crates/tune/tests/data/methodology_scores.json: fixed traces on synthetic spaces and the
`autotuning-methodology` package's scores of them, which the Rust port
(`tunebox_tune::strategies::score`) is checked against (`score_agrees_with_the_methodology_package`).

    methodology_fixture.py OUT.json [--bagging-seeds K]

The spaces: uniform objectives with equal costs; a skewed (log-normal) objective with 20% failed,
cheaper configurations; a small space with few runs that stop early. The strategies: random
search, a strategy biased towards good ranks, and one that stops early. Everything is drawn from
seeded generators, so the file is reproducible.
"""

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
from pathlib import Path


def space_uniform(rng):
    perf = [float(v) for v in range(1, 401)]
    rng.shuffle(perf)
    return perf, [1.0] * 400


def space_skewed(rng):
    perf, cost = [], []
    for _ in range(1000):
        if rng.random() < 0.2:
            perf.append(None)
            cost.append(round(rng.uniform(0.2, 0.6), 4))
        else:
            perf.append(round(math.exp(rng.gauss(0.0, 1.0)), 6))
            cost.append(round(rng.uniform(1.0, 3.0), 4))
    return perf, cost


def space_small(rng):
    perf = [round(rng.uniform(10, 20), 5) for _ in range(120)]
    return perf, [round(rng.uniform(0.5, 1.5), 4) for _ in range(120)]


def run(perf, cost, rng, n, bias=None):
    order = list(range(len(perf)))
    if bias is None:
        rng.shuffle(order)
    else:
        ranked = sorted(order, key=lambda i: math.inf if perf[i] is None else perf[i])
        keys = {i: rng.random() ** (1.0 / (1.0 + bias * (len(perf) - r) / len(perf))) for r, i in enumerate(ranked)}
        order.sort(key=lambda i: -keys[i])
    t, best, out = 0.0, None, []
    for i in order[:n]:
        t += cost[i]
        if perf[i] is not None:
            best = perf[i] if best is None else min(best, perf[i])
        out.append([round(t, 6), best])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--bagging-seeds", type=int, default=200)
    a = ap.parse_args()
    rng = random.Random(26)
    spaces = []
    for name, make, n in [("uniform", space_uniform, 80), ("skewed", space_skewed, 250), ("small", space_small, 80)]:
        perf, cost = make(rng)
        strategies = {
            "random": [run(perf, cost, rng, n) for _ in range(20)],
            "biased": [run(perf, cost, rng, n, bias=6.0) for _ in range(10)],
            "early": [run(perf, cost, rng, rng.randint(n // 4, n // 2), bias=2.0) for _ in range(6)],
        }
        spaces.append({"name": name, "performance": perf, "cost_s": cost, "strategies": strategies})
    doc = {"cutoff": 0.95, "cutoff_start": 0.01, "resolution": 1000, "confidence": 0.95, "spaces": spaces}
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory() as d:
        traces, scores = Path(d) / "traces.json", Path(d) / "scores.json"
        traces.write_text(json.dumps(doc))
        subprocess.run(
            [sys.executable, here / "methodology.py", traces, scores, "--bagging-seeds", str(a.bagging_seeds)],
            check=True,
        )
        doc["package"] = json.loads(scores.read_text())
    Path(a.out).write_text(json.dumps(doc, separators=(",", ":")))


if __name__ == "__main__":
    main()
