"""Every YAML file in the repository parses with PyYAML, all of its documents: the tracked ones
(``git ls-files``) and the new ones under k8s/ and tests/k8s/."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.k8s.manifests import ROOT

SUFFIXES = (".yaml", ".yml")


def git_files(*args: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", *args], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout
    return [p for p in out.decode().split("\0") if p]


def yaml_files() -> list[str]:
    try:
        tracked = git_files("--", "*.yaml", "*.yml")
        new = git_files("--others", "--exclude-standard", "--", "k8s", "tests/k8s")
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file but hidden ones
        found = [p.relative_to(ROOT) for p in ROOT.rglob("*") if p.suffix in SUFFIXES]
        return sorted(str(p) for p in found if not any(part.startswith(".") for part in p.parts))
    return sorted({p for p in tracked + new if p.endswith(SUFFIXES) and (ROOT / p).is_file()})


FILES = yaml_files()


def test_the_k8s_files_are_among_them() -> None:
    assert "k8s/base/kustomization.yaml" in FILES
    assert "k8s/overlays/vllm/kustomization.yaml" in FILES


@pytest.mark.parametrize("path", FILES)
def test_parses(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    documents = list(yaml.safe_load_all(text))
    assert any(d is not None for d in documents), f"{path} holds no YAML document"
