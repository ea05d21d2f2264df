"""End to end: plain `locust -f locustfiles/...` against a server with known timing.

The mock records when it wrote every chunk; the client's TTFT/TPOT/ITL must match the
server's own timing within 2 ms at p50, and every request is counted exactly once.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.conftest import locust_request_count, read_records, run_locust
from tokenload.metrics.definitions import COALESCED_FIRST_SHARE, coalesced_first_is_late
from tokenload.metrics.intervals import share_exceeds


@pytest.mark.parametrize("locustfile", ["locustfiles/chat.py", "locustfiles/completions.py"])
def test_timing_matches_server_and_counts_agree(start_mock, tmp_path: Path, locustfile: str) -> None:
    mock = start_mock("--ttft-ms", "40", "--itl-ms", "8")
    run = run_locust(
        locustfile, mock.url, tmp_path / "run", "-u", "8", "-r", "50", "-t", "4s", "--output-tokens", "24"
    )
    assert run.returncode == 0, run.output[-3000:]
    records = read_records(run.run_dir)
    ok = [r for r in records if r["status"] == "ok"]
    assert len(ok) == len(records) > 20
    traces = mock.traces()
    # Every request the server saw is a record, and Locust counted each once.
    assert len(traces) == len(records) == locust_request_count(run.output) == mock.stats()["requests_seen"]

    server_ttft = [(t["writes"][0] - t["arrival"]) * 1000 for t in traces]
    server_itl = [(b - a) * 1000 for t in traces for a, b in zip(t["writes"], t["writes"][1:], strict=False)]
    server_tpot = [(t["end"] - t["writes"][0]) * 1000 / (len(t["writes"]) - 1) for t in traces]
    client_ttft = [r["ttft_ms"] for r in ok]
    client_tpot = [r["tpot_ms"] for r in ok]
    client_itl_p50 = statistics.median(r["itl_p50_ms"] for r in ok)
    assert abs(statistics.median(client_ttft) - statistics.median(server_ttft)) < 2.0
    assert abs(statistics.median(client_tpot) - statistics.median(server_tpot)) < 2.0
    assert abs(client_itl_p50 - statistics.median(server_itl)) < 2.0
    # Per request, joined on the response id: the client never sees a token before it was written,
    # and sees it within 2 ms at p50 (CLOCK_MONOTONIC is shared by processes on one host).
    by_id = {f"{'chatcmpl' if 'chat' in locustfile else 'cmpl'}-mock{t['n']}": t for t in traces}
    lag_ms = [
        (r["start_monotonic_s"] + r["ttft_ms"] / 1000 - by_id[r["response_id"]]["writes"][0]) * 1000
        for r in ok
    ]
    assert min(lag_ms) > -0.01
    assert statistics.median(lag_ms) < 2.0
    assert all(
        r["output_tokens"] == 24 and r["output_tokens_source"] == "usage" and r["token_count_diff"] == 0
        for r in ok
    )
    # The LLM table was printed, and Locust's own --csv/--html carry it too (see test_outputs).
    assert "LLM metrics" in run.output and "TTFT p50" in run.output


def test_multi_token_chunks_count_as_k_tokens(start_mock, tmp_path: Path) -> None:
    mock = start_mock("--ttft-ms", "20", "--itl-ms", "12", "--tokens-per-chunk", "3")
    run = run_locust(
        "locustfiles/completions.py",
        mock.url,
        tmp_path / "run",
        "-u",
        "2",
        "-t",
        "2s",
        "--output-tokens",
        "30",
    )
    assert run.returncode == 0, run.output[-3000:]
    ok = [r for r in read_records(run.run_dir) if r["status"] == "ok"]
    assert ok
    for r in ok:
        assert r["content_chunks"] == 10 and r["output_tokens"] == 30
        # 9 gaps of ~12 ms, each carrying 3 tokens -> 27 ITL values of ~4 ms.
        assert r["itl_count"] == 27
    # The values: a request the client happened to read in one burst (a stalled moment of a
    # shared machine) has gaps of ~0, so the values are judged over the requests' median.
    assert statistics.median(r["itl_p50_ms"] for r in ok) == pytest.approx(4.0, abs=1.0)


def test_a_first_token_read_behind_later_ones_is_known_to_be_late(start_mock, tmp_path: Path) -> None:
    # A reader that falls behind takes the first token with later ones. Read one event at a time,
    # it is still dated by its own packet unless the kernel merged the queued packets; then the
    # first token shares the next one's stamp, and the record says it may be late.
    mock = start_mock("--ttft-ms", "30", "--itl-ms", "5")
    run = run_locust(
        "tests/locustfiles/stalled_reader.py", mock.url, tmp_path / "run", "-u", "64", "-r", "200",
        "-t", "6s", "--output-tokens", "32",
    )  # fmt: skip
    assert run.returncode == 0, run.output[-3000:]
    by_id = {f"cmpl-mock{t['n']}": t for t in mock.traces()}
    late, known, maybe_late = [], [], []
    for r in read_records(run.run_dir):
        if r["status"] != "ok" or r["first_read_coalesced"] is None:
            continue
        writes = by_id[r["response_id"]]["writes"]
        error_ms = (r["start_monotonic_s"] + r["ttft_ms"] / 1000 - writes[0]) * 1000
        # How long after the first token the mock really wrote the second: 5 ms on schedule, less
        # when a busy machine delayed the mock and it wrote both at once.
        gap_ms = (writes[1] - writes[0]) * 1000 if len(writes) > 1 else None
        known.append((r["first_read_coalesced"], error_ms, gap_ms))
        maybe_late.append(
            coalesced_first_is_late(r["first_read_coalesced"], r["first_read_events"], r["tpot_ms"])
        )
    assert len(known) > 200
    # Not flagged: dated by its own packet, within the client's 2 ms accuracy target (a rare
    # read that took the first token alone yet late is allowed for: 1 %).
    clean = [e for c, e, _ in known if not c]
    assert sum(e < 2.0 for e in clean) >= 0.99 * len(clean), sorted(clean)[-10:]
    # The first tokens dated late by more than that are flagged, and the flagged ones are late.
    # Measured on a 2-core VM over four runs: 20 of 21, 48 of 49, 47 of 47 and 42 of 42 late ones
    # flagged, every flagged one late; 90 % leaves room for a noisy machine, not for a detector
    # that guesses (flagging at random would catch about 3 % of them).
    late = [c for c, e, _ in known if e >= 2.0]
    assert sum(late) >= 0.9 * len(late), (sum(late), len(late))
    # A flagged one is dated by a later packet: late by as much as the mock left between its
    # first two writes, so it is judged where the mock kept its schedule (2 ms apart or more).
    flagged = [e for c, e, gap in known if c and gap is not None and gap >= 2.0]
    assert sum(e >= 2.0 for e in flagged) >= 0.9 * len(flagged), sorted(flagged)[:10]
    summary = json.loads((run.run_dir / "summary.json").read_text())
    step = summary["steps"][-1]
    # Flagged exactly when the share of first reads that may be dated later than the client's
    # tolerance ((k - 1) x TPOT > 10 ms) is above 1 % beyond sampling noise (how often the kernel
    # merges queued packets is its own business); the flag then makes the step client_bound. The
    # reader stalls 25 ms at a time, 5 tokens' gaps: such reads happen here.
    over = sum(maybe_late)
    coalesced = sum(c for c, _, _ in known)
    # How often the kernel merges queued packets is its own business: the four runs quoted above
    # had 21-49 late first reads each, while a 2-core VM on 2026-12-06 merged 10, then 3 and 2,
    # of 1,920. The late branch is asserted only where the kernel merged 20 or more.
    if coalesced >= 20:
        assert over > 0, (coalesced, len(known))
    above = share_exceeds(over, len(known), COALESCED_FIRST_SHARE)
    assert ("coalesced_first_late_share" in step["client"]["bound_by"]) == above, (over, len(known))
    assert not above or "client_bound" in step["flags"]
