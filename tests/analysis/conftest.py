"""Fixtures for the analysis tests."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.conftest import bench_module


@pytest.fixture(scope="session")
def verdict_bench() -> ModuleType:
    """bench/verdict_accuracy.py, loaded as a module (bench/ is not a package)."""
    return bench_module("verdict_accuracy")
