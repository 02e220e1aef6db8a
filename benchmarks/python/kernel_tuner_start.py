"""What a worker process costs `tunebox.kernel_tuner.tune_kernel` (issue 33; docs/python.md).

Two figures, each the median of --repeat runs (with the min and max):

- start: one worker executable started by hand until it exits (it says it needs a parent, after
  the start-up every worker makes): the Rust worker the extension carries
  (``tunebox._native.engine_worker()``) and the Python launcher it falls back to
  (``python -IS``, the extension alone), each --starts times;
- run: a ``tune_kernel`` call over a tiny kernel with --choices configurations, a fresh worker
  process for every window (the default), and its windows, so that wall / windows is the
  per-window cost; ``--worker python`` runs it with the Python launcher.

Run it with the package installed (``cargo xtask python-test`` builds it into
target/python/venv): ``target/python/venv/bin/python benchmarks/python/kernel_tuner_start.py``.
With the package of an older checkout first on ``PYTHONPATH`` it measures that one (its
``tune_kernel`` has no ``engine_worker``: only the run is measured, with its launcher).
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SOURCE = "void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * F + G; }"


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def start_ms(command, starts):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEBOX_WORKER")}
    times = []
    for _ in range(starts):
        began = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True)
        times.append((time.perf_counter() - began) * 1e3)
        if done.returncode != 2:
            sys.exit(f"{command}: exit {done.returncode}, {done.stderr.decode()[-500:]}")
    return statistics.median(times)


def run_once(choices, worker_kind):
    import numpy as np

    import tunebox.kernel_tuner as kt

    x = np.ones(256, np.float32)
    params = {"F": list(range(1, choices + 1)), "G": [0]}
    with contextlib.ExitStack() as stack:
        if worker_kind == "python" and hasattr(kt, "_python_worker"):
            folder = stack.enter_context(tempfile.TemporaryDirectory())
            python_launcher = kt._python_worker(folder)

            @contextlib.contextmanager
            def python_worker():
                yield python_launcher

            stack.enter_context(_patched(kt, "_worker", python_worker))
        began = time.perf_counter()
        results, env = kt.tune_kernel("scale", SOURCE, 256, [x, np.int32(256)], params, quiet=True)
        wall = time.perf_counter() - began
    assert all(r["status"] == "ok" for r in results), results
    windows = sum(
        len((r.get("windows") or {}).get("medians_ms", [])) for r in env["report"]["results"]
    )
    return wall, windows


@contextlib.contextmanager
def _patched(owner, name, value):
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--starts", type=int, default=50)
    parser.add_argument("--choices", type=int, default=32)
    parser.add_argument("--worker", choices=["rust", "python"], default="rust")
    parser.add_argument("--skip-start", action="store_true")
    args = parser.parse_args()
    import tunebox.kernel_tuner as kt
    from tunebox import _native

    out = {"package": os.path.dirname(_native.__file__), "worker": args.worker}
    if not args.skip_start and hasattr(_native, "engine_worker"):
        with tempfile.TemporaryDirectory() as folder:
            launcher = kt._python_worker(folder)
            rust = [str(_native.engine_worker())]
            out["start_ms"] = {
                "rust": spread([start_ms(rust, args.starts) for _ in range(args.repeat)]),
                "python_launcher": spread(
                    [start_ms([launcher], args.starts) for _ in range(args.repeat)]
                ),
            }
    runs = [run_once(args.choices, args.worker) for _ in range(args.repeat)]
    out["run"] = {
        "choices": args.choices,
        "wall_s": spread([w for w, _ in runs]),
        "windows": spread([n for _, n in runs]),
        "ms_per_window": spread([1e3 * w / n for w, n in runs]),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
