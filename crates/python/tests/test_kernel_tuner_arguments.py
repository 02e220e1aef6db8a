"""tunebox.kernel_tuner.tune_kernel: the arguments as Kernel Tuner 1.5 reads them (restriction
functions, ``defines``, C kernels as C++, file names, the engine's errors in the caller's terms,
argument types)."""

import re
import shutil
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs a C++ compiler")

from tunebox.kernel_tuner import tune_kernel  # noqa: E402

# Computes x = x * FACTOR + BIAS; the defines are the tests'.
AFFINE = "void affine(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * FACTOR + BIAS; }"
NOTHING = "void k(float *x) {}"


def ones(n=256):
    return np.ones(n, np.float32)


def recording_verify():
    """A ``verify`` function that passes every configuration, and the list of the first
    output it was given for each, in the order it was called."""
    seen = []

    def verify(answer, result, atol=None):
        seen.append(result[0])
        return True

    return seen, verify


# 1. Restriction functions, as Kernel Tuner calls them.


def test_restriction_functions_get_the_params_by_name_or_the_parameter_dict():
    """As Kernel Tuner's ``check_restriction``: a function whose arguments are named after
    params gets them as keywords, ``**params`` gets them all, one of another name gets the
    dict, and a ``(function, [names])`` pair gets those named."""
    x = ones()
    tune_params = {"FACTOR": [1, 2, 3, 4], "BIAS": [0, 1]}

    def at_most(FACTOR, BIAS=0):  # noqa: N803 (Kernel Tuner's names are the params')
        return FACTOR + BIAS <= 4

    results, _ = tune_kernel(
        "affine",
        AFFINE,
        256,
        [x, np.int32(256)],
        tune_params,
        restrictions=[
            lambda FACTOR, BIAS: FACTOR * (BIAS + 1) <= 4,  # noqa: N803
            at_most,
            lambda **params: params["FACTOR"] != 3,
            lambda p: p["FACTOR"] > 1 or p["BIAS"] == 0,
            (lambda b: b < 2, ["BIAS"]),
        ],
        quiet=True,
    )
    kept = [(r["FACTOR"], r["BIAS"]) for r in results]
    assert kept == [(1, 0), (2, 0), (2, 1), (4, 0)]
    assert all(r["status"] == "ok" for r in results)
    # One such function alone, not in a list.
    alone, _ = tune_kernel(
        "affine",
        AFFINE,
        256,
        [x, np.int32(256)],
        tune_params,
        restrictions=lambda FACTOR, BIAS: FACTOR == 2 and BIAS == 1,  # noqa: N803
        quiet=True,
    )
    assert [(r["FACTOR"], r["BIAS"]) for r in alone] == [(2, 1)]


def test_a_failing_restriction_function_is_named_with_what_went_wrong():
    x = ones(4)
    params = {"FACTOR": [0, 1], "U": [1, 2]}
    with pytest.raises(ValueError, match=r"restrictions\[1\].*ZeroDivisionError") as error:
        tune_kernel(
            "k", NOTHING, 4, [x], params, restrictions=["U > 0", lambda p: 4 // p["FACTOR"]]
        )
    assert "FACTOR" in str(error.value)  # the configuration it failed for
    with pytest.raises(ValueError, match=r"restrictions\[0\].*KeyError.*'FACTR'"):
        tune_kernel("k", NOTHING, 4, [x], params, restrictions=[lambda p: p["FACTR"] > 0])
    # Arguments named after no param: refused before any call, naming them and the params.
    with pytest.raises(TypeError, match=r"restrictions\[0\].*\bV\b.*FACTOR, U"):
        tune_kernel("k", NOTHING, 4, [x], params, restrictions=[lambda FACTOR, V: True])  # noqa: N803
    with pytest.raises(TypeError, match=r"restrictions\[2\]"):
        tune_kernel("k", NOTHING, 4, [x], params, restrictions=["U > 0", "U < 9", 42])  # type: ignore[list-item]


def test_restrictions_keep_their_indices_whatever_mixes_strings_and_functions():
    """A function before a string: the engine's error about the string names the caller's
    index, not the string's place among the strings."""
    x = ones(4)
    with pytest.raises(ValueError, match=r"restrictions\[1\]") as error:
        tune_kernel(
            "k", NOTHING, 4, [x], {"U": [1, 2]}, restrictions=[lambda p: True, "H > 2"], quiet=True
        )
    assert "restrictions[0]" not in str(error.value)


# 2. defines, as Kernel Tuner's prepare_kernel_string writes them.


def test_defines_replace_the_params_as_kernel_tuner_defines_them():
    """With ``defines``, Kernel Tuner defines those and not the params: FACTOR is 3 in both
    configurations, and U (a param not in ``defines``) is not defined at all."""
    x = np.arange(1, 257, dtype=np.float32)
    source = "#ifdef U\n#error U is a param, not a define\n#endif\n" + AFFINE
    results, _ = tune_kernel(
        "affine",
        source,
        256,
        [x, np.int32(256)],
        {"FACTOR": [1, 2], "U": [1, 2]},
        defines={"FACTOR": 3, "BIAS": 2},
        answer=[x * 3 + 2, None],
        quiet=True,
    )
    assert [r["status"] for r in results] == ["ok"] * 4, [r.get("error") for r in results]
    # An empty dict is given too: Kernel Tuner then defines nothing (FACTOR is missing).
    results, _ = tune_kernel(
        "affine", AFFINE, 256, [x, np.int32(256)], {"FACTOR": [1]}, defines={}, quiet=True
    )
    assert results[0]["status"] == "compile_error"


def test_a_define_may_be_a_function_of_the_params_or_an_expression_over_them():
    """Kernel Tuner's ``defines`` values: a function of the params, or a string in which each
    param's name is replaced by its value; here each configuration computes x * F + 2 * F
    with F its FACTOR, so x + 2 for every one once divided (by the verify function)."""
    x = np.arange(1, 257, dtype=np.float32)
    seen, verify = recording_verify()

    for defines in (
        {"FACTOR": lambda p: p["FACTOR"], "BIAS": lambda p: 2 * p["FACTOR"]},
        {"FACTOR": "FACTOR", "BIAS": "2 * FACTOR"},
        {"FACTOR": lambda p: str(p["FACTOR"]), "BIAS": "(FACTOR + FACTOR)"},
    ):
        seen.clear()
        results, _ = tune_kernel(
            "affine",
            AFFINE,
            256,
            [x, np.int32(256)],
            {"FACTOR": [1, 2, 3], "U": [True, False]},
            restrictions=["U or FACTOR > 1"],
            defines=defines,
            answer=[x, None],
            verify=verify,
            quiet=True,
        )
        assert [(r["FACTOR"], r["U"]) for r in results] == [
            (1, True),
            (2, True),
            (2, False),
            (3, True),
            (3, False),
        ]
        assert [r["status"] for r in results] == ["ok"] * 5, [r.get("error") for r in results]
        for row, out in zip(results, seen):
            np.testing.assert_array_equal(out, x * row["FACTOR"] + 2 * row["FACTOR"])


def test_a_define_may_change_with_a_param_of_identifiers():
    """A string param whose values are C identifiers is told apart by ``#if`` too."""
    x = np.arange(1, 9, dtype=np.float32)
    seen, verify = recording_verify()

    results, _ = tune_kernel(
        "affine",
        AFFINE,
        8,
        [x, np.int32(8)],
        {"MODE": ["low", "high"], "N": [1, 2]},
        defines={"FACTOR": lambda p: {"low": 2, "high": 5}[p["MODE"]] * p["N"], "BIAS": 0},
        answer=[x, None],
        verify=verify,
        quiet=True,
    )
    assert [r["status"] for r in results] == ["ok"] * 4, [r.get("error") for r in results]
    factors = [{"low": 2, "high": 5}[r["MODE"]] * r["N"] for r in results]
    for factor, out in zip(factors, seen):
        np.testing.assert_array_equal(out, x * factor)


def test_a_define_that_the_preprocessor_cannot_choose_is_refused_with_the_way_out():
    """A value that varies with a float param cannot be chosen by ``#if`` (tunebox defines
    the params for the compiler, one source for all): refused, naming the define."""
    x = ones(4)
    with pytest.raises(NotImplementedError, match=r"defines\['T'\].*\bS\b.*tune_params"):
        tune_kernel("k", NOTHING, 4, [x], {"S": [0.5, 1.5]}, defines={"T": lambda p: p["S"] * 2})
    with pytest.raises(ValueError, match=r"defines\['T'\].*ZeroDivisionError"):
        tune_kernel("k", NOTHING, 4, [x], {"S": [0, 1]}, defines={"T": lambda p: 1 // p["S"]})
    with pytest.raises(ValueError, match=r"defines\['1T'\]"):
        tune_kernel("k", NOTHING, 4, [x], {"S": [0, 1]}, defines={"1T": 1})


# 3. C kernels are compiled as C++ by g++, as Kernel Tuner compiles them.

CXX_KERNEL = """#include <cmath>
void root(float *x, int n) { for (int i = 0; i < n; i++) x[i] = std::sqrt(x[i]) * F; }
"""


@pytest.mark.parametrize("lang", [None, "C"])
def test_a_c_kernel_using_cxx_compiles_as_kernel_tuner_compiles_it(lang, tmp_path):
    x = np.arange(1, 257, dtype=np.float32) ** 2
    expected = np.arange(1, 257, dtype=np.float32)
    results, env = tune_kernel(
        "root",
        CXX_KERNEL,
        256,
        [x, np.int32(256)],
        {"F": [1]},
        answer=[expected, None],
        lang=lang,
        quiet=True,
    )
    assert results[0]["status"] == "ok", results[0].get("error")
    # The same in a .c file, read from its folder.
    path = tmp_path / "root.c"
    path.write_text(CXX_KERNEL)
    results, _ = tune_kernel(
        "root",
        str(path),
        256,
        [x, np.int32(256)],
        {"F": [1]},
        answer=[expected, None],
        lang=lang,
        quiet=True,
    )
    assert results[0]["status"] == "ok", results[0].get("error")


# 4. A file name that names no file.


@pytest.mark.parametrize(
    "name", ["vector_add_kernel.c", "kernels/vector_add.cu", "missing.hpp", "src/kernel"]
)
def test_a_kernel_source_file_that_does_not_exist_is_file_not_found(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=name):
        tune_kernel("k", name, 4, [ones(4)], {"B": [1]}, quiet=True)
    with pytest.raises(FileNotFoundError, match=name):
        tune_kernel("k", Path(name), 4, [ones(4)], {"B": [1]}, quiet=True)


def test_one_line_of_code_is_still_source_text():
    results, _ = tune_kernel("k", NOTHING, 4, [ones(4)], {"B": [1]}, quiet=True)
    assert results[0]["status"] == "ok"


# 5. The engine's refusals in the caller's terms.


def test_the_engines_errors_name_the_arguments_not_a_manifest():
    x = ones(4)
    with pytest.raises(ValueError) as error:
        tune_kernel("k", NOTHING, 4, [x], {"U": [1, 2]}, restrictions=["U > 5"], quiet=True)
    message = str(error.value)
    assert message.startswith("tune_kernel: "), message
    assert "kernel_tuner.toml" not in message and "`tune_params`" in message, message
    assert "`params`" not in message, message
    with pytest.raises(ValueError) as error:
        tune_kernel("k", NOTHING, 4, [x], {"U": [1, 1]}, quiet=True)
    message = str(error.value)
    assert message.startswith("tune_kernel: "), message
    assert "tune_params['U'][1]" in message and "params.U" not in message, message


# 6. Argument types.


def test_a_numpy_integer_problem_size_is_taken():
    results, env = tune_kernel("k", NOTHING, np.int32(4), [ones(4)], {"B": [1]}, quiet=True)
    assert results[0]["status"] == "ok"


def test_the_annotations_take_a_numpy_integer_problem_size(tmp_path):
    api = pytest.importorskip("mypy.api")
    snippet = (
        "import numpy\nfrom tunebox.kernel_tuner import tune_kernel\n"
        "tune_kernel('k', 'void k(float *x) {}', numpy.int32(10), [], {'B': [1]})\n"
        "tune_kernel('k', 'void k(float *x) {}', (numpy.int64(10), 'B'), [], {'B': [1]})\n"
    )
    (tmp_path / "mypy.ini").write_text("[mypy]\nfollow_imports = silent\n")
    (tmp_path / "call.py").write_text(snippet)
    config = str(tmp_path / "mypy.ini")
    out, err, status = api.run(
        ["--config-file", config, "--no-incremental", str(tmp_path / "call.py")]
    )
    assert status == 0, out + err


@pytest.mark.parametrize("options", ["-O3", b"-O3"])
def test_compiler_options_as_one_string_is_a_type_error_saying_to_give_a_list(options):
    with pytest.raises(TypeError, match=r"compiler_options.*list of strings.*\['-O3'\]"):
        tune_kernel("k", NOTHING, 4, [ones(4)], {"B": [1]}, compiler_options=options)
    with pytest.raises(TypeError, match=r"compiler_options\[1\]"):
        tune_kernel("k", NOTHING, 4, [ones(4)], {"B": [1]}, compiler_options=["-O3", 3])  # type: ignore[list-item]


def test_params_named_as_the_engines_trampoline_names_do_not_break_a_cxx_kernel():
    """The engine's C++ trampoline (after the kernel's text) names ``T`` and ``pointer``: a
    param of either name, now that every C kernel compiles as C++, must not break it (nor
    ``extern "C"`` kernels, C++ before)."""
    x = np.arange(8, dtype=np.float32)
    for source in (
        "void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * T * pointer; }",
        'extern "C" void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= T * pointer; }',
    ):
        results, _ = tune_kernel(
            "k",
            source,
            8,
            [x, np.int32(8)],
            {"T": [1, 2], "pointer": [1]},
            answer=[x, None],
            quiet=True,
        )
        assert [r["status"] for r in results] == ["ok", "wrong"], [r.get("error") for r in results]


def test_kernel_tuner_is_defined_beside_the_params_without_defines():
    """Kernel Tuner defines ``kernel_tuner`` (1) when ``defines`` is not given; a kernel may
    test it (``#ifdef kernel_tuner``)."""
    source = (
        "void mark(float *x) {\n#ifdef kernel_tuner\n x[0] = kernel_tuner;\n#else\n"
        " x[0] = 7;\n#endif\n}\n"
    )
    x = np.zeros(4, np.float32)
    results, _ = tune_kernel(
        "mark", source, 4, [x], {"V": [1]}, answer=[np.array([1, 0, 0, 0], np.float32)], quiet=True
    )
    assert [r["status"] for r in results] == ["ok"], [r.get("error") for r in results]


def test_verify_gets_each_configuration_s_arrays_with_a_bool_param():
    """The verify function's re-run defines a bool param as the engine does (1 or 0): written
    as ``-DU=True`` it read as 0 in ``#if``, and a define chosen on it took the other
    configuration's value, silently."""
    x = np.arange(1, 5, dtype=np.float32)
    seen, verify = recording_verify()

    results, _ = tune_kernel(
        "affine",
        AFFINE,
        4,
        [x, np.int32(4)],
        {"U": [True, False]},
        defines={"FACTOR": lambda p: 3 if p["U"] else 1, "BIAS": 0},
        answer=[x, None],
        verify=verify,
        quiet=True,
    )
    assert [r["status"] for r in results] == ["ok", "ok"], [r.get("error") for r in results]
    assert len(seen) == 2
    for row, out in zip(results, seen):
        np.testing.assert_array_equal(out, x * (3 if row["U"] else 1))


# 7. What a trial of Kernel Tuner's own examples found (its values, answers, options).

COPY = (
    "void copy(float *out, const float *in, int n) { for (int i = 0; i < n; i++) out[i] = in[i]; }"
)


def test_tune_params_may_be_numpy_arrays_and_bad_ones_are_named():
    results, _ = tune_kernel(
        "affine",
        AFFINE,
        256,
        [ones(), np.int32(256)],
        {"FACTOR": np.arange(1, 3), "BIAS": [0]},
        quiet=True,
    )
    assert [r["FACTOR"] for r in results] == [1, 2]
    assert all(type(r["FACTOR"]) is int for r in results)
    with pytest.raises(ValueError, match=r"tune_params\['FACTOR'\] is empty"):
        tune_kernel("affine", AFFINE, 256, [ones(), np.int32(256)], {"FACTOR": [], "BIAS": [0]})
    with pytest.raises(ValueError, match=r"tune_params\['FACTOR'\] = '12': give a list"):
        tune_kernel("affine", AFFINE, 256, [ones(), np.int32(256)], {"FACTOR": "12", "BIAS": [0]})


def test_an_answer_of_a_type_the_output_casts_to_is_taken_as_kernel_tuner_takes_it():
    x = np.arange(8, dtype=np.float32)
    out = np.zeros_like(x)
    args = [out, x, np.int32(8)]
    results, _ = tune_kernel(
        "copy", COPY, 8, args, {"U": [1]}, answer=[x.astype(np.float64), None, None], quiet=True
    )
    assert results[0]["status"] == "ok", results
    with pytest.raises(TypeError, match=r"answer\[0\]: int32 for an argument of float32"):
        tune_kernel("copy", COPY, 8, args, {"U": [1]}, answer=[x.astype(np.int32), None, None])
    ints = np.arange(8, dtype=np.int32)
    with pytest.raises(TypeError, match="that no int32 equals"):
        tune_kernel(
            "copy",
            COPY,
            8,
            [ints, ints, np.int32(8)],
            {"U": [1]},
            answer=[ints + 0.5, None, None],
        )


def test_a_nan_where_the_answer_has_one_is_equal_as_in_kernel_tuner():
    x = np.arange(8, dtype=np.float32)
    x[3] = np.nan
    args = [np.zeros_like(x), x, np.int32(8)]
    with pytest.warns(UserWarning, match="1 NaN"):
        results, _ = tune_kernel(
            "copy", COPY, 8, args, {"U": [1]}, answer=[x.copy(), None, None], quiet=True
        )
    assert results[0]["status"] == "ok", results
    # A NaN where the answer has a number is still wrong.
    answer = x.copy()
    answer[3] = 3.0
    results, _ = tune_kernel("copy", COPY, 8, args, {"U": [1]}, answer=[answer, None, None])
    assert results[0]["status"] == "wrong", results


def test_a_metric_that_cannot_be_computed_fails_before_the_run_naming_it():
    def typo(p):
        return p["tme"]

    with pytest.raises(ValueError, match=r"metrics\['GB/s'\] raises KeyError: 'tme'"):
        tune_kernel(
            "affine",
            AFFINE,
            256,
            [ones(), np.int32(256)],
            {"FACTOR": [1], "BIAS": [0]},
            metrics={"GB/s": typo},
        )

    # One that fails on made-up times only is left to the measured rows.
    def needs_real_time(p):
        assert p["time"] != 1.0
        return 1.0 / p["time"]

    results, _ = tune_kernel(
        "affine",
        AFFINE,
        256,
        [ones(), np.int32(256)],
        {"FACTOR": [1], "BIAS": [0]},
        metrics={"per_ms": needs_real_time},
        quiet=True,
    )
    assert results[0]["per_ms"] > 0
    # Nor one whose own table lacks the first configuration, which the restrictions leave out.
    table = {2: 20.0, 3: 30.0}
    results, _ = tune_kernel(
        "affine",
        AFFINE,
        256,
        [ones(), np.int32(256)],
        {"FACTOR": [1, 2, 3], "BIAS": [0]},
        restrictions=["FACTOR >= 2"],
        metrics={"looked_up": lambda p: table[p["FACTOR"]]},
        quiet=True,
    )
    assert [r["looked_up"] for r in results] == [20.0, 30.0]


def test_a_long_argument_of_the_wrong_type_is_named_briefly():
    with pytest.raises(TypeError) as refused:
        tune_kernel("k", NOTHING, 4, [list(range(100_000))], {"B": [1]})
    message = str(refused.value)
    assert message.startswith("arguments[0] is a list (") and len(message) < 300, message


def test_strategy_budgets_as_kernel_tuner_bounds_them():
    params = {"FACTOR": list(range(10)), "BIAS": list(range(10))}
    args = [ones(), np.int32(256)]
    with pytest.raises(ValueError, match="brute force measures every configuration"):
        tune_kernel(
            "affine",
            AFFINE,
            256,
            args,
            params,
            strategy="brute_force",
            strategy_options={"max_fevals": 5},
        )
    # Kernel Tuner's genetic algorithm evaluates at most popsize x maxiter configurations,
    # with max_fevals too (the smaller bound).
    for options in ({"popsize": 4, "maxiter": 2}, {"popsize": 4, "maxiter": 2, "max_fevals": 50}):
        results, _ = tune_kernel(
            "affine",
            AFFINE,
            256,
            args,
            params,
            strategy="genetic_algorithm",
            strategy_options=options,
            quiet=True,
        )
        assert 1 <= len(results) <= 8, (options, len(results))


def test_when_every_configuration_fails_the_first_error_is_said(capsys):
    tune_kernel("k", "void k(float *x) { x[0] = 1 }", 4, [ones(4)], {"B": [1, 2]})
    printed = capsys.readouterr().out
    assert "2 of 2 configurations failed (2 compile_error)" in printed, printed
    assert "; the first: " in printed and "error:" in printed, printed


def test_each_configuration_is_printed_with_its_time_and_metrics(capsys):
    tune_kernel(
        "affine",
        AFFINE,
        256,
        [ones(), np.int32(256)],
        {"FACTOR": [2], "BIAS": [0]},
        metrics={
            "GB/s": "8 * 256 / (time / 1e3) / 1e9",
            "half": lambda p: p["time"] / 2,
            "kind": lambda p: "fast",
        },
        objective="GB/s",
        objective_higher_is_better=True,
    )
    printed = capsys.readouterr().out
    assert re.search(
        r"^FACTOR=2, BIAS=0, time=[0-9.]+, GB/s=[0-9.]+, half=[0-9.]+, kind=fast$", printed, re.M
    ), printed
