"""What k8s/ describes stays in step with its source (the Grafana dashboard and its ConfigMap, the
README's list of overlays), and it copies nothing: the locustfiles are the image's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.k8s import manifests
from tests.k8s.manifests import K8S, ROOT

DASHBOARD = K8S / "grafana" / "tokenload-dashboard.json"


def test_no_locustfile_is_copied_the_image_has_them() -> None:
    """The base runs the image's locustfiles (the Dockerfile copies locustfiles/): k8s/ keeps no
    copy of any of them, and the default one exists in the repository."""
    source = {p.name: p.read_bytes() for p in (ROOT / "locustfiles").glob("*.py")}
    assert source, "no locustfiles/*.py"
    copies = [p for p in K8S.rglob("*.py") if p.read_bytes() in source.values()]
    assert not copies, f"copies of locustfiles/ under k8s/: {copies}"
    data = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    assert not [g for g in data.get("configMapGenerator") or [] if "locustfile" in g["name"]]
    env = (K8S / "base" / "run.env").read_text()
    default = re.search(r"^LOCUST_LOCUSTFILE=/opt/tokenload/locustfiles/(\S+)$", env, re.MULTILINE)
    assert default and default.group(1) in source


def test_the_dashboard_is_a_valid_grafana_dashboard() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels), "panel ids must be unique"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        assert panel["datasource"]["uid"].strip("${}") in variables
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(set(refs)) == len(refs)
        for target in panel["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")") and expr.count("[") == expr.count("]"), expr
            assert expr.count("{") == expr.count("}"), expr
            for var in re.findall(r"\$(\w+)", expr):
                assert var in variables or var.startswith("__"), f"{expr}: ${var} is not defined"


def test_the_dashboard_shows_the_vllm_saturation_signals() -> None:
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]

    def some(pattern: str) -> bool:
        return any(re.search(pattern, e) for e in exprs)

    assert some(r"vllm:kv_cache_usage_perc\b")
    assert some(r"vllm:num_requests_running\b")
    assert some(r"vllm:num_requests_waiting\b")
    assert some(r"rate\(vllm:num_preemptions_total\b")
    for histogram in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"):
        assert some(rf"histogram_quantile\(0\.\d+, sum by \(le\) \(rate\({histogram}_bucket\b"), histogram


def test_the_dashboard_configmap_carries_the_file_and_the_sidecar_label(kubectl: str) -> None:
    docs = manifests.render_cached(kubectl, K8S / "overlays" / "monitoring")
    [configmap] = [d for d in docs if d["kind"] == "ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["data"] == {DASHBOARD.name: DASHBOARD.read_text()}


def test_the_readme_covers_every_overlay_and_component() -> None:
    readme = (K8S / "README.md").read_text()
    for directory in [*manifests.kustomizations(), *manifests.components()]:
        path = directory.relative_to(K8S).as_posix()
        assert path in readme, f"k8s/README.md does not mention {path}"


def test_the_entry_script_compiles_and_is_in_its_configmap() -> None:
    script = K8S / "base" / "scripts" / "tokenload_k8s.py"
    compile(script.read_text(), str(script), "exec")
    data = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    [generator] = [g for g in data["configMapGenerator"] if g["name"] == "tokenload-scripts"]
    assert [Path(f).name for f in generator["files"]] == [script.name]
