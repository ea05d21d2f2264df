"""Everything a report says about a run, computed once and rendered as markdown, HTML or
terminal text. Pure: takes the run's parsed files, reads none.

The verdicts are recomputed from summary.json's steps (not copied from it), so a changed
threshold, or a diagnosis improved since the run, shows in the report.
"""

from __future__ import annotations

import copy
import shlex
import time
import urllib.parse
from dataclasses import asdict, dataclass
from typing import Any

from tokenload.analysis.diagnosis import ADVICE
from tokenload.analysis.judge import judge_steps
from tokenload.analysis.run_rules import failures
from tokenload.analysis.thresholds import CLOSE_CALL, Thresholds
from tokenload.metrics.definitions import FORMULAS
from tokenload.report.capacity import (
    DEFAULT_HEADROOM,
    SLO,
    Capacity,
    ReplicaPlan,
    StepCheck,
    Target,
    check_steps,
    find_capacity,
    parse_slo,
    replicas_needed,
    replicas_scraped,
    search_capacity,
)
from tokenload.report.redact import redact
from tokenload.report.tables import load_label, no_knee_sentence, rate_text, users

__all__ = ["ReportModel", "build_model", "knee_sentence", "reconstructed_command", "refresh_verdicts"]


def refresh_verdicts(summary: dict[str, Any], thresholds: Thresholds | None = None) -> dict[str, Any]:
    """A copy of the summary with each step's verdict and the knee recomputed."""
    out = copy.deepcopy(summary)
    steps = out.get("steps") or []
    _, out["knee"] = judge_steps(
        steps, thresholds=thresholds, peaks=out.get("gpu_peaks"), max_num_seqs=out.get("server_max_num_seqs")
    )
    return out


def _is_loopback(host: str) -> bool:
    name = urllib.parse.urlsplit(host if "//" in host else "//" + host).hostname or ""
    return name == "localhost" or name.startswith("127.") or name == "::1"


def reconstructed_command(summary: dict[str, Any]) -> str:
    """A ``tokenload sweep`` line equivalent to the run, from what summary.json records: the
    target (the built-in emulator by its arguments, not the port it had), the shape and its loads
    as the steps ran them, quoted for a POSIX shell. Every option the run was given comes from
    ``search.argv`` (step timing, lengths, the scrape, a knee search's bounds, a trace file, stop
    rules; URLs without their credentials, which a rerun must give again); a run recorded before
    it has its step timing read back from the steps (approximate) and the sweep's defaults."""
    steps = summary.get("steps") or []
    cfg = dict(summary.get("config") or {})
    search = summary.get("search") or {}
    shape = search.get("shape")
    if shape is None and steps and all(s.get("target_rate_rps") is not None for s in steps):
        shape = "rate"  # rate steps, whatever ran them (a plan's prediction records no search)
    words = ["tokenload", "sweep"]
    host = str(redact(summary["host"])) if summary.get("host") else ""
    pred = summary.get("prediction")
    if isinstance(pred, dict):  # a plan: the sweep it predicts, against the emulator it ran
        cfg.update(
            {k: v for k, v in (pred.get("workload") or {}).items() if k in ("prompt_tokens", "output_tokens")}
        )
        cfg["target_emulator"] = " ".join(["tokenload sim", str(pred.get("sim_args") or "")]).strip()
    emulator = str(redact(cfg.get("target_emulator") or ""))
    on_emulator = bool(emulator) and (not host or _is_loopback(host))
    if on_emulator:  # the emulator sweep started, on loopback
        sim_args = emulator.removeprefix("tokenload sim").strip()
        # One word: argparse takes a lone value that starts with '-' for an option.
        words += [f"--sim-args={sim_args}"] if sim_args else []
    elif host:
        words += ["--host", host]

    def joined(key: str, fmt: Any = str) -> str:
        return ",".join(fmt(v) for v in dict.fromkeys(s[key] for s in steps if s.get(key) is not None))

    def add(flag: str, value: Any) -> None:
        if value not in (None, ""):
            words.extend([flag, str(value)])

    if shape == "rate":
        words += ["--shape", "rate"]
        add("--rate", joined("target_rate_rps", lambda r: f"{r:g}"))
    elif shape == "context_sweep":
        words += ["--shape", "context"]
        add("--prompt-lengths", joined("prompt_tokens"))
        add("--concurrency", joined("concurrency"))
    elif shape == "slo":
        words += ["--shape", "slo"]
        add("--slo", search.get("slo"))
        add("--slo-attainment", search.get("slo_attainment"))
    elif shape in ("knee", "trace"):
        words += ["--shape", shape]
    else:
        add(
            "--concurrency",
            ",".join(str(s["concurrency"]) for s in steps if s.get("concurrency") is not None),
        )
    if shape in ("rate", "slo") and search.get("arrival") not in (None, "poisson"):
        add("--arrival", search["arrival"])
    argv = [str(w) for w in search.get("argv") or []]
    held = [s["end"] - s["start"] for s in steps if isinstance(s.get("end"), int | float) and s.get("start")]
    warm = [
        s["measure_start"] - s["start"]
        for s in steps
        if isinstance(s.get("measure_start"), int | float) and s.get("start")
    ]
    if held and "argv" not in search:  # a run before search.argv (or a plan): read back
        words += ["--step-duration", f"{sum(held) / len(held):.0f}"]
    if warm and "argv" not in search:
        words += ["--warmup", f"{sum(warm) / len(warm):.0f}"]
    endpoints = cfg.get("endpoints") or []
    if endpoints == ["/v1/chat/completions"]:  # the sweep's default is completions
        words += ["--endpoint", "chat"]
    add("--workload", cfg.get("workload_file"))  # its lengths, not the length options' defaults
    for key, flag in (("prompt_tokens", "--prompt-tokens"), ("output_tokens", "--output-tokens"),
                      ("model", "--model")):  # fmt: skip
        lengths = key != "model" and (
            (shape == "context_sweep" and key == "prompt_tokens") or cfg.get("workload_file")
        )
        if not lengths:  # a context sweep's prompts are each step's own, above
            add(flag, cfg.get(key))
    # The run's options as it was given them (summary.json's search.argv: step timing, a knee
    # search's bounds, a trace file, stop rules, the scrape), over what the steps read back.
    pairs = [
        (word, argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None)
        for i, word in enumerate(argv)
        if word.startswith("--")
    ]
    repeated = {flag for flag in dict.fromkeys(f for f, _ in pairs) if sum(f == flag for f, _ in pairs) > 1}
    for flag, value in pairs:
        if flag == "--metrics-url" and on_emulator:
            continue  # the ports that run's emulator replicas had: a rerun's sweep finds its own
        if flag in repeated or flag not in words:  # a repeatable option (--metrics-url) each time
            words += [flag] if value is None else [flag, value]
        elif value is not None:
            words[words.index(flag) + 1] = value
    return shlex.join(words)


def knee_sentence(summary: dict[str, Any]) -> str:
    """The run's headline: where saturation starts and what ran out (or that the requests failed,
    or that nothing saturated), for the reports and the console alike."""
    knee = summary.get("knee")
    if not knee:
        return no_knee_sentence(summary)
    steps = summary.get("steps") or []
    step = steps[knee["step"]] if knee["step"] < len(steps) else {}
    before = knee.get("last_unsaturated_concurrency")
    if before is None and knee.get("last_unsaturated_rate_rps") is not None:
        prev = f"; the last unsaturated step ran {rate_text(knee['last_unsaturated_rate_rps'])} req/s"
    else:
        prev = f"; the last unsaturated step ran {users(before)}" if before is not None else ""
    if knee["bottleneck"] == "errors":  # no resource ran out: the requests failed
        failed, dominant = failures(step)
        share = "its requests" if failed is None else f"{failed:.0%} of its requests"
        mostly = "" if dominant == "unclassified" else f" (mostly {dominant})"
        return (
            f"Failing from step {knee['step']} ({load_label(step)}): {share} failed{mostly}{prev}. "
            "Fix the failures before reading capacity."
        )
    what = (
        "some replicas ran out while others had room (imbalance: the router's split)"
        if knee["bottleneck"] == "imbalance"
        else f"{knee['bottleneck']} ran out"
    )
    close = (
        f" A close call: {CLOSE_CALL} (the step's evidence quotes how often)."
        if knee.get("close_call")
        else ""
    )
    return (
        f"Saturated at step {knee['step']} ({load_label(step)}): {what}{prev}. "
        f"Output at the knee: {knee.get('output_tokens_per_s_at_knee') or 0:.1f} tokens/s.{close}"
    )


@dataclass(slots=True)
class ReportModel:
    summary: dict[str, Any]  # with refreshed verdicts and knee
    requests: list[dict[str, Any]]
    points: list[dict[str, Any]]
    thresholds: Thresholds
    slo: SLO | None
    checks: list[StepCheck] | None
    capacity: Capacity | None
    plan: ReplicaPlan | None
    plan_error: str | None
    generated_at: float

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.summary.get("steps") or []

    @property
    def knee(self) -> dict[str, Any] | None:
        return self.summary.get("knee")

    @property
    def formulas(self) -> dict[str, str]:
        return self.summary.get("formulas") or FORMULAS

    @property
    def config(self) -> dict[str, Any]:
        return redact(self.summary.get("config") or {})

    def thresholds_text(self) -> str:
        return ", ".join(f"{k}={v:g}" for k, v in asdict(self.thresholds).items())

    def knee_sentence(self) -> str:
        return knee_sentence(self.summary)

    def knee_advice(self) -> list[str]:
        knee = self.knee
        if knee:
            return ADVICE.get(knee["bottleneck"], [])
        # A context sweep has no knee to find: "raise the load" is a staircase's advice.
        return [] if (self.summary.get("search") or {}).get("shape") == "context_sweep" else ADVICE["none"]


def build_model(
    summary: dict[str, Any],
    requests: list[dict[str, Any]],
    points: list[dict[str, Any]],
    *,
    slo: SLO | None = None,
    thresholds: Thresholds | None = None,
    target: Target | None = None,
    headroom: float = DEFAULT_HEADROOM,
) -> ReportModel:
    th = thresholds or Thresholds()
    fresh = refresh_verdicts(summary, th)
    steps = fresh.get("steps") or []
    search = fresh.get("search") or {}
    # An SLO search's answer is the capacity under its own SLO (the report's --slo may ask
    # about another one: then the steps are checked against that, as for any sweep).
    searched = parse_slo(search["slo"]) if search.get("shape") == "slo" and search.get("slo") else None
    slo = slo if slo is not None else searched
    if searched is not None and slo is not None and str(slo) == str(searched):
        capacity = search_capacity(steps, search, slo, requests)
    else:
        capacity = find_capacity(steps, slo, requests)
    plan, plan_error = None, None
    if target is not None:
        if capacity is None:
            plan_error = "no step meets the SLO: no per-replica capacity to plan with"
        else:
            try:
                plan = replicas_needed(capacity, target, headroom, replicas_scraped(steps))
            except ValueError as exc:
                plan_error = str(exc)
    return ReportModel(
        summary=fresh,
        requests=requests,
        points=points,
        thresholds=th,
        slo=slo,
        checks=check_steps(steps, slo) if slo is not None else None,
        capacity=capacity,
        plan=plan,
        plan_error=plan_error,
        generated_at=time.time(),
    )
