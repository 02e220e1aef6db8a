"""Tunes examples/matmul-cuda.toml's 40 choices with Kernel Tuner (CuPy backend), for tunebox's
GPU side by side. Needs kernel_tuner 1.5, CuPy and a CUDA GPU.

    python3 benchmarks/gpu/kt_matmul.py OUT.json

The same kernel, params, restrictions, launch (grid_div_x/_y) and NVRTC option (-std=c++17) as
examples/matmul-cuda-kt.toml; answer= a float64 reference with atol=1e-3, as that manifest's
check; Kernel Tuner's defaults otherwise (7 iterations, its mean, warm L2). Writes each choice's
time (ms) and the tune_kernel wall time (s) to OUT.json.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import matmul_space
import numpy

SIZE = matmul_space.SIZE
PARAMS = matmul_space.PARAMS


def main() -> int:
    start = time.perf_counter()
    import kernel_tuner

    rng = numpy.random.default_rng(0)
    a = rng.uniform(-1, 1, (SIZE, SIZE)).astype(numpy.float32)
    b = rng.uniform(-1, 1, (SIZE, SIZE)).astype(numpy.float32)
    c = numpy.zeros((SIZE, SIZE), dtype=numpy.float32)
    n = numpy.int64(SIZE)
    expected = (a.astype(numpy.float64) @ b.astype(numpy.float64)).astype(numpy.float32)
    t0 = time.perf_counter()
    results, _env = kernel_tuner.tune_kernel(
        "matmul",
        str(matmul_space.SOURCE),
        (SIZE, SIZE),
        [a, b, c, n, n, n],
        PARAMS,
        lang="CUPY",
        grid_div_x=["block_size_x", "WN"],
        grid_div_y=["block_size_y", "WM"],
        compiler_options=["-std=c++17"],
        restrictions=matmul_space.RESTRICTIONS,
        answer=[None, None, expected, None, None, None],
        atol=1e-3,
        quiet=True,
    )
    t1 = time.perf_counter()
    rows = [
        {"params": {k: r[k] for k in PARAMS}, "time": r["time"]}
        for r in results
        if isinstance(r.get("time"), float)
    ]
    out = {
        "tune_kernel_s": t1 - t0,
        "script_s": t1 - start,
        "failed": len(results) - len(rows),
        "results": rows,
    }
    pathlib.Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
    print(f"Kernel Tuner: {len(rows)} choices in {t1 - t0:.1f} s (script {t1 - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
