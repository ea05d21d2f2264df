"""The Dockerfile's shape: a base image pinned to a version tag, the package installed at build
time (never in ENTRYPOINT/CMD), a numeric non-root USER that the manifests' runAsUser matches."""

from __future__ import annotations

import re

import pytest

from tests.k8s.manifests import K8S, ROOT

DOCKERFILE = ROOT / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def dockerfile_problems(text: str) -> list[str]:
    problems = []
    steps = instructions(text)
    froms = [args for op, args in steps if op == "FROM"]
    if not froms:
        problems.append("no FROM")
    for args in froms:
        image = next(w for w in args.split() if not w.startswith("--"))
        _, _, tag = image.split("@")[0].rpartition("/")[2].partition(":")
        if not re.fullmatch(r"\d+\.\d+\.\d+[\w.-]*", tag):
            problems.append(f"FROM {image}: pin a full version tag (e.g. python:3.11.9-slim-bookworm)")
    users = [args for op, args in steps if op == "USER"]
    if not users:
        problems.append("no USER: the image would run as root")
    elif not re.fullmatch(r"[1-9]\d*(:\d+)?", users[-1]):
        problems.append(f"USER {users[-1]}: use a numeric non-root uid (runAsNonRoot can only check numbers)")
    for op, args in steps:
        if op in ("ENTRYPOINT", "CMD") and re.search(r"\bpip3?\b.*\binstall\b", args):
            problems.append(f"{op} {args}: install at build time, not at start")
        if op in ("ENV", "ARG") and re.search(r"(API_?KEY|SECRET|PASSWORD|TOKEN)\b", args, re.IGNORECASE):
            problems.append(f"{op} {args}: no secrets in the image")
    if not any(op == "WORKDIR" for op, _ in steps):
        problems.append("no WORKDIR")
    if not any(op == "RUN" and re.search(r"pip3? install --no-cache-dir \.", args) for op, args in steps):
        problems.append("the package is not installed at build time (RUN pip install --no-cache-dir .)")
    return problems


def test_the_dockerfile_passes() -> None:
    assert dockerfile_problems(DOCKERFILE.read_text()) == []


def test_it_copies_what_the_package_needs_and_all_of_it_exists() -> None:
    copied = [
        w for op, args in instructions(DOCKERFILE.read_text()) if op == "COPY" for w in args.split()[:-1]
    ]
    assert {"pyproject.toml", "README.md", "tokenload/", "locustfiles/"} <= set(copied)
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: not in the build context"


def test_the_manifests_run_as_the_images_user() -> None:
    [user] = [args for op, args in instructions(DOCKERFILE.read_text()) if op == "USER"]
    uid = int(user.split(":")[0])
    uids = {int(m) for p in K8S.rglob("*.yaml") for m in re.findall(r"runAsUser: (\d+)", p.read_text())}
    assert uids == {uid}


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("FROM python:3.11.9-slim-bookworm", "FROM python:latest", "pin a full version tag"),
        ("FROM python:3.11.9-slim-bookworm", "FROM python:3.11-slim", "pin a full version tag"),
        ("FROM python:3.11.9-slim-bookworm", "FROM python", "pin a full version tag"),
        ("USER 10001:10001", "USER tokenload", "numeric non-root uid"),
        ("USER 10001:10001", "USER 0", "numeric non-root uid"),
        ("USER 10001:10001\n", "", "no USER"),
        ('CMD ["tokenload", "--help"]', 'CMD ["sh", "-c", "pip install . && tokenload sim"]', "not at start"),
        ('CMD ["tokenload", "--help"]', "ENTRYPOINT pip install tokenload; locust", "not at start"),
        ("ENV HOME=/tmp", "ENV HOME=/tmp OPENAI_API_KEY=x", "no secrets"),
    ],
)
def test_the_lint_catches_a_planted_mistake(old: str, new: str, expected: str) -> None:
    text = DOCKERFILE.read_text()
    assert old in text
    problems = dockerfile_problems(text.replace(old, new))
    assert any(expected in p for p in problems), problems
