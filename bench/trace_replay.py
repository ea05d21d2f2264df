"""Trace replay against the emulator: how close to its row's time each request starts, whether
every row was sent with its exact input length, and the prefix reuse the server saw against what
the trace's hash_ids imply. Prints JSON.

A Mooncake-format trace made here (Poisson arrivals at ``--rate``; each row 0-3 blocks of one of
12 shared prefixes, then 1-2 blocks of its own, the last partial) is replayed by ``tokenload
sweep --shape trace`` with ``--workers`` workers against a fresh emulator with prefix caching.
Start error = the request's ``send_lag_ms`` (sent minus its row's time, on the worker's clock).
The target (issue #18): start error p99 within 5 ms with 2 workers, exact input lengths, the
served prefix hit rate within 5 points of the implied one.

    python bench/trace_replay.py [--rows 3000] [--rate 60] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _harness import CLIENT_CPU, machine, pct, rounded, run_sweep, start_target, write_results_section  # noqa: E402

BLOCK = 64


def make_trace(path: Path, rows: int, rate: float, seed: int = 0) -> None:
    rng = random.Random(seed)
    t, lines = 0.0, []
    for i in range(rows):
        t += rng.expovariate(rate)
        group = rng.randrange(12)
        shared = [group * 100 + k for k in range(rng.randint(0, 3))]
        own = [10**6 + i * 4 + k for k in range(rng.randint(1, 2))]
        hashes = shared + own
        n_in = (len(hashes) - 1) * BLOCK + rng.randint(8, BLOCK)
        row = {
            "timestamp": round(t * 1000),
            "input_length": n_in,
            "output_length": rng.randint(2, 24),
            "hash_ids": hashes,
        }
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")


def _replay(trace: Path, run_dir: Path, workers: int, pinned: bool) -> dict:
    """One replay: the sweep's own emulator sharing every core with the load generator, or
    (``pinned``) the emulator on one core and the master and its workers on the other."""
    args = ["--shape", "trace", "--trace", str(trace), "--trace-block-size", str(BLOCK), "--warmup", "0",
            "--workers", str(workers)]  # fmt: skip
    if not pinned:
        summary, wall = run_sweep(run_dir, [*args, "--sim-args=--enable-prefix-caching"])
    else:
        srv = start_target(["-m", "tokenload.sim", "--port", "0", "--enable-prefix-caching"])
        try:
            summary, wall = run_sweep(run_dir, [*args, "--host", srv.url], cpus={CLIENT_CPU})
        finally:
            srv.stop()
    recs = [
        json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()
    ]
    ok = [r for r in recs if r["status"] == "ok"]
    lags = [r["send_lag_ms"] for r in ok]
    t = summary["trace"]
    return {
        "placement": "server on its own core" if pinned else "all processes on every core",
        "rows": t["rows"],
        "sent": len(recs),
        "ok": len(ok),
        "exact_input_share": rounded(
            sum(r["input_tokens"] == r["requested_input_tokens"] for r in ok) / max(1, len(ok)), 4
        ),
        "start_error_ms": {
            "p50": rounded(pct(lags, 0.5), 2),
            "p99": rounded(pct(lags, 0.99), 2),
            "max": rounded(max(lags), 1),
        },
        "implied_prefix_hit_rate": rounded(t["implied_prefix_hit_rate"], 4),
        "server_prefix_hit_rate": rounded(t["server_prefix_hit_rate"], 4),
        "flags": summary["steps"][0]["flags"],
        "wall_s": round(wall, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--rate", type=float, default=60.0)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="trace-bench-") as tmp:
        trace = Path(tmp) / "mooncake.jsonl"
        make_trace(trace, args.rows, args.rate)
        for pinned in (False, True):
            runs.append(_replay(trace, Path(tmp) / f"run-{int(pinned)}", args.workers, pinned))
    result = {
        "bench": "trace_replay",
        "config": vars(args),
        "runs": runs,
        "target": "start error p99 <= 5 ms; every row sent, exact lengths; hit rates within 5 points",
    }
    print(json.dumps(result, indent=2))
    write_results_section("trace_replay", results_markdown(result, args, " ".join(sys.argv[1:])))


def results_markdown(result: dict, args: argparse.Namespace, argv: str) -> str:
    """bench/RESULTS.md's "Trace replay" section: one row per placement."""
    rows = []
    for r in result["runs"]:
        e = r["start_error_ms"]
        hits = f"{100 * r['implied_prefix_hit_rate']:.1f} %/{100 * r['server_prefix_hit_rate']:.1f} %"
        rows.append(
            f"| {r['placement']} | {r['rows']} | {r['sent']} | {100 * r['exact_input_share']:.1f} % "
            f"| {e['p50']} / {e['p99']} / {e['max']} | {hits} |"
        )
    return "\n".join(
        [
            "## Trace replay against the emulator (issue #18)",
            "",
            f"`python bench/trace_replay.py {argv}`".replace(" `", "`") + f" on {machine()}:",
            f"a {args.rows}-row Mooncake-format trace (Poisson, {args.rate:g} req/s, shared {BLOCK}-token",
            f"prefix blocks) replayed with {args.workers} workers against `tokenload sim",
            "--enable-prefix-caching`, twice: the sweep's own emulator with the master and workers on",
            "every core, then the emulator on one core and the load generator on the other (a load",
            "generator and its server do not share a machine in a real test). Start error = sent minus",
            "the row's time (`send_lag_ms`).",
            "",
            "| placement | rows | sent | exact input lengths | start error p50/p99/max ms "
            "| prefix hits implied/served |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )


if __name__ == "__main__":
    main()
