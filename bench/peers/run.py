"""Side-by-side peer benchmarks (issue #9 part 4): tokenload, a bare Locust client, guidellm,
aiperf and inference-perf measured against the same ground truth.

The mock server (``python -m tokenload.mock --trace``, pinned to one core) records when it really
wrote each chunk, on CLOCK_MONOTONIC; each client runs pinned to the other core with the same
workload (streaming ``/v1/completions``, a fixed number of concurrent streams, 128 output
tokens, a 32-token prompt). Per client and concurrency it reports

* the TTFT error (client's first-token receive time minus the server's first write) at p50/p99,
  and the ITL error (per request mean gap; per-request median and per chunk where the client
  exports chunk times), joined per request on the response id;
* client CPU milliseconds per 1,000 streamed tokens (its whole process tree, children included,
  over a steady window; tokens counted at the server);
* the streamed tokens/s one client core sustains against an as-fast-as-possible mock.

Each peer lives in its own virtual environment, ``bench/peers/.venvs/<tool>`` (created with
plain venv + pip from PyPI, reused while the pinned version is installed); tokenizers are built
locally. Prints one JSON object and rewrites the "Peers" section of ``bench/RESULTS.md``.

Run: ``make bench-peers`` or ``.venv/bin/python bench/peers/run.py [--quick] [--tools a,b]
[--concurrency 64,256]``. Ratios between clients on one machine are the claim, not the
absolute times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: _harness, client_overhead, client_accuracy

from _harness import (  # noqa: E402
    CLIENT_CPU,
    CPUS,
    RESULTS,
    ROOT,
    SERVER_CPU,
    start_target,
    write_results_section,
)
from localtok import CACHE_NAME, build  # noqa: E402
from measure import (  # noqa: E402
    accuracy_stats,
    load_trace,
    mean_in_flight,
    run_window,
    wall_to_monotonic_offset,
)
from tools import PEERS, TOOLS, Ctx, Tool, ensure_venv  # noqa: E402

BEGIN, END = "<!-- peers:begin -->", "<!-- peers:end -->"
ACC_MOCK = ["--ttft-ms", "50", "--itl-ms", "10", "--tokens", "128"]
TP_MOCK = ["--ttft-ms", "0", "--itl-ms", "0", "--tokens", "512"]
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "server_cpu": SERVER_CPU,
        "client_cpu": CLIENT_CPU,
        "cpus_usable": len(CPUS),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def _tree_version() -> str:
    """The commit this tree is at (read only), with '+changes' when files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "this tree"
    return f"tree {head}{'+changes' if dirty else ''}" if head else "this tree"


def _tool_env(hf_cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(OFFLINE, HF_HUB_CACHE=str(hf_cache), HF_HOME=str(hf_cache.parent / "hf-home"))
    return env


def _mock(tmp: Path, tag: str, args: list[str]):
    trace = tmp / f"{tag}.trace.jsonl"
    return start_target(["-m", "tokenload.mock", "--port", "0", "--trace", str(trace), *args]), trace


def accuracy_run(tool: Tool, users: int, cfg: dict, tmp: Path, shared: dict, attempt: int = 0) -> dict:
    tag = f"{tool.name}-acc{users}" + (f"-retry{attempt}" if attempt else "")
    srv, trace_path = _mock(tmp, tag, ACC_MOCK)
    ctx = Ctx(
        url=srv.url,
        users=users,
        tokens=128,
        prompt_tokens=32,
        duration_s=cfg["duration_s"],
        throughput=False,
        out=tmp / tag,
        client_cpu=CLIENT_CPU,
        **shared,
    )
    try:
        ctx.wall_offset = wall_to_monotonic_offset()
        w = run_window(
            lambda: tool.launch(ctx),
            srv.url + "/mock/stats",
            cores=(CLIENT_CPU, SERVER_CPU),
            server_pid=srv.proc.pid,
            settle_s=cfg["settle_s"],
            window_s=cfg["window_s"],
            hard_timeout_s=cfg["duration_s"] + 150,
            stop_after_window=False,
        )
    finally:
        srv.stop()
    url = "http://127.0.0.1:$PORT"
    cmd = [c.replace(srv.url, url) for c in tool.command(ctx)]
    conf = tool.config(ctx)
    result = {"command": cmd, "config": json.loads(json.dumps(conf).replace(srv.url, url)) if conf else None}
    try:
        recs = tool.records(ctx)
    except Exception as e:  # a report that did not parse is a finding, not a crash
        recs = []
        result["records_error"] = f"{type(e).__name__}: {e}"
    trace = load_trace(trace_path)
    result.update(accuracy_stats(recs, trace, since=w.t0))
    result["server_in_flight_mean"] = _round(mean_in_flight(trace, w.t0, w.t1), 1)
    result["cost"] = w.summary()
    result["wall_s"] = round(w.wall_s, 1)
    if not recs or w.rc not in (0, None):
        result["client_log_tail"] = tool.log_tail(ctx)
    return result


def throughput_run(tool: Tool, users: int, cfg: dict, tmp: Path, shared: dict, attempt: int = 0) -> dict:
    tag = f"{tool.name}-tp{users}" + (f"-retry{attempt}" if attempt else "")
    srv, _ = _mock(tmp, tag, TP_MOCK)
    own_bound = tool.pip is None  # the Locust clients end by -t; the peers are stopped after the window
    ctx = Ctx(
        url=srv.url,
        users=users,
        tokens=512,
        prompt_tokens=32,
        duration_s=cfg["settle_s"] + cfg["window_s"] + 10 if own_bound else 120,
        throughput=True,
        out=tmp / tag,
        client_cpu=CLIENT_CPU,
        **shared,
    )
    try:
        w = run_window(
            lambda: tool.launch(ctx),
            srv.url + "/mock/stats",
            cores=(CLIENT_CPU, SERVER_CPU),
            server_pid=srv.proc.pid,
            settle_s=cfg["settle_s"],
            window_s=cfg["window_s"],
            hard_timeout_s=cfg["settle_s"] + cfg["window_s"] + 120,
            stop_after_window=True,
        )
    finally:
        srv.stop()
    result = {**w.summary(), "wall_s": round(w.wall_s, 1)}
    if w.tokens is None:
        result["client_log_tail"] = tool.log_tail(ctx)
    return result


CONTENDED = 0.10  # share of a core busy with other work above which a run is repeated (once)


def _contention(cost: dict) -> float:
    return max(cost.get("client_core_other_share") or 0.0, cost.get("server_core_other_share") or 0.0)


def measured(run: Callable[..., dict], retry_until: float, *args: object) -> dict:
    """One run; if other work on the machine took more than CONTENDED of the client's or the
    mock's core over its window, one more try while time allows, keeping the less contended."""
    try:
        r = run(*args)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    first = _contention(r.get("cost", r))
    if first <= CONTENDED or time.time() > retry_until:
        return r
    print(f"[peers]   other load {first:.2f} of a core during the window: once more", file=sys.stderr)
    try:
        again = run(*args, 1)
    except Exception:
        return r
    second = _contention(again.get("cost", again))
    best = again if second < first else r
    best["contention_retry"] = {
        "other_load_first": first,
        "other_load_second": second,
        "kept": "second" if best is again else "first",
    }
    return best


def _portable(text: str, tmp: Path) -> str:
    return text.replace(str(tmp), "$TMP").replace(str(ROOT) + "/", "")


def _round(v: float | None, nd: int) -> float | None:
    return None if v is None else round(v, nd)


def _abs(v: float | None) -> float | None:
    return None if v is None else abs(v)


def compare(tools: dict, concurrency: list[int]) -> dict:
    """tokenload against the best peer (guidellm, aiperf, inference-perf) and the bare client."""
    out: dict = {}

    def acc(key: str, stat: str) -> Callable[[dict, int], float | None]:
        def get(entry: dict, users: int) -> float | None:
            a = entry.get("accuracy", {}).get(str(users))
            if not a or "error" in a or not a.get("requests_joined"):
                return None
            return _abs(a[key][stat]) if stat else a["cost"]["client_cpu_ms_per_1000_tokens"]

        return get

    def saturated(entry: dict, users: int) -> float | None:
        return (entry.get("throughput", {}).get(str(users)) or {}).get("client_cpu_ms_per_1000_tokens")

    metrics = {
        "ttft_error_p50_ms": acc("ttft_error_ms", "p50"),
        "ttft_error_p99_ms": acc("ttft_error_ms", "p99"),
        "itl_mean_error_p50_ms": acc("itl_request_mean_error_ms", "p50"),
        "itl_mean_error_p99_ms": acc("itl_request_mean_error_ms", "p99"),
        "cpu_ms_per_1000_tokens": acc("cost", ""),
        "cpu_ms_per_1000_tokens_saturated": saturated,
    }
    peers = [t.name for t in PEERS]
    for users in concurrency:
        row: dict = {}
        for key, get in metrics.items():
            vals = {}
            for name in [*peers, "tokenload", "bare_locust"]:
                v = get(tools.get(name, {}), users)
                if v is not None:
                    vals[name] = v
            best = min((p for p in peers if p in vals), key=lambda p: vals[p], default=None)
            tl = vals.get("tokenload")
            row[key] = {
                "tokenload": _round(tl, 3),
                "best_peer": best,
                "best_peer_value": _round(vals.get(best), 3) if best else None,
                "tokenload_over_best_peer": _round(tl / vals[best], 3)
                if best and tl is not None and vals[best]
                else None,
                "tokenload_at_or_below_best_peer": (tl <= vals[best]) if best and tl is not None else None,
                "bare_locust": _round(vals.get("bare_locust"), 3),
            }
        out[str(users)] = row
    tp = {n: t.get("throughput", {}).get("highest_tokens_per_s") for n, t in tools.items()}
    best_tp = max((p for p in peers if tp.get(p)), key=lambda p: tp[p], default=None)
    out["highest_tokens_per_s"] = {
        "tokenload": tp.get("tokenload"),
        "best_peer": best_tp,
        "best_peer_value": tp.get(best_tp) if best_tp else None,
        "tokenload_over_best_peer": _round(tp["tokenload"] / tp[best_tp], 2)
        if best_tp and tp.get("tokenload")
        else None,
        "bare_locust": tp.get("bare_locust"),
        "tokenload_over_bare_locust": _round(tp["tokenload"] / tp["bare_locust"], 3)
        if tp.get("tokenload") and tp.get("bare_locust")
        else None,
    }
    return out


def _f(v: float | None, nd: int = 1) -> str:
    return "n/a" if v is None else f"{v:+.{nd}f}" if nd >= 0 else str(v)


def _pair(d: dict | None, nd: int = 1) -> str:
    if not d:
        return "n/a"
    return f"{_f(d.get('p50'), nd)} / {_f(d.get('p99'), nd)}"


def _num(v: float | None, nd: int = 1) -> str:
    return "n/a" if v is None else f"{v:,.{nd}f}"


def markdown(result: dict) -> str:
    m, wl = result["machine"], result["workload"]
    lines = [
        BEGIN,
        "## Peers",
        "",
        f"Measured {result['date']} by `bench/peers/run.py`{' --quick' if result['quick'] else ''} "
        f"(`make bench-peers`). Machine: {m['nproc']} CPUs ({m['cpu_model']}), Python {m['python']}, "
        f"Linux {m['kernel']}; the mock on CPU {m['server_cpu']}, each client pinned to CPU "
        f"{m['client_cpu']}. "
        "Ratios between clients are the claim, not the absolute times.",
        "",
        f"Workload: {wl['description']}",
        "",
        "Errors are client minus server (ms), joined per request on the response id: TTFT = the "
        "client's first-chunk receive time minus the server's first write; ITL (mean) = the client's "
        "per-request mean gap minus the server's; per chunk = each gap's error, where the client "
        "exports per-chunk times; last chunk = the last content chunk's receive time minus the "
        "server's last write. CPU = the client's whole process tree over a steady window, per "
        "1,000 tokens the server streamed in that window. 'Other load' is the share of the client's "
        "(the mock's) core busy with anything but the client (the mock) over the window: other work "
        "on the machine; 'mock core busy' near 1.0 means the mock, not the client, may have been the "
        "limit. "
        f"Load average at start / end: {m.get('loadavg_start')} / {m.get('loadavg_end')}.",
        "",
    ]
    tools = result["tools"]
    for users in result["concurrency"]:
        lines += [
            f"### {users} concurrent streams (mock: TTFT 50 ms, a token every 10 ms, 128 tokens)",
            "",
            "| client | version | requests: steady (joined of served) | server in flight | "
            "TTFT error p50 / p99 | ITL error (request mean) p50 / p99 | ITL error per chunk p50 / p99 | "
            "last-chunk error p50 / p99 | CPU-ms per 1,000 tokens | other load: client / mock core |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, t in tools.items():
            acc = t.get("accuracy", {}).get(str(users))
            ver = t.get("version", "")
            if not acc or "error" in acc:
                why = (acc or {}).get("error") or t.get("install", {}).get("error") or "not run"
                lines.append(f"| {name} | {ver} | {why.splitlines()[0][:120]} | | | | | | | |")
                continue
            lines.append(
                f"| {name} | {ver} | {acc['requests_steady']} ({acc['requests_joined']} of "
                f"{acc['requests_server']}) | "
                f"{_num(acc.get('server_in_flight_mean'))} | {_pair(acc['ttft_error_ms'])} | "
                f"{_pair(acc['itl_request_mean_error_ms'], 2)} | "
                f"{_pair(acc.get('itl_per_chunk_error_ms'), 2)} | {_pair(acc.get('last_chunk_error_ms'))} | "
                f"{_num(acc['cost']['client_cpu_ms_per_1000_tokens'])} | "
                f"{_num(acc['cost'].get('client_core_other_share'), 2)} / "
                f"{_num(acc['cost'].get('server_core_other_share'), 2)} |"
            )
        lines.append("")
    lines += [
        "### Streamed tokens/s one client core sustains (mock: no delays, 512 tokens a stream)",
        "",
        "| client | "
        + " | ".join(
            f"tokens/s @{u} (client CPU share, CPU-ms/1k tok, mock core busy)" for u in result["concurrency"]
        )
        + " | highest |",
        "|---|" + "---|" * (len(result["concurrency"]) + 1),
    ]
    for name, t in tools.items():
        tp = t.get("throughput", {})
        cells = []
        for u in result["concurrency"]:
            r = tp.get(str(u))
            if not r or r.get("tokens_per_s") is None:
                cells.append((r or {}).get("error", "n/a").splitlines()[0][:80] if r else "n/a")
            else:
                cost = _num(r["client_cpu_ms_per_1000_tokens"])
                srv = _num(r.get("server_core_busy_share"), 2)
                cells.append(f"{r['tokens_per_s']:,} ({r['client_cpu_share']}, {cost}, {srv})")
        hi = tp.get("highest_tokens_per_s")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'n/a' if hi is None else f'{hi:,}'} |")
    contended = []
    for name, t in tools.items():
        for kind, runs in (("accuracy", t.get("accuracy", {})), ("tokens/s", t.get("throughput", {}))):
            for u, r in runs.items():
                cost = r.get("cost", r) if isinstance(r, dict) else {}
                if isinstance(r, dict) and _contention(cost) > CONTENDED:
                    contended.append(
                        f"{name} {kind} @{u} (client core {_num(cost.get('client_core_other_share'), 2)}, "
                        f"mock core {_num(cost.get('server_core_other_share'), 2)})"
                    )
    lines += [
        "",
        "Other work on the machine over a run's window (share of a core, after one retry): "
        + ("; ".join(contended) if contended else f"none above {CONTENDED:.2f} of a core")
        + ".",
    ]
    lines += ["", "### tokenload against the best peer", ""]
    lines += [f"- {s}" for s in result["closing_note"]]
    lines += ["", "### How each client was run and joined", ""]
    for name, t in tools.items():
        lines.append(
            f"- **{name}** {t.get('version', '')}: concurrency {t['concurrency']}; "
            f"join: {t['join']}; ITL: {t['itl']}."
        )
    lines += ["", "### Commands", "", "```"]
    lines.append(f"# ground truth (CPU {m['server_cpu']}): {' '.join(result['mock_command'])}")
    for name, t in tools.items():
        if t.get("command"):
            lines.append(f"# {name} (CPU {m['client_cpu']}):")
            lines.append(" ".join(t["command"]))
            if t.get("config"):
                path = next((c for c in t["command"] if c.endswith((".json", ".yml"))), "its config")
                lines.append(f"#   {path}: {json.dumps(t['config'], separators=(',', ':'))}")
    lines += ["```", "", "Caveats: see `bench/peers/README.md`.", END]
    return "\n".join(lines) + "\n"


def write_results(md: str) -> None:
    """The Peers section of bench/RESULTS.md (the other sections are other scripts')."""
    write_results_section("peers", md.replace(BEGIN, "").replace(END, ""))


def _last_chunk_p50(tools: dict, name: str, users: int) -> str:
    """The p50 of a client's last-content-chunk error at ``users`` streams, as text."""
    acc = (tools.get(name) or {}).get("accuracy", {}).get(str(users)) or {}
    p50 = (acc.get("last_chunk_error_ms") or {}).get("p50")
    return "n/a" if p50 is None else f"{p50:+.2f} ms"


def closing_note(cmp: dict, concurrency: list[int], tools: dict | None = None) -> list[str]:
    """One line per comparison: errors as magnitudes (|client - server|), costs as they are."""
    notes = []
    labels = {
        "ttft_error_p50_ms": ("|TTFT error| p50", "ms"),
        "ttft_error_p99_ms": ("|TTFT error| p99", "ms"),
        "itl_mean_error_p50_ms": ("|ITL error| (request mean) p50", "ms"),
        "itl_mean_error_p99_ms": ("|ITL error| (request mean) p99", "ms"),
        "cpu_ms_per_1000_tokens": ("CPU per 1,000 tokens, paced", "ms"),
        "cpu_ms_per_1000_tokens_saturated": ("CPU per 1,000 tokens, client-bound (512-token streams)", "ms"),
    }
    for users in concurrency:
        for key, (label, unit) in labels.items():
            c = cmp[str(users)][key]
            if c["tokenload"] is None or c["best_peer"] is None:
                notes.append(f"{users} streams, {label}: not comparable (a run is missing)")
                continue
            tl, best = c["tokenload"], c["best_peer_value"]
            if c["tokenload_at_or_below_best_peer"]:
                verdict = "at or below"
            else:
                verdict = f"ABOVE by {tl - best:.3g} {unit}"
            ratio = c["tokenload_over_best_peer"]
            why = ""
            if tools and key.startswith("itl_mean") and not c["tokenload_at_or_below_best_peer"]:
                # A request's mean gap is (last - first) / 127: it moves with the last chunk's delay.
                why = (
                    "; last content chunk's error p50: tokenload "
                    f"{_last_chunk_p50(tools, 'tokenload', users)}, bare Locust "
                    f"{_last_chunk_p50(tools, 'bare_locust', users)}, {c['best_peer']} "
                    f"{_last_chunk_p50(tools, c['best_peer'], users)}"
                )
            notes.append(
                f"{users} streams, {label}: tokenload {tl:.3g} {unit} vs best peer {c['best_peer']} "
                f"{best:.3g} {unit} -> {verdict}"
                + (f" (ratio {ratio:.3g})" if ratio is not None else "")
                + why
            )
    h = cmp["highest_tokens_per_s"]
    if h["tokenload"] and h["best_peer"]:
        notes.append(
            f"highest streamed tokens/s on one client core: tokenload {h['tokenload']:,} vs best peer "
            f"{h['best_peer']} {h['best_peer_value']:,} ({h['tokenload_over_best_peer']}x); "
            f"tokenload / bare Locust client = {h['tokenload_over_bare_locust']}"
        )
    return notes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--quick", action="store_true", help="a smoke run: a few seconds per client, 64 streams only"
    )
    p.add_argument("--tools", default=",".join(TOOLS), help="comma-separated subset of: " + ", ".join(TOOLS))
    p.add_argument("--concurrency", default=None, help="comma-separated stream counts (default 64,256)")
    p.add_argument("--no-throughput", action="store_true", help="skip the tokens/s-per-core runs")
    p.add_argument("--no-accuracy", action="store_true", help="skip the accuracy runs")
    p.add_argument(
        "--write-results",
        choices=("auto", "yes", "no"),
        default="auto",
        help="rewrite the Peers section of bench/RESULTS.md (auto: not for --quick)",
    )
    args = p.parse_args()
    names = [n.strip() for n in args.tools.split(",") if n.strip()]
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        p.error(f"unknown tool(s) {unknown}; expected some of {list(TOOLS)}")
    concurrency = [int(c) for c in (args.concurrency or ("64" if args.quick else "64,256")).split(",")]
    acc = {"duration_s": 6, "settle_s": 1.0, "window_s": 2.5} if args.quick else {}
    acc = acc or {"duration_s": 16, "settle_s": 2.0, "window_s": 10.0}
    tp = {"settle_s": 1.5, "window_s": 3.0} if args.quick else {"settle_s": 3.0, "window_s": 8.0}
    os.chdir(ROOT)

    started = time.time()
    # Repeat a contended run only while the whole benchmark stays within ~15 minutes.
    retry_until = started + (0 if args.quick else 600)
    result: dict = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick,
        "machine": machine(),
        "concurrency": concurrency,
        "workload": {
            "description": (
                f"streaming POST /v1/completions, fixed concurrency {' and '.join(map(str, concurrency))}, "
                "128 output tokens (max_tokens), a 32-token prompt (tokenload and the peers; the bare client "
                f"sends 'hello'); each accuracy run lasts ~{acc['duration_s']} s, CPU and tokens over a "
                f"{acc['window_s']:.0f} s steady window; throughput runs: {tp['window_s']:.0f} s windows."
            ),
            "accuracy_mock": ACC_MOCK,
            "throughput_mock": TP_MOCK,
            "accuracy_run": acc,
            "throughput_run": tp,
        },
        "mock_command": [
            "python",
            "-m",
            "tokenload.mock",
            "--port",
            "0",
            "--trace",
            "TRACE.jsonl",
            *ACC_MOCK,
        ],
        "tools": {},
    }
    tools = {n: TOOLS[n] for n in names}
    for name, tool in tools.items():
        entry: dict = {"join": tool.join, "itl": tool.itl, "concurrency": tool.concurrency}
        if tool.pip:
            print(f"[peers] {name}: checking bench/peers/.venvs/{name} ({tool.pip})", file=sys.stderr)
            entry["install"] = ensure_venv(tool)
            if "version" in entry["install"]:
                entry["version"] = entry["install"]["version"]
        else:
            entry["version"] = _tree_version() if name == "tokenload" else "locust (dev venv)"
        result["tools"][name] = entry

    with tempfile.TemporaryDirectory(prefix="tokenload-peers-") as d:
        tmp = Path(d)
        tok, hf_cache = build(tmp / "tok")
        shared = {"tokenizer": tok, "hf_cache": hf_cache, "env": _tool_env(hf_cache)}
        runnable = {n: t for n, t in tools.items() if "error" not in result["tools"][n].get("install", {})}
        for users in [] if args.no_accuracy else concurrency:
            for name, tool in runnable.items():
                print(f"[peers] {name}: accuracy at {users} streams", file=sys.stderr)
                entry = result["tools"][name]
                r = measured(accuracy_run, retry_until, tool, users, acc, tmp, shared)
                cmd, conf = r.pop("command", None), r.pop("config", None)
                if cmd and "command" not in entry:
                    entry["command"] = [_portable(c, tmp) for c in cmd]
                    if conf:
                        entry["config"] = json.loads(_portable(json.dumps(conf), tmp))
                entry.setdefault("accuracy", {})[str(users)] = r
        if not args.no_throughput:
            for users in concurrency:
                for name, tool in runnable.items():
                    print(f"[peers] {name}: tokens/s at {users} streams", file=sys.stderr)
                    r = measured(throughput_run, retry_until, tool, users, tp, tmp, shared)
                    result["tools"][name].setdefault("throughput", {})[str(users)] = r
            for entry in result["tools"].values():
                got = [
                    r["tokens_per_s"] for r in entry.get("throughput", {}).values() if r.get("tokens_per_s")
                ]
                entry.setdefault("throughput", {})["highest_tokens_per_s"] = max(got) if got else None
    result["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    result["tokenizer"] = f"word-level, built locally (tokenizers); HF cache name {CACHE_NAME}"
    result["comparison"] = compare(result["tools"], concurrency)
    result["closing_note"] = closing_note(result["comparison"], concurrency, result["tools"])
    result["elapsed_s"] = round(time.time() - started, 1)
    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    stem = "quick" if args.quick else "results"
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=2))
    md = markdown(result)
    (out_dir / f"{stem}.md").write_text(md)
    if args.write_results == "yes" or (args.write_results == "auto" and not args.quick):
        write_results(md)
        print(f"[peers] wrote the Peers section of {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
