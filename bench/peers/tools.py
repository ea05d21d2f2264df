"""The clients compared: how each is installed, started for one run, and read back.

tokenload and the bare Locust reference are started by the existing bench functions
(``bench/client_overhead.py``, ``bench/client_accuracy.py``); the peers from their own virtual
environments under ``bench/peers/.venvs/<tool>``, each with its documented options for a fixed
number of concurrent streaming ``/v1/completions`` requests, a short prompt and a fixed output
length. Every peer exports per-request records carrying the server's response id, which is how
they are joined to the mock's trace.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from client_accuracy import _bare
from client_overhead import _locust
from measure import Rec, pin

__all__ = ["PEERS", "TOOLS", "Ctx", "Tool", "ensure_venv"]

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"
MODEL = "mock-model"


@dataclass
class Ctx:
    """One run: the mock's URL, the workload, where the client writes, and the shared setup."""

    url: str
    users: int
    tokens: int
    prompt_tokens: int
    duration_s: float
    throughput: bool
    out: Path
    tokenizer: Path
    hf_cache: Path
    client_cpu: int
    wall_offset: float = 0.0
    env: dict[str, str] = field(default_factory=dict)


class Tool:
    name = ""
    pip: str | None = None
    min_python = (3, 11)
    join = "response id (the server's `id` in the stream, exported per request)"
    itl = ""
    concurrency = "fixed: N concurrent streams"

    def command(self, ctx: Ctx) -> list[str]:
        raise NotImplementedError

    def config(self, ctx: Ctx) -> dict | None:
        """The configuration file the command points to, if any (recorded with the results)."""
        return None

    def launch(self, ctx: Ctx) -> subprocess.Popen:
        ctx.out.mkdir(parents=True, exist_ok=True)
        log = open(ctx.out / "client.log", "wb")  # noqa: SIM115
        try:
            return subprocess.Popen(
                self.command(ctx),
                cwd=ctx.out,
                env=ctx.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=pin(ctx.client_cpu),
                start_new_session=True,
            )
        finally:
            log.close()

    def records(self, ctx: Ctx) -> list[Rec]:
        raise NotImplementedError

    def log_tail(self, ctx: Ctx, n: int = 1500) -> str:
        p = ctx.out / "client.log"
        return p.read_text(errors="replace")[-n:] if p.exists() else ""


class Tokenload(Tool):
    name = "tokenload"
    itl = (
        "per request: mean and median from its records (itl_mean_ms, itl_p50_ms); the last chunk's "
        "time is first + itl_mean_ms x itl_count"
    )

    def command(self, ctx: Ctx) -> list[str]:
        return [
            "locust", "-f", "locustfiles/completions.py", "--host", ctx.url, "--headless",
            "--only-summary", "-u", str(ctx.users), "-r", str(ctx.users), "-t", f"{int(ctx.duration_s)}s",
            "--stop-timeout", "60", "--run-dir", "$OUT/run", "--loglevel", "WARNING", "--no-server-metrics",
            "--output-tokens", str(ctx.tokens), "--prompt-tokens", "32",
        ]  # fmt: skip

    def launch(self, ctx: Ctx) -> subprocess.Popen:
        ctx.out.mkdir(parents=True, exist_ok=True)
        return _locust(ctx.url, ctx.out / "run", ctx.users, f"{int(ctx.duration_s)}s", ctx.tokens)

    def records(self, ctx: Ctx) -> list[Rec]:
        path = ctx.out / "run" / "requests.jsonl"
        out = []
        for line in path.read_text().splitlines() if path.exists() else []:
            r = json.loads(line)
            if r["status"] != "ok" or r["ttft_ms"] is None:
                continue
            first = r["start_monotonic_s"] + r["ttft_ms"] / 1000
            mean, count = r.get("itl_mean_ms"), r.get("itl_count")
            # One token a chunk: mean x count is the sum of the gaps, so first + that is the
            # last content chunk's receive time.
            last = first + mean * count / 1000 if mean is not None and count else None
            out.append(
                Rec(r["response_id"], first, last=last, itl_mean_ms=mean, itl_p50_ms=r.get("itl_p50_ms"))
            )
        return out


class BareLocust(Tool):
    name = "bare_locust"
    itl = "per chunk (every content line's receive time)"

    def command(self, ctx: Ctx) -> list[str]:
        return [
            "env", "BARE_SSE_OUT=$OUT/bare", f"BARE_SSE_TOKENS={ctx.tokens}",
            "locust", "-f", "bench/locustfiles/bare_sse.py", "--host", ctx.url, "--headless",
            "--only-summary", "-u", str(ctx.users), "-r", str(ctx.users), "-t", f"{int(ctx.duration_s)}s",
            "--stop-timeout", "60", "--loglevel", "WARNING",
        ]  # fmt: skip

    def launch(self, ctx: Ctx) -> subprocess.Popen:
        ctx.out.mkdir(parents=True, exist_ok=True)
        return _bare(ctx.url, ctx.out / "bare", ctx.users, f"{int(ctx.duration_s)}s", ctx.tokens)

    def records(self, ctx: Ctx) -> list[Rec]:
        out = []
        for f in sorted(ctx.out.glob("bare.*.jsonl")):
            for r in map(json.loads, f.read_text().splitlines()):
                if r["chunks"]:
                    out.append(Rec(r["id"], r["chunks"][0], chunks=r["chunks"]))
        return out


class GuideLLM(Tool):
    name = "guidellm"
    pip = "guidellm==0.8.1"
    itl = (
        "per-request mean only: guidellm keeps the first and last token times and a count, not each "
        "chunk's time; its own ITL is that mean"
    )
    concurrency = "fixed: profile kind=concurrent, streams=N"

    def config(self, ctx: Ctx) -> dict:
        return {
            "spec": {
                "backend": {
                    "kind": "openai_http",
                    "target": ctx.url,
                    "model": MODEL,
                    "request_format": "/v1/completions",
                },
                "profile": {"kind": "concurrent", "streams": ctx.users},
                "tokenizer": {"kind": "huggingface_auto", "model": str(ctx.tokenizer)},
                "data": [
                    {
                        "kind": "synthetic_text",
                        "prompt_tokens": ctx.prompt_tokens,
                        "output_tokens": ctx.tokens,
                    }
                ],
                "constraints": [{"kind": "max_duration", "seconds": int(ctx.duration_s)}],
                "outputs": [{"kind": "json", "path": str(ctx.out / "benchmarks.json")}],
            }
        }

    def command(self, ctx: Ctx) -> list[str]:
        ctx.out.mkdir(parents=True, exist_ok=True)
        path = ctx.out / "scenario.json"
        path.write_text(json.dumps(self.config(ctx), indent=1))
        return [
            str(VENVS / self.name / "bin" / "guidellm"),
            "run",
            "--scenario",
            str(path),
            "--disable-progress",
        ]

    def records(self, ctx: Ctx) -> list[Rec]:
        path = ctx.out / "benchmarks.json"
        if not path.exists():
            return []
        out = []
        off = ctx.wall_offset  # guidellm stamps with time.time(): back to CLOCK_MONOTONIC
        for b in json.loads(path.read_text())["benchmarks"]:
            for r in b["requests"]["successful"]:
                t = r["info"]["timings"]
                if t.get("first_token_iteration") is None:
                    continue
                last = t.get("last_token_iteration")
                out.append(
                    Rec(
                        r.get("response_id"),
                        t["first_token_iteration"] - off,
                        last=None if last is None else last - off,
                    )
                )
        return out


class AIPerf(Tool):
    name = "aiperf"
    pip = "aiperf==0.13.0"
    itl = "per chunk (raw export: every SSE message's receive time, perf_counter_ns)"
    concurrency = "fixed: --concurrency N"

    def command(self, ctx: Ctx) -> list[str]:
        return [
            str(VENVS / self.name / "bin" / "aiperf"), "profile", "--model", MODEL, "--url", ctx.url,
            "--endpoint-type", "completions", "--streaming", "--tokenizer", "tokenload/bench-tok",
            "--prompt-input-tokens-mean", str(ctx.prompt_tokens), "--prompt-input-tokens-stddev", "0",
            "--prompt-output-tokens-mean", str(ctx.tokens), "--prompt-output-tokens-stddev", "0",
            "--use-legacy-max-tokens", "--concurrency", str(ctx.users),
            "--benchmark-duration", str(int(ctx.duration_s)), "--benchmark-grace-period", "20",
            "--export-level", "records" if ctx.throughput else "raw",
            "--artifact-dir", str(ctx.out / "artifacts"),
            "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry", "--random-seed", "1",
        ]  # fmt: skip

    def records(self, ctx: Ctx) -> list[Rec]:
        path = ctx.out / "artifacts" / "profile_export_raw.jsonl"
        out = []
        with open(path) if path.exists() else open(os.devnull) as fh:
            for line in fh:
                r = json.loads(line)
                rid, chunks = None, []
                for resp in r.get("responses") or []:
                    for pk in resp.get("packets") or []:
                        v = pk.get("value") or ""
                        if pk.get("name") == "data" and '"text":' in v:
                            if rid is None:
                                rid = json.loads(v)["id"]
                            chunks.append(resp["perf_ns"] / 1e9)
                            break
                if chunks:
                    out.append(Rec(rid, chunks[0], chunks=chunks))
        return out


class InferencePerf(Tool):
    name = "inference-perf"
    pip = "inference-perf==0.7.0"
    min_python = (3, 12)
    itl = "per chunk (per-request lifecycle report: chunk_times, perf_counter)"
    concurrency = (
        "fixed: load type=concurrent, concurrency_level=N; bounded by a request count (its concurrent "
        "stages take num_requests, not a duration)"
    )

    def config(self, ctx: Ctx) -> dict:
        per_req = 1.33  # the mock's 50 ms + 127 x 10 ms, plus a little
        n = 10**6 if ctx.throughput else max(ctx.users, round(ctx.users * ctx.duration_s / per_req))
        fixed = lambda v: {"type": "fixed", "mean": v, "min": v, "max": v, "std_dev": 0}  # noqa: E731
        return {
            "api": {"type": "completion", "streaming": True},
            "data": {
                "type": "random",
                "input_distribution": fixed(ctx.prompt_tokens),
                "output_distribution": fixed(ctx.tokens),
            },
            "load": {
                "type": "concurrent",
                "stages": [{"num_requests": n, "concurrency_level": ctx.users}],
                "worker_max_concurrency": ctx.users,
            },
            "server": {"type": "vllm", "model_name": MODEL, "base_url": ctx.url, "ignore_eos": True},
            "tokenizer": {"pretrained_model_name_or_path": str(ctx.tokenizer)},
            "report": {
                "request_lifecycle": {
                    "summary": True,
                    "per_stage": True,
                    "per_request": not ctx.throughput,
                    "per_request_fields": {"request": False, "response": False, "response_chunks": True},
                },
                "prometheus": None,
            },
            "storage": {"local_storage": {"path": str(ctx.out / "reports")}},
        }

    def command(self, ctx: Ctx) -> list[str]:
        ctx.out.mkdir(parents=True, exist_ok=True)
        path = ctx.out / "config.yml"
        path.write_text(json.dumps(self.config(ctx), indent=1))  # JSON is YAML
        return [str(VENVS / self.name / "bin" / "inference-perf"), "-c", str(path), "--log-level", "WARNING"]

    def records(self, ctx: Ctx) -> list[Rec]:
        path = ctx.out / "reports" / "per_request_lifecycle_metrics.json"
        if not path.exists():
            return []
        out = []
        for r in json.loads(path.read_text()):
            if r.get("error"):
                continue
            m = (r.get("info") or {}).get("response_metrics") or {}
            times, chunks = m.get("chunk_times") or [], m.get("response_chunks") or []
            if times and chunks:
                out.append(Rec(json.loads(chunks[0])["id"], times[0], chunks=times))
        return out


TOOLS: dict[str, Tool] = {
    t.name: t for t in (Tokenload(), BareLocust(), GuideLLM(), AIPerf(), InferencePerf())
}
PEERS = [t for t in TOOLS.values() if t.pip]


def _python_for(version: tuple[int, int]) -> str | None:
    """A CPython >= version: python3.X on PATH (checked by running it), else a pyenv install."""
    candidates = [f"python{version[0]}.{m}" for m in range(version[1], 15)]
    paths = [p for c in candidates if (p := shutil.which(c))]
    for m in range(version[1], 15):
        paths += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version[0]}.{m}*/bin/python3")))
    for p in paths:
        try:
            got = subprocess.run(
                [p, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if got.returncode == 0 and tuple(map(int, got.stdout.split("."))) >= version:
            return p
    return None


def installed_version(tool: Tool) -> str | None:
    py = VENVS / tool.name / "bin" / "python"
    if not py.exists() or tool.pip is None:
        return None
    dist = tool.pip.split("==")[0]
    got = subprocess.run(
        [str(py), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return got.stdout.strip() if got.returncode == 0 else None


def ensure_venv(tool: Tool) -> dict:
    """Reuse bench/peers/.venvs/<tool> when the pinned version is there; otherwise create it
    with plain venv + pip. Returns {"version": ...} or {"error": ...}."""
    assert tool.pip is not None
    want = tool.pip.split("==")[1]
    if installed_version(tool) == want:
        return {"version": want, "venv": "reused"}
    py = _python_for(tool.min_python)
    if py is None:
        return {"error": f"no Python >= {'.'.join(map(str, tool.min_python))} found for {tool.pip}"}
    venv = VENVS / tool.name
    shutil.rmtree(venv, ignore_errors=True)
    VENVS.mkdir(parents=True, exist_ok=True)
    made = subprocess.run([py, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        return {"error": f"{py} -m venv failed: {made.stderr[-800:]}"}
    log = venv / "pip.log"
    with open(log, "w") as fh:
        pip = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", tool.pip],
            stdout=fh,
            stderr=subprocess.STDOUT,
            timeout=1800,
        )
    if pip.returncode != 0:
        tail = [
            ln for ln in log.read_text(errors="replace").splitlines() if "is ignored: it is neither" not in ln
        ]
        return {"error": f"pip install {tool.pip} failed: " + "\n".join(tail[-15:])}
    got = installed_version(tool)
    if got != want:
        return {"error": f"{tool.pip} installed but reports version {got!r}"}
    return {"version": want, "venv": f"created with {py}"}
