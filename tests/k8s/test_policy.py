"""Policy over every rendered kustomization: pod security and resources, the API key only from a
Secret, network policies that let workers reach only the master and the target, one knob for the
number of workers, and references (ConfigMaps, claims, Service selectors) that resolve."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.k8s import manifests
from tests.k8s.manifests import K8S, selector_matches

ROOTS = manifests.kustomizations()
DNS = {("UDP", 53), ("TCP", 53)}

#: Objects a kustomization refers to but does not create, on purpose.
EXTERNAL = {
    # the reader mounts the claim that overlays/headless-job creates
    "tools/results-reader": {("PersistentVolumeClaim", "tokenload-results")},
}
#: Services that select pods this repository does not deploy.
EXTERNAL_SELECTORS = {"vllm-metrics", "vllm"}


def rel(path: Path) -> str:
    return path.relative_to(K8S).as_posix()


@pytest.fixture(scope="module", params=ROOTS, ids=rel)
def rendered(request: pytest.FixtureRequest, kubectl: str) -> tuple[str, list[dict[str, Any]]]:
    return rel(request.param), list(manifests.render_cached(kubectl, request.param))


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def run_config(docs: list[dict[str, Any]]) -> dict[str, str] | None:
    found = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].startswith("tokenload-run-")]
    assert len(found) <= 1
    return found[0]["data"] if found else None


def component(doc: dict[str, Any]) -> str | None:
    return manifests.pod_labels(doc).get("app.kubernetes.io/component")


def ports_of(rule: dict[str, Any]) -> set[tuple[str, Any]]:
    return {(p.get("protocol", "TCP"), p.get("port")) for p in rule.get("ports") or []}


def selecting(docs: list[dict[str, Any]], labels: dict[str, str], policy_type: str) -> list[dict[str, Any]]:
    return [
        p
        for p in by_kind(docs, "NetworkPolicy")
        if policy_type in p["spec"].get("policyTypes", [])
        and selector_matches(p["spec"].get("podSelector"), labels)
    ]


def test_pods_are_locked_down_and_the_key_only_comes_from_a_secret(rendered) -> None:
    name, docs = rendered
    violations = manifests.policy_violations(docs)
    assert not violations, f"{name}:\n" + "\n".join(violations)


def test_the_api_key_is_an_optional_secret_key_ref_for_the_workers(rendered) -> None:
    _, docs = rendered
    for doc, spec in manifests.workloads(docs):
        for container in manifests.all_containers(spec):
            keys = [v for v in container.get("env") or [] if v["name"] == "OPENAI_API_KEY"]
            if component(doc) == "worker" and container in spec["containers"]:
                assert keys, f"{manifests.name_of(doc)}: the workers make the requests and need the key"
            for var in keys:
                assert var["valueFrom"]["secretKeyRef"] == {
                    "name": "tokenload-api-key",
                    "key": "api-key",
                    "optional": True,
                }


def test_the_number_of_workers_is_one_knob(rendered) -> None:
    name, docs = rendered
    config = run_config(docs)
    workers = [d for d in docs if d["kind"] in ("Job", "Deployment") and component(d) == "worker"]
    if config is None:
        assert not workers
        return
    expected = int(config["LOCUST_EXPECT_WORKERS"])
    assert workers, f"{name}: a run config but no workers"
    for w in workers:
        counts = (
            [w["spec"]["parallelism"], w["spec"]["completions"]]
            if w["kind"] == "Job"
            else [w["spec"]["replicas"]]
        )
        assert counts == [expected] * len(counts), (
            f"{name}: {manifests.name_of(w)} runs {counts}, master expects {expected}"
        )


def test_every_pod_is_selected_by_ingress_and_egress_policies(rendered) -> None:
    name, docs = rendered
    for doc, _ in manifests.workloads(docs):
        labels = manifests.pod_labels(doc)
        assert selecting(docs, labels, "Ingress"), (
            f"{name}: no ingress NetworkPolicy selects {manifests.name_of(doc)}"
        )
        assert selecting(docs, labels, "Egress"), (
            f"{name}: no egress NetworkPolicy selects {manifests.name_of(doc)}"
        )


def test_workers_reach_only_the_master_the_target_and_dns(rendered) -> None:
    name, docs = rendered
    masters = [manifests.pod_labels(d) for d, _ in manifests.workloads(docs) if component(d) == "master"]
    for doc, _ in manifests.workloads(docs):
        if component(doc) != "worker":
            continue
        labels = manifests.pod_labels(doc)
        assert selecting(docs, labels, "Ingress"), "nothing may connect to a worker"
        for policy in selecting(docs, labels, "Ingress"):
            assert not policy["spec"].get("ingress"), f"{name}: {policy['metadata']['name']} lets in traffic"
        allowed: set[tuple[str, Any]] = set()
        for policy in selecting(docs, labels, "Egress"):
            for rule in policy["spec"].get("egress") or []:
                ports = ports_of(rule)
                assert ports, f"{name}: {policy['metadata']['name']}: an egress rule with no ports allows all"
                allowed |= ports
                if ports <= DNS:
                    continue
                peers = rule.get("to") or []
                assert peers, f"{name}: {policy['metadata']['name']}: egress on {ports} to anywhere"
                if policy["metadata"]["name"] == "tokenload-target":
                    continue
                assert ports == {("TCP", 5557)}, f"{name}: workers may reach {ports} besides the target"
                for peer in peers:
                    assert set(peer) == {"podSelector"}, f"{name}: the master is a pod, not {peer}"
                    assert any(selector_matches(peer["podSelector"], m) for m in masters), (
                        f"{name}: worker egress on 5557 does not select the master"
                    )
        assert allowed >= DNS, f"{name}: workers cannot resolve names"
        assert ("TCP", 5557) in allowed


def test_the_master_is_reached_on_5557_by_workers_and_on_8089(rendered) -> None:
    name, docs = rendered
    workers = [manifests.pod_labels(d) for d, _ in manifests.workloads(docs) if component(d) == "worker"]
    for doc, _ in manifests.workloads(docs):
        if component(doc) != "master":
            continue
        labels = manifests.pod_labels(doc)
        seen: set[tuple[str, Any]] = set()
        for policy in selecting(docs, labels, "Ingress"):
            for rule in policy["spec"].get("ingress") or []:
                ports = ports_of(rule)
                seen |= ports
                assert ports and ports <= {("TCP", 5557), ("TCP", 8089)}, f"{name}: master ingress on {ports}"
                if ("TCP", 5557) in ports:
                    assert rule.get("from"), f"{name}: anyone may connect to the master's 5557"
                    for peer in rule["from"]:
                        assert any(selector_matches(peer.get("podSelector"), w) for w in workers)
        assert seen == {("TCP", 5557), ("TCP", 8089)}
        egress = {
            p
            for pol in selecting(docs, labels, "Egress")
            for r in pol["spec"].get("egress") or []
            for p in ports_of(r)
        }
        assert egress >= DNS


def test_the_target_is_where_the_network_policy_lets_the_load_go(rendered) -> None:
    name, docs = rendered
    config = run_config(docs)
    if config is None:
        return
    host = urlsplit(config["LOCUST_HOST"])
    target_policy = next(
        p for p in by_kind(docs, "NetworkPolicy") if p["metadata"]["name"] == "tokenload-target"
    )
    [rule] = target_policy["spec"]["egress"]
    [peer] = rule["to"]
    services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
    if host.hostname in services:  # a target deployed here (the emulator): the policy selects its pods
        service = services[host.hostname]
        [port] = [p for p in service["spec"]["ports"] if p["port"] == host.port]
        pods = [manifests.pod_labels(d) for d, _ in manifests.workloads(docs)]
        selects = {"matchLabels": service["spec"]["selector"]}
        targets = [labels for labels in pods if selector_matches(selects, labels)]
        assert targets, f"{name}: Service {host.hostname} selects no pod"
        assert all(selector_matches(peer["podSelector"], t) for t in targets)
        pod_ports = {
            (c.get("protocol", "TCP"), cp["containerPort"])
            for d, spec in manifests.workloads(docs)
            if selector_matches(selects, manifests.pod_labels(d))
            for c in spec["containers"]
            for cp in c.get("ports") or []
            if cp.get("name") == port["targetPort"] or cp["containerPort"] == port["targetPort"]
        }
        assert ports_of(rule) == pod_ports
    discover = config.get("TOKENLOAD_METRICS_DISCOVER")
    if discover:  # the replicas' headless Service selects what the policy lets the master reach
        svc_name, _, svc_port = discover.partition(":")
        service = services[svc_name]
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["selector"] == peer["podSelector"]["matchLabels"]
        assert ("TCP", int(svc_port)) in ports_of(rule)


def test_workers_find_the_master_service(rendered) -> None:
    _, docs = rendered
    services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
    for doc, spec in manifests.workloads(docs):
        if component(doc) != "worker":
            continue
        [worker] = spec["containers"]
        env = {v["name"]: v.get("value") for v in worker.get("env") or []}
        master = services[env["LOCUST_MASTER_NODE_HOST"]]
        assert int(env["LOCUST_MASTER_NODE_PORT"]) in [p["port"] for p in master["spec"]["ports"]]
        [wait] = spec["initContainers"]
        assert wait["command"][-1] == f"{env['LOCUST_MASTER_NODE_HOST']}:{env['LOCUST_MASTER_NODE_PORT']}"


def test_references_resolve(rendered) -> None:
    name, docs = rendered
    have = {(d["kind"], d["metadata"]["name"]) for d in docs} | EXTERNAL.get(name, set())
    problems = []
    pods = [(manifests.pod_labels(d), spec) for d, spec in manifests.workloads(docs)]
    for doc, spec in manifests.workloads(docs):
        where = manifests.name_of(doc)
        wanted = []
        for volume in spec.get("volumes") or []:
            if "configMap" in volume:
                wanted.append(("ConfigMap", volume["configMap"]["name"]))
            if "persistentVolumeClaim" in volume:
                wanted.append(("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]))
            if "secret" in volume:
                problems.append(f"{where}: mounts a Secret")
        if "serviceAccountName" in spec:
            wanted.append(("ServiceAccount", spec["serviceAccountName"]))
        for container in manifests.all_containers(spec):
            for source in container.get("envFrom") or []:
                if "configMapRef" in source:
                    wanted.append(("ConfigMap", source["configMapRef"]["name"]))
            for var in container.get("env") or []:
                ref = (var.get("valueFrom") or {}).get("secretKeyRef")
                if (
                    ref is not None
                    and ref.get("optional") is not True
                    and ("Secret", ref["name"]) not in have
                ):
                    problems.append(f"{where}: needs Secret {ref['name']}; reference it with optional: true")
            mounts = {m["name"] for m in container.get("volumeMounts") or []}
            missing = mounts - {v["name"] for v in spec.get("volumes") or []}
            if missing:
                problems.append(f"{where}: mounts undefined volumes {missing}")
        problems += [
            f"{where}: refers to {k}/{n}, which is not rendered" for k, n in wanted if (k, n) not in have
        ]
    for service in by_kind(docs, "Service"):
        if service["metadata"]["name"] in EXTERNAL_SELECTORS:
            continue
        matched = [
            spec
            for labels, spec in pods
            if selector_matches({"matchLabels": service["spec"]["selector"]}, labels)
        ]
        if not matched:
            problems.append(f"Service/{service['metadata']['name']}: selects no pod")
        named = {
            cp.get("name") for spec in matched for c in spec["containers"] for cp in c.get("ports") or []
        }
        for port in service["spec"]["ports"]:
            if isinstance(port.get("targetPort"), str) and port["targetPort"] not in named:
                problems.append(
                    f"Service/{service['metadata']['name']}: no pod port named {port['targetPort']}"
                )
    assert not problems, f"{name}:\n" + "\n".join(problems)


def test_a_headless_master_keeps_its_results_where_the_overlay_says(rendered) -> None:
    name, docs = rendered
    for job in by_kind(docs, "Job"):
        if component(job) != "master":
            continue
        spec = job["spec"]["template"]["spec"]
        [master] = spec["containers"]
        assert master["command"][-1] == "master-headless"
        assert job["spec"]["backoffLimit"] == 0, "a load test must not be re-run silently"
        [results] = [v for v in spec["volumes"] if v["name"] == "results"]
        persistent = name in ("overlays/headless-job", "overlays/vllm", "overlays/vllm-prometheus")
        assert ("persistentVolumeClaim" in results) == persistent and ("emptyDir" in results) != persistent
        assert {"name": "results", "mountPath": "/results"} in master["volumeMounts"]


def test_every_pod_runs_the_image_components_image_sets(rendered) -> None:
    name, docs = rendered
    [image] = yaml.safe_load((K8S / "components" / "image" / "kustomization.yaml").read_text())["images"]
    expected = f"{image['newName']}:{image['newTag']}"
    for doc, spec in manifests.workloads(docs):
        for container in manifests.all_containers(spec):
            assert container["image"] == expected, (
                f"{name}: {manifests.name_of(doc)} runs {container['image']!r}: list components/image last"
            )


#: Where the image keeps the repository's locustfiles/ (Dockerfile: WORKDIR /opt/tokenload), and
#: where components/own-locustfiles mounts a user's own.
IMAGE_LOCUSTFILES = "/opt/tokenload/locustfiles"
OWN_LOCUSTFILES = "/etc/tokenload/own-locustfiles"


def test_the_locustfiles_run_are_the_images_or_in_the_own_configmap(rendered) -> None:
    name, docs = rendered
    config = run_config(docs)
    if config is None:
        return
    own = [
        d
        for d in by_kind(docs, "ConfigMap")
        if d["metadata"]["name"].startswith("tokenload-own-locustfiles-")
    ]
    image = {p.name for p in (K8S.parent / "locustfiles").glob("*.py")}
    for path in config["LOCUST_LOCUSTFILE"].split(","):
        directory, _, filename = path.strip().rpartition("/")
        if directory == IMAGE_LOCUSTFILES:
            assert filename in image, f"{name}: {path} is not in the image (locustfiles/)"
            continue
        assert directory == OWN_LOCUSTFILES and own and filename in own[0]["data"], f"{name}: {path}"
        # ... and every master and worker mounts it there
        for doc, spec in manifests.workloads(docs):
            if component(doc) in ("master", "worker"):
                mounts = {m["mountPath"] for m in spec["containers"][0].get("volumeMounts") or []}
                assert OWN_LOCUSTFILES in mounts, f"{name}: {manifests.name_of(doc)} lacks {OWN_LOCUSTFILES}"


def test_prometheus_is_reached_by_the_master_alone_on_its_port_alone(kubectl: str) -> None:
    docs = list(manifests.render_cached(kubectl, K8S / "overlays" / "vllm-prometheus"))
    config = run_config(docs)
    assert config is not None
    url = urlsplit(config["TOKENLOAD_PROMETHEUS_URL"])
    assert url.scheme == "http" and url.port == 9090 and not config["TOKENLOAD_METRICS_DISCOVER"]
    pods = {component(d): manifests.pod_labels(d) for d, _ in manifests.workloads(docs)}
    rules = [
        (policy, rule)
        for policy in by_kind(docs, "NetworkPolicy")
        for rule in policy["spec"].get("egress") or []
        if ("TCP", 9090) in ports_of(rule)
    ]
    assert [p["metadata"]["name"] for p, _ in rules] == ["tokenload-prometheus"]
    [(policy, rule)] = rules
    assert ports_of(rule) == {("TCP", 9090)}, "egress to the Prometheus port only"
    assert selector_matches(policy["spec"]["podSelector"], pods["master"])
    assert not selector_matches(policy["spec"]["podSelector"], pods["worker"])
    [peer] = rule["to"]
    assert peer["namespaceSelector"] and peer["podSelector"], "a peer, not anywhere"
