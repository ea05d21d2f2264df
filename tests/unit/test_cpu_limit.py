"""The CPU a load generator may use, read from cgroup files written by the test (v2 and v1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenload.loadgen.cpu_limit import parse_cgroup_v1, parse_cgroup_v2, read_cpu_limit


@pytest.mark.parametrize(
    ("text", "cores"),
    [("50000 100000\n", 0.5), ("max 100000\n", None), ("200000 100000", 2.0), ("", None), ("x y", None)],
)
def test_cgroup_v2_cpu_max(text: str, cores: float | None) -> None:
    assert parse_cgroup_v2(text) == cores


def test_cgroup_v1_quota() -> None:
    assert parse_cgroup_v1("25000\n", "100000\n") == 0.25
    assert parse_cgroup_v1("-1\n", "100000\n") is None


def test_a_pod_limited_to_500m_is_judged_against_half_a_core(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    limit = read_cpu_limit(tmp_path, tmp_path / "no-proc-cgroup")
    assert limit.cores == 0.5 and "cgroup v2 cpu.max" in limit.source
    # Throttled at half a core, the process shows 48 % of one core: 96 % of what it may use.
    assert limit.percent_of_usable(48.0) == 96.0


def test_the_processs_own_cgroup_directory_is_read(tmp_path: Path) -> None:
    own = tmp_path / "kubepods" / "pod1"
    own.mkdir(parents=True)
    (own / "cpu.max").write_text("25000 100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/kubepods/pod1\n")
    assert read_cpu_limit(tmp_path, proc).cores == 0.25


def test_no_quota_or_more_than_a_core_is_one_core(tmp_path: Path) -> None:
    assert read_cpu_limit(tmp_path / "absent", tmp_path / "absent").cores == 1.0
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert read_cpu_limit(tmp_path, tmp_path / "absent").cores == 1.0  # 4 cores: one thread uses one
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("30000\n")
    limit = read_cpu_limit(tmp_path, tmp_path / "absent")
    assert limit.cores == 0.3 and "cgroup v1" in limit.source
