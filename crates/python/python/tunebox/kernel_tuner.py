"""``tune_kernel`` with Kernel Tuner's signature, for C and C++ kernels, over tunebox's workers.

Change ``from kernel_tuner import tune_kernel`` to ``from tunebox.kernel_tuner import tune_kernel``.
Every configuration is compiled (into tunebox's kernel cache) and timed in an isolated worker by
tunebox's ``cpu`` backend (do_bench: estimate, warmup, reps, last-level cache flushed between
reps); a configuration that does not compile, crashes, hangs past ``timeout`` or computes a wrong
answer is one result row with its ``status``, where Kernel Tuner's C backend aborts the run (or
dies with it).

What it takes from Kernel Tuner: ``kernel_name``, ``kernel_source`` (text or a file name),
``problem_size`` (recorded), ``arguments`` (numpy arrays, passed as pointers, and numpy scalars,
by value), ``tune_params`` (each name is defined for the compiler, ``-Dname=value``),
``restrictions`` (strings evaluated with the parameters, or a function of the parameter dict),
``answer`` (expected arrays, None for those not checked), ``atol``, ``verify`` (a function
``verify(answer, result, atol=...)``), ``lang`` (``C`` or ``C++``), ``compiler``,
``compiler_options``, ``defines``, ``iterations`` (recorded: tunebox's do_bench sets the reps from its
100 ms budget), ``metrics``
(functions of the result dict, or expressions), ``objective``, ``strategy`` (``brute_force``,
``random_sample`` with ``strategy_options`` ``fraction`` or ``max_fevals``), ``verbose`` and
``quiet``. It returns ``(results, env)``: a list of dicts (the parameters, ``time`` in ms —
the mean of the timed reps, as Kernel Tuner reports it —, the metrics, and tunebox's
``status``, ``time_median``, ``time_min``, ``time_max``, ``reps``) and a dict describing the run.

Not supported (an error names it): CUDA, OpenCL and HIP kernels (``lang``), strategies other
than the two above, and a ``cache`` file (Kernel Tuner's JSON cache is not written: a warning).
"""

import itertools
import math
import os
import platform as _platform
import random
import warnings

from tunebox.benchmark import BenchmarkResult, CKernelChoice, TuningProcessPool

__all__ = ["tune_kernel"]

_C_LANGS = {"c", "c++", "cpp"}


def tune_kernel(
    kernel_name,
    kernel_source,
    problem_size,
    arguments,
    tune_params,
    grid_div_x=None,
    grid_div_y=None,
    grid_div_z=None,
    restrictions=None,
    answer=None,
    atol=1e-6,
    verify=None,
    verbose=False,
    lang=None,
    device=0,
    platform=0,
    smem_args=None,
    cmem_args=None,
    texmem_args=None,
    compiler=None,
    compiler_options=None,
    defines=None,
    log=None,
    iterations=7,
    block_size_names=None,
    quiet=False,
    strategy=None,
    strategy_options=None,
    cache=None,
    metrics=None,
    simulation_mode=False,
    observers=None,
    objective=None,
    objective_higher_is_better=None,
    timeout=60.0,
    **unsupported,
):
    """Tunes a C or C++ kernel as Kernel Tuner's ``tune_kernel`` does; see the module's doc."""
    source = _read_source(kernel_source)
    language = _language(lang, source)
    if unsupported:
        raise TypeError(f"tune_kernel got unknown arguments: {', '.join(sorted(unsupported))}")
    if cache:
        warnings.warn(
            f"tunebox.kernel_tuner: cache={cache!r} is not written (Kernel Tuner's cache format "
            "is not supported yet); tunebox's own kernel cache still skips recompiles",
            stacklevel=2,
        )
    if simulation_mode:
        raise NotImplementedError("tunebox.kernel_tuner: simulation_mode is not supported")
    names = list(tune_params)
    configs = _space(tune_params, restrictions)
    configs = _select(configs, strategy, strategy_options or {})
    checked = _checked_outputs(answer, arguments)
    choices = [
        CKernelChoice(
            source,
            kernel_name,
            arguments,
            compiler_options=_flags(compiler_options, source),
            compiler=compiler or ("cc" if language == "C" else "g++"),
            defines={**(defines or {}), **config},
            outputs=checked,
        )
        for config in configs
    ]
    rep_ms = 100.0
    pool = TuningProcessPool(timeout=timeout, warmup=10, rep=rep_ms)
    try:
        measured = pool.benchmark_results(choices)
    finally:
        pool.shutdown()
    objective = objective or "time"
    results = []
    for config, outcome in zip(configs, measured):
        row = dict(config)
        row.update(_outcome(outcome, answer, checked, atol, verify))
        if row["status"] == "ok":
            row.update(_metrics(metrics, row))
        results.append(row)
        if not quiet and (verbose or row["status"] == "ok"):
            print(_line(row, names, objective))
    env = _env(kernel_name, source, problem_size, tune_params, compiler_options, iterations, language)
    if not quiet:
        best = _best(results, objective, objective_higher_is_better)
        if best is not None:
            print("best performing configuration:")
            print(_line(best, names, objective))
    return results, env


def _read_source(kernel_source):
    if isinstance(kernel_source, (list, tuple)):
        kernel_source = kernel_source[0]
    if isinstance(kernel_source, os.PathLike) or (
        isinstance(kernel_source, str) and "\n" not in kernel_source and os.path.isfile(kernel_source)
    ):
        with open(kernel_source) as f:
            return f.read()
    if not isinstance(kernel_source, str):
        raise TypeError(f"kernel_source={kernel_source!r}: use the source text or a file name")
    return kernel_source


def _language(lang, source):
    if lang is None:
        if "__global__" in source:
            raise NotImplementedError(
                "tunebox.kernel_tuner runs C and C++ kernels only; this looks like CUDA "
                "(`tunebox tune` with a manifest runs CUDA kernels)"
            )
        return "C++" if 'extern "C"' in source else "C"
    if str(lang).lower() not in _C_LANGS:
        raise NotImplementedError(
            f"tunebox.kernel_tuner: lang={lang!r} is not supported; use lang='C' (or 'C++')"
        )
    return "C" if str(lang).lower() == "c" and 'extern "C"' not in source else "C++"


def _flags(compiler_options, source):
    flags = list(compiler_options) if compiler_options else ["-O3"]
    if ("omp.h" in source or "#pragma omp" in source) and "-fopenmp" not in flags:
        flags.append("-fopenmp")
    return flags


def _space(tune_params, restrictions):
    names = list(tune_params)
    for name, values in tune_params.items():
        if not isinstance(values, (list, tuple, range)) or len(values) == 0:
            raise ValueError(f"tune_params[{name!r}] = {values!r}: give a non-empty list of values")
    configs = []
    for values in itertools.product(*(tune_params[n] for n in names)):
        config = dict(zip(names, values))
        if _allowed(config, restrictions):
            configs.append(config)
    if not configs:
        raise ValueError("no configuration satisfies the restrictions")
    return configs


def _allowed(config, restrictions):
    if restrictions is None:
        return True
    if callable(restrictions):
        return bool(restrictions(dict(config)))
    if isinstance(restrictions, str):
        restrictions = [restrictions]
    for restriction in restrictions:
        if callable(restriction):
            if not restriction(dict(config)):
                return False
            continue
        try:
            ok = eval(restriction, {"__builtins__": {}, "math": math, "min": min, "max": max}, dict(config))  # noqa: S307
        except Exception as error:  # noqa: BLE001
            raise ValueError(f"restriction {restriction!r} cannot be evaluated: {error}") from None
        if not ok:
            return False
    return True


def _select(configs, strategy, options):
    if strategy in (None, "brute_force"):
        return configs
    if strategy == "random_sample":
        if "max_fevals" in options:
            count = int(options["max_fevals"])
        else:
            count = max(1, int(round(float(options.get("fraction", 0.1)) * len(configs))))
        rng = random.Random(options.get("seed", 0))
        return rng.sample(configs, min(count, len(configs)))
    raise NotImplementedError(
        f"tunebox.kernel_tuner: strategy={strategy!r} is not supported; use brute_force or "
        "random_sample (`tunebox tune --strategy` has the others)"
    )


def _checked_outputs(answer, arguments):
    if answer is None:
        return []
    # Kernel Tuner's own examples give fewer entries than arguments (the trailing scalars left
    # out); more is a mistake.
    if len(answer) > len(arguments):
        raise ValueError(
            f"answer has {len(answer)} entries and arguments only {len(arguments)}: give one "
            "per argument, None for those not checked"
        )
    return [i for i, expected in enumerate(answer) if expected is not None]


def _outcome(outcome, answer, checked, atol, verify):
    if not isinstance(outcome, BenchmarkResult):
        return {"status": _status(outcome), "time": math.inf, "error": str(outcome)}
    row = {
        "status": "ok",
        "time": outcome.mean_ms,
        "time_median": outcome.median_ms,
        "time_min": outcome.min_ms,
        "time_max": outcome.max_ms,
        "reps": outcome.reps,
    }
    if checked and not _correct(answer, outcome.outputs, checked, atol, verify):
        row["status"] = "wrong"
        row["time"] = math.inf
    return row


def _status(error):
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, ChildProcessError):
        return "crashed"
    if "compil" in str(error):
        return "compile_error"
    return "error"


def _correct(answer, outputs, checked, atol, verify):
    import numpy as np

    results = [None] * len(answer)
    for i in checked:
        if i not in outputs:
            return False
        results[i] = outputs[i].reshape(np.shape(answer[i]))
    if verify is not None:
        return bool(verify(answer, results, atol=atol))
    return all(
        results[i] is not None and np.allclose(results[i], answer[i], atol=atol) for i in checked
    )


def _metrics(metrics, row):
    out = {}
    if not metrics:
        return out
    for name, metric in metrics.items():
        values = {**row, **out}
        try:
            if callable(metric):
                out[name] = metric(values)
            else:
                out[name] = eval(metric, {"__builtins__": {}, "math": math}, values)  # noqa: S307
        except Exception as error:  # noqa: BLE001
            raise ValueError(f"metric {name!r} cannot be computed: {error}") from None
    return out


def _best(results, objective, higher_is_better):
    ok = [r for r in results if r["status"] == "ok" and objective in r]
    if not ok:
        return None
    return (max if higher_is_better else min)(ok, key=lambda r: r[objective])


def _line(row, names, objective):
    params = ", ".join(f"{n}={row[n]}" for n in names)
    if row["status"] != "ok":
        return f"{params}, {row['status']}"
    return f"{params}, {objective}={row.get(objective, math.nan):.3f}"


def _env(kernel_name, source, problem_size, tune_params, compiler_options, iterations, language):
    return {
        "kernel_name": kernel_name,
        "kernel_string": source,
        "problem_size": problem_size,
        "tune_params": tune_params,
        "compiler_options": compiler_options,
        "iterations": iterations,
        "lang": language,
        "device_name": _platform.processor() or _platform.machine(),
        "backend": "tunebox",
    }
