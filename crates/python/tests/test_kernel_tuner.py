"""tunebox.kernel_tuner.tune_kernel: Kernel Tuner's signature and result shape, run by the engine."""

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

np = pytest.importorskip("numpy")
pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None, reason="needs g++ (C kernels compile as C++)"
)

from tunebox.kernel_tuner import (  # noqa: E402
    CompilationFailedConfig,
    RuntimeFailedConfig,
    tune_kernel,
)

FIXTURES = Path(__file__).resolve().parents[1] / "conformance" / "kernel_tuner"

# As Kernel Tuner's examples/c/vector_add.py, small: vector types, C++ linkage, OpenMP; among
# its configurations one segfaults, one loops forever, one computes a wrong answer and one does
# not compile: each of those ends a Kernel Tuner run (or the Python process).
FAULTY = """
#include <omp.h>
typedef float vfloat __attribute__ ((vector_size (vecsize*4)));
#if nthreads == 2 && vecsize == 4
#error this configuration does not compile
#endif
extern "C" void vector_add(vfloat *c, vfloat *a, vfloat *b, int n) {
    if (nthreads == 3 && vecsize == 4) { *(volatile int *)0 = 1; }
    if (nthreads == 3 && vecsize == 1) { for (;;) {} }
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

SCALE = "void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * F + G; }"


def vectors(size=3 << 12):
    a = np.random.randn(size).astype(np.float32)
    b = np.random.randn(size).astype(np.float32)
    return size, a, b, np.zeros_like(b)


def test_each_fault_that_kills_kernel_tuner_is_one_row():
    size, a, b, c = vectors()
    tune_params = {"nthreads": [1, 2, 3], "vecsize": [1, 2, 4]}
    results, env = tune_kernel(
        "vector_add",
        FAULTY,
        size,
        [c, a, b, np.int32(size)],
        tune_params,
        answer=[a + b, None, None, None],
        compiler_options=["-O3", "-fopenmp"],
        quiet=True,
        timeout=3.0,
    )
    assert [(r["nthreads"], r["vecsize"]) for r in results] == [
        (t, v) for t in (1, 2, 3) for v in (1, 2, 4)
    ]
    status = {(r["nthreads"], r["vecsize"]): r["status"] for r in results}
    assert status.pop((3, 4)) == "crashed"
    assert status.pop((3, 1)) == "timeout"
    assert status.pop((2, 2)) == "wrong"
    assert status.pop((2, 4)) == "compile_error"
    assert set(status.values()) == {"ok"}
    by = {(r["nthreads"], r["vecsize"]): r for r in results}
    assert isinstance(by[(2, 4)]["__error__"], CompilationFailedConfig)
    assert "does not compile" in by[(2, 4)]["error"]
    for key in ((3, 4), (3, 1), (2, 2)):
        assert isinstance(by[key]["__error__"], RuntimeFailedConfig)
        assert "time" not in by[key]
    for row in by.values():
        if row["status"] == "ok":
            assert row["time"] > 0 and row["reps"] >= 1 and "__error__" not in row
    assert env["kernel_name"] == "vector_add" and env["problem_size"] == size
    assert env["tune_params"] == tune_params and env["backend"] == "tunebox"
    assert env["report"]["space_size"] == 9


def test_restrictions_strategies_metrics_and_the_objective():
    x = np.ones(1024, np.float32)
    tune_params = {"F": [1, 2, 3, 4, 5, 6], "G": [0, 1]}
    results, _ = tune_kernel(
        "scale",
        SCALE,
        1024,
        [x, np.int32(1024)],
        tune_params,
        restrictions=[lambda p: p["F"] % 2 == 0, "G == 0 or F > 2"],
        quiet=True,
        lang="C",
        metrics={"work": "F * 1000 / time", "twice": lambda p: 2 * p["work"]},
        objective="work",
        objective_higher_is_better=True,
    )
    assert [(r["F"], r["G"]) for r in results] == [(2, 0), (4, 0), (4, 1), (6, 0), (6, 1)]
    for r in results:
        assert r["work"] == pytest.approx(r["F"] * 1000 / r["time"], rel=1e-6)
        assert r["twice"] == pytest.approx(2 * r["work"])
    sampled, _ = tune_kernel(
        "scale",
        SCALE,
        1024,
        [x, np.int32(1024)],
        tune_params,
        restrictions=lambda p: p["F"] % 2 == 0,
        strategy="random_sample",
        strategy_options={"max_fevals": 2},
        quiet=True,
    )
    assert len(sampled) == 2 and all(r["F"] % 2 == 0 for r in sampled)
    searched, env = tune_kernel(
        "scale",
        SCALE,
        1024,
        [x, np.int32(1024)],
        tune_params,
        strategy="genetic_algorithm",
        strategy_options={"max_fevals": 4, "seed": 3},
        quiet=True,
    )
    assert 1 <= len(searched) <= 4
    assert env["report"]["selection"]["strategy"] == "genetic"


def test_answer_and_verify_function_and_iterations():
    x = np.arange(1, 257, dtype=np.float32)
    tune_params = {"F": [1, 2], "G": [0, 1]}
    expected = x * 1 + 0
    results, _ = tune_kernel(
        "scale",
        SCALE,
        256,
        [x, np.int32(256)],
        tune_params,
        answer=[expected, None],
        quiet=True,
        iterations=5,
    )
    assert [r["status"] for r in results] == ["ok", "wrong", "wrong", "wrong"]
    # The engine splits the iterations over its windows (Kernel Tuner's 7: 3, 2 and 2).
    assert 1 <= results[0]["reps"] <= 5
    seen = []

    def verify(answer, result, atol=None):
        seen.append((answer, atol))
        return bool(np.all(result[0] >= x))  # F >= 1, G >= 0 never shrinks

    results, _ = tune_kernel(
        "scale",
        SCALE.replace("+ G", "- G"),
        256,
        [x, np.int32(256)],
        tune_params,
        answer=[expected, None],
        verify=verify,
        atol=1e-3,
        quiet=True,
    )
    assert [r["status"] for r in results] == ["ok", "wrong", "ok", "ok"]
    assert results[0]["reps"] > 5  # without iterations, do_bench's budget sizes the reps
    assert len(seen) == 4 and seen[0][1] == 1e-3


def test_a_cache_file_makes_a_second_run_measure_nothing(tmp_path, monkeypatch):
    # The engine caches a result as final only when its windows ran on a quiet machine: a
    # /proc/stat that never changes is one (this machine may be busy).
    stat = tmp_path / "stat"
    stat.write_text(Path("/proc/stat").read_text())
    monkeypatch.setenv("TUNEBOX_PROC_STAT", str(stat))
    x = np.ones(512, np.float32)
    cache = tmp_path / "scale.json"
    args = ("scale", SCALE, 512, [x, np.int32(512)], {"F": [1, 2, 3], "G": [0]})
    first, env = tune_kernel(*args, cache=str(cache), quiet=True)
    assert env["cache"] == str(tmp_path / "scale.tunebox-cache.jsonl")
    assert Path(env["cache"]).exists()
    assert not any(r["cached"] for r in first)
    second, _ = tune_kernel(*args, cache=str(cache), quiet=True)
    assert [r["F"] for r in second] == [1, 2, 3] and all(r["cached"] for r in second)
    assert [r["time"] for r in second] == [r["time"] for r in first]


def test_kernel_tuners_vector_add_example_runs_with_only_its_import_changed(tmp_path):
    """examples/c/vector_add.py of Kernel Tuner (the fixture), with fewer floats per array:
    every configuration Kernel Tuner measures, each verified against its answer."""
    text = (FIXTURES / "vector_add.py").read_text()
    assert "size = 72 * 1024 * 1024" in text
    script = tmp_path / "vector_add.py"
    script.write_text(text.replace("size = 72 * 1024 * 1024", "size = 96 * 1024"))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=900, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = re.findall(r"^nthreads=(\d+), vecsize=(\d+), time=", done.stdout, re.M)
    configs = set(lines)
    expected = {(str(t), str(v)) for t in (1, 2, 3, 4, 8, 12, 16, 24, 32) for v in (1, 2, 4, 8, 16)}
    assert configs == expected, done.stdout[-3000:]
    assert "best performing configuration:" in done.stdout


def test_each_array_goes_to_the_engine_once_whatever_the_number_of_configurations(monkeypatch):
    """A large argument goes to the engine once per call, in memory (one buffer per array and
    per answer, with the source text), and is verified by the engine: nothing in Python runs
    per configuration, nothing is copied per configuration."""
    import tunebox.kernel_tuner as kt
    from tunebox import _native

    size, a, b, c = vectors(1 << 16)
    seen: dict[str, Any] = {}
    engine_tune = _native.tune

    def tune(manifest, path, files, *args, **kwargs):
        seen["files"] = {
            name: value if isinstance(value, str) else value[1] for name, value in files.items()
        }
        seen["manifest"] = manifest
        seen["path"] = path
        return engine_tune(manifest, path, files, *args, **kwargs)

    def verify_again(*args):
        raise AssertionError("an answer is verified by the engine, not again in Python")

    monkeypatch.setattr(_native, "tune", tune)
    monkeypatch.setattr(kt, "_verify_again", verify_again)
    tune_params = {"nthreads": [1, 2], "vecsize": [1, 2, 4, 8]}
    source = FAULTY.replace("#error", "#warning")
    results, _ = tune_kernel(
        "vector_add",
        source,
        size,
        [c, a, b, np.int32(size)],
        tune_params,
        answer=[a + b, None, None, None],
        compiler_options=["-O3", "-fopenmp"],
        quiet=True,
    )
    assert len(results) == 8
    assert {(r["nthreads"], r["vecsize"]): r["status"] for r in results}[(2, 2)] == "wrong"
    # c (zeros) travels as `init = "zeros"`: no buffer, and fresh zero pages in each worker;
    # the source (C++, as Kernel Tuner compiles C) as text named with C++'s suffix.
    assert seen["files"] == {
        "kernel.cpp": source,
        **{name: 4 * size for name in ("arg1.bin", "arg2.bin", "answer0.bin")},
    }
    assert seen["manifest"].count('init = "zeros"') == 1
    assert not os.path.exists(seen["path"])


def test_nothing_is_written_to_the_folder_or_to_temporary_files(tmp_path, monkeypatch):
    """The call, its arrays, its answer and its report stay in memory: the current folder and
    the temporary folder are as empty after tune_kernel as before."""
    work = tmp_path / "work"
    temporary = tmp_path / "tmp"
    work.mkdir()
    temporary.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    x = np.arange(1, 1025, dtype=np.float32)
    results, env = tune_kernel(
        "scale",
        SCALE,
        1024,
        [x, np.int32(1024)],
        {"F": [1, 2], "G": [0]},
        answer=[x, None],
        quiet=True,
    )
    assert [r["status"] for r in results] == ["ok", "wrong"]
    assert env["report"]["results"] and isinstance(env["report"], dict)
    assert list(work.iterdir()) == [] and list(temporary.iterdir()) == []


RECORD_EXE = r"""
#include <stdio.h>
#include <unistd.h>
void scale(float *x, int n) {
    static int recorded = 0;
    if (!recorded) {
        char exe[4096];
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        FILE *f = fopen(LOG, "a");
        if (f && k > 0) { exe[k] = 0; fprintf(f, "%d %s\n", (int)getpid(), exe); }
        if (f) fclose(f);
        recorded = 1;
    }
    for (int i = 0; i < n; i++) x[i] = x[i] * F;
}
"""


def test_the_workers_are_the_rust_worker_not_python(tmp_path):
    """Every worker process the engine starts runs tunebox's Rust worker (the executable the
    extension carries), not a Python interpreter: each kernel records the program it runs in."""
    log = tmp_path / "exe.log"
    x = np.ones(1024, np.float32)
    results, env = tune_kernel(
        "scale",
        RECORD_EXE,
        1024,
        [x, np.int32(1024)],
        {"F": [1, 2, 3]},
        # As Kernel Tuner: with defines, a param is defined only when named among them.
        defines={"LOG": f'"{log}"', "F": "F"},
        quiet=True,
    )
    assert [r["status"] for r in results] == ["ok"] * 3
    worker = Path(env["worker"])
    assert worker.name.startswith("tunebox-worker-"), worker
    assert worker.read_bytes()[:4] == b"\x7fELF"  # a program, not a #! launcher
    runs = [line.split(" ", 1) for line in log.read_text().splitlines()]
    assert len({pid for pid, _ in runs}) >= 3  # a fresh process per measurement
    programs = {Path(exe) for _, exe in runs}
    assert programs == {worker.resolve()}, programs
    assert Path(sys.executable).resolve() not in programs


def test_without_the_rust_worker_a_python_launcher_serves_and_says_so(monkeypatch, caplog):
    """An extension without the Rust worker (or a cache it cannot run from) falls back to the
    Python launcher, with a logged note; the results are the same."""
    from tunebox import _native

    def missing():
        raise FileNotFoundError("this build of tunebox._native holds no Rust worker")

    monkeypatch.setattr(_native, "engine_worker", missing)
    x = np.ones(256, np.float32)
    with caplog.at_level(logging.WARNING, logger="tunebox.kernel_tuner"):
        results, env = tune_kernel(
            "scale",
            SCALE,
            256,
            [x, np.int32(256)],
            {"F": [1, 2], "G": [0]},
            quiet=True,
        )
    assert [r["status"] for r in results] == ["ok", "ok"]
    assert "Python launchers instead" in caplog.text and "no Rust worker" in caplog.text
    assert Path(env["worker"]).name == "tunebox-engine-worker"
    assert not Path(env["worker"]).exists()  # its folder lived for the call only


def test_the_engine_worker_starts_without_site_and_without_numpy(tmp_path):
    """The Python launcher (where the Rust worker is missing) runs this interpreter with -IS
    and imports the extension only: it gets to tunebox-worker's loop (which, started by hand,
    says it needs a parent) without numpy, cloudpickle or site-packages' .pth files."""
    from tunebox.kernel_tuner import _python_worker

    launcher = Path(_python_worker(str(tmp_path)))
    if not launcher.read_text().startswith(f"#!{sys.executable} -IS\n"):
        pytest.skip("this interpreter's path cannot go on a #! line")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEBOX_WORKER")}
    done = subprocess.run([str(launcher)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "TUNEBOX_WORKER_SERVER is not set" in done.stderr, done.stderr
    timed = subprocess.run(
        [sys.executable, "-IS", "-X", "importtime", str(launcher)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    imported = {
        line.rsplit("|", 1)[-1].strip() for line in timed.stderr.splitlines() if "|" in line
    }
    assert "tunebox._native" in imported, timed.stderr[-2000:]
    assert not imported & {"numpy", "cloudpickle", "site", "re"}, sorted(imported)


def test_the_rust_worker_says_it_needs_a_parent_when_started_by_hand():
    """The worker the extension carries is tunebox-worker itself: started without a parent it
    refuses, as every tunebox worker does."""
    from tunebox import _native

    worker = _native.engine_worker()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEBOX_WORKER")}
    done = subprocess.run([str(worker)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "TUNEBOX_WORKER_SERVER is not set" in done.stderr, done.stderr
    assert _native.engine_worker() == worker  # written once, then found


def test_max_process_uses_lets_measurements_share_a_worker_process(tmp_path, monkeypatch):
    """Each measurement gets a fresh worker process by default (as `tunebox tune`);
    max_process_uses=0 lets one process make them all (tunebox tune --max-process-uses 0)."""
    import tunebox.kernel_tuner as kt

    starts = tmp_path / "starts"
    launch = kt._worker

    @contextlib.contextmanager
    def counted():
        with launch() as real:
            path = tmp_path / "counted-worker"
            path.write_text(f'#!/bin/sh\necho start >> {starts}\nexec {real} "$@"\n')
            path.chmod(0o755)
            yield str(path)

    monkeypatch.setattr(kt, "_worker", counted)
    x = np.ones(1024, np.float32)
    args = ("scale", SCALE, 1024, [x, np.int32(1024)], {"F": [1, 2, 3, 4], "G": [0]})
    fresh, _ = tune_kernel(*args, quiet=True)
    fresh_starts = len(starts.read_text().splitlines())
    starts.unlink()
    shared, _ = tune_kernel(*args, quiet=True, max_process_uses=0)
    shared_starts = len(starts.read_text().splitlines())
    assert [r["status"] for r in fresh] == [r["status"] for r in shared] == ["ok"] * 4
    assert fresh_starts >= 4  # one a measurement: at least one a configuration
    assert shared_starts < fresh_starts
    with pytest.raises(ValueError, match="max_process_uses"):
        tune_kernel(*args, quiet=True, max_process_uses=-1)


def test_cuda_kernels_go_to_the_engine_and_without_a_gpu_say_so():
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("a GPU is present: tests/gpu covers CUDA")
    x = np.ones(1024, np.float32)
    kernel = 'extern "C" __global__ void k(float *x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2; }'
    with pytest.raises(RuntimeError, match="(?i)cuda|gpu|driver") as refused:
        tune_kernel("k", kernel, 1024, [x, np.int32(1024)], {"block_size_x": [32, 64]}, quiet=True)
    # In the call's terms: not the command line's manifest and flags.
    message = str(refused.value)
    if "needs a GPU" in message:
        assert message.startswith("tune_kernel: a CUDA kernel needs a GPU"), message
        assert "manifest" not in message and "--list" not in message, message


def test_an_unknown_strategy_is_an_error_naming_the_known_ones():
    """A misspelt name is refused before anything is built or run, with Kernel Tuner's names and
    the engine's own (``tunebox._native.STRATEGIES``) in the message; each Kernel Tuner name
    tunebox takes is one of the engine's."""
    import tunebox.kernel_tuner as kt
    from tunebox import _native

    x = np.ones(4, np.float32)
    src = "void k(float *x) {}"
    with pytest.raises(ValueError, match="strategy='gentic' is unknown") as error:
        tune_kernel("k", src, 4, [x], {"B": [1]}, strategy="gentic", quiet=True)
    kernel_tuner_names = [
        "brute_force",
        "random_sample",
        "genetic_algorithm",
        "simulated_annealing",
        "greedy_ils",
        "diff_evo",
        "bayes_opt",
    ]
    for name in kernel_tuner_names + list(_native.STRATEGIES):
        assert name in str(error.value)
    assert set(kt._STRATEGIES) == set(kernel_tuner_names)
    assert set(kt._STRATEGIES.values()) <= set(_native.STRATEGIES)
    # A Kernel Tuner strategy tunebox lacks is not a mistake of the caller's.
    with pytest.raises(NotImplementedError, match="pso.*use one of brute_force"):
        tune_kernel("k", src, 4, [x], {"B": [1]}, strategy="pso", quiet=True)


def test_what_is_not_supported_is_named():
    x = np.ones(4, np.float32)
    src = "void k(float *x) {}"
    with pytest.raises(NotImplementedError, match="lang"):
        tune_kernel("k", src, 4, [x], {"B": [1]}, lang="OpenCL")
    with pytest.raises(NotImplementedError, match="strategy"):
        tune_kernel("k", src, 4, [x], {"B": [1]}, strategy="firefly_algorithm")
    with pytest.raises(NotImplementedError, match="cmem_args"):
        tune_kernel("k", src, 4, [x], {"B": [1]}, cmem_args={"c": x})
    with pytest.raises(TypeError, match="answer has 2 entries and arguments 1"):
        tune_kernel("k", src, 4, [x], {"B": [1]}, answer=[x, None])
    with pytest.raises(ValueError, match="no configuration"):
        tune_kernel("k", src, 4, [x], {"B": [1]}, restrictions=lambda p: False)
    with pytest.raises(ValueError, match="restrictions"):
        tune_kernel("k", src, 4, [x], {"B": [1]}, restrictions=["NOPE > 1"], quiet=True)
    with pytest.raises(ValueError, match=r"strategy_options\['fraction'\] = 0:"):
        tune_kernel(
            "k", src, 4, [x], {"B": [1]}, strategy="random_sample", strategy_options={"fraction": 0}
        )
    with pytest.raises(TypeError, match="float16"):
        tune_kernel("k", src, 4, [x.astype(np.float16)], {"B": [1]})


def test_failures_are_said_and_the_best_row_is_env_best_config(capsys):
    size, a, b, c = vectors()
    results, env = tune_kernel(
        "vector_add",
        FAULTY,
        size,
        [c, a, b, np.int32(size)],
        {"nthreads": [1, 2], "vecsize": [2, 4]},
        answer=[a + b, None, None, None],
        compiler_options=["-O3", "-fopenmp"],
        timeout=3.0,
    )
    printed = capsys.readouterr().out
    # (2, 4) does not compile, (2, 2) computes a wrong answer: not silent without verbose.
    assert "2 of 4 configurations failed (1 compile_error, 1 wrong)" in printed
    ok = [r for r in results if r["status"] == "ok"]
    assert len(ok) == 2
    assert env["best_config"] == min(ok, key=lambda r: r["time"])


def test_an_argument_the_engine_refuses_is_named_as_the_argument():
    x = np.ones(64, np.float32)
    with pytest.raises(ValueError) as refused:
        tune_kernel(
            "scale",
            SCALE,
            64,
            [x, np.int32(64)],
            {"F": [1, 2], "G": [0]},
            restrictions=["H > 2"],
            quiet=True,
        )
    message = str(refused.value)
    assert message.startswith("tune_kernel: invalid arguments: restrictions[0]"), message
    assert "kernel_tuner.toml" not in message


# Every integer width Kernel Tuner's C backend takes, each array written by the kernel from
# the scalars: out[i] = in[i] + s, with the scalars at their type's extremes.
WIDTHS = """
#include <stdint.h>
void widths(int8_t *a, int16_t *b, uint16_t *c, uint32_t *d, uint64_t *e,
            int8_t sa, int16_t sb, uint16_t sc, uint32_t sd, uint64_t se, int n) {
    for (int i = 0; i < n; i++) {
        a[i] = (int8_t)(a[i] + sa); b[i] = (int16_t)(b[i] + sb * K);
        c[i] = (uint16_t)(c[i] + sc); d[i] = d[i] + sd; e[i] = e[i] + se;
    }
}
"""


def test_every_integer_width_kernel_tuners_c_backend_takes_travels_unchanged():
    n = 1000
    types = [np.int8, np.int16, np.uint16, np.uint32, np.uint64]
    arrays = [np.arange(n).astype(t) for t in types]
    scalars = [
        np.int8(-3),
        np.int16(-30000),
        np.uint16(65000),
        np.uint32(4_000_000_000),
        np.uint64(2**64 - 5),
    ]
    expected = [(arr + s).astype(arr.dtype) for arr, s in zip(arrays, scalars)]
    answer = [*expected, *([None] * 6)]
    arguments = [a.copy() for a in arrays] + scalars + [np.int32(n)]
    results, _ = tune_kernel(
        "widths", WIDTHS, n, arguments, {"K": [1, 2]}, answer=answer, quiet=True
    )
    # K=2 doubles int16's scalar: that array alone is wrong, said in its own elements.
    assert [r["status"] for r in results] == ["ok", "wrong"], results
    assert "arg1 is int16, compared byte for byte" in results[1]["error"], results[1]
    assert "of element 0)" in results[1]["error"], results[1]
    seen = []

    def verify(answer, result, atol=None):
        seen.append(result)
        return all(np.array_equal(want, got) for want, got in zip(answer[:5], result[:5]))

    results, _ = tune_kernel(
        "widths", WIDTHS, n, arguments, {"K": [1, 2]}, answer=answer, verify=verify, quiet=True
    )
    assert [r["status"] for r in results] == ["ok", "wrong"], results
    assert [r.dtype for r in seen[0][:5]] == [np.dtype(t) for t in types]
    assert [r.shape for r in seen[0][:5]] == [(n,)] * 5


# Kernel Tuner's macros beside the params, written out by the kernel.
GEOMETRY = """
void geometry(int *out) {
    int values[] = {grid_size_x, grid_size_y, grid_size_z, block_size_x, block_size_y,
                    block_size_z, kernel_tuner};
    for (int i = 0; i < 7; i++) out[i] = values[i];
}
"""


def test_kernel_tuners_grid_and_block_macros_are_defined_for_a_c_kernel():
    out = np.zeros(7, np.int32)
    # Kernel Tuner 1.5's util.setup_block_and_grid((1000, 64), (None, ["block_size_y"], None),
    # {"block_size_y": 2}): block (256, 2, 1), grid (1000, 32, 1): without a block_size_x
    # param nothing divides x.
    expected = np.array([1000, 32, 1, 256, 2, 1, 1], np.int32)
    results, _ = tune_kernel(
        "geometry",
        GEOMETRY,
        (1000, 64),
        [out],
        {"block_size_y": [2, 4]},
        grid_div_y=["block_size_y"],
        answer=[expected],
        quiet=True,
    )
    # block_size_y = 4 halves grid_size_y: its macros differ from the answer.
    assert [r["status"] for r in results] == ["ok", "wrong"], results
    # A verify function's run compiles the configuration again, with the same macros.
    seen = []

    def verify(answer, result, atol=None):
        seen.append(result[0])
        return True

    results, _ = tune_kernel(
        "geometry",
        GEOMETRY,
        (1000, 64),
        [out],
        {"block_size_y": [2]},
        grid_div_y=["block_size_y"],
        answer=[expected],
        verify=verify,
        quiet=True,
    )
    assert results[0]["status"] == "ok", results
    assert seen[0].tolist() == expected.tolist()
    # With `defines`, Kernel Tuner defines only those: the grid and block macros are gone.
    undefined = "".join(
        f"#ifdef {name}\n#error {name} is defined\n#endif\n"
        for name in ("grid_size_x", "grid_size_y", "block_size_x", "block_size_z")
    )
    results, _ = tune_kernel(
        "only",
        undefined + "void only(int *out) { out[0] = ONLY; }",
        (1000, 64),
        [out],
        {"block_size_y": [2]},
        grid_div_y=["block_size_y"],
        defines={"ONLY": 7},
        answer=[np.array([7, 0, 0, 0, 0, 0, 0], np.int32)],
        quiet=True,
    )
    assert results[0]["status"] == "ok", results
