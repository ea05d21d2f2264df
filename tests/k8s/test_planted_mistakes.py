"""The checks can fail: a copy of k8s/ with one planted mistake must be reported by the same
render + validate + policy helper the other tests use, and the unbroken copy must pass."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.k8s import manifests
from tests.k8s.manifests import K8S

WORKER_KEY = """            - name: OPENAI_API_KEY
              valueFrom:
                secretKeyRef:
                  name: tokenload-api-key
                  key: api-key
                  optional: true
"""

# (file under k8s/, text to replace, replacement, kustomization to check, expected in a problem)
PLANTS = [
    pytest.param(
        "base/master-job.yaml",
        "backoffLimit: 0 ",
        'backoffLimit: "zero" ',
        "overlays/headless-job",
        "backoffLimit",
        id="string-where-an-integer-goes",
    ),
    pytest.param(
        "overlays/web-ui/master-deployment.yaml",
        "  replicas: 1\n",
        '  replicas: "two"\n',
        "overlays/web-ui",
        "replicas",
        id="replicas-two",
    ),
    pytest.param(
        "base/master-service.yaml",
        "  type: ClusterIP\n",
        "  type: ClusterIP\n  externalTrafficPolicee: Local\n",
        "base",
        "externalTrafficPolicee",
        id="unknown-field-under-spec",
    ),
    pytest.param(
        "components/sim-target/sim-deployment.yaml",
        re.compile(r"\n          securityContext:\n(            .*\n|              .*\n)+"),
        "\n",
        "overlays/sim",
        "readOnlyRootFilesystem is not true",
        id="securityContext-removed",
    ),
    pytest.param(
        "components/sim-target/sim-deployment.yaml",
        'limits: {cpu: "1", memory: 1Gi}',
        'limits: {cpu: "2", memory: 1Gi}',
        "overlays/web-ui-sim",
        "CPU requests must equal limits",
        id="cpu-limit-above-request",
    ),
    pytest.param(
        "base/worker-job.yaml",
        WORKER_KEY,
        "            - {name: OPENAI_API_KEY, value: not-from-a-secret}\n",
        "overlays/vllm",
        "must come from a secretKeyRef",
        id="api-key-as-a-literal",
    ),
    pytest.param(
        "base/run.env",
        "TOKENLOAD_MODEL=\n",
        "TOKENLOAD_MODEL=\nOPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx\n",
        "overlays/sim",
        "credential in a ConfigMap",
        id="api-key-in-the-run-config",
    ),
    pytest.param(
        "tools/results-reader/pod.yaml",
        "  securityContext:\n    runAsNonRoot: true\n    runAsUser: 10001\n",
        "  securityContext:\n    runAsNonRoot: false\n    runAsUser: 0\n",
        "tools/results-reader",
        "runAsNonRoot is not true",
        id="root-pod",
    ),
    pytest.param(
        "components/image/kustomization.yaml",
        "\n    newTag: 0.1.0\n",
        "\n    newTag: latest\n",
        "overlays/sim",
        "not pinned to a tag",
        id="image-latest",
    ),
    pytest.param(
        "overlays/monitoring/podmonitor-master.yaml",
        "      interval: 5s\n",
        "      interval: 5s\n      scrapeEvery: 5s\n",
        "overlays/monitoring",
        "scrapeEvery",
        id="podmonitor-unknown-field",
    ),
    pytest.param(
        "overlays/monitoring/podmonitor-master.yaml",
        "interval: 5s",
        "interval: 5 seconds",
        "overlays/monitoring",
        "interval",
        id="podmonitor-bad-duration",
    ),
    pytest.param(
        "overlays/monitoring/podmonitor-vllm.yaml",
        "kind: PodMonitor",
        "kind: ServiceMonitor",
        "overlays/monitoring",
        "add a schema under tests/k8s/schemas",
        id="a-kind-with-no-schema",
    ),
    pytest.param(
        "overlays/vllm/kustomization.yaml",
        "      - LOCUST_USERS=64\n",
        "      - LOCUST_USERS=64\n    - [unclosed\n",
        "overlays/vllm",
        "kubectl kustomize",
        id="broken-yaml",
    ),
    pytest.param(
        "overlays/own-locustfile/kustomization.yaml",
        "      - my_llm.py\n",
        "      - my_llm.py\n      - missing.py\n",
        "overlays/own-locustfile",
        "kubectl kustomize",
        id="missing-file",
    ),
]


@pytest.fixture
def k8s_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    return copy


def plant(path: Path, old: str | re.Pattern[str], new: str) -> None:
    text = path.read_text()
    broken = old.sub(new, text, count=1) if isinstance(old, re.Pattern) else text.replace(old, new, 1)
    assert broken != text, f"the mistake was not planted: {old!r} not found in {path}"
    path.write_text(broken)


@pytest.mark.parametrize("filename, old, new, directory, expected", PLANTS)
def test_a_planted_mistake_is_reported(
    kubectl: str,
    kube_versions: list[str],
    k8s_copy: Path,
    filename: str,
    old: str | re.Pattern[str],
    new: str,
    directory: str,
    expected: str,
) -> None:
    plant(k8s_copy / filename, old, new)
    problems = manifests.check(kubectl, k8s_copy / directory, kube_versions)
    assert problems, f"{filename}: the planted mistake went unnoticed"
    assert any(expected in p for p in problems), "\n".join(problems)


@pytest.mark.parametrize("directory", sorted({p.values[3] for p in PLANTS}))
def test_the_unbroken_copy_passes(
    kubectl: str, kube_versions: list[str], k8s_copy: Path, directory: str
) -> None:
    assert manifests.check(kubectl, k8s_copy / directory, kube_versions) == []
