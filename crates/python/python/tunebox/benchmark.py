"""Inductor-style benchmarking of choices in isolated workers: ``TuningProcessPool.benchmark``.

As PyTorch Inductor's ``TuningProcessPool`` (torch/_inductor/autotune_process.py): one worker
per device, the choices spread over them, each choice timed as triton's ``do_bench`` times it,
and a choice that fails, crashes or hangs costs its own result: ``inf`` from
:meth:`TuningProcessPool.benchmark`, the exception from
:meth:`TuningProcessPool.benchmark_results`.

A choice is either

- a Python callable (no arguments; ``functools.partial`` for arguments), timed in the worker by
  :func:`do_bench` on the CPU clock (``time.perf_counter``), or
- a :class:`CKernelChoice`: C source and numpy arguments, compiled (cached) and timed by
  tunebox's ``cpu`` backend in the worker (its ``do_bench``: estimate, warmup, reps, last-level
  cache flushed between reps), outputs returned for checking.

Example::

    from functools import partial
    from tunebox.benchmark import TuningProcessPool

    pool = TuningProcessPool(timeout=10)
    times = pool.benchmark([partial(sorted, range(10_000)), partial(max, range(10_000))])
    # [0.31, 0.12] (ms, medians); a choice that raised or crashed is inf
"""

from __future__ import annotations

import math
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Union, cast, overload

from tunebox import _dtypes
from tunebox.popen_pool import PopenWorker

if TYPE_CHECKING:
    from typing import Literal

    import numpy as np
    import numpy.typing as npt
    from typing_extensions import Self, TypeAlias

    #: A choice: a callable of no arguments (timed by :func:`do_bench`), or a C kernel.
    Choice: TypeAlias = Union[Callable[[], object], "CKernelChoice"]

__all__ = ["BenchmarkResult", "CKernelChoice", "TuningProcessPool", "do_bench"]


class BenchmarkResult(NamedTuple):
    """One choice's timing (milliseconds) and, for a C kernel, its output arrays by argument
    index (empty for a Python callable)."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    reps: int
    warmup_reps: int
    outputs: dict[int, npt.NDArray[Any]]


@overload
def do_bench(
    fn: Callable[[], object],
    warmup: float = 25,
    rep: float = 100,
    return_mode: Literal["median", "mean", "min", "max"] = "median",
) -> float: ...
@overload
def do_bench(
    fn: Callable[[], object], warmup: float, rep: float, return_mode: Literal["all"]
) -> BenchmarkResult: ...
@overload
def do_bench(
    fn: Callable[[], object], warmup: float = 25, rep: float = 100, *, return_mode: Literal["all"]
) -> BenchmarkResult: ...
def do_bench(
    fn: Callable[[], object],
    warmup: float = 25,
    rep: float = 100,
    return_mode: str = "median",
) -> float | BenchmarkResult:
    """Times ``fn()`` as triton's ``do_bench``, on the CPU clock, in milliseconds.

    Estimates one call from 5, runs ``warmup`` ms worth of calls (at least 1), then times
    ``rep`` ms worth of calls one by one (at least 1, at most 100,000) and returns their
    ``return_mode`` (``median``, ``mean``, ``min``, ``max``) or, with ``all``, a
    :class:`BenchmarkResult`.
    """
    start = time.perf_counter()
    for _ in range(5):
        fn()
    estimate_ms = max((time.perf_counter() - start) * 1e3 / 5, 1e-6)
    n_warmup = max(1, int(warmup / estimate_ms))
    n_repeat = min(max(1, int(rep / estimate_ms)), 100_000)
    for _ in range(n_warmup):
        fn()
    times: list[float] = []
    clock = time.perf_counter
    for _ in range(n_repeat):
        t0 = clock()
        fn()
        times.append((clock() - t0) * 1e3)
    if return_mode == "all":
        return BenchmarkResult(
            statistics.median(times),
            statistics.fmean(times),
            min(times),
            max(times),
            n_repeat,
            n_warmup,
            {},
        )
    modes: dict[str, Callable[[list[float]], float]] = {
        "median": statistics.median,
        "mean": statistics.fmean,
        "min": min,
        "max": max,
    }
    if return_mode not in modes:
        raise ValueError(f"return_mode={return_mode!r}: use median, mean, min, max or all")
    return modes[return_mode](times)


def _time_in_worker(fn: Callable[[], object], warmup: float, rep: float) -> BenchmarkResult:
    return do_bench(fn, warmup, rep, return_mode="all")


class CKernelChoice:
    """A C kernel as a choice: ``kernel_source`` (text), ``kernel_name`` (the function),
    ``arguments`` (numpy arrays, passed as pointers, and numpy scalars, by value, in the
    function's order), ``compiler_options`` (replacing ``-O3 -march=native``), ``compiler``
    (default ``cc``), ``defines`` (``{"BLOCK": 64}`` as ``-DBLOCK=64``, a bool as 1 or 0, as
    the engine defines a manifest's params: ``-DU=True`` reads as 0 in ``#if``) and
    ``outputs`` (the indices of the arrays to return; default: every array)."""

    def __init__(
        self,
        kernel_source: str,
        kernel_name: str,
        arguments: Sequence[Any],
        compiler_options: Iterable[str] | None = None,
        compiler: str | None = None,
        defines: Mapping[str, object] | None = None,
        outputs: Collection[int] | None = None,
    ) -> None:
        import numpy as np

        self.kernel_source = kernel_source
        self.kernel_name = kernel_name
        self.compiler_options = list(compiler_options) if compiler_options is not None else None
        self.compiler = compiler
        self.defines = [
            (str(k), str(int(v)) if isinstance(v, bool) else str(v))
            for k, v in (defines or {}).items()
        ]
        # ("array", name, dtype, shape, bytes, returned) or (scalar type, name, value).
        self._args: list[tuple[Any, ...]] = []
        # Each array's numpy dtype and shape, by argument index: its output comes back as it.
        self._arrays: dict[int, tuple[Any, tuple[int, ...]]] = {}
        for i, arg in enumerate(arguments):
            typed = _dtypes.scalar(arg)
            if isinstance(arg, np.ndarray):
                kind = _dtypes.array_kind(arg.dtype)
                if kind is None:
                    raise ValueError(
                        f"argument {i} of {kernel_name} is a {arg.dtype} array: use "
                        f"{_dtypes.ARRAY_TYPES}"
                    )
                output = outputs is None or i in outputs
                data = np.ascontiguousarray(arg).tobytes()
                shape = [int(arg.size) * kind[1]]
                self._args.append(("array", f"arg{i}", kind[0], shape, data, output))
                self._arrays[i] = (arg.dtype, arg.shape)
            elif typed is not None:
                self._args.append((typed[0], f"arg{i}", typed[1]))
            else:
                raise TypeError(
                    f"argument {i} of {kernel_name} is {type(arg).__name__}: use a numpy array "
                    f"or a numpy scalar ({_dtypes.SCALAR_TYPES}), as Kernel Tuner does"
                )

    def _run(
        self, worker: PopenWorker, warmup: float, rep: float, timeout: float
    ) -> BenchmarkResult:
        import numpy as np

        stats = worker._native.benchmark_c(
            self.kernel_source,
            self.kernel_name,
            self._args,
            flags=self.compiler_options,
            compiler=self.compiler,
            defines=self.defines,
            warmup_ms=float(warmup),
            rep_ms=float(rep),
            timeout=float(timeout),
        )
        outputs: dict[int, np.ndarray[Any, Any]] = {}
        for name, _dtype, _shape, data in stats["outputs"]:
            index = int(name[3:])
            dtype, shape = self._arrays[index]
            outputs[index] = np.frombuffer(bytearray(data), dtype=dtype).reshape(shape)
        return BenchmarkResult(
            stats["median_ms"],
            stats["mean_ms"],
            stats["min_ms"],
            stats["max_ms"],
            stats["reps"],
            stats["warmup_reps"],
            outputs,
        )


def _devices(devices: Iterable[object] | None, num_workers: int | None) -> list[str | None]:
    """One worker per device: ``devices`` given, else ``CUDA_VISIBLE_DEVICES``, else
    ``num_workers`` (default 1) CPU workers, unpinned."""
    if devices is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        if visible and visible != "-1" and num_workers is None:
            devices = [d.strip() for d in visible.split(",") if d.strip()]
    if devices is not None:
        named: list[str | None] = [str(d) for d in devices]
        if not named:
            raise ValueError("devices=[]: name at least one device, or pass None")
        return named
    if num_workers is None:
        num_workers = 1
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers={num_workers!r}: use a positive integer or None")
    return [None] * num_workers


class TuningProcessPool:
    """Benchmarks choices across isolated workers, one per device, as Inductor's.

    Parameters
    ----------
    num_workers : int or None
        CPU workers when no device is named (default 1: choices are measured one at a time, so
        they do not disturb each other).
    devices : list or None
        Devices (``CUDA_VISIBLE_DEVICES`` values), one worker each, pinned; default: those of
        ``CUDA_VISIBLE_DEVICES`` when it is set.
    timeout : float
        Seconds one choice may take (compile and measurement); past it the worker is killed.
    warmup, rep : float
        do_bench's budgets in milliseconds (triton's defaults: 25 and 100).
    initializer, initargs
        Run in every new worker process, as TVM's.
    """

    def __init__(
        self,
        num_workers: int | None = None,
        devices: Iterable[object] | None = None,
        timeout: float = 60.0,
        warmup: float = 25,
        rep: float = 100,
        initializer: Callable[..., object] | None = None,
        initargs: Iterable[Any] = (),
    ) -> None:
        self.devices = _devices(devices, num_workers)
        self.timeout = timeout
        self.warmup = warmup
        self.rep = rep
        self._workers = [
            PopenWorker(
                initializer,
                initargs,
                env=None if device is None else {"CUDA_VISIBLE_DEVICES": device},
            )
            for device in self.devices
        ]
        for worker in self._workers:
            threading.Thread(target=_start_quietly, args=(worker,), daemon=True).start()

    def benchmark(self, choices: Iterable[Choice]) -> list[float]:
        """The median time (ms) of each choice, in order; ``inf`` for one that failed."""
        return [
            r.median_ms if isinstance(r, BenchmarkResult) else math.inf
            for r in self.benchmark_results(choices)
        ]

    def benchmark_results(self, choices: Iterable[Choice]) -> list[BenchmarkResult | Exception]:
        """A :class:`BenchmarkResult` per choice, in order, or the exception it failed with
        (``TimeoutError``, ``ChildProcessError``, the task's own, ``RuntimeError`` for a C
        kernel that does not compile)."""
        choices = list(choices)
        results: list[BenchmarkResult | Exception | None] = [None] * len(choices)
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for index in range(len(choices)):
            todo.put(index)
        threads = [
            threading.Thread(target=self._drain, args=(worker, choices, todo, results))
            for worker in self._workers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # Every index is filled now.
        return cast("list[BenchmarkResult | Exception]", results)

    def _drain(
        self,
        worker: PopenWorker,
        choices: list[Choice],
        todo: queue.SimpleQueue[int],
        results: list[BenchmarkResult | Exception | None],
    ) -> None:
        while True:
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            results[index] = self._run_one(worker, choices[index])

    def _run_one(self, worker: PopenWorker, choice: Choice) -> BenchmarkResult | Exception:
        try:
            if isinstance(choice, CKernelChoice):
                return choice._run(worker, self.warmup, self.rep, self.timeout)
            if not callable(choice):
                raise TypeError(f"{choice!r} is no choice: use a callable or a CKernelChoice")
            worker.send(_time_in_worker, (choice, self.warmup, self.rep), timeout=self.timeout)
            result: BenchmarkResult = worker.recv()
            return result
        except Exception as error:  # noqa: BLE001 - a failed choice is its own result
            return error

    def shutdown(self) -> None:
        """Stops the workers."""
        for worker in self._workers:
            worker.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.shutdown()
        return False


def _start_quietly(worker: PopenWorker) -> None:

    try:
        worker.start()
    except Exception:  # noqa: BLE001, S110 - the first choice reports it
        pass
