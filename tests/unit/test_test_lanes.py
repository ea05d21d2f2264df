"""The suite's two lanes (Makefile, `make test`): what runs at idle CPU priority must not need the
wall clock, and the two lanes together are the whole suite."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK = "simulated_time"

# A module in the idle lane may be starved for minutes while the other lane fills both cores:
# nothing in it may start a process, open a socket, sleep or read the wall clock. Hypothesis
# neither: its deadline (200 ms an example by default) is a wall-clock bound.
FORBIDDEN_MODULES = (
    "hypothesis",
    "subprocess",
    "socket",
    "urllib",
    "http",
    "gevent",
    "locust",
    "time",
    "threading",
    "asyncio",
)
FORBIDDEN_NAMES = {"ServerProcess", "run_locust", "start_mock", "with_trusted_client"}


def _marked(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            return MARK in ast.unparse(node.value)
    return False


def _lane_modules() -> list[Path]:
    return [p for p in sorted((ROOT / "tests").rglob("test_*.py")) if _marked(ast.parse(p.read_text()))]


def test_the_idle_lane_holds_only_simulated_time() -> None:
    modules = _lane_modules()
    assert len(modules) >= 10, modules
    bad = []
    for path in modules:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [f"{path.name}: imports {n}" for n in names if n.split(".")[0] in FORBIDDEN_MODULES]
            if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
                bad.append(f"{path.name}: uses {node.id}")
            if isinstance(node, ast.arg) and node.arg in FORBIDDEN_NAMES:
                bad.append(f"{path.name}: takes the fixture {node.arg}")
    assert not bad, bad


def test_make_test_runs_both_lanes() -> None:
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    runs = re.findall(r"\$\(BIN\)/pytest ([^;&>]*)", recipe)
    assert len(runs) == 2, runs
    expressions = sorted(re.search(r"-m (\"[^\"]+\"|\S+)", r).group(1).strip('"') for r in runs)
    assert expressions == [f"not {MARK}", MARK], expressions
    assert "wait $$idle" in recipe and "test $$main -eq 0 && test $$rest -eq 0" in recipe
