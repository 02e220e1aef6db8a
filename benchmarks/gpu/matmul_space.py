"""examples/matmul-cuda.toml's space, read from the manifest itself: the one source of the
params, restrictions and size that do_bench_matmul.py and kt_matmul.py time."""

from __future__ import annotations

import itertools
import pathlib

import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = tomllib.loads((ROOT / "examples" / "matmul-cuda.toml").read_text())
SOURCE = ROOT / "examples" / "kernels" / "matmul.cu"
# M = N = K (the manifest's problem_size is [N, M], its scalars say K).
SIZE: int = MANIFEST["problem_size"][0]
PARAMS: dict[str, list[int]] = MANIFEST["params"]
RESTRICTIONS: list[str] = MANIFEST["restrictions"]


def choices() -> list[dict[str, int]]:
    """The valid choices, in canonical order (the restrictions are Python expressions)."""
    names = list(PARAMS)
    every = (dict(zip(names, values)) for values in itertools.product(*PARAMS.values()))
    return [c for c in every if all(eval(r, {}, dict(c)) for r in RESTRICTIONS)]
