"""Kernel Tuner's search strategies in its simulation mode on the benchmark hub's recorded spaces.

Run by `cargo xtask strategies` (through `benchmarks/strategies`) when Kernel Tuner is
installed in `target/kernel-tuner-venv` (or `$KT_VENV`); see docs/search.md.

    strategies.py BUDGETS.json OUT.json [--seeds N] [--strategies a,b,...] [--jobs J]

BUDGETS.json is written by the Rust side: per space its name, Kernel Tuner cache file (.json or
.json.gz), T1 file (whose Conditions are the restrictions) and simulated time budget `end_ms`.
Each strategy runs once per seed (Python's `random` and NumPy's global generator seeded, and
SciPy's Latin hypercube, which diff_evo starts from, seeded from them) with
`strategy_options={"time_limit": ...}`; its trace is rebuilt from the returned results in
evaluation order on tunebox's clock: the first evaluation of a configuration costs its recorded
compile + verification + benchmark + framework time (as tunebox's replay counts it), a repeat
costs nothing (as Kernel Tuner's simulation runner does). OUT.json holds per space and strategy
one trace per seed, `[[elapsed_ms, best_ms or null], ...]`, cut at `end_ms`.
"""

import argparse
import gzip
import json
import math
import os
import random
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

DEFAULT_STRATEGIES = [
    "random_sample",
    "genetic_algorithm",
    "simulated_annealing",
    "greedy_ils",
    "diff_evo",
    "bayes_opt",
    "mls",
    "pso",
    "dual_annealing",
    "basinhopping",
]

# Kernel Tuner's time limit counts the real (Python) time spent as well as the recorded compile,
# verification and benchmark times, but not the recorded framework time: give it headroom and cut
# the trace at the budget on tunebox's clock.
TIME_HEADROOM = 1.3

# Seeds at most for strategies too slow for the full count: Kernel Tuner's bayes_opt takes about
# two minutes per run on the largest budget (about 900 evaluations) on one core.
SLOW = {"bayes_opt": 1}


def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load_space(space, workdir):
    """The cache (decompressed to workdir), its records and the T1 restrictions."""
    path = space["cache"]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        cache = json.load(f)
    plain = os.path.join(workdir, space["name"].replace(" ", "_") + ".json")
    with open(plain, "w") as f:
        json.dump(cache, f)
    with open(space["t1"]) as f:
        t1 = json.load(f)
    restrictions = [c["Expression"] for c in t1["ConfigurationSpace"].get("Conditions", [])]
    records = {}
    for key, r in cache["cache"].items():
        cost = sum(
            r[k]
            for k in ("compile_time", "verification_time", "benchmark_time", "framework_time")
            if finite(r.get(k))
        )
        t = r.get("time")
        records[key] = (t if finite(t) else None, cost)
    return cache, plain, restrictions, records


def seed_latin_hypercube():
    """Kernel Tuner's diff_evo (and others) start from `scipy.stats.qmc.LatinHypercube(d)` without
    a seed, so their runs differ every time: give it one drawn from NumPy's seeded global generator
    (Kernel Tuner imports the class inside the function that uses it, so patching the module
    attribute reaches it)."""
    import inspect

    import numpy as np
    import scipy.stats.qmc as qmc

    base = getattr(qmc, "_tunebox_unseeded_lhs", qmc.LatinHypercube)
    key = "rng" if "rng" in inspect.signature(base.__init__).parameters else "seed"

    class SeededLatinHypercube(base):
        def __init__(self, d, **kwargs):
            if kwargs.get(key) is None:
                kwargs[key] = np.random.randint(2**31 - 1)
            super().__init__(d, **kwargs)

    qmc._tunebox_unseeded_lhs = base
    qmc.LatinHypercube = SeededLatinHypercube


def run_one(args):
    space, plain, restrictions, strategy, seed = args
    import numpy as np
    import kernel_tuner

    with open(plain) as f:
        header = json.load(f)
    random.seed(seed)
    np.random.seed(seed)
    seed_latin_hypercube()
    records = _RECORDS[space["name"]]
    keys = header["tune_params_keys"]
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _env = kernel_tuner.tune_kernel(
            header["kernel_name"],
            "__global__ void dummy() {}",
            tuple(header["problem_size"]),
            [],
            header["tune_params"],
            restrictions=restrictions,
            lang="CUDA",
            simulation_mode=True,
            cache=plain,
            strategy=strategy,
            strategy_options={
                "time_limit": space["end_ms"] / 1000.0 * TIME_HEADROOM,
                # Several strategies default to 100 evaluations (random_sample to 10%): let the
                # time limit decide.
                "max_fevals": len(records),
            },
            verbose=False,
            quiet=True,
        )
    wall = time.perf_counter() - started
    seen = set()
    elapsed, best, trace = 0.0, None, []
    for r in results:
        if not r:
            continue
        key = ",".join(str(r[k]) for k in keys)
        if key in seen:
            continue
        seen.add(key)
        t, cost = records.get(key, (None, 0.0))
        if elapsed >= space["end_ms"]:
            break
        elapsed += cost
        if t is not None:
            best = t if best is None else min(best, t)
        trace.append([elapsed, best])
    return space["name"], strategy, seed, trace, wall


_RECORDS = {}


def _init(records):
    _RECORDS.update(records)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("budgets")
    ap.add_argument("out")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    with open(a.budgets) as f:
        budgets = json.load(f)

    import importlib

    from kernel_tuner.interface import strategy_map

    strategies, skipped = [], {}
    for s in a.strategies.split(","):
        if s not in strategy_map:
            skipped[s] = "not a strategy of this Kernel Tuner"
            continue
        try:
            importlib.import_module(strategy_map[s]._module_path)
            strategies.append(s)
        except Exception as e:  # an optional dependency is missing
            skipped[s] = f"{type(e).__name__}: {e}"
    for s, why in skipped.items():
        print(f"kt-strategies: skipping {s}: {why}", file=sys.stderr)

    started = time.perf_counter()
    out = {
        "kernel_tuner": __import__("kernel_tuner").__version__
        if hasattr(__import__("kernel_tuner"), "__version__")
        else "",
        "seeds": a.seeds,
        "slow_seeds": {s: n for s, n in SLOW.items() if n < a.seeds},
        "jobs": a.jobs,
        "skipped": skipped,
        "wall_s": {},
        "spaces": {},
    }
    with tempfile.TemporaryDirectory() as workdir:
        records, jobs = {}, []
        for space in budgets["spaces"]:
            _cache, plain, restrictions, recs = load_space(space, workdir)
            records[space["name"]] = recs
            out["spaces"][space["name"]] = {s: [] for s in strategies}
            for s in strategies:
                for seed in range(min(a.seeds, SLOW.get(s, a.seeds))):
                    jobs.append((space, plain, restrictions, s, seed))
        # The slow ones first, so that they do not finish last alone.
        jobs.sort(key=lambda j: j[3] not in SLOW)
        failed = {}
        with ProcessPoolExecutor(a.jobs, initializer=_init, initargs=(records,)) as pool:
            futures = [(j, pool.submit(run_one, j)) for j in jobs]
            for j, fut in futures:
                try:
                    name, s, seed, trace, wall = fut.result()
                except Exception as e:
                    failed.setdefault(j[3], f"{type(e).__name__}: {e}")
                    continue
                out["spaces"][name][s].append(trace)
                out["wall_s"][s] = out["wall_s"].get(s, 0.0) + wall
    for s, why in failed.items():
        print(f"kt-strategies: {s} failed: {why}", file=sys.stderr)
        skipped[s] = f"failed: {why}"
        for per in out["spaces"].values():
            per.pop(s, None)
    out["total_wall_s"] = time.perf_counter() - started
    for s, w in sorted(out["wall_s"].items(), key=lambda x: -x[1]):
        print(f"kt-strategies: {s}: {w:.1f} s (sum over runs)", file=sys.stderr)
    with open(a.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
