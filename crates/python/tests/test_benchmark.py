"""tunebox.benchmark: Inductor-style TuningProcessPool.benchmark over Python and C choices."""

import functools
import math
import shutil

import pytest

import helpers
from tunebox.benchmark import BenchmarkResult, CKernelChoice, TuningProcessPool, do_bench

np = pytest.importorskip("numpy")

SOURCE = """
void scale(float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = 2.0f * x[i]; }
void wrong(float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = x[i]; }
void crash(float *x, float *y, long n) { *(volatile int *)0 = 1; }
void hang(float *x, float *y, long n) { for (;;) {} }
"""


def test_do_bench_times_a_known_duration():
    import time

    ms = do_bench(lambda: time.sleep(0.002), warmup=5, rep=40)
    assert 1.5 < ms < 50
    result = do_bench(lambda: None, return_mode="all")
    assert isinstance(result, BenchmarkResult) and result.reps >= 1
    with pytest.raises(ValueError, match="return_mode"):
        do_bench(lambda: None, return_mode="p99")  # type: ignore[call-overload]


def test_python_choices_and_failed_ones_are_inf():
    with TuningProcessPool(timeout=5, warmup=5, rep=20) as pool:
        times = pool.benchmark(
            [
                functools.partial(helpers.identity_after, 1, 0.001),
                functools.partial(helpers.raise_custom, "no"),
                functools.partial(helpers.exit_with, 9),
                functools.partial(helpers.identity_after, 1, 60),
                functools.partial(sum, range(1000)),
            ]
        )
    assert 0.5 < times[0] < 100
    assert times[1] == times[2] == times[3] == math.inf
    assert 0 < times[4] < 100


def test_results_name_the_failure():
    with TuningProcessPool(timeout=2, warmup=1, rep=1) as pool:
        results = pool.benchmark_results(
            [
                functools.partial(helpers.kill_self, 11),
                functools.partial(helpers.identity_after, 0, 60),
                42,  # type: ignore[list-item]
            ]
        )
    assert isinstance(results[0], ChildProcessError) and "SIGSEGV" in str(results[0])
    assert isinstance(results[1], TimeoutError)
    assert isinstance(results[2], TypeError)


def test_two_workers_share_the_choices():
    with TuningProcessPool(num_workers=2, timeout=10, warmup=1, rep=1) as pool:
        results = pool.benchmark_results([helpers.pid] * 8)
    assert all(isinstance(r, BenchmarkResult) for r in results)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_c_kernel_choices_give_times_outputs_and_one_failure_each():
    n = 1 << 12
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    args = [x, y, np.int64(n)]
    choices = [
        CKernelChoice(SOURCE, name, args, outputs=[1])
        for name in ("scale", "wrong", "crash", "hang")
    ]
    choices.append(CKernelChoice("void broken(", "broken", args))
    with TuningProcessPool(timeout=5, warmup=2, rep=5) as pool:
        results = pool.benchmark_results(choices)
    first, second = results[0], results[1]
    assert isinstance(first, BenchmarkResult) and first.median_ms > 0
    assert isinstance(second, BenchmarkResult)
    assert np.allclose(first.outputs[1], 2 * x)
    assert not np.allclose(second.outputs[1], 2 * x)
    assert isinstance(results[2], ChildProcessError)
    assert isinstance(results[3], TimeoutError)
    assert isinstance(results[4], RuntimeError) and "compil" in str(results[4])


def test_bad_choices_are_clear_errors():
    with pytest.raises(TypeError, match="numpy scalar"):
        CKernelChoice(SOURCE, "scale", [np.zeros(4, np.float32), 3])
    with pytest.raises(ValueError, match="complex128"):
        CKernelChoice(SOURCE, "scale", [np.zeros(4, np.complex128)])
    with pytest.raises(ValueError, match="num_workers"):
        TuningProcessPool(num_workers=0)
