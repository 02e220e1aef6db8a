"""``tune_kernel`` with Kernel Tuner's signature, run by tunebox's tuning engine.

Change ``from kernel_tuner import tune_kernel`` to ``from tunebox.kernel_tuner import tune_kernel``.

The call is written as a manifest in Kernel Tuner's spelling (docs/manifest.md, "Kernel Tuner's
names") and handed to tunebox's engine in memory with the kernel source and every array argument
and expected answer (each copied once per call into shared memory; an array of zeros is
``init = "zeros"`` instead): no file is written, and the report comes back as Python objects.
The engine checks it with the code that reads a manifest file for ``tunebox tune MANIFEST``.
So every configuration compiles in parallel in the parent (into tunebox's kernel cache), is
measured in an isolated worker process (do_bench: estimate, warmup, reps, the cache flushed
between reps; then rounds of short windows and a race for the top) that is tunebox's Rust
worker, ``tunebox-worker``, carried by the extension (no Python interpreter starts for a
worker), verified against
``answer``, kept in the results cache when ``cache`` is given, and ranked. A configuration that
does not compile, crashes, hangs past ``timeout`` (seconds, tunebox's own argument) or computes a
wrong answer is one result with its status, where Kernel Tuner's C backend aborts the run (or
dies with it).

What it takes from Kernel Tuner:

- ``kernel_name``, ``kernel_source`` (text, or a file name: one line that looks like one, ending
  in a source suffix or holding a path separator, and names no file is a ``FileNotFoundError``),
  ``lang`` (``C``, ``C++``, ``CUDA``; ``None``: ``__global__`` or ``.cu`` is CUDA, else C),
  ``problem_size`` (an int, numpy's too, or a tuple of ints and param names),
  ``grid_div_x/y/z``. Without ``compiler``, a C kernel is compiled as C++ by ``$CXX`` or
  ``g++``, as Kernel Tuner's C backend compiles every C kernel with ``g++`` (its entry need
  not be ``extern "C"``); with one, C stays C unless the source says ``extern "C"``, has a
  C++ suffix, or the compiler is a C++ driver;
- ``arguments``: numpy arrays (``float32``, ``float64``, and the integers Kernel Tuner's C
  backend takes: ``int8`` to ``int64``, ``uint8`` to ``uint64``; C kernels get them untyped, as
  Kernel Tuner passes them, so vector types work) and numpy scalars of those types (a Python
  int is ``int64``, a float ``float64``), by value; an integer array is checked exactly, and a
  wrong ``int16`` or ``uint16`` element is reported at its byte (``tunebox._dtypes``);
- ``tune_params`` (each defined for the compiler, ``-Dname=value``, unless ``defines`` is
  given), ``restrictions`` (strings, Python expressions evaluated by the engine; functions,
  called as Kernel Tuner calls them: with the params as keyword arguments when theirs are
  named after params, ``lambda BX, BY: BX * BY <= 1024``, else with the parameter dict; or
  ``(function, [names])``; a list may mix them; each function is evaluated here over the space,
  in the list's order, and handed to the engine at its index as an expression; an error in
  one names ``restrictions[i]``, the configuration and the exception);
- ``answer`` (one entry per argument, ``None`` for those not checked) with ``atol``; ``verify``
  (``verify(answer, result, atol=...)``, Kernel Tuner's: each configuration the engine measured
  runs once more in an isolated worker, and its arrays go to the function);
- ``compiler``, ``compiler_options`` (a list of strings; one string is a ``TypeError``),
  ``defines`` (Kernel Tuner's: a constant, a string in which each param's name is replaced by
  its value, or a function of the parameter dict; when given, the params are not defined,
  only these: written before the source as ``#define`` lines, a value that changes with the
  configuration chosen by ``#if`` on the params that decide it, which must hold integers,
  booleans or C identifiers, else ``NotImplementedError``; then the params are undefined),
  ``iterations`` (the timed reps of a configuration in all, shared by its windows: 7 over the
  engine's four windows is 2, 2, 2 and 1, and a configuration whose first two windows agree
  stops with fewer; one measured in one window gets exactly that many; no more windows than
  reps, so 1 is one window of one rep; ``None``, the default
  here, lets do_bench size them from its budget);
- ``objective`` and ``objective_higher_is_better``, ``metrics`` (expressions, evaluated by the
  engine, or functions of the result dict, evaluated here);
- ``strategy`` (``brute_force``, ``random_sample``, ``genetic_algorithm``,
  ``simulated_annealing``, ``greedy_ils``, ``diff_evo``, ``bayes_opt``, or one of the engine's
  names, ``tunebox._native.STRATEGIES``, such as ``auto``) with ``strategy_options``
  ``max_fevals``, ``fraction``, ``time_limit`` (s) and ``seed``; any other name is a
  ``ValueError`` that lists these;
- ``cache``: a file name; the engine's results cache goes to ``NAME.tunebox-cache.jsonl``
  (``.json`` dropped), so a second call measures only what is not in it;
- ``verbose`` and ``quiet``; tunebox's own: ``timeout`` (s per configuration), ``workers``
  and ``max_process_uses`` (the measurements a worker process makes before it is replaced: 1
  gives each a fresh process, so that nothing a configuration does to its process changes the
  next result; 0 is no limit, faster for many small, well-behaved configurations; the default,
  ``None``, is ``tunebox tune``'s: 1 for C, no limit for CUDA, whose configurations run no host
  code and for which a fresh process would cost a new CUDA context each;
  ``tunebox tune --max-process-uses``).

It returns ``(results, env)`` as Kernel Tuner does: one dict per configuration the run
finished, in the space's order: the parameters, ``time`` (ms: the median the engine ranks by),
the metrics, and for a failed one ``__error__`` (``CompilationFailedConfig`` or
``RuntimeFailedConfig``, Kernel Tuner's classes' names) instead of ``time``; plus tunebox's
``status`` (``ok``, ``wrong``, ``compile_error``, ``crashed``, ``timeout``, ``error``),
``error``, ``time_mean``, ``time_min``, ``time_max``, ``time_stddev``, ``reps`` and
``cached``. Not Kernel Tuner's per-configuration ``times`` (each rep's time) nor its
``*_time`` accounting keys. ``env`` describes the run: ``best_config`` (the best row, as
Kernel Tuner's), ``compiler_options`` and ``iterations`` as given, the call's other arguments,
``report`` (the engine's JSON report as Python objects) and ``worker`` (the worker executable
the engine started). Unless ``quiet``, a line after the rows says how many configurations
failed and why (their rows say which).

An argument the engine refuses is a ``ValueError`` naming the argument (``tune_kernel: invalid
arguments: restrictions[0]: ...``, ``tune_params['U'][1]``), as the engine names a manifest's
field: the call is written in Kernel Tuner's spelling, and the engine's own names of its fields
(``params``, ``kernel.entry``) are given as the arguments'.

Refused with an error naming the argument: OpenCL, HIP and Fortran, ``smem_args``,
``cmem_args``, ``texmem_args``, ``block_size_names``, ``observers``, ``simulation_mode``,
callables as ``problem_size``, and Kernel Tuner's strategies the engine does not have (``pso``,
``firefly_algorithm``, ...: ``NotImplementedError``, listing those it has).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import itertools
import json
import logging
import math
import operator
import os
import re
import reprlib
import shlex
import shutil
import stat
import sys
import sysconfig
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

from tunebox import _dtypes

if TYPE_CHECKING:
    import numpy as np
    from typing_extensions import Self, TypeAlias

    #: A configuration as the functions of ``restrictions`` and ``metrics`` get it: parameter
    #: name -> value (with the results so far, for a metric).
    Config: TypeAlias = dict[str, Any]
    #: A restriction, as Kernel Tuner takes it: a Python expression over the parameters; a
    #: function of the parameters by name (``lambda BX, BY: BX * BY <= 1024``) or of the config
    #: dict (``lambda p: ...``); or ``(function, [names])``, called with those params' values.
    Restriction: TypeAlias = Union[
        str, Callable[..., object], tuple[Callable[..., object], Sequence[str]]
    ]
    #: A problem size's entry: an integer (numpy's too), or an expression over the parameters.
    Size: TypeAlias = Union[int, "np.integer[Any]", str]
    #: A metric: an expression the engine evaluates, or a function of the result's row.
    Metric: TypeAlias = Union[str, Callable[[Config], Any]]
    #: One configuration's result: its parameters, ``time`` or ``__error__``, the metrics, ...
    Row: TypeAlias = dict[str, Any]
    #: A manifest entry: ``(key, value)``.
    Entry: TypeAlias = tuple[str, Any]

__all__ = ["tune_kernel", "ErrorConfig", "CompilationFailedConfig", "RuntimeFailedConfig"]


class ErrorConfig(str):
    """Why a configuration has no time, as Kernel Tuner's ``kernel_tuner.util.ErrorConfig``."""

    #: What went wrong: tunebox's error message, or the status.
    detail: str

    def __new__(cls, detail: str = "") -> Self:
        value = super().__new__(cls, cls.__name__)
        value.detail = detail
        return value

    def __str__(self) -> str:
        return self.__class__.__name__


class CompilationFailedConfig(ErrorConfig):
    """The configuration did not compile."""


class RuntimeFailedConfig(ErrorConfig):
    """The configuration crashed, hung, failed or computed a wrong answer."""


# Kernel Tuner's strategy names, and the engine's (all of them in tunebox._native.STRATEGIES).
_STRATEGIES = {
    "brute_force": "brute-force",
    "random_sample": "random",
    "genetic_algorithm": "genetic",
    "simulated_annealing": "annealing",
    "greedy_ils": "ils",
    "diff_evo": "de",
    "bayes_opt": "bayes",
}

# Kernel Tuner's strategies that tunebox has no counterpart of: refused as not implemented,
# where any other unknown name is a mistake (ValueError).
_KERNEL_TUNER_ONLY = (
    "basinhopping",
    "dual_annealing",
    "firefly_algorithm",
    "greedy_mls",
    "minimize",
    "mls",
    "ordered_greedy_mls",
    "pso",
)

# The macros Kernel Tuner defines before a kernel without `defines` beside the params (the
# engine defines them from the problem size, `grid_div_*` and the block-size params).
_GEOMETRY_MACROS = (
    "grid_size_x",
    "grid_size_y",
    "grid_size_z",
    "block_size_x",
    "block_size_y",
    "block_size_z",
)

_CXX_SUFFIXES = (".cpp", ".cc", ".cxx", ".c++", ".C", ".hpp")


def tune_kernel(
    kernel_name: str,
    kernel_source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    problem_size: Size | Sequence[Size],
    arguments: Sequence[Any],
    tune_params: Mapping[str, Sequence[Any]],
    grid_div_x: str | Sequence[str] | None = None,
    grid_div_y: str | Sequence[str] | None = None,
    grid_div_z: str | Sequence[str] | None = None,
    restrictions: Restriction | Sequence[Restriction] | None = None,
    answer: Sequence[Any] | None = None,
    atol: float = 1e-6,
    verify: Callable[..., object] | None = None,
    verbose: bool = False,
    lang: str | None = None,
    device: int | None = 0,
    platform: int = 0,
    smem_args: object = None,
    cmem_args: object = None,
    texmem_args: object = None,
    compiler: str | None = None,
    compiler_options: Sequence[str] | None = None,
    defines: Mapping[str, object] | None = None,
    log: object = None,
    iterations: int | None = None,
    block_size_names: object = None,
    quiet: bool = False,
    strategy: str | None = None,
    strategy_options: Mapping[str, Any] | None = None,
    cache: str | os.PathLike[str] | None = None,
    metrics: Mapping[str, Metric] | None = None,
    simulation_mode: bool = False,
    observers: object = None,
    objective: str | None = None,
    objective_higher_is_better: bool | None = None,
    timeout: float = 60.0,
    workers: int = 1,
    max_process_uses: int | None = None,
    **unsupported: object,
) -> tuple[list[Row], dict[str, Any]]:
    """Tunes a kernel as Kernel Tuner's ``tune_kernel`` does, through tunebox's engine; see the
    module's doc for the arguments, the result and what is refused."""
    if unsupported:
        raise TypeError(f"tune_kernel got unknown arguments: {', '.join(sorted(unsupported))}")
    _refuse(
        smem_args=smem_args,
        cmem_args=cmem_args,
        texmem_args=texmem_args,
        block_size_names=block_size_names,
        observers=observers,
        simulation_mode=simulation_mode or None,
    )
    if device not in (0, None):
        raise NotImplementedError(
            f"tunebox.kernel_tuner: device={device!r}: tunebox measures on the first visible "
            "device; set CUDA_VISIBLE_DEVICES instead"
        )
    uses = _uses(max_process_uses)
    metrics = dict(metrics or {})
    tune_params = _tune_params(tune_params)
    engine_strategy, options = _strategy(
        strategy, strategy_options or {}, math.prod(len(v) for v in tune_params.values())
    )
    writer = _Manifest()
    source, language = writer.kernel(
        kernel_name, kernel_source, lang, compiler, in_memory=defines is not None
    )
    writer.flags(compiler_options, language, source)
    writer.arguments(arguments, language)
    writer.params(tune_params)
    writer.restrictions(restrictions, tune_params)
    writer.defines(defines, tune_params)
    writer.answer(answer, arguments, atol, verify)
    if nans := writer.nan_answers():
        warnings.warn(
            f"tunebox.kernel_tuner: the answer holds {nans} NaN(s): an output's NaN where the "
            "answer has one counts as equal (as Kernel Tuner compares it)",
            stacklevel=2,
        )
    writer.launch(problem_size, (grid_div_x, grid_div_y, grid_div_z))
    writer.timing(iterations, timeout)
    writer.metrics(metrics)
    _check_metrics(metrics, tune_params)
    writer.objective(objective, objective_higher_is_better, metrics)
    from tunebox import _native

    budget = options.get("max_fevals")
    fraction = (
        None if budget is not None or "fraction" not in options else _fraction(options["fraction"])
    )
    printer = _Printer(list(tune_params), verbose and not quiet)
    # Named as a file in the current folder (relative paths, the report), which is neither
    # read nor written.
    manifest_path = os.path.join(os.getcwd(), "kernel_tuner.toml")
    with _worker() as worker, _arguments_named(manifest_path):
        report = _native.tune(
            writer.toml(),
            manifest_path,
            writer.buffers(),
            worker,
            cache=_cache_path(cache),
            strategy=engine_strategy,
            budget=None if budget is None else int(budget),
            fraction=fraction,
            seed=int(options.get("seed", 0)),
            workers=int(workers),
            max_process_uses=uses,
            max_time_s=options.get("time_limit"),
            on_choice=printer.choice,
            on_note=printer.note,
        )
    results = [
        _row(r, tune_params, arguments) for r in sorted(report["results"], key=lambda r: r["index"])
    ]
    if verify is not None:
        _verify_again(results, writer, kernel_name, arguments, answer, atol, verify)
    _python_metrics(results, metrics, list(tune_params))
    objective = objective or "time"
    higher = bool(objective_higher_is_better)
    # As Kernel Tuner prints a configuration: its time, then its metrics.
    shown = ["time", *metrics]
    best = _best(results, objective, higher)
    if not quiet:
        for row in results:
            if verbose or "__error__" not in row:
                print(_line(row, list(tune_params), shown))
        failed = _failures(results)
        if failed:
            print(failed)
        if best is not None:
            print("best performing configuration:")
            print(_line(best, list(tune_params), shown))
    env = {
        "best_config": best,
        "kernel_name": kernel_name,
        "kernel_string": source,
        "problem_size": problem_size,
        "tune_params": tune_params,
        "compiler_options": compiler_options,
        "iterations": iterations,
        "lang": "CUDA" if language == "CUDA" else "C",  # Kernel Tuner's names
        "device_name": report.get("device"),
        "strategy": strategy or "brute_force",
        "strategy_options": strategy_options or {},
        "objective": objective,
        "objective_higher_is_better": higher,
        "cache": _cache_path(cache),
        "backend": "tunebox",
        "report": report,
        "worker": worker,
    }
    return results, env


@contextlib.contextmanager
def _arguments_named(path: str) -> Iterator[None]:
    """The engine's errors about the manifest written from the call (named as ``path``) in
    the caller's terms: the manifest is in Kernel Tuner's spelling, so most of its fields are
    the arguments' names; its path names a file the user never wrote, and the fields the
    engine names by its own spelling (``params.X``, ``kernel.entry``) are the arguments'."""
    try:
        yield
    except (ValueError, RuntimeError) as error:
        message = str(error)
        if message.startswith(_NEEDS_GPU):
            # The command line's advice (its flags) is no use here.
            message = message.split("\nTune it on a machine", 1)[0]
            said = f"tune_kernel: a CUDA kernel needs a GPU{message[len(_NEEDS_GPU) :]}"
            raise type(error)(said) from None
        if path not in message:
            raise
        raise type(error)(_in_callers_terms(message, path)) from None


# How the engine begins to say that no GPU is there for a CUDA kernel.
_NEEDS_GPU = "this manifest needs a GPU"


# The engine's names of manifest fields, as the arguments of tune_kernel that give them.
_FIELDS = (
    (re.compile(r"\bparams\.(\w+)"), r"tune_params['\1']"),
    (re.compile(r"`params`|\[params\]"), "`tune_params`"),
    (re.compile(r"\(params: "), "(tune_params: "),
    (re.compile(r"\bkernel\.entry\b"), "kernel_name"),
    (re.compile(r"\bkernel\.source\b"), "kernel_source"),
    (re.compile(r"\bkernel\.(?:flags|options)\b"), "compiler_options"),
    (re.compile(r"\bkernel\.compiler\b"), "compiler"),
)


def _in_callers_terms(message: str, path: str) -> str:
    """``invalid manifest PATH: restrictions[0]: ...`` as ``tune_kernel: invalid arguments:
    restrictions[0]: ...``, ``PATH: no choice ... to `params``` as ``tune_kernel: no choice ...
    to `tune_params```: the manifest's path and its fields as the call's arguments."""
    for prefix, said in ((f"invalid manifest {path}: ", "invalid arguments: "), (f"{path}: ", "")):
        if message.startswith(prefix):
            message = f"tune_kernel: {said}{message[len(prefix) :]}"
            break
    else:
        message = f"tune_kernel: {message}"
    message = message.replace(f"invalid manifest {path}: ", "").replace(f"{path}: ", "")
    message = message.replace(path, "tune_kernel's arguments")
    for pattern, name in _FIELDS:
        message = pattern.sub(name, message)
    return message


def _in_argument_terms(error: str | None, arguments: Sequence[Any]) -> str | None:
    """A configuration's error as the call's arguments say it: an array that travelled as
    another type in its own terms (:func:`tunebox._dtypes.in_numpy_terms`), the timeout as
    the ``timeout`` argument."""
    error = _dtypes.in_numpy_terms(error, arguments)
    if error is not None:
        error = re.sub(r"(give it a timeout of at least ([0-9.]+) s)", r"\1 (timeout=\2)", error)
    return error


def _answer_as(i: int, expected: np.ndarray[Any, Any], arg: np.ndarray[Any, Any]) -> Any:
    """``answer[i]`` as the engine compares it with argument ``i``: of the argument's type, as
    Kernel Tuner accepts an answer of any type the argument's casts to (a ``float64`` answer
    for a ``float32`` output); an integer output's answer must hold integers of its range."""
    import numpy as np

    if expected.size != arg.size:
        raise ValueError(
            f"answer[{i}] has {expected.size} elements and argument {i} {arg.size}: give one "
            "per element"
        )
    if expected.dtype == arg.dtype:
        return expected
    if not np.can_cast(arg.dtype, expected.dtype):
        raise TypeError(
            f"answer[{i}]: {expected.dtype.name} for an argument of {arg.dtype.name}, which "
            f"does not cast to it (Kernel Tuner refuses it too): give a {arg.dtype.name} answer"
        )
    with np.errstate(all="ignore"):
        converted = expected.astype(arg.dtype)
    if arg.dtype.kind in "iub" and not np.array_equal(converted.astype(expected.dtype), expected):
        raise TypeError(
            f"answer[{i}]: {expected.dtype.name} values that no {arg.dtype.name} equals (the "
            f"output is compared exactly): give the answer as {arg.dtype.name}"
        )
    return converted


def _tune_params(tune_params: Mapping[str, Any]) -> dict[str, list[Any]]:
    """``tune_params`` with each param's values as a list of plain Python values (a list, a
    tuple, a range or a numpy array, as Kernel Tuner takes them)."""
    if not isinstance(tune_params, Mapping):
        raise TypeError(
            f"tune_params = {reprlib.repr(tune_params)}: give a dict of param name -> values"
        )
    plain: dict[str, list[Any]] = {}
    for name, values in tune_params.items():
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
            raise ValueError(
                f"tune_params[{name!r}] = {reprlib.repr(values)}: give a list of values"
            )
        listed = [_plain(v) for v in values]
        if not listed:
            raise ValueError(f"tune_params[{name!r}] is empty: give one value at least")
        plain[str(name)] = listed
    return plain


def _failures(results: list[Row]) -> str | None:
    """``3 of 9 configurations failed (1 crashed, 1 timeout, 1 wrong); their rows say which
    and why``, or ``None`` when none did."""
    statuses = sorted(str(r["status"]) for r in results if "__error__" in r)
    if not statuses:
        return None
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses)))
    said = (
        f"{len(statuses)} of {len(results)} configurations failed ({counts}); their rows "
        "say which and why (status, error)"
    )
    if len(statuses) == len(results):
        # Nothing ran: the first error is likely every configuration's.
        first = str(results[0].get("error") or results[0]["status"])
        said += f"; the first: {_first_lines(first)}"
    return said


def _first_lines(error: str, lines: int = 6) -> str:
    """The lines of ``error`` that say most: a compiler's first diagnostics (after the
    command), else its first lines."""
    all_lines = error.splitlines()
    start = next((i for i, line in enumerate(all_lines) if "error:" in line), 0)
    return "\n".join(all_lines[start : start + lines])


def _refuse(**given: object) -> None:
    for name, value in given.items():
        if value is not None:
            raise NotImplementedError(f"tunebox.kernel_tuner: {name} is not supported yet")


def _strategy(
    strategy: str | None, options: Mapping[str, Any], size: int
) -> tuple[str, Mapping[str, Any]]:
    """The engine's name for ``strategy`` (Kernel Tuner's name or the engine's own), and the
    options it runs with: Kernel Tuner's genetic algorithm measures at most its population size
    times its generations (:func:`_generations_budget`; of a space of ``size`` configurations),
    and at most ``max_fevals``.

    Raises ``NotImplementedError`` for Kernel Tuner's strategies tunebox has no counterpart of,
    ``ValueError`` for any other name the engine does not know; both name the known ones."""
    from tunebox import _native

    name = strategy or "brute_force"
    engine = _STRATEGIES.get(name, name)
    if engine not in _native.STRATEGIES:
        known = (
            f"use one of {', '.join(_STRATEGIES)} (Kernel Tuner's names) or "
            f"{', '.join(_native.STRATEGIES)} (tunebox's)"
        )
        if name in _KERNEL_TUNER_ONLY:
            raise NotImplementedError(
                f"tunebox.kernel_tuner: strategy={strategy!r}: Kernel Tuner's {name} has no "
                f"counterpart in tunebox; {known}"
            )
        raise ValueError(f"tunebox.kernel_tuner: strategy={strategy!r} is unknown; {known}")
    if engine == "random" and "max_fevals" not in options and "fraction" not in options:
        options = {**options, "fraction": 0.1}  # Kernel Tuner's random_sample default
    if name == "brute_force" and "max_fevals" in options:
        raise ValueError(
            "strategy_options['max_fevals'] with strategy brute_force: brute force measures "
            "every configuration (Kernel Tuner refuses it too); to measure a sample, use "
            "strategy='random_sample' with max_fevals"
        )
    if name == "genetic_algorithm":
        # Kernel Tuner's bound, with max_fevals or without.
        budget = _generations_budget(options, size)
        given = options.get("max_fevals")
        options = {**options, "max_fevals": budget if given is None else min(given, budget)}
    ignored = sorted(set(options) - {"max_fevals", "fraction", "time_limit", "seed"})
    ignored = [o for o in ignored if not (name == "genetic_algorithm" and o in _GA_BUDGET)]
    if ignored:
        warnings.warn(
            f"tunebox.kernel_tuner: strategy_options {', '.join(ignored)} are not used: tunebox's "
            f"{engine} strategy has its own settings",
            stacklevel=3,
        )
    return engine, options


# Kernel Tuner 1.5's genetic_algorithm options that bound its evaluations, and their defaults.
_GA_BUDGET = {"popsize": 26, "maxiter": 90}


def _generations_budget(options: Mapping[str, Any], size: int) -> int:
    """The most configurations Kernel Tuner's genetic algorithm evaluates: ``popsize`` (its
    population, made smaller for a small space as Kernel Tuner makes it) times ``maxiter`` (its
    generations)."""
    values = {}
    for key, default in _GA_BUDGET.items():
        value = options.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"strategy_options[{key!r}] = {value!r}: give a whole number, 1 or more"
            )
        values[key] = value
    popsize, generations = values["popsize"], values["maxiter"]
    if popsize < 2 or popsize > size // 2:
        popsize = min(max(round(size / generations * 3), 2), popsize)
    return popsize * generations


def _fraction(value: object) -> float:
    try:
        fraction = float(value)  # type: ignore[arg-type] # anything float() takes
    except (TypeError, ValueError):
        fraction = math.nan
    if not 0.0 < fraction <= 1.0:
        raise ValueError(
            f"strategy_options['fraction'] = {value!r}: give the share of the configurations to "
            "measure, above 0 and at most 1"
        )
    return fraction


def _uses(max_process_uses: object) -> int | None:
    if max_process_uses is None:
        return None
    try:
        uses = (
            None if isinstance(max_process_uses, bool) else operator.index(max_process_uses)  # type: ignore[arg-type] # checked here
        )
    except TypeError:
        uses = None
    if uses is None or uses < 0:
        raise ValueError(
            f"max_process_uses={max_process_uses!r}: give the measurements a worker process makes "
            "before it is replaced (1: a fresh process each, 0: no limit)"
        )
    return uses


def _cache_path(cache: str | os.PathLike[str] | None) -> str | None:
    if not cache:
        return None
    path = os.fspath(cache)
    if path.endswith(".json"):
        path = path[: -len(".json")]
    return os.path.abspath(path + ".tunebox-cache.jsonl")


_log = logging.getLogger("tunebox.kernel_tuner")


@contextlib.contextmanager
def _worker() -> Iterator[str]:
    """The worker executable the engine starts for every measurement (a fresh process each):
    tunebox's Rust worker, ``tunebox-worker``, which the extension carries and writes once
    into tunebox's cache (``tunebox._native.engine_worker``): no Python interpreter starts
    for a worker. Where it cannot be had (an extension built without it, a cache on a
    ``noexec`` mount), a note is logged and a Python launcher serves instead (see
    :func:`_python_worker`), which costs an interpreter start per worker process."""
    from tunebox import _native

    try:
        path = os.fspath(_native.engine_worker())
    except OSError as error:
        _log.warning("tunebox.kernel_tuner: %s; the workers are Python launchers instead", error)
        path = None
    if path is not None:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="tunebox-engine-worker-") as folder:
        yield _python_worker(folder)


def _python_worker(folder: str) -> str:
    """The Python launcher of the engine's worker, where the Rust worker is missing: a script
    in `folder` that starts this interpreter isolated and without `site` (``python -IS``: no
    site-packages scan, no ``.pth`` files, no user paths) and serves straight from
    ``tunebox._native``, which takes about half the start of the ``tunebox-engine-worker``
    console script (site, ``re``, the package's imports). Where a ``#!`` line cannot name
    this interpreter (spaces in its path, too long for the kernel), that script, else a plain
    launcher. The package's folder goes after the standard library's on ``sys.path``, so that
    nothing installed beside it shadows a standard module."""
    from tunebox import _native

    package_root = os.path.dirname(os.path.dirname(os.path.abspath(_native.__file__)))
    shebang = f"#!{sys.executable} -IS"
    if (
        sys.executable
        and not any(c.isspace() for c in sys.executable)
        and len(shebang) < _SHEBANG_MAX
    ):
        return _launcher(
            folder,
            f"{shebang}\nimport sys\nsys.path.append({package_root!r})\n"
            "from tunebox._native import serve_engine_worker\nsys.exit(serve_engine_worker())\n",
        )
    found = shutil.which("tunebox-engine-worker", path=sysconfig.get_path("scripts"))
    if found:
        return found
    return _launcher(
        folder,
        f"#!{sys.executable}\nimport sys\nfrom tunebox._engine_worker import main\nsys.exit(main())\n",
    )


# The longest `#!` line every Linux reads whole (BINPRM_BUF_SIZE before 5.1 was 128 bytes).
_SHEBANG_MAX = 127


def _launcher(folder: str, text: str) -> str:
    path = os.path.join(folder, "tunebox-engine-worker")
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


class _Manifest:
    """A manifest in Kernel Tuner's spelling, and the files it names, in memory: the kernel
    source (text) and the arrays (``name.bin``: contiguous numpy arrays, held here until the
    engine has copied them)."""

    def __init__(self) -> None:
        # name in the manifest -> str (source) or a contiguous numpy array
        self.files: dict[str, str | np.ndarray[Any, Any]] = {}
        self.top: list[Entry] = []
        self.tables: dict[str, list[Entry]] = {}
        self.argument_tables: list[list[Entry]] = []
        self.language = "C"
        # (index, numpy array) of the array arguments
        self.arrays: list[tuple[int, np.ndarray[Any, Any]]] = []
        # where the user's source was, when it is copied here
        self.include_dir: str | None = None
        # the user's source text, and its name in `files` when it goes in memory
        self.text = ""
        self.source_name: str | None = None
        # the restrictions given as strings (Python expressions), and the configurations
        # (tuples of values, in tune_params' order) that the functions among them reject
        self.restriction_strings: list[str] = []
        self.rejected: set[tuple[Any, ...]] = set()
        # the problem size and grid divisors as written (`launch`), and whether the kernel
        # gets Kernel Tuner's grid and block macros (no `defines`)
        self.problem_size: list[int | str] = []
        self.grid_divs: list[Any] = [None, None, None]
        self.geometry_macros = True

    def kernel(
        self,
        kernel_name: str,
        kernel_source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        lang: str | None,
        compiler: str | None,
        in_memory: bool = False,
    ) -> tuple[str, str]:
        """The kernel's entries, and its source in memory unless the engine can read the
        user's file as it is (a C++ or CUDA file, and ``in_memory`` false: nothing to prepend).
        Returns the source text and the language (``C``, ``C++`` or ``CUDA``)."""
        if isinstance(kernel_source, (list, tuple)):
            if len(kernel_source) != 1:
                raise NotImplementedError(
                    "tunebox.kernel_tuner: a list of kernel sources is not supported yet: "
                    "#include the others from the first"
                )
            kernel_source = kernel_source[0]
        file_name = _source_file(kernel_source)
        if file_name is not None:
            with open(file_name) as f:
                text = f.read()
        elif isinstance(kernel_source, str):
            text = kernel_source
        else:
            raise TypeError(f"kernel_source={kernel_source!r}: give the source text or a file name")
        language = _language(lang, text, file_name, compiler)
        self.language = language
        if file_name is not None and (
            in_memory or (language == "C++" and not file_name.endswith(_CXX_SUFFIXES))
        ):
            # Kernel Tuner compiles every C source as C++ (g++), and the engine goes by the
            # suffix; defines are written before the text. Its #include "..." are the file's.
            self.include_dir = os.path.dirname(file_name)
            file_name = None
        self.text = text
        if file_name is None:
            # In memory, under a name whose suffix tells the engine the language.
            file_name = "kernel" + {"C": ".c", "C++": ".cpp", "CUDA": ".cu"}[language]
            self.source_name = file_name
            self.files[file_name] = text
        self.top.append(("kernel_name", kernel_name))
        self.top.append(("kernel_source", file_name))
        self.top.append(("lang", "CUDA" if language == "CUDA" else "C"))
        if compiler is not None:
            if language == "CUDA":
                raise NotImplementedError(
                    "tunebox.kernel_tuner: CUDA kernels compile with NVRTC; drop compiler="
                )
            self.table("kernel").append(("compiler", compiler))
        return text, language

    def compiled_text(self) -> str:
        """The source the engine compiles: the user's, after the defines' lines if any."""
        if self.source_name is None:
            return self.text
        text = self.files[self.source_name]
        assert isinstance(text, str)
        return text

    def flags(
        self,
        compiler_options: Sequence[str] | None,
        language: str,
        source: str,
    ) -> None:
        if isinstance(compiler_options, (str, bytes)):
            text = os.fsdecode(compiler_options)
            raise TypeError(
                f"tune_kernel: compiler_options={compiler_options!r} is one string, which would "
                f"be read as one flag a character: give a list of strings, one flag each, e.g. "
                f"compiler_options={shlex.split(text)!r}"
            )
        flags: list[str] = []
        for i, flag in enumerate(compiler_options or ()):
            if not isinstance(flag, (str, os.PathLike)):
                raise TypeError(
                    f"tune_kernel: compiler_options[{i}] = {flag!r}: give each flag as a string"
                )
            flags.append(os.fspath(flag))
        if language != "CUDA" and not compiler_options:
            flags = ["-O3"]
        # A file copied into memory (with `defines`) keeps its folder's headers, CUDA's too.
        if '#include "' in source and (language != "CUDA" or self.include_dir):
            flags.append("-I" + (self.include_dir or os.getcwd()))
        if flags or compiler_options is not None:
            self.top.append(("compiler_options", flags))

    def arguments(self, arguments: Sequence[Any], language: str) -> None:
        import numpy as np

        for i, arg in enumerate(arguments):
            name = f"arg{i}"
            if isinstance(arg, np.ndarray):
                kind = _dtypes.array_kind(arg.dtype)
                if kind is None:
                    raise TypeError(
                        f"arguments[{i}]: numpy arrays of {arg.dtype.name} are not supported; use "
                        f"one of {_dtypes.ARRAY_TYPES}"
                    )
                dtype, per_element = kind
                table: list[Entry] = [
                    ("name", name),
                    ("dtype", dtype),
                    ("shape", [int(arg.size) * per_element]),
                    ("init", self.contents(name, arg)),
                ]
                if language != "CUDA":
                    table.append(("c_type", "void"))
                self.arrays.append((i, arg))
            elif isinstance(arg, (np.generic, int, float)) and not isinstance(
                arg, (bool, np.bool_)
            ):
                typed = (
                    _dtypes.scalar(arg)
                    if isinstance(arg, np.generic)
                    else ("i64" if isinstance(arg, int) else "f64", arg)
                )
                if typed is None:
                    raise TypeError(
                        f"arguments[{i}] = {reprlib.repr(arg)}: use scalars of "
                        f"{_dtypes.SCALAR_TYPES}"
                    )
                table = [("name", name), ("type", typed[0]), ("value", typed[1])]
            else:
                raise TypeError(
                    f"arguments[{i}] is a {type(arg).__name__} ({reprlib.repr(arg)}): give numpy "
                    "arrays and numpy scalars"
                )
            self.argument_tables.append(table)

    def contents(self, name: str, arg: np.ndarray[Any, Any]) -> str | dict[str, str]:
        """An array's `init`: ``"zeros"`` when every byte is 0 (an output buffer, the usual
        ``numpy.zeros_like``: nothing to copy, and each worker gets fresh zero pages instead of
        a copy of the caller's), else its bytes, handed to the engine in memory as the file
        ``name.bin`` (copied once for the whole call)."""
        import numpy as np

        arg = np.ascontiguousarray(arg)
        if arg.size and not arg.reshape(-1).view(np.uint8).any():
            return "zeros"
        data = f"{name}.bin"
        self.files[data] = arg
        return {"file": data}

    def params(self, tune_params: Mapping[str, Sequence[Any]]) -> None:
        table = self.table("tune_params")
        for name, values in tune_params.items():
            table.append((name, list(values)))

    def restrictions(
        self,
        restrictions: Restriction | Sequence[Restriction] | None,
        tune_params: Mapping[str, Sequence[Any]],
    ) -> None:
        """The restrictions, each at its index: a string as it is (the engine evaluates it),
        a function evaluated here over the space and handed to the engine as the expression
        of the configurations it rejects (``not (...)``) or keeps, whichever is shorter."""
        if restrictions is None:
            return
        names = list(tune_params)
        entries: list[str] = []
        functions: list[tuple[int, str, Callable[[Config], object]]] = []
        for i, (label, item) in enumerate(_restriction_items(restrictions)):
            if isinstance(item, str):
                entries.append(item)
                self.restriction_strings.append(item)
            else:
                functions.append((i, label, _restriction_call(item, label, names)))
                entries.append("True")  # its expression, once the functions have run
        if functions:
            rejected = self._reject(tune_params, functions)
            values = [[_plain(v) for v in tune_params[n]] for n in names]
            for i, _, _ in functions:
                entries[i] = _not_in(names, values, rejected[i])
        self.top.append(("restrictions", entries))

    def _reject(
        self,
        tune_params: Mapping[str, Sequence[Any]],
        functions: list[tuple[int, str, Callable[[Config], object]]],
    ) -> dict[int, list[tuple[Any, ...]]]:
        """The configurations each function rejects, called in the list's order on those the
        ones before it kept (as Kernel Tuner checks them in turn): restriction index -> the
        rejected configurations' values. A function that raises is an error naming it and the
        configuration, unless a string restriction leaves that configuration out anyway."""
        rejected: dict[int, list[tuple[Any, ...]]] = {i: [] for i, _, _ in functions}
        kept = 0
        for key, config in _configs(tune_params):
            for i, label, call in functions:
                try:
                    ok = bool(call(config))
                except Exception as error:  # noqa: BLE001 (the user's function: any error)
                    if _strings_exclude(self.restriction_strings, config):
                        ok = False
                    else:
                        raise _failed(label, config, error) from error
                if not ok:
                    rejected[i].append(tuple(_plain(v) for v in key))
                    self.rejected.add(key)
                    break
            else:
                kept += 1
        if not kept:
            labels = ", ".join(label for _, label, _ in functions)
            verb = "rejects" if len(functions) == 1 else "reject"
            raise ValueError(
                f"tune_kernel: no configuration of tune_params satisfies the restrictions "
                f"({labels} {verb} them all); loosen `restrictions` or add values to "
                "`tune_params`"
            )
        return rejected

    def defines(
        self, defines: Mapping[str, object] | None, tune_params: Mapping[str, Sequence[Any]]
    ) -> None:
        """Kernel Tuner's ``defines``: when given, they are the kernel's macros and the params
        are not (Kernel Tuner's ``prepare_kernel_string``). The engine defines every param for
        the compiler (``-DNAME=VALUE``), so the source starts with lines that choose each
        define's value from the params (``#if``), then undefine the params."""
        if defines is None:
            # And `kernel_tuner` (1), which Kernel Tuner defines beside the params then (the
            # engine defines the grid and block macros).
            self.add_flag("-Dkernel_tuner=1")
            return
        self.geometry_macros = False
        assert self.source_name is not None, "kernel(in_memory=True) keeps the source in memory"
        prelude = _define_lines(defines, tune_params, self.rejected, self.restriction_strings)
        self.files[self.source_name] = prelude + self.text

    def add_flag(self, flag: str) -> None:
        """Adds ``flag`` to the compiler options written so far."""
        for i, (key, value) in enumerate(self.top):
            if key == "compiler_options" and isinstance(value, list):
                self.top[i] = (key, [*value, flag])
                return
        self.top.append(("compiler_options", [flag]))

    def answer(
        self,
        answer: Sequence[Any] | None,
        arguments: Sequence[Any],
        atol: float,
        verify: Callable[..., object] | None,
    ) -> None:
        if answer is None or verify is not None:
            return  # a verify function is called here, after the engine's run
        import numpy as np

        if len(answer) != len(arguments):
            raise TypeError(
                f"answer has {len(answer)} entries and arguments {len(arguments)}: give one per "
                "argument, None for those not checked (Kernel Tuner refuses this too)"
            )
        entries = []
        for i, (expected, arg) in enumerate(zip(answer, arguments)):
            if expected is None:
                entries.append("")
                continue
            if not isinstance(arg, np.ndarray):
                raise TypeError(f"answer[{i}]: argument {i} is a scalar; give None")
            expected = _answer_as(i, np.asarray(expected), arg)
            data = f"answer{i}.bin"
            self.files[data] = np.ascontiguousarray(expected)
            entries.append(data)
            # Kernel Tuner checks the arrays after one call on fresh copies of the arguments:
            # an in-place kernel (`x[i] = x[i] * 2`) gets its inputs back before every call.
            self.argument_tables[i].append(("reset", True))
        if not any(entries):
            return
        self.top.append(("answer", entries))
        self.top.append(("atol", float(atol)))

    def nan_answers(self) -> int:
        """How many NaNs the answer arrays hold (Kernel Tuner warns of them)."""
        import numpy as np

        return sum(
            int(np.isnan(a).sum())
            for name, a in self.files.items()
            if name.startswith("answer") and not isinstance(a, str) and a.dtype.kind == "f"
        )

    def launch(
        self,
        problem_size: Size | Sequence[Size],
        grid_divs: tuple[str | Sequence[str] | None, ...],
    ) -> None:
        grid_div_x, grid_div_y, grid_div_z = grid_divs
        if callable(problem_size):
            raise NotImplementedError(
                "tunebox.kernel_tuner: problem_size as a function is not supported"
            )
        sizes = (
            [problem_size]
            if isinstance(problem_size, (str, int)) or not isinstance(problem_size, Iterable)
            else list(problem_size)
        )
        entries: list[int | str] = []
        for size in sizes:
            if isinstance(size, str):
                entries.append(size)
            elif isinstance(size, bool) or not hasattr(size, "__index__"):
                raise TypeError(
                    f"tune_kernel: problem_size={problem_size!r}: give an int (a numpy integer "
                    "too), a param name or expression, or a tuple of them"
                )
            else:
                entries.append(operator.index(size))
        self.top.append(("problem_size", entries))
        self.problem_size = entries
        self.grid_divs = [grid_div_x, grid_div_y, grid_div_z]
        for name, value in (
            ("grid_div_x", grid_div_x),
            ("grid_div_y", grid_div_y),
            ("grid_div_z", grid_div_z),
        ):
            if value is not None:
                # For a C kernel too: Kernel Tuner's grid_size_* macros divide by it.
                self.top.append((name, [value] if isinstance(value, str) else list(value)))

    def timing(self, iterations: int | None, timeout: float) -> None:
        if iterations is not None:
            self.top.append(("iterations", int(iterations)))
        self.top.append(("timeout_s", float(timeout)))

    def metrics(self, metrics: Mapping[str, Metric]) -> None:
        expressions = [(name, m) for name, m in metrics.items() if isinstance(m, str)]
        if expressions:
            self.table("metrics").extend(expressions)

    def objective(
        self, objective: str | None, higher: bool | None, metrics: Mapping[str, Metric]
    ) -> None:
        if objective is None or objective == "time":
            return
        if isinstance(metrics.get(objective), str):
            self.top.append(("objective", objective))
            if higher is not None:
                self.top.append(("objective_higher_is_better", bool(higher)))
        elif objective not in metrics:
            raise ValueError(
                f"objective={objective!r}: it is neither 'time' nor one of the metrics"
            )
        # A metric computed here (a function) ranks the results here; the engine's strategy
        # searches by time.

    def table(self, name: str) -> list[Entry]:
        return self.tables.setdefault(name, [])

    def toml(self) -> str:
        """The manifest as TOML text."""
        lines = [f"{key} = {_toml(value)}" for key, value in self.top]
        for name, entries in self.tables.items():
            lines.append(f"\n[{name}]")
            lines.extend(f"{_toml_key(k)} = {_toml(v)}" for k, v in entries)
        for table in self.argument_tables:
            lines.append("\n[[arguments]]")
            lines.extend(f"{k} = {_toml(v)}" for k, v in table)
        return "\n".join(lines) + "\n"

    def buffers(self) -> dict[str, str | tuple[int, int]]:
        """The files for ``tunebox._native.tune``: source text as it is, each array as
        ``(address, nbytes)`` of its memory, which ``self.files`` keeps alive."""
        return {
            name: contents if isinstance(contents, str) else (contents.ctypes.data, contents.nbytes)
            for name, contents in self.files.items()
        }


def _language(lang: str | None, text: str, file_name: str | None, compiler: str | None) -> str:
    """``CUDA``, ``C++`` or ``C``. Kernel Tuner's C backend compiles every C kernel with
    ``g++`` (a file under its own suffix, text as ``.cc``; the entry wrapped in ``extern "C"``
    unless the text says ``extern "C"``): without ``compiler``, so does tunebox (as C++, from
    a ``.cpp``, by ``$CXX`` or ``g++``; the engine's trampoline calls the entry with either
    linkage). A ``compiler`` given compiles C as C (``kernel.c``) unless the source is C++ by
    its suffix or its ``extern "C"``, or the compiler is a C++ driver (``g++``)."""
    name = None if lang is None else str(lang).lower()
    if name is None:
        if file_name is not None and file_name.endswith((".cu", ".cuh")) or "__global__" in text:
            return "CUDA"
    elif name == "cuda":
        return "CUDA"
    elif name not in ("c", "c++", "cpp"):
        raise NotImplementedError(
            f"tunebox.kernel_tuner: lang={lang!r} is not supported; use 'C', 'C++' or 'CUDA'"
        )
    if compiler is None or name in ("c++", "cpp"):
        return "C++"
    if file_name is not None and file_name.endswith(_CXX_SUFFIXES):
        return "C++"
    return "C++" if 'extern "C"' in text else "C"


# The suffixes of a file name given as kernel_source (Kernel Tuner's C, C++, CUDA, OpenCL,
# Fortran and Julia sources and headers): a one-line string ending in one that names no file
# is a missing file, not source text.
_SOURCE_SUFFIXES = (
    ".c", ".cc", ".cpp", ".cxx", ".c++", ".C", ".h", ".hh", ".hpp", ".hxx", ".cu", ".cuh",
    ".cl", ".F90", ".f90", ".jl",
)  # fmt: skip


def _source_file(kernel_source: object) -> str | None:
    """The absolute path of the file ``kernel_source`` names, or ``None`` for source text.
    Raises ``FileNotFoundError`` naming it when it names a file that is not there: a path
    object, or one line that looks like a file name (it ends in a source suffix, or holds a
    path separator and nothing of code: no ``(``, ``{`` or ``;``), as Kernel Tuner's
    ``open`` of it does."""
    if isinstance(kernel_source, os.PathLike):
        path = os.fspath(kernel_source)
    elif isinstance(kernel_source, str) and "\n" not in kernel_source:
        path = kernel_source
        if not os.path.isfile(path) and not _looks_like_a_path(path):
            return None
    else:
        return None
    if not isinstance(path, str):
        raise TypeError(f"kernel_source={kernel_source!r}: give the source text or a file name")
    if os.path.isdir(path):
        raise IsADirectoryError(
            errno.EISDIR, "tune_kernel: kernel_source is a folder, not a source file", path
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(
            errno.ENOENT,
            f"tune_kernel: kernel_source names no file (from {os.getcwd()}); give the source "
            "file's path, or the source text",
            path,
        )
    return os.path.abspath(path)


def _looks_like_a_path(text: str) -> bool:
    text = text.strip()
    if not text or any(c in text for c in "(){};") or text.startswith(("//", "/*", "#")):
        return False
    return text.endswith(_SOURCE_SUFFIXES) or os.sep in text or "/" in text


def _restriction_items(restrictions: object) -> list[tuple[str, object]]:
    """``(label, restriction)`` for each restriction: ``restrictions[i]``, or ``restrictions``
    for one given alone."""
    if isinstance(restrictions, str) or callable(restrictions) or _is_pair(restrictions):
        return [("restrictions", restrictions)]
    if not isinstance(restrictions, (list, tuple)):
        raise TypeError(
            f"tune_kernel: restrictions={restrictions!r}: give a list of strings (Python "
            "expressions over tune_params) and functions of the params"
        )
    return [(f"restrictions[{i}]", r) for i, r in enumerate(restrictions)]


def _is_pair(item: object) -> bool:
    """Kernel Tuner's ``(function, [param names])`` (or ``(function, names, source)``)."""
    return (
        isinstance(item, tuple)
        and len(item) in (2, 3)
        and callable(item[0])
        and isinstance(item[1], (list, tuple))
    )


def _restriction_call(item: object, label: str, names: list[str]) -> Callable[[Config], object]:
    """The restriction function ``item`` as a function of the config dict, called as Kernel
    Tuner calls it (``check_restriction`` and its constraint solver): with the params as
    keyword arguments when its arguments are named after params (``lambda BX, BY: ...``) or
    it takes ``**params``; with their values in order for ``*args`` or a ``(function,
    [names])`` pair; else with the dict (``lambda p: p["BX"] ...``). A function whose
    arguments fit none of these is a ``TypeError`` naming it, before any call."""
    known = ", ".join(names)
    if _is_pair(item):
        assert isinstance(item, tuple)
        function, selected = item[0], [str(n) for n in item[1]]
        unknown = [n for n in selected if n not in names]
        if unknown:
            raise TypeError(
                f"tune_kernel: {label}: {', '.join(unknown)} not in tune_params ({known})"
            )
        return lambda config: function(*(config[n] for n in selected))
    if not callable(item):
        raise TypeError(
            f"tune_kernel: {label} = {item!r}: give a string (a Python expression over "
            "tune_params), a function of the params, or (function, [param names])"
        )
    function = item
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without one: Kernel Tuner's dict
        return lambda config: function(dict(config))
    kind = inspect.Parameter
    parameters = list(signature.parameters.values())
    named = [
        p.name for p in parameters if p.kind in (kind.POSITIONAL_OR_KEYWORD, kind.KEYWORD_ONLY)
    ]
    required = [
        p.name
        for p in parameters
        if p.default is kind.empty and p.kind not in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD)
    ]
    takes_all = any(p.kind is kind.VAR_KEYWORD for p in parameters)
    by_name = [n for n in named if n in names]
    if by_name or (takes_all and not required):
        missing = [n for n in required if n not in names]
        if missing:
            raise TypeError(
                f"tune_kernel: {label}: its argument{'s' if len(missing) > 1 else ''} "
                f"{', '.join(missing)} {'are' if len(missing) > 1 else 'is'} not in tune_params "
                f"({known}): name a function's arguments after tune_params, or give it one "
                "argument, the parameter dict"
            )
        passed = names if takes_all else by_name
        return lambda config: function(**{n: config[n] for n in passed})
    if not required and any(p.kind is kind.VAR_POSITIONAL for p in parameters):
        return lambda config: function(*config.values())
    try:
        signature.bind(None)
    except TypeError:
        raise TypeError(
            f"tune_kernel: {label}: a function of {', '.join(required) or 'no arguments'}, "
            f"none of them in tune_params ({known}): name its arguments after tune_params, or "
            "give it one argument, the parameter dict"
        ) from None
    return lambda config: function(dict(config))


def _configs(tune_params: Mapping[str, Sequence[Any]]) -> Iterator[tuple[tuple[Any, ...], Config]]:
    """Every configuration of the product, the first param varying slowest (the engine's
    order): its values as given, and as the dict the user's functions get."""
    names = list(tune_params)
    for values in itertools.product(*(tune_params[n] for n in names)):
        yield values, dict(zip(names, values))


def _strings_exclude(strings: Sequence[str], config: Config) -> bool:
    """Whether a restriction string leaves the configuration out, evaluated as Kernel Tuner
    does (Python's ``eval`` over the params; the engine's evaluator has Python's meaning); one
    that raises leaves nothing out here."""
    names = dict(config)
    for code in _compiled(tuple(strings)):
        try:
            if code is not None and not eval(code, {"math": math}, names):
                return True
        except Exception:  # noqa: BLE001 (the engine says what is wrong with it)
            continue
    return False


@functools.lru_cache(maxsize=64)
def _compiled(strings: tuple[str, ...]) -> tuple[Any, ...]:
    """Each restriction string compiled once (``None`` where it does not compile: the engine
    says what is wrong with it), not parsed again for each configuration: 1e5 configurations
    with two strings took 1.8 s."""
    out: list[Any] = []
    for text in strings:
        try:
            out.append(compile(text, "<restriction>", "eval"))
        except SyntaxError:
            out.append(None)
    return tuple(out)


def _failed(label: str, config: Config, error: Exception) -> ValueError:
    """A user's function (``restrictions[i]``, ``defines[...]``) raising on ``config``."""
    text = ", ".join(f"{name}={value!r}" for name, value in config.items())
    return ValueError(f"tune_kernel: {label} failed for {text}: {type(error).__name__}: {error}")


def _not_in(names: list[str], values: list[list[Any]], rejected: list[tuple[Any, ...]]) -> str:
    """An expression true for every configuration but the rejected ones: the rejected ones'
    expression negated, or the kept ones' where they are fewer."""
    total = math.prod(len(v) for v in values)
    if not rejected:
        return "True"
    if len(rejected) == total:
        return "False"
    if total - len(rejected) < len(rejected):
        out = set(rejected)
        return _nest(names, values, [t for t in itertools.product(*values) if t not in out])
    return f"not ({_nest(names, values, rejected)})"


def _define_lines(
    defines: Mapping[str, object],
    tune_params: Mapping[str, Sequence[Any]],
    rejected: set[tuple[Any, ...]],
    strings: Sequence[str],
) -> str:
    """The lines that start the source when ``defines`` is given, as Kernel Tuner's
    ``prepare_kernel_string`` (``#define NAME VALUE`` for each define, the params not
    defined): a value that is a function of the params (called with their dict), or a string
    naming params (each name replaced by its value), is evaluated here for every valid
    configuration and chosen with ``#if`` on the params that decide it, as the engine defines
    them (see :class:`_Tests`); then every param is undefined, and the constants defined;
    ``#line 1`` gives the user's lines their numbers."""
    names = list(tune_params)
    values = [[_plain(v) for v in tune_params[n]] for n in names]
    valid: list[tuple[tuple[Any, ...], Config]] | None = None
    constant: dict[str, str] = {}
    varying: dict[str, dict[tuple[Any, ...], str]] = {}
    for key, value in defines.items():
        label = f"defines[{key!r}]"
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(
                f"tune_kernel: {label}: a define's name must be a C identifier (Kernel Tuner "
                "refuses it too)"
            )
        if not callable(value) and not (isinstance(value, str) and _mentions(value, names)):
            constant[key] = _define_text(value)
            continue
        if valid is None:
            valid = [
                (tuple(_plain(v) for v in k), config)
                for k, config in _configs(tune_params)
                if k not in rejected and not (strings and _strings_exclude(strings, config))
            ]
        texts: dict[tuple[Any, ...], str] = {}
        for k, config in valid:
            try:
                result = value(dict(config)) if callable(value) else _with_params(value, config)
            except Exception as error:  # noqa: BLE001 (the user's function: any error)
                raise _failed(label, config, error) from error
            texts[k] = _define_text(result)
        if len(set(texts.values())) == 1:
            constant[key] = next(iter(texts.values()))
        elif texts:
            varying[key] = texts
    tests = _Tests(names, values)
    chains: list[str] = []
    deciding = {key: tests.deciding(key, texts) for key, texts in varying.items()}
    for key, texts in varying.items():
        if key not in names:
            kept = deciding[key]
            branches: dict[tuple[Any, ...], list[str]] = {}
            for k, text in texts.items():
                branches[tuple(k[j] for j in kept)] = [f"#define {key} {text}"]
            chains += tests.chain(kept, branches)
    redefined = [key for key in varying if key in names]
    if redefined:
        # A define named as a param is chosen by the params (its own among them) in one
        # chain, whose taken branch undefines them before defining it.
        kept = sorted({j for key in redefined for j in deciding[key]})
        branches = {}
        for k in varying[redefined[0]]:
            body = [f"#undef {key}" for key in redefined]
            body += [f"#define {key} {varying[key][k]}" for key in redefined]
            branches[tuple(k[j] for j in kept)] = body
        chains += tests.chain(kept, branches)
    lines = ["// tune_kernel: Kernel Tuner's defines (the params are not defined)"]
    lines += tests.helpers() + chains + tests.helpers_undone()
    lines += [f"#undef {name}" for name in names if name not in redefined]
    # Nor the grid and block macros the engine defines from the problem size, as Kernel Tuner
    # defines them only without `defines`.
    lines += [
        f"#undef {name}" for name in _GEOMETRY_MACROS if name not in defines and name not in names
    ]
    lines += [f"#define {key} {text}" for key, text in constant.items()]
    lines.append("#line 1")
    return "\n".join(lines) + "\n"


class _Tests:
    """The ``#if`` tests of a configuration, on the params as the engine defines them
    (``-DNAME=VALUE``): an integer param (booleans are 1 and 0) is compared as it is; a
    string param whose values are C identifiers (``float4``) through a table of its values
    (``TUNEBOX_KT_VEC_float4`` is 2) that token pasting looks the value up in. Float params
    and other strings cannot be compared by the preprocessor."""

    def __init__(self, names: list[str], values: list[list[Any]]) -> None:
        self.names = names
        self.values = values
        self.tabled: list[int] = []  # the string params the tests look up

    def deciding(self, key: str, texts: dict[tuple[Any, ...], str]) -> list[int]:
        """The indices of the params that decide a define's value (as few as the greedy drop
        of one at a time leaves), each one the preprocessor can compare."""
        kept = list(range(len(self.names)))
        for j in reversed(range(len(self.names))):
            trial = [i for i in kept if i != j]
            seen: dict[tuple[Any, ...], str] = {}
            if all(seen.setdefault(tuple(k[i] for i in trial), t) == t for k, t in texts.items()):
                kept = trial
        for j in kept:
            if all(isinstance(v, int) for v in self.values[j]):
                continue
            if all(isinstance(v, str) and v.isidentifier() for v in self.values[j]):
                if j not in self.tabled:
                    self.tabled.append(j)
                continue
            name = self.names[j]
            shown = ", ".join(repr(v) for v in self.values[j])
            raise NotImplementedError(
                f"tunebox.kernel_tuner: defines[{key!r}] changes with the param {name}, whose "
                f"values ({shown}) the C preprocessor cannot tell apart: tunebox compiles one "
                f"source with the params defined for the compiler (-D{name}=...) and chooses "
                "each define's value with #if, which compares integers (and identifiers, "
                "looked up). Make the value depend only on integer, boolean or identifier "
                f"tune_params, or make {key} a param of tune_params (with a restriction tying "
                f"it to {name})"
            )
        return kept

    def chain(self, kept: list[int], branches: dict[tuple[Any, ...], list[str]]) -> list[str]:
        """``#if A == 1 && B == 0`` ... ``#elif`` ... ``#endif``, one branch a combination
        of the kept params' values."""
        lines = []
        for i, (combination, body) in enumerate(branches.items()):
            test = " && ".join(self.test(j, v) for j, v in zip(kept, combination)) or "1"
            lines.append(("#if " if i == 0 else "#elif ") + test)
            lines.extend(body)
        lines.append("#endif")
        return lines

    def test(self, j: int, value: Any) -> str:
        name = self.names[j]
        if isinstance(value, str):
            position = self.values[j].index(value) + 1
            return f"TUNEBOX_KT_CAT(TUNEBOX_KT_{name}_, {name}) == {position}"
        return f"{name} == {int(value)}"

    def helpers(self) -> list[str]:
        if not self.tabled:
            return []
        lines = [
            "#define TUNEBOX_KT_CAT_(a, b) a##b",
            "#define TUNEBOX_KT_CAT(a, b) TUNEBOX_KT_CAT_(a, b)",
        ]
        for j in self.tabled:
            lines += [
                f"#define TUNEBOX_KT_{self.names[j]}_{v} {i + 1}"
                for i, v in enumerate(self.values[j])
            ]
        return lines

    def helpers_undone(self) -> list[str]:
        if not self.tabled:
            return []
        lines = ["#undef TUNEBOX_KT_CAT_", "#undef TUNEBOX_KT_CAT"]
        for j in self.tabled:
            lines += [f"#undef TUNEBOX_KT_{self.names[j]}_{v}" for v in self.values[j]]
        return lines


def _mentions(text: str, names: Sequence[str]) -> bool:
    return any(part in names for part in re.split(r"([a-zA-Z0-9_]+)", text))


def _with_params(text: str, config: Config) -> str:
    """Kernel Tuner's ``replace_param_occurrences``: each word that is a param's name, as its
    value."""
    return "".join(
        str(config[part]) if part in config else part for part in re.split(r"([a-zA-Z0-9_]+)", text)
    )


def _define_text(value: object) -> str:
    """A define's value as Kernel Tuner writes it: ``str``, newlines continued."""
    return str(value).replace("\n", "\\\n")


def _nest(names: list[str], values: list[list[Any]], allowed: list[tuple[Any, ...]]) -> str:
    if len(allowed) == math.prod(len(v) for v in values):
        return "True"
    if len(names) == 1:
        return f"{names[0]} in [{', '.join(_literal(t[0]) for t in allowed)}]"
    groups: dict[Any, list[tuple[Any, ...]]] = {}
    for t in allowed:
        groups.setdefault(t[0], []).append(t[1:])
    parts = []
    for value, rest in groups.items():
        inner = _nest(names[1:], values[1:], rest)
        test = f"{names[0]} == {_literal(value)}"
        parts.append(test if inner == "True" else f"({test} and ({inner}))")
    return " or ".join(parts)


def _literal(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"tune_params value {value!r} cannot be written in a restriction")
    return repr(value)


def _plain(value: Any) -> Any:
    return (
        value.item() if hasattr(value, "item") and not isinstance(value, (list, tuple)) else value
    )


def _toml_key(key: object) -> str:
    text = str(key)
    return (
        text
        if text.replace("_", "").replace("-", "").isalnum() and text.isascii()
        else json.dumps(text)
    )


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            repr(value)
            if math.isfinite(value)
            else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
        )
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"{value!r} ({type(value).__name__}) cannot be written to a manifest")


class _Printer:
    """Prints the engine's notes and each finished configuration when verbose."""

    def __init__(self, names: list[str], verbose: bool) -> None:
        self.names = names
        self.verbose = verbose

    def choice(self, label: str, status: str, median_ms: float | None) -> None:
        if self.verbose:
            time = f"{median_ms:.3f} ms" if median_ms is not None else status
            print(f"tunebox: {label}: {time}", flush=True)

    def note(self, line: str) -> None:
        if self.verbose:
            print(f"tunebox: {line}", flush=True)


def _row(result: Mapping[str, Any], tune_params: Iterable[str], arguments: Sequence[Any]) -> Row:
    row: Row = {name: result["choice"].get(name) for name in tune_params}
    status = result["status"]
    row["status"] = status
    if status == "ok":
        row["time"] = result["median_ms"]
        row["time_mean"] = result.get("mean_ms")
        row["time_min"] = result.get("min_ms")
        row["time_max"] = result.get("max_ms")
        row["time_stddev"] = result.get("stddev_ms")
        row["reps"] = result.get("reps")
        row.update(result.get("metrics") or {})
    else:
        failure = CompilationFailedConfig if status == "compile_error" else RuntimeFailedConfig
        error = _in_argument_terms(result.get("error"), arguments)
        row["__error__"] = failure(error or status)
        row["error"] = error
    row["cached"] = result.get("cached", False)
    return row


def _verify_again(
    results: list[Row],
    writer: _Manifest,
    kernel_name: str,
    arguments: Sequence[Any],
    answer: Sequence[Any] | None,
    atol: float,
    verify: Callable[..., object],
) -> None:
    """Runs each measured configuration once more in an isolated worker for its arrays, and
    asks the user's `verify` whether they are right (Kernel Tuner's `verify(answer, result,
    atol=...)`)."""
    if writer.language == "CUDA":
        raise NotImplementedError(
            "tunebox.kernel_tuner: a verify function for CUDA kernels is not supported yet; give answer"
        )
    from tunebox.benchmark import BenchmarkResult, CKernelChoice, TuningProcessPool

    ok = [row for row in results if row["status"] == "ok"]
    if not ok:
        return
    array_indices = [i for i, _ in writer.arrays]
    flags = dict(writer.top).get("compiler_options")
    compiler = dict(writer.tables.get("kernel", [])).get("compiler") or (
        (os.environ.get("CXX") or "g++") if writer.language == "C++" else "cc"
    )
    params = [k for k, _ in writer.tables["tune_params"]]
    source = writer.compiled_text()  # after the lines of `defines`, as the engine compiled it

    def defines(row: Row) -> dict[str, object]:
        config = {p: row[p] for p in params}
        if not writer.geometry_macros:
            return config
        # The macros the engine defined beside the params, as Kernel Tuner computes them.
        geometry = _geometry(writer.problem_size, writer.grid_divs, config)
        return {**{k: v for k, v in geometry.items() if k not in config}, **config}

    choices = [
        CKernelChoice(
            source,
            kernel_name,
            arguments,
            compiler_options=flags,
            compiler=compiler,
            defines=defines(row),
            outputs=array_indices,
        )
        for row in ok
    ]
    pool = TuningProcessPool(timeout=60.0, warmup=0.0, rep=0.0)
    try:
        outcomes = pool.benchmark_results(choices)
    finally:
        pool.shutdown()
    for row, outcome in zip(ok, outcomes):
        if not isinstance(outcome, BenchmarkResult):
            _fail(row, "error", f"the verification run failed: {outcome}")
            continue
        result = [None] * len(arguments)
        for i in array_indices:
            result[i] = outcome.outputs[i].reshape(arguments[i].shape)
        if not bool(verify(answer, result, atol=atol)):
            _fail(row, "wrong", "verify returned False")


def _geometry(
    problem_size: Sequence[int | str], grid_divs: Sequence[Any], config: Config
) -> dict[str, int]:
    """Kernel Tuner's ``grid_size_x/y/z`` and ``block_size_x/y/z`` of a configuration, as its
    ``util.setup_block_and_grid`` computes them: the block from the block-size params (else
    256, 1, 1); the problem size (a string evaluated with the params' values) divided, rounded
    up, by the product of ``grid_div_*`` (strings evaluated so, ints, functions of the
    configuration; without one, the block-size param, else 1)."""

    def value(item: Any, default: int) -> int:
        if item is None:
            return int(default)
        if isinstance(item, int):
            return item
        if callable(item):
            return int(item(dict(config)))
        if isinstance(item, str):
            return int(eval(_with_params(item, config)))  # noqa: S307 (Kernel Tuner's eval)
        return math.prod(value(part, 1) for part in item)

    names = ("block_size_x", "block_size_y", "block_size_z")
    block = [int(config.get(name, 256 if d == 0 else 1)) for d, name in enumerate(names)]
    sizes = [*(value(size, 1) for size in problem_size), 1, 1, 1][:3]
    grid = [math.ceil(sizes[d] / value(grid_divs[d], config.get(names[d], 1))) for d in range(3)]
    return dict(zip(_GEOMETRY_MACROS, grid + block))


def _fail(row: Row, status: str, error: str) -> None:
    for key in ("time", "time_mean", "time_min", "time_max", "time_stddev", "reps"):
        row.pop(key, None)
    row["status"] = status
    row["__error__"] = RuntimeFailedConfig(error)
    row["error"] = error


def _python_metrics(results: list[Row], metrics: Mapping[str, Metric], names: list[str]) -> None:
    """Each metric function (called with the row, the metrics before it included, as Kernel
    Tuner calls them) into each measured row; one that raises is a ``ValueError`` naming it,
    the exception and the configuration."""
    functions = [(name, m) for name, m in metrics.items() if callable(m)]
    for row in results:
        if "__error__" in row:
            continue
        for name, metric in functions:
            try:
                row[name] = metric(dict(row))
            except Exception as error:  # noqa: BLE001 (the user's function: any error)
                config = ", ".join(f"{n}={row[n]!r}" for n in names)
                raise ValueError(
                    f"metrics[{name!r}] raised {type(error).__name__}: {error} (for {config}, "
                    f"whose row has {', '.join(map(repr, row))})"
                ) from None


def _check_metrics(metrics: Mapping[str, Metric], tune_params: Mapping[str, list[Any]]) -> None:
    """Calls each metric function once before the run, on the first configuration with the
    keys a measured row has (times of 1 ms), so that one that cannot be computed (a name
    misspelled) fails now, naming it, rather than after every configuration was measured. A
    function that fails otherwise (on these made-up values, or on a configuration the
    restrictions leave out) is left to the real rows."""
    functions = [(name, m) for name, m in metrics.items() if callable(m)]
    if not functions:
        return
    row: Row = {name: values[0] for name, values in tune_params.items()}
    row.update(status="ok", time=1.0, time_mean=1.0, time_min=1.0, time_max=1.0)
    row.update(time_stddev=0.0, reps=1, cached=False)
    # The engine's metrics (expressions) are in the row before the functions are called.
    row.update({name: 1.0 for name, m in metrics.items() if not callable(m)})
    for name, metric in functions:
        looked_up = _Lookups(row)
        try:
            row[name] = metric(looked_up)
        except (KeyError, NameError) as error:
            # A key no row has (not a key of the user's own tables), or a misspelt name.
            if isinstance(error, NameError) or error.args[:1] in [(k,) for k in looked_up.missed]:
                raise ValueError(
                    f"metrics[{name!r}] raises {type(error).__name__}: {error}, called as "
                    f"Kernel Tuner calls it (with a row of {', '.join(map(repr, row))})"
                ) from None
            row[name] = 1.0
        except Exception:  # noqa: BLE001 (made-up values: the real rows decide)
            row[name] = 1.0


class _Lookups(dict[str, Any]):
    """A row that records the keys looked up and not found in it."""

    def __init__(self, row: Row) -> None:
        super().__init__(row)
        self.missed: list[object] = []

    def __missing__(self, key: object) -> Any:
        self.missed.append(key)
        raise KeyError(key)


def _best(results: list[Row], objective: str, higher_is_better: bool) -> Row | None:
    ok = [r for r in results if "__error__" not in r and objective in r]
    if not ok:
        return None
    return (max if higher_is_better else min)(ok, key=lambda r: r[objective])


def _line(row: Row, names: list[str], shown: list[str]) -> str:
    """A configuration as Kernel Tuner prints it: its params, then ``shown`` (its time and
    metrics), or its status when it failed."""
    params = ", ".join(f"{n}={row[n]}" for n in names)
    if "__error__" in row:
        return f"{params}, {row['status']}"
    values = ", ".join(f"{key}={_shown(row.get(key, math.nan))}" for key in shown)
    return f"{params}, {values}"


def _shown(value: object) -> str:
    """A time or metric as Kernel Tuner prints it: a number with 3 decimals, else as it is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.3f}"
    return str(value)
