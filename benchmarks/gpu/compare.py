"""Compares tunebox's medians of examples/matmul-cuda.toml with triton do_bench's.

    python3 benchmarks/gpu/compare.py DO_BENCH.json TUNEBOX.json [TUNEBOX.json ...]

DO_BENCH.json is benchmarks/gpu/do_bench_matmul.py's output; each TUNEBOX.json a
``tunebox tune examples/matmul-cuda.toml --json`` (or matmul-cuda-kt.toml) result. Prints, per
tunebox run: the median and range of tunebox/do_bench per choice, Spearman's rank correlation
with do_bench, and the do_bench regret of tunebox's best; and do_bench's own pass-to-pass figures.
"""

from __future__ import annotations

import json
import statistics
import sys


def key(params: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(params.items()))


def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    for rank, i in enumerate(order):
        out[i] = float(rank)
    return out


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def compare(name: str, ours: dict, theirs: dict) -> None:
    common = [k for k in ours if k in theirs]
    ratio = [ours[k] / theirs[k] for k in common]
    a = [ours[k] for k in common]
    b = [theirs[k] for k in common]
    best = min(common, key=ours.__getitem__)
    regret = theirs[best] / min(b) - 1
    print(
        f"{name}: {len(common)} choices, ratio median {statistics.median(ratio):.4f} "
        f"[{min(ratio):.4f}, {max(ratio):.4f}], Spearman {spearman(a, b):.4f}, "
        f"best's regret by do_bench {100 * regret:.2f} %"
    )


def main() -> int:
    bench = json.load(open(sys.argv[1]))
    choices = bench["choices"]
    passes = len(choices[0]["median_ms"])
    by_pass = [{key(c["params"]): c["median_ms"][i] for c in choices} for i in range(passes)]
    median = {key(c["params"]): statistics.median(c["median_ms"]) for c in choices}
    if len(by_pass) > 1:
        compare("do_bench pass 2 vs pass 1", by_pass[1], by_pass[0])
    print(
        f"spin 1 ms: do_bench {bench['spin_1ms_median_ms']} ms; "
        f"empty kernel: {[round(1000 * x, 2) for x in bench['empty_median_ms']]} us"
    )
    for path in sys.argv[2:]:
        result = json.load(open(path))
        ours = {key(r["choice"]): r["median_ms"] for r in result["results"] if r["status"] == "ok"}
        compare(f"tunebox {path} ({result['elapsed_s']:.1f} s) vs do_bench", ours, median)
    return 0


if __name__ == "__main__":
    sys.exit(main())
