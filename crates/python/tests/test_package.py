"""The package as installed: its version, its type information, the names it accepts."""

import importlib.metadata
import re
from pathlib import Path

import pytest

import tunebox
from tunebox import _native

WORKSPACE = Path(__file__).resolve().parents[3]


def workspace_version():
    """``[workspace.package] version`` of the repository's Cargo.toml."""
    text = (WORKSPACE / "Cargo.toml").read_text()
    table = text.split("[workspace.package]", 1)[1].split("\n[", 1)[0]
    found = re.search(r'^version\s*=\s*"([^"]+)"', table, re.MULTILINE)
    assert found, "Cargo.toml's [workspace.package] has no version"
    return found.group(1)


def test_the_version_is_cargo_toml_s_in_the_module_and_the_installed_metadata():
    assert tunebox.__version__ == workspace_version()
    assert importlib.metadata.version("tunebox") == tunebox.__version__


def test_the_package_carries_its_type_information():
    folder = Path(tunebox.__file__).parent
    assert (folder / "py.typed").is_file()
    assert (folder / "_native.pyi").is_file()


def test_the_engine_names_its_strategies():
    assert "brute-force" in _native.STRATEGIES and "auto" in _native.STRATEGIES
    assert len(set(_native.STRATEGIES)) == len(_native.STRATEGIES)


def test_the_engine_refuses_an_unknown_strategy_naming_the_known_ones():
    with pytest.raises(ValueError, match='strategy "gentic": use one of') as error:
        _native.tune("", "kernel_tuner.toml", {}, "/nonexistent-worker", strategy="gentic")
    assert all(name in str(error.value) for name in _native.STRATEGIES)


def test_the_engine_hands_its_report_over_as_objects(tmp_path):
    """``_native.tune`` returns the report as ``json.loads`` of the ``--json`` file would: a
    dict with the manifest's name, results as dicts with ints and floats, ``None`` for null."""
    source = "void add(const float *a, float *b, int n) { for (int i = 0; i < n; i++) b[i] = a[i] + 1; }\n"
    manifest = "\n".join(
        [
            'name = "objects"',
            "[kernel]",
            'source = "add.c"',
            'entry = "add"',
            "[[tensors]]",
            'name = "a"',
            'dtype = "f32"',
            "shape = [1024]",
            'init = "random"',
            "[[tensors]]",
            'name = "b"',
            'dtype = "f32"',
            "shape = [1024]",
            'init = "zeros"',
            "output = true",
            "[[scalars]]",
            'name = "n"',
            "value = 1024",
            "[params]",
            "X = [1, 2]",
            "[timing]",
            "warmup_ms = 1",
            "rep_ms = 2",
        ]
    )
    report = _native.tune(
        manifest, str(tmp_path / "objects.toml"), {"add.c": source}, _native.engine_worker()
    )
    assert isinstance(report, dict)
    assert report["name"] == "objects"
    assert [type(r["index"]) for r in report["results"]] == [int, int]
    assert all(r["status"] == "ok" and isinstance(r["median_ms"], float) for r in report["results"])
    assert report["results"][0]["error"] is None
