"""tunebox.kernel_tuner.tune_kernel: Kernel Tuner's signature and result shape for C kernels."""

import math
import shutil

import pytest

np = pytest.importorskip("numpy")
pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

from tunebox.kernel_tuner import tune_kernel  # noqa: E402

# As Kernel Tuner's examples/c/vector_add.py, small: vector types, C++ linkage, OpenMP; one
# configuration crashes and one computes a wrong answer.
KERNEL = """
#include <omp.h>
typedef float vfloat __attribute__ ((vector_size (vecsize*4)));
extern "C" void vector_add(vfloat *c, vfloat *a, vfloat *b, int n) {
    if (nthreads == 3 && vecsize == 4) { *(volatile int *)0 = 1; }
    int chunk = n / (vecsize * nthreads);
    #pragma omp parallel num_threads(nthreads)
    {
        int offset = omp_get_thread_num() * chunk;
        for (int i = offset; i < offset + chunk && i < n; i++) {
            c[i] = a[i] + b[i];
            if (nthreads == 2 && vecsize == 2) c[i] = a[i];
        }
    }
}
"""


def test_vector_add_gives_one_row_per_configuration_with_its_status():
    size = 3 << 14  # every nthreads * vecsize divides it, as in Kernel Tuner's example
    a = np.random.randn(size).astype(np.float32)
    b = np.random.randn(size).astype(np.float32)
    c = np.zeros_like(b)
    n = np.int32(size)
    tune_params = {"nthreads": [1, 2, 3], "vecsize": [1, 2, 4]}
    results, env = tune_kernel(
        "vector_add", KERNEL, size, [c, a, b, n], tune_params,
        answer=[a + b, None, None, None], compiler_options=["-O3"],
        restrictions=["nthreads * vecsize <= 12"], quiet=True,
        metrics={"GFLOP/s": lambda p: size / 1e6 / p["time"]},
    )
    assert len(results) == 9
    by = {(r["nthreads"], r["vecsize"]): r for r in results}
    assert by[(3, 4)]["status"] == "crashed" and by[(3, 4)]["time"] == math.inf
    assert by[(2, 2)]["status"] == "wrong"
    ok = [r for r in results if r["status"] == "ok"]
    assert len(ok) == 7
    assert all(r["time"] > 0 and r["GFLOP/s"] > 0 for r in ok)
    assert env["kernel_name"] == "vector_add" and env["problem_size"] == size
    assert env["tune_params"] == tune_params


def test_restrictions_as_a_function_and_random_sample():
    x = np.ones(1024, np.float32)
    src = "void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= F; }"
    results, _ = tune_kernel(
        "scale", src, 1024, [x, np.int32(1024)], {"F": [1, 2, 3, 4, 5, 6]},
        restrictions=lambda p: p["F"] % 2 == 0, strategy="random_sample",
        strategy_options={"max_fevals": 2}, quiet=True, lang="C",
    )
    assert len(results) == 2 and all(r["F"] % 2 == 0 for r in results)


def test_unsupported_things_are_named():
    x = np.ones(4, np.float32)
    with pytest.raises(NotImplementedError, match="CUDA"):
        tune_kernel("k", "__global__ void k(float *x) {}", 4, [x], {"B": [1]})
    with pytest.raises(NotImplementedError, match="strategy"):
        tune_kernel("k", "void k(float *x) {}", 4, [x], {"B": [1]}, strategy="genetic_algorithm")
    with pytest.raises(ValueError, match="no configuration"):
        tune_kernel("k", "void k(float *x) {}", 4, [x], {"B": [1]}, restrictions=["B > 1"])
