"""Tables of a run for parquet: one row per request, one row per scrape. Pure (no file access).

Column types are fixed by name, not inferred, so a column that is all-null in one run (no
failures, so no ``failure_class``) has the same type as in a run where it is filled, and files
from different runs concatenate.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import pandas as pd
import pyarrow as pa

from tokenload.metrics.records import RECORD_FIELDS

__all__ = ["REQUEST_TYPES", "requests_table", "server_metrics_table"]

_STR, _F64, _I64, _BOOL = pa.string(), pa.float64(), pa.int64(), pa.bool_()

#: requests.jsonl fields (tokenload/metrics/records.py) and their types; times are ms or Unix s.
REQUEST_TYPES: dict[str, pa.DataType] = {
    "request_id": _STR,
    "worker": _STR,
    "name": _STR,
    "wall_start": _F64,
    "start_monotonic_s": _F64,
    "response_id": _STR,
    "step": _I64,
    "phase": _STR,
    "status": _STR,
    "failure_class": _STR,
    "http_status": _I64,
    "ttft_ms": _F64,
    "tpot_ms": _F64,
    "e2e_ms": _F64,
    "input_tokens": _I64,
    "requested_input_tokens": _I64,
    "output_tokens": _I64,
    "output_tokens_source": _STR,
    "token_count_diff": _I64,
    "content_chunks": _I64,
    "itl_count": _I64,
    "itl_mean_ms": _F64,
    "itl_p50_ms": _F64,
    "itl_p99_ms": _F64,
    "itl_max_ms": _F64,
    "finish_reason": _STR,
    "detail": _STR,
    "measured_tokens_by_step": _STR,
}


def _infer(name: str, values: list[Any]) -> pa.DataType:
    """For a field this module does not know yet (records gain fields): the narrowest of
    bool, int64, float64, else string (nested values as JSON). An all-null column is typed by
    the project's naming (``*_ms``/``*_s`` times, ``*_tokens``/``*_count`` counts) so that
    it matches a run where it is filled."""
    present = [v for v in values if v is not None]
    if not present:
        if name.endswith(("_ms", "_s")):
            return _F64
        if name.endswith(("_tokens", "_count")):
            return _I64
        return _STR
    if present and all(isinstance(v, bool) for v in present):
        return _BOOL
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return _I64
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return _F64
    return _STR


def _coerce(v: Any, t: pa.DataType) -> Any:
    if v is None:
        return None
    if t == _STR:
        return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
    if t == _F64:
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
    if t == _I64:
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            return int(v)
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if t == _BOOL:
        return v if isinstance(v, bool) else None
    return v


def _pandas_dtype(t: pa.DataType) -> Any:
    # Nullable pandas dtypes: an int column with a gap stays int, not float.
    return {_STR: pd.StringDtype(), _F64: "float64", _I64: pd.Int64Dtype(), _BOOL: pd.BooleanDtype()}[t]


def _frame(columns: dict[str, list[Any]], types: dict[str, pa.DataType]) -> pd.DataFrame:
    data = {}
    for name, t in types.items():
        values = [_coerce(v, t) for v in columns[name]]
        if t == _F64:
            values = [math.nan if v is None else v for v in values]
        data[name] = pd.Series(values, dtype=_pandas_dtype(t))
    return pd.DataFrame(data, columns=list(types))


def requests_table(records: Iterable[dict[str, Any]]) -> tuple[pd.DataFrame, pa.Schema]:
    """One row per record, the known fields first in RECORD_FIELDS order, then any others."""
    recs = list(records)
    names = list(dict.fromkeys([*RECORD_FIELDS, *REQUEST_TYPES]))
    extra = sorted({k for r in recs for k in r} - set(names))
    columns = {n: [r.get(n) for r in recs] for n in [*names, *extra]}
    types = {n: REQUEST_TYPES.get(n) or _infer(n, columns[n]) for n in names}
    types.update({n: _infer(n, columns[n]) for n in extra})
    return _frame(columns, types), pa.schema([(n, t) for n, t in types.items()])


def server_metrics_table(points: Iterable[dict[str, Any]]) -> tuple[pd.DataFrame, pa.Schema]:
    """One row per scrape (failed ones too, their values null): t, target, ok, ms, error, then
    one float column per scalar quantity, and ``hist_<name>_count`` / ``hist_<name>_sum`` per
    histogram (cumulative, as scraped; buckets stay in server_metrics.jsonl)."""
    pts = [p for p in points if "event" not in p]  # a replica's coming or going is not a scrape
    scalars = sorted({k for p in pts for k in (p.get("scalars") or {})})
    hists = sorted({k for p in pts for k in (p.get("histograms") or {})})
    columns: dict[str, list[Any]] = {
        "t": [p.get("t") for p in pts],
        "target": [p.get("target") for p in pts],
        "ok": [bool(p.get("ok")) for p in pts],
        "ms": [p.get("ms") for p in pts],
        "error": [p.get("error") for p in pts],
    }
    types: dict[str, pa.DataType] = {"t": _F64, "target": _STR, "ok": _BOOL, "ms": _F64, "error": _STR}
    for q in scalars:
        columns[q] = [(p.get("scalars") or {}).get(q) for p in pts]
        types[q] = _F64
    for h in hists:
        for part, key in (("count", "c"), ("sum", "s")):
            name = f"hist_{h}_{part}"
            columns[name] = [((p.get("histograms") or {}).get(h) or {}).get(key) for p in pts]
            types[name] = _F64
    return _frame(columns, types), pa.schema([(n, t) for n, t in types.items()])
