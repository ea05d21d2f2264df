"""How much CPU this load generator process may use: one core (a gevent process runs on one
thread), or less when its cgroup has a CPU quota (a Kubernetes pod with ``limits.cpu: 500m`` is
throttled at half a core and would never reach 90 % of one). Pure parsing, plus one reader of
the files under a cgroup root (``/sys/fs/cgroup`` unless told otherwise, for tests).

cgroup v2: ``cpu.max`` holds ``"$QUOTA $PERIOD"`` or ``"max $PERIOD"`` (no limit).
cgroup v1: ``cpu/cpu.cfs_quota_us`` (-1: no limit) and ``cpu/cpu.cfs_period_us``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuLimit", "parse_cgroup_v1", "parse_cgroup_v2", "read_cpu_limit"]


@dataclass(frozen=True, slots=True)
class CpuLimit:
    """``cores``: the CPU the process may use (at most 1.0, one thread); ``source``: what set it."""

    cores: float
    source: str

    def percent_of_usable(self, process_cpu_percent: float) -> float:
        """A process's CPU % (of one core, as psutil reports it) as a % of what it may use."""
        return process_cpu_percent / self.cores


ONE_CORE = CpuLimit(1.0, "one core (a single-threaded process)")


def parse_cgroup_v2(cpu_max: str) -> float | None:
    """Cores allowed by a cgroup v2 ``cpu.max``; None when unlimited or unreadable."""
    parts = cpu_max.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cgroup_v1(quota_us: str, period_us: str) -> float | None:
    """Cores allowed by cgroup v1's CFS quota and period; None when unlimited or unreadable."""
    try:
        quota, period = int(quota_us.strip()), int(period_us.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _own_v2_dir(root: Path, proc_cgroup: Path) -> Path:
    """This process's cgroup v2 directory (``0::/path`` in /proc/self/cgroup), else the root (a
    container's cgroup namespace shows its own cgroup as the root)."""
    try:
        for line in proc_cgroup.read_text().splitlines():
            if line.startswith("0::"):
                own = root / line[3:].strip().lstrip("/")
                if (own / "cpu.max").exists():
                    return own
    except OSError:
        pass
    return root


def read_cpu_limit(
    root: str | Path = "/sys/fs/cgroup", proc_cgroup: str | Path = "/proc/self/cgroup"
) -> CpuLimit:
    """The CPU this process may use: its cgroup's quota when below one core, else one core."""
    base = Path(root)
    cores, source = None, ""
    try:
        cores = parse_cgroup_v2((_own_v2_dir(base, Path(proc_cgroup)) / "cpu.max").read_text())
        source = "cgroup v2 cpu.max"
    except OSError:
        try:
            cores = parse_cgroup_v1(
                (base / "cpu" / "cpu.cfs_quota_us").read_text(),
                (base / "cpu" / "cpu.cfs_period_us").read_text(),
            )
            source = "cgroup v1 cpu.cfs_quota_us"
        except OSError:
            cores = None
    if cores is None or cores >= 1.0:
        return ONE_CORE
    return CpuLimit(cores, f"{source}: {cores:g} cores")
