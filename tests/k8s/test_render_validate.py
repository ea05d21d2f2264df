"""Every kustomization under k8s/ renders with ``kubectl kustomize`` and passes strict schema
validation for Kubernetes 1.30 and for the newest version kubernetes-validate bundles."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.k8s import manifests
from tests.k8s.manifests import K8S

ROOTS = manifests.kustomizations()

EXPECTED = {
    "base",
    "grafana",
    "overlays/headless-job",
    "overlays/monitoring",
    "overlays/sim",
    "overlays/vllm",
    "overlays/web-ui",
    "overlays/web-ui-sim",
    "tools/results-reader",
}


def rel(path: Path) -> str:
    return path.relative_to(K8S).as_posix()


def test_the_expected_kustomizations_are_found() -> None:
    # more (an overlay of your own) are rendered and validated too
    assert {rel(p) for p in ROOTS} >= EXPECTED


def test_every_component_is_used_by_a_kustomization() -> None:
    used: set[Path] = set()
    for root in ROOTS:
        data = yaml.safe_load((root / "kustomization.yaml").read_text()) or {}
        used |= {(root / c).resolve() for c in data.get("components") or []}
    unused = [rel(c) for c in manifests.components() if c.resolve() not in used]
    assert manifests.components(), "no components found"
    assert not unused, f"components no kustomization renders (so no test checks them): {unused}"


@pytest.mark.parametrize("which", ["oldest", "newest"])
@pytest.mark.parametrize("directory", ROOTS, ids=rel)
def test_renders_and_validates_strictly(
    kubectl: str, kube_versions: list[str], directory: Path, which: str
) -> None:
    version = kube_versions[0] if which == "oldest" else kube_versions[-1]
    docs = manifests.render_cached(kubectl, directory)
    errors = [e for doc in docs for e in manifests.schema_errors(doc, version)]
    assert not errors, f"{rel(directory)} against Kubernetes {version}:\n" + "\n".join(errors)


def test_validates_against_1_30_and_the_newest_bundled(kube_versions: list[str]) -> None:
    from kubernetes_validate.utils import all_versions

    assert kube_versions[0] == "1.30.0"
    assert kube_versions[-1] == all_versions()[-1]


def test_crds_are_validated_by_our_schema_not_skipped(kubectl: str, kube_versions: list[str]) -> None:
    docs = manifests.render_cached(kubectl, K8S / "overlays" / "monitoring")
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    assert ("monitoring.coreos.com/v1", "PodMonitor") in kinds
    # kubernetes-validate itself has no PodMonitor schema: without ours this would be an error.
    import kubernetes_validate

    podmonitor = next(d for d in docs if d["kind"] == "PodMonitor")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(podmonitor, kube_versions[-1], strict=True)


def readme_block(marker: str) -> str:
    readme = (K8S / "README.md").read_text()
    match = re.search(rf"<!-- {marker} -->\n```yaml\n(.*?)```", readme, re.DOTALL)
    assert match, f"k8s/README.md has no yaml block after <!-- {marker} -->"
    return match.group(1)


def test_the_readme_sweep_overlay_renders(kubectl: str, kube_versions: list[str], tmp_path: Path) -> None:
    """k8s/README.md's sweep: an overlay of your own next to the others, copied here verbatim."""
    k8s = tmp_path / "k8s"
    shutil.copytree(K8S, k8s)
    (k8s / "overlays" / "my-sweep").mkdir()
    (k8s / "overlays" / "my-sweep" / "kustomization.yaml").write_text(readme_block("sweep-overlay"))
    assert manifests.check(kubectl, k8s / "overlays" / "my-sweep", kube_versions) == []
    docs = manifests.render(kubectl, k8s / "overlays" / "my-sweep")
    run = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("tokenload-run")
    )
    assert run["data"]["LOCUST_LOCUSTFILE"].endswith("/staircase.py")
    assert run["data"]["TOKENLOAD_RESULT_FILE"] == "summary.json"
    assert run["data"]["TOKENLOAD_METRICS_DISCOVER"] == "vllm-metrics:8000"
    worker = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "tokenload-worker")
    assert (
        worker["spec"]["parallelism"]
        == worker["spec"]["completions"]
        == int(run["data"]["LOCUST_EXPECT_WORKERS"])
    )
