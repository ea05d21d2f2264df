"""Parquet tables with stable column types (an all-null column keeps its type), written and read
back through files; and secrets kept out of the configuration a report shows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenload.metrics.records import RECORD_FIELDS
from tokenload.report.frames import REQUEST_TYPES, requests_table, server_metrics_table
from tokenload.report.redact import REDACTED, is_secret_key, redact

pytestmark = pytest.mark.simulated_time


def _write_read(tmp_path: Path, frame, schema) -> pa.Table:
    path = tmp_path / "t.parquet"
    frame.to_parquet(path, engine="pyarrow", schema=schema, index=False)
    return pq.read_table(path)


def test_request_columns_keep_their_types_when_all_null(tmp_path: Path) -> None:
    ok = {f: None for f in RECORD_FIELDS}
    ok.update(request_id="w-1", step=0, phase="measure", status="ok", ttft_ms=12.5, output_tokens=64)
    failed = {**ok, "request_id": "w-2", "status": "failed", "failure_class": "http_5xx", "http_status": 503}
    only_ok = _write_read(tmp_path, *requests_table([ok]))
    both = _write_read(tmp_path, *requests_table([ok, failed]))
    empty = _write_read(tmp_path, *requests_table([]))
    # The same schema whether a column is filled, all-null or the table is empty.
    assert only_ok.schema == both.schema == empty.schema
    for name, t in REQUEST_TYPES.items():
        assert only_ok.schema.field(name).type == t, name
    assert only_ok.column_names[: len(RECORD_FIELDS)] == list(RECORD_FIELDS)
    assert both.column("http_status").to_pylist() == [None, 503]
    assert both.column("failure_class").to_pylist() == [None, "http_5xx"]


def test_unknown_request_fields_are_kept_with_inferred_types(tmp_path: Path) -> None:
    recs = [
        {
            "request_id": "a",
            "new_count": 3,
            "new_ratio": 0.5,
            "new_flag": True,
            "tags": ["x"],
            "later_ms": None,
        },
        {
            "request_id": "b",
            "new_count": None,
            "new_ratio": 1,
            "new_flag": False,
            "tags": None,
            "later_ms": None,
        },
    ]
    t = _write_read(tmp_path, *requests_table(recs))
    types = {f.name: f.type for f in t.schema}
    assert types["new_count"] == pa.int64() and types["new_ratio"] == pa.float64()
    assert types["new_flag"] == pa.bool_() and types["tags"] == pa.string()
    assert types["later_ms"] == pa.float64()  # all-null: typed by its name
    assert t.column("tags").to_pylist() == ['["x"]', None]


def test_server_metrics_flatten_one_row_per_scrape(tmp_path: Path) -> None:
    points = [
        {"t": 1.0, "target": "u", "ok": True, "ms": 3.0, "scalars": {"kv_cache_usage_ratio": 0.5},
         "histograms": {"ttft_s": {"b": [[0.1, 1.0], ["+Inf", 2.0]], "s": 0.3, "c": 2.0}}},
        {"t": 2.0, "target": "u", "ok": False, "ms": 800.0, "error": "timeout"},
        {"t": 3.0, "target": "u", "ok": True, "ms": 2.0,
         "scalars": {"kv_cache_usage_ratio": 0.7, "preemptions": 1}},
    ]  # fmt: skip
    t = _write_read(tmp_path, *server_metrics_table(points))
    assert t.num_rows == 3
    assert t.column_names[:5] == ["t", "target", "ok", "ms", "error"]
    assert t.column("kv_cache_usage_ratio").to_pylist() == [0.5, None, 0.7]
    assert t.column("preemptions").to_pylist() == [None, None, 1.0]
    assert t.column("hist_ttft_s_count").to_pylist() == [2.0, None, None]
    assert t.column("hist_ttft_s_sum").to_pylist() == [0.3, None, None]
    assert t.column("ok").to_pylist() == [True, False, True]
    assert t.schema.field("error").type == pa.string()


def test_secrets_are_redacted_but_token_counts_are_not() -> None:
    for key in ("api_key", "OPENAI_API_KEY", "hf_token", "token", "Authorization", "password", "x-api-key"):
        assert is_secret_key(key), key
    for key in ("api_key_env", "api_key_set", "prompt_tokens", "output_tokens", "max_tokens", "model"):
        assert not is_secret_key(key), key
    cfg = {
        "api_key_env": "OPENAI_API_KEY",
        "api_key_set": True,
        "prompt_tokens": "128",
        "headers": {"Authorization": "Bearer sk-123", "accept": "json"},
        "metrics_urls": ["http://user:hunter2@host:8000/metrics"],
        "api_key": None,
    }
    out = redact(cfg)
    assert (
        out["api_key_env"] == "OPENAI_API_KEY"
        and out["api_key_set"] is True
        and out["prompt_tokens"] == "128"
    )
    assert out["headers"] == {"Authorization": REDACTED, "accept": "json"}
    assert out["metrics_urls"] == [f"http://{REDACTED}@host:8000/metrics"]
    assert "hunter2" not in repr(out) and "sk-123" not in repr(out)
