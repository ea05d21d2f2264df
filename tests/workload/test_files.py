"""The files a workload reads and their fingerprints (what a worker compares with the master's)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.workload.test_spec import DATA
from tokenload.workload.files import fingerprint, mismatches, workload_files
from tokenload.workload.spec import load_workload_file


def test_every_file_the_workload_reads_is_listed_and_fingerprinted(tmp_path: Path) -> None:
    shutil.copy(DATA / "sharegpt.json", tmp_path / "chats.json")
    shutil.copy(DATA / "hist.csv", tmp_path / "hist.csv")
    path = tmp_path / "run.yaml"
    path.write_text(
        "workload:\n  kind: conversation\n  input_tokens: empirical:hist.csv\n  output_tokens: 16\n"
        "  dataset:\n    path: chats.json\n  conversation:\n    turns: 2\n    source: dataset\n"
    )
    spec = load_workload_file(path)
    files = workload_files(spec, str(path), trace_file=str(tmp_path / "trace.jsonl"))
    assert [p.name for p in files] == ["chats.json", "hist.csv", "run.yaml", "trace.jsonl"]
    prints = fingerprint(files)
    assert prints[str(tmp_path / "hist.csv")][0] == (DATA / "hist.csv").stat().st_size
    assert prints[str(tmp_path / "trace.jsonl")] == [None, None]  # not there: no size, no hash
    assert mismatches(prints, {}) == [  # what the master could not read either is not compared
        f"{tmp_path / n}: missing (the master has {prints[str(tmp_path / n)][0]} bytes)"
        for n in ("chats.json", "hist.csv", "run.yaml")
    ]


def test_a_changed_or_missing_file_is_named() -> None:
    master = {"a.csv": [10, "aa"], "b.json": [5, "bb"]}
    here = {"a.csv": [11, "cc"]}
    assert mismatches(master, here) == [
        "a.csv: differs (11 bytes here, 10 bytes on the master)",
        "b.json: missing (the master has 5 bytes)",
    ]
    assert mismatches(master, dict(master)) == []


def test_a_file_is_hashed_once_until_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker fingerprints its files at every test start: an unchanged file (same size and
    mtime) is not read again, a changed one is, and a file larger than one read is hashed whole."""
    import hashlib
    import os

    from tokenload.workload import files

    big = tmp_path / "trace.jsonl"
    data = b'{"timestamp": 0, "input_length": 512, "output_length": 128}\n' * 40_000  # > 1 MiB
    big.write_bytes(data)
    first = fingerprint([big])
    assert first == {str(big): [len(data), hashlib.sha256(data).hexdigest()]}
    reads: list[str] = []
    real_open = open

    def counting_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    assert fingerprint([big]) == first and reads == []
    big.write_bytes(b"[" + data[1:])  # same size, other bytes, a later mtime
    st = big.stat()
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    changed = fingerprint([big])
    assert reads == [str(big)] and changed[str(big)][1] != first[str(big)][1]
    assert files._DIGESTS  # the cache is this process's own
