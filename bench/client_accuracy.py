"""tokenload's client against a bare Locust client, side by side in one run (issue #10).

Both are one Locust process pinned to one core; the mock server (the other core) records when it
really wrote each chunk (``--trace``), joined per request on the response id (CLOCK_MONOTONIC is
shared by processes on one host). Prints one JSON object with, per client:

* ``accuracy`` at 64 and 256 concurrent streams (tokenload also with its web UI, LLM tab and
  scraper running: ``tokenload_everything_on``) (mock: TTFT 50 ms, a token every 10 ms, 128
  tokens): TTFT error and per-request ITL-median error against the server's writes, p50 and p99;
* ``throughput``: streamed tokens/s the client takes in against an as-fast-as-possible mock
  (512 tokens a stream), and its CPU-ms per 1,000 tokens, counted at the server.

The reference is ``bench/locustfiles/bare_sse.py``: a FastHttpUser reading the SSE body line by
line, with no bookkeeping at all. Targets (issue #10): TTFT error <= 1 ms p50 / 2 ms p99, ITL
<= 0.5 ms p50; >= 80 % of the bare client's tokens/s; <= 25 CPU-ms per 1,000 tokens at 256.

Run: ``.venv/bin/python bench/client_accuracy.py [--quick]``. Medians and ratios of one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from _harness import (
    BIN,
    CLIENT_CPU,
    CPUS,
    ROOT,
    SERVER_CPU,
    get_json,
    machine,
    pct,
    rounded,
    start_target,
    write_results_section,
)
from client_overhead import accuracy as tokenload_accuracy
from client_overhead import throughput as tokenload_throughput

BARE = ROOT / "bench" / "locustfiles" / "bare_sse.py"


def _bare(host: str, out: Path, users: int, run_time: str, tokens: int) -> subprocess.Popen:
    cmd = [
        str(BIN / "locust"), "-f", str(BARE), "--host", host, "--headless", "--only-summary",
        "-u", str(users), "-r", str(max(users, 1)), "-t", run_time, "--stop-timeout", "60",
        "--loglevel", "WARNING",
    ]  # fmt: skip
    env = dict(os.environ, BARE_SSE_OUT=str(out), BARE_SSE_TOKENS=str(tokens))
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, {CLIENT_CPU}),
    )


def bare_accuracy(users: int, seconds: float, tmp: Path) -> dict:
    trace = tmp / f"bare{users}_trace.jsonl"
    out = tmp / f"bare{users}"
    srv = start_target(
        ["-m", "tokenload.mock", "--port", "0", "--trace", str(trace), "--ttft-ms", "50", "--itl-ms", "10",
         "--tokens", "128"]
    )  # fmt: skip
    try:
        proc = _bare(srv.url, out, users, f"{int(seconds)}s", 128)
        proc.wait(timeout=seconds + 120)
    finally:
        srv.stop()
    traces = {f"cmpl-mock{t['n']}": t for t in map(json.loads, trace.read_text().splitlines())}
    ttft_err, itl_err = [], []
    for f in tmp.glob(f"bare{users}.*.jsonl"):
        for r in map(json.loads, f.read_text().splitlines()):
            t = traces.get(r["id"])
            if t is None or not r["chunks"]:
                continue
            ttft_err.append((r["chunks"][0] - t["writes"][0]) * 1000)
            mine = [(b - a) * 1000 for a, b in zip(r["chunks"], r["chunks"][1:], strict=False)]
            theirs = [(b - a) * 1000 for a, b in zip(t["writes"], t["writes"][1:], strict=False)]
            if mine and theirs:
                itl_err.append(statistics.median(mine) - statistics.median(theirs))
    return {
        "concurrent_streams": users,
        "requests": len(ttft_err),
        "ttft_error_ms": {"p50": rounded(pct(ttft_err, 0.5)), "p99": rounded(pct(ttft_err, 0.99))},
        "itl_p50_error_ms": {"p50": rounded(pct(itl_err, 0.5)), "p99": rounded(pct(itl_err, 0.99))},
    }


def bare_throughput(users: int, seconds: float, tmp: Path) -> dict:
    srv = start_target(
        ["-m", "tokenload.mock", "--port", "0", "--trace", str(tmp / "bare_tp.jsonl"), "--ttft-ms", "0",
         "--itl-ms", "0", "--tokens", "512"]
    )  # fmt: skip
    try:
        proc = _bare(srv.url, tmp / "bare_tp", users, f"{int(seconds + 6)}s", 512)
        ps = psutil.Process(proc.pid)
        time.sleep(3.0)
        c0, n0, t0 = ps.cpu_times(), get_json(srv.url + "/mock/stats")["tokens_sent"], time.perf_counter()
        time.sleep(seconds)
        c1, n1, t1 = ps.cpu_times(), get_json(srv.url + "/mock/stats")["tokens_sent"], time.perf_counter()
        proc.wait(timeout=120)
    finally:
        srv.stop()
    tokens, cpu = n1 - n0, (c1.user + c1.system) - (c0.user + c0.system)
    return {
        "concurrent_streams": users,
        "tokens_per_s": round(tokens / (t1 - t0)),
        "client_cpu_share": round(cpu / (t1 - t0), 3),
        "client_cpu_ms_per_1000_tokens": round(cpu / tokens * 1e6, 2) if tokens else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="shorter windows (a smoke run)")
    args = p.parse_args()
    window = 4.0 if args.quick else 10.0
    acc_time = 6.0 if args.quick else 12.0
    with tempfile.TemporaryDirectory(prefix="tokenload-accuracy-") as d:
        tmp = Path(d)
        result: dict = {"machine": {"cpus": len(CPUS), "client_cpu": CLIENT_CPU, "server_cpu": SERVER_CPU}}
        for users in (64, 256):
            tl_acc = tokenload_accuracy(users, acc_time, tmp)
            tl_all = tokenload_accuracy(users, acc_time, tmp, everything_on=True)
            bare_acc = bare_accuracy(users, acc_time, tmp)
            tl_tp = tokenload_throughput(users, window, tmp)
            bare_tp = bare_throughput(users, window, tmp)
            result[f"streams_{users}"] = {
                "tokenload": {"accuracy": tl_acc, "throughput": tl_tp},
                # the same with the web UI's LLM tab polled, the scraper and the records writer on
                "tokenload_everything_on": {"accuracy": tl_all},
                "bare_locust": {"accuracy": bare_acc, "throughput": bare_tp},
                "tokens_per_s_ratio": round(tl_tp["tokens_per_s"] / bare_tp["tokens_per_s"], 3)
                if bare_tp["tokens_per_s"]
                else None,
            }
        # Past one core's reach (issue #16): the step must be flagged with its coalesced share.
        result["streams_512"] = {"tokenload": {"accuracy": tokenload_accuracy(512, acc_time, tmp)}}
    print(json.dumps(result, indent=2))
    if not args.quick:
        write_results_section("client", results_markdown(result))


def results_markdown(result: dict) -> str:
    """The table of bench/RESULTS.md's "Client" section, against issue #10's targets."""
    rows = []
    for users in (64, 256):
        r = result[f"streams_{users}"]
        for who, label in (("tokenload", "tokenload"), ("bare_locust", "bare Locust FastHttpUser")):
            a, t = r[who]["accuracy"], r[who]["throughput"]
            ttft, cpu = a["ttft_error_ms"], t["client_cpu_ms_per_1000_tokens"]
            rows.append(
                f"| {label} | {users} | {ttft['p50']} / {ttft['p99']} | {a['itl_p50_error_ms']['p50']} | "
                f"{t['tokens_per_s']:,} | {cpu} |"
            )
        a = r["tokenload_everything_on"]["accuracy"]
        rows.append(
            f"| tokenload, web UI + LLM tab + scraper on | {users} | {a['ttft_error_ms']['p50']} / "
            f"{a['ttft_error_ms']['p99']} | {a['itl_p50_error_ms']['p50']} | | |"
        )
        rows.append(f"| tokenload / bare tokens/s | {users} | | | {r['tokens_per_s_ratio']} | |")
    return "\n".join(
        [
            "## Client accuracy and cost (issue #10)",
            "",
            "`.venv/bin/python bench/client_accuracy.py` on " + machine() + ": the mock on one core",
            "(TTFT 50 ms, a token every 10 ms, 128 tokens; `--trace` of its own writes as the truth),",
            "the client pinned to the other. Throughput: against an as-fast-as-possible mock (512 tokens",
            "a stream); the mock's core is then the limit, so CPU-ms per 1,000 tokens is the client's cost.",
            "Targets: TTFT error <= 1 ms p50 / 2 ms p99, ITL <= 0.5 ms p50, >= 0.8 of the bare client's",
            "tokens/s, <= 25 CPU-ms per 1,000 tokens. tokenload dates received bytes by the kernel's",
            "receive stamp (SO_TIMESTAMPNS, `tokenload/rxstamp.py`), the bare client by its read.",
            "",
            "| client | streams | TTFT error p50 / p99 (ms) | ITL error p50 (ms) | tokens/s "
            "| CPU-ms / 1,000 tokens |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            "What the client knows of its own error, per run: the share of first tokens read behind",
            "later ones whose stamp they share (`coalesced_first_share`; above 1 % of them possibly later",
            "than 10 ms, (k - 1) x TPOT, the step is flagged `client_bound`), the TTFT error p99 of the",
            "other requests, and the run's flags:",
            "",
            "| streams | TTFT error p50 / p99 (ms) | coalesced first reads "
            "| TTFT error p99, not coalesced (ms) | client CPU share max | flags | client_bound by |",
            "|---|---|---|---|---|---|---|",
            *(
                _own_error_row(users, result[f"streams_{users}"]["tokenload"]["accuracy"])
                for users in (64, 256, 512)
            ),
        ]
    )


def _own_error_row(users: int, a: dict) -> str:
    ttft, flags = a["ttft_error_ms"], ", ".join(a["flags"] or []) or "-"
    bound = ", ".join(a.get("bound_by") or []) or "-"
    return (
        f"| {users} | {ttft['p50']} / {ttft['p99']} | {a['coalesced_first_share']} | "
        f"{a['ttft_error_ms_not_coalesced_p99']} | {a['client_cpu_share_max']} | {flags} | {bound} |"
    )


if __name__ == "__main__":
    main()
