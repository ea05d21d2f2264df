"""A worker whose workload files are not the master's (a dataset that differs, or none at all)
refuses the run before any request, in one line, and the master ends the run (issue #19)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.cluster import Cluster, free_port, read_trace, wait_exit
from tests.workload.test_spec import DATA

pytestmark = pytest.mark.slow

WORKLOAD = """workload:
  kind: synthetic
  input_tokens: empirical:hist.csv
  output_tokens: 8
"""


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def _folder(root: Path, name: str, hist: str | None) -> Path:
    folder = root / name
    folder.mkdir()
    if hist is not None:
        (folder / "workload.yaml").write_text(WORKLOAD)
        (folder / "hist.csv").write_text(hist)
    return folder


@pytest.mark.parametrize("worker_has", ["a different hist.csv", "no files"])
def test_a_worker_with_other_workload_files_refuses_before_any_request(
    cluster: Cluster, worker_has: str
) -> None:
    _sim, url, trace = cluster.emulator()
    hist = (DATA / "hist.csv").read_text()
    master_dir = _folder(cluster.tmp, "master-files", hist)
    other = None if worker_has == "no files" else hist + "40,1\n"
    worker_dir = _folder(cluster.tmp, "worker-files", other)
    port = free_port()
    master = cluster.master(
        url, port, 1, "--workload", "workload.yaml", "--concurrency", "2", "--step-duration", "20",
        cwd=master_dir,
    )  # fmt: skip
    worker = cluster.worker(0, "127.0.0.1", port, cwd=worker_dir)
    assert wait_exit(worker, 60) == 2
    assert wait_exit(master, 60) == 2
    said = [line for line in worker.text().splitlines() if "the workload is not the master's" in line]
    assert len(said) == 1 and ("hist.csv" in said[0] or "workload.yaml" in said[0]), worker.text()[-2000:]
    assert ("differs" in said[0]) == (worker_has != "no files")
    assert "refused the run" in master.text()
    assert "Traceback" not in worker.text()
    assert not trace.exists() or read_trace(trace) == []  # not one request reached the server
