"""Times examples/matmul-cuda.toml's choices with triton's do_bench, for tunebox's GPU figures.

Needs a CUDA GPU, CuPy (NVRTC, to build the kernel as tunebox does: -D params, -std=c++17),
PyTorch and Triton. Prints one JSON object: the do_bench medians of every choice (in ms, cold:
do_bench zeroes a 256 MB buffer before each rep, as tunebox's flush does) for ``--passes``
passes, and a 1 ms globaltimer spin and an empty kernel, the known-duration checks.

    python3 benchmarks/gpu/do_bench_matmul.py --passes 2 > do_bench.json

Compare with ``tunebox tune examples/matmul-cuda.toml --json tunebox.json`` on the same GPU:
benchmarks/gpu/compare.py tunebox.json do_bench.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import cupy
import matmul_space
import numpy
import torch
import triton.testing

SOURCE = matmul_space.SOURCE.read_text()
SIZE = matmul_space.SIZE

SPIN = r"""
extern "C" __global__ void spin(long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < (unsigned long long)ns);
}
extern "C" __global__ void empty() {}
"""


def bench(fn, passes: int) -> list[float]:
    """do_bench medians (ms), one per pass, L2 flushed before each rep as do_bench does."""
    return [
        float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
        for _ in range(passes)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()

    torch.cuda.init()
    rng = numpy.random.default_rng(0)
    a = cupy.asarray(rng.uniform(-1, 1, (SIZE, SIZE)).astype(numpy.float32))
    b = cupy.asarray(rng.uniform(-1, 1, (SIZE, SIZE)).astype(numpy.float32))
    c = cupy.zeros((SIZE, SIZE), dtype=numpy.float32)
    expected = cupy.asnumpy(a).astype(numpy.float64) @ cupy.asnumpy(b).astype(numpy.float64)
    n = numpy.int64(SIZE)

    out: dict[str, object] = {"gpu": torch.cuda.get_device_name(), "choices": []}
    start = time.monotonic()
    for choice in matmul_space.choices():
        options = ("-std=c++17",) + tuple(f"-D{k}={v}" for k, v in choice.items())
        kernel = cupy.RawModule(code=SOURCE, options=options).get_function("matmul")
        block = (choice["block_size_x"], choice["block_size_y"], 1)
        grid = (
            math.ceil(SIZE / (choice["block_size_x"] * choice["WN"])),
            math.ceil(SIZE / (choice["block_size_y"] * choice["WM"])),
            1,
        )

        def launch(kernel=kernel, grid=grid, block=block) -> None:
            kernel(grid, block, (a, b, c, n, n, n))

        launch()
        cupy.cuda.runtime.deviceSynchronize()
        error = float(numpy.max(numpy.abs(cupy.asnumpy(c) - expected)))
        out["choices"].append(
            {"params": choice, "max_abs_error": error, "median_ms": bench(launch, args.passes)}
        )
    out["matmul_seconds"] = time.monotonic() - start

    module = cupy.RawModule(code=SPIN)
    spin, empty = module.get_function("spin"), module.get_function("empty")
    out["spin_1ms_median_ms"] = bench(
        lambda: spin((1,), (1,), (numpy.int64(1_000_000),)), args.passes
    )
    out["empty_median_ms"] = bench(lambda: empty((1,), (1,), ()), args.passes)
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
