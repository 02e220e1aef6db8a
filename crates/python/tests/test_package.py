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
