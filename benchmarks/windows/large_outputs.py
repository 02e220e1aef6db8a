#!/usr/bin/env python3
"""What a verified window of a large problem costs: Kernel Tuner's vector_add (c = a + b, 45
configurations of thread count and vector width) as a tunebox manifest, with `a` and `b` read
from files and `c` checked against expected outputs (Kernel Tuner's `answer`), run by one or
more tunebox binaries in turn, interleaved.

    benchmarks/windows/large_outputs.py [--mi 72 | --n N] [--runs 3] [--dir DIR] BIN [BIN...]

Writes the kernel, the manifest and the data (`a.bin`, `b.bin`, expected `c.bin`: three
tensors of MI Mi float32 each, 288 MiB at 72) into DIR (a temporary folder unless given; the
data is kept there and reused), warms the kernel cache (`DIR/cache`) with one run of the first
binary, then runs each binary RUNS times, one after the other, from the same warm cache, so
that only windows are timed. Needs numpy.

Printed per binary, min / median / max over its runs: the wall time, the windows, the
screening window (the time from the first choice's first window to the last choice's first
window, divided by the windows between: each choice's verified window in a fresh worker) and
the later windows (the median gap between windows after the last first window), and how many
choices ended `ok`. docs/performance.md ("Issue 33, fifth session") has figures and what the
screening window's time goes to.
"""

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Kernel Tuner's example, as the conformance script (Kernel Tuner's `examples/c/vector_add.py`
# with one import changed) holds it: its `kernel_string`.
CONFORMANCE_SCRIPT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "../../crates/python/conformance/kernel_tuner/vector_add.py",
)


def kernel_source():
    """The `kernel_string` of the conformance script, read without running the script."""
    with open(CONFORMANCE_SCRIPT) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "kernel_string" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    sys.exit(f"no kernel_string in {CONFORMANCE_SCRIPT}")


MANIFEST = """name = "large-outputs"
[kernel]
source = "kernel.cpp"
entry = "vector_add"
flags = ["-fopenmp", "-O3"]
[[tensors]]
name = "c"
dtype = "f32"
shape = [{n}]
c_type = "void"
init = "zeros"
output = true
[[tensors]]
name = "a"
dtype = "f32"
shape = [{n}]
c_type = "void"
init = {{ file = "a.bin" }}
[[tensors]]
name = "b"
dtype = "f32"
shape = [{n}]
c_type = "void"
init = {{ file = "b.bin" }}
[[scalars]]
name = "n"
type = "i32"
value = {n}
[params]
nthreads = [1, 2, 3, 4, 8, 12, 16, 24, 32]
vecsize = [1, 2, 4, 8, 16]
[verify]
reference = {{ outputs = {{ c = "c.bin" }} }}
"""


def write_problem(folder, n):
    """The kernel, the manifest and the data for `n` floats per tensor in `folder` (data
    reused when its size matches)."""
    import numpy

    with open(os.path.join(folder, "kernel.cpp"), "w") as f:
        f.write(kernel_source())
    with open(os.path.join(folder, "large.toml"), "w") as f:
        f.write(MANIFEST.format(n=n))
    paths = [os.path.join(folder, name) for name in ("a.bin", "b.bin", "c.bin")]
    if all(os.path.exists(p) and os.path.getsize(p) == 4 * n for p in paths):
        return
    rng = numpy.random.default_rng(0)
    a = rng.standard_normal(n, dtype=numpy.float32)
    b = rng.standard_normal(n, dtype=numpy.float32)
    for array, path in zip((a, b, a + b), paths):
        array.tofile(path)


def run(binary, folder, report):
    """One `tune` run of `binary` in `folder`; its wall time in seconds."""
    env = dict(os.environ, TUNEBOX_CACHE_DIR=os.path.join(folder, "cache"))
    command = [binary, "tune", "large.toml", "--no-cache", "-q", "--json", report]
    started = time.monotonic()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall


def figures(report, wall):
    """(wall s, windows, screening ms per window, later gap ms, ok choices) of one report."""
    with open(report) as f:
        r = json.load(f)
    windows = [x["windows"] for x in r["results"] if x.get("windows")]
    firsts = sorted(w["ended_s"][0] for w in windows)
    ends = sorted(e for w in windows for e in w["ended_s"])
    later = [e for e in ends if e > firsts[-1]]
    gaps = [b - a for a, b in zip(later, later[1:])]
    screening = (firsts[-1] - firsts[0]) / max(len(firsts) - 1, 1) * 1e3
    later_gap = statistics.median(gaps) * 1e3 if gaps else float("nan")
    ok = sum(x["status"] == "ok" for x in r["results"])
    return wall, r["conditions"]["windows"], screening, later_gap, ok


def spread(values, unit):
    values = sorted(values)
    return (
        " / ".join(
            f"{v:.0f}" if unit == "ms" else f"{v:.1f}"
            for v in (values[0], statistics.median(values), values[-1])
        )
        + f" {unit}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binaries", nargs="+", metavar="BIN", help="tunebox binaries")
    parser.add_argument(
        "--mi",
        type=int,
        default=72,
        help="Mi floats per tensor (72); a multiple of 3, or the kernel leaves elements out "
        "for 3, 12 and 24 threads and those choices are wrong",
    )
    parser.add_argument(
        "--n",
        type=int,
        help="floats per tensor, instead of --mi: a multiple of 1536 (every thread count "
        "times every vector width divides it); 75495936 (1536 x 49151) ends within a page, "
        "as most sizes do, where 72 Mi fills whole pages",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per binary (3)")
    parser.add_argument("--dir", help="folder for the problem (a temporary one by default)")
    args = parser.parse_args()
    # The runs start in the problem's folder: a relative path is taken from here.
    args.binaries = [os.path.abspath(b) if os.sep in b else b for b in args.binaries]
    folder = args.dir or tempfile.mkdtemp(prefix="tunebox-large-outputs-")
    os.makedirs(folder, exist_ok=True)
    n = args.n or args.mi * 1024 * 1024
    write_problem(folder, n)
    report = os.path.join(folder, "report.json")
    run(args.binaries[0], folder, report)  # fills the kernel cache
    seen = {b: [] for b in args.binaries}
    for _ in range(args.runs):
        for binary in args.binaries:
            seen[binary].append(figures(report, run(binary, folder, report)))
    print(f"{n} floats per tensor, {args.runs} runs each, interleaved, in {folder}")
    for binary, runs in seen.items():
        wall, windows, screening, later, ok = zip(*runs)
        print(
            f"{binary}: wall {spread(wall, 's')}; windows {min(windows)}-{max(windows)}; "
            f"screening window {spread(screening, 'ms')}; later windows "
            f"{spread(later, 'ms')}; ok {min(ok)}-{max(ok)} of 45"
        )


if __name__ == "__main__":
    main()
