"""The files a run's workload reads (the workload YAML, its datasets, trace, tokenizer and
empirical length files, a ``--trace`` file) and their fingerprints: every worker must read the
same bytes as the master, or its requests are not the run's. Pure (reads the files only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tokenload.workload.spec import WorkloadSpec

__all__ = ["fingerprint", "mismatches", "workload_files"]

_PATH_KEYS = ("path", "tokenizer_file")


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _walk(v)


def workload_files(spec: WorkloadSpec, workload_file: str = "", trace_file: str = "") -> list[Path]:
    """Every file the workload reads, resolved as the run reads it, in a stable order."""
    found: list[Path] = []
    if workload_file:
        found.append(Path(workload_file).expanduser())
    for key, value in _walk(spec.model_dump()):
        if not isinstance(value, str) or not value:
            continue
        if key in _PATH_KEYS:
            found.append(spec.resolve_path(value))
        elif value.startswith("empirical:"):
            found.append(spec.resolve_path(value.removeprefix("empirical:")))
    if trace_file:
        found.append(Path(trace_file).expanduser())
    return sorted(dict.fromkeys(p.resolve() if p.is_absolute() else p for p in found), key=str)


#: Digests already computed in this process, by (path, size, mtime in ns): a worker checks its
#: files at every test start, and a trace or dataset of gigabytes is read once, not each time.
_DIGESTS: dict[tuple[str, int, int], str] = {}
_CHUNK = 1 << 20


def _digest(path: Path) -> tuple[int, str]:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as fh:  # in chunks: a large file is never held whole
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
        _DIGESTS[key] = h.hexdigest()
    return st.st_size, _DIGESTS[key]


def fingerprint(paths: Iterable[Path]) -> dict[str, list[Any]]:
    """``{path: [size in bytes, sha256 hex]}``; a file that cannot be read: ``[None, None]``.
    A file unchanged since this process last hashed it (same size and mtime) is not read again."""
    out: dict[str, list[Any]] = {}
    for path in paths:
        try:
            size, digest = _digest(path)
        except OSError:
            out[str(path)] = [None, None]
            continue
        out[str(path)] = [size, digest]
    return out


def mismatches(expected: dict[str, list[Any]], here: dict[str, list[Any]]) -> list[str]:
    """What differs between the master's fingerprints and this process's, one phrase a file."""
    problems = []
    for path, (size, digest) in expected.items():
        if size is None:
            continue  # the master could not read it either (its own checks report that)
        mine = here.get(path, [None, None])
        if mine[0] is None:
            problems.append(f"{path}: missing (the master has {size} bytes)")
        elif mine[1] != digest:
            problems.append(f"{path}: differs ({mine[0]} bytes here, {size} bytes on the master)")
    return problems
