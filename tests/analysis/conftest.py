"""Fixtures for the analysis tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def verdict_bench() -> ModuleType:
    """bench/verdict_accuracy.py, loaded as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "verdict_accuracy", Path(__file__).parents[2] / "bench" / "verdict_accuracy.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench
