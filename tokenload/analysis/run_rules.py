"""The rules about the run itself, not the server: a client that could not keep up
(``client_bound``), a worker lost mid-step, failures past their share. Pure; tried in
:data:`tokenload.analysis.diagnosis.RULES`' order with the server's rules."""

from __future__ import annotations

from typing import Any

from tokenload.analysis.signals import StepSignals
from tokenload.analysis.signals import evidence as _ev
from tokenload.analysis.thresholds import Thresholds
from tokenload.metrics.definitions import (
    CLIENT_CPU_LIMIT_PERCENT,
    CLIENT_LAG_LIMIT_MS,
    CLIENT_SEND_LAG_LIMIT_MS,
    COALESCED_FIRST_SHARE,
)
from tokenload.metrics.failures import FAILURE_CLASSES, failed_share, requests_ended

__all__ = [
    "CLIENT_CAUSED_FAILURES",
    "failures",
    "rule_client",
    "rule_errors",
    "rule_nothing_measured",
    "rule_worker_lost",
]


def rule_client(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, list[dict]] | None:
    flags = step.get("flags") or []
    if "client_bound" not in flags:
        return None
    c = step.get("client") or {}
    bound_by = c.get("bound_by")  # absent in summaries older than the coalesced-read check
    passed = ", ".join(bound_by) if bound_by else "CPU, loop lag or send lag"
    ev = [_ev("flag", "client_bound", f"the client's own {passed} passed its limit")]
    for k, rule in (
        (
            "cpu_percent_max",
            f"> {CLIENT_CPU_LIMIT_PERCENT:g} % of the CPU the process may use "
            "(one core, or its cgroup quota)",
        ),
        ("loop_lag_ms_p95", f"> {CLIENT_LAG_LIMIT_MS:g} ms"),
        ("send_lag_ms_p99", f"> {CLIENT_SEND_LAG_LIMIT_MS:g} ms"),
        ("coalesced_first_share", "first tokens read late behind later ones (not a limit)"),
        (
            "coalesced_first_late_share",
            f"> {COALESCED_FIRST_SHARE:g} of first tokens read behind later ones and possibly "
            f"> {CLIENT_LAG_LIMIT_MS:g} ms late",
        ),
        ("coalesced_first_late_ms_max", "(k - 1) x TPOT: how late such a first token may be dated"),
    ):
        if c.get(k) is not None:
            ev.append(_ev(f"client {k}", round(c[k], 3), rule))
    return "client", ev


def rule_worker_lost(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, list[dict]] | None:
    if "worker_lost" not in (step.get("flags") or []):
        return None
    return "unknown", [
        _ev("flag", "worker_lost", "a worker died during the step: its load was short; not judged")
    ]


def rule_nothing_measured(
    sig: StepSignals, step: dict[str, Any], th: Thresholds
) -> tuple[str, list[dict]] | None:
    """A step none of whose measured requests ended (none started in its measured part, or none
    finished before the step was decided) while the server shows no work in it (nothing running,
    no prompt or output tokens on /metrics, or no /metrics): nothing measured says anything of the server. A
    server busy with requests that outlive the step (a cache that thrashes, long prefills) is
    judged by its own signals."""
    if step.get("requests") is None or requests_ended(step) > 0:
        return None
    srv = step.get("server") or {}
    if (srv.get("requests_running") or {}).get("mean") or any(
        (srv.get(k) or {}).get("rate_per_s") for k in ("generation_tokens", "prompt_tokens")
    ):
        return None
    return "unknown", [
        _ev(
            "requests measured",
            0,
            "no request of the step's measured part ended and the server shows no work in it: "
            "nothing to judge",
        )
    ]


def failures(step: dict[str, Any]) -> tuple[float | None, str]:
    """A step's failed share of its requests (None without requests) and its commonest failure
    class ("unclassified" without classes)."""
    by = (step.get("requests") or {}).get("by_failure_class") or {}
    dominant = max(by, key=by.get) if by else "unclassified"
    return failed_share(step), dominant


#: Failure classes a client that falls behind can cause itself (it reads its streams late): with
#: the client_bound flag, a step failing mostly so is the client's, not the server's.
CLIENT_CAUSED_FAILURES = frozenset({"ttft_timeout", "stall_timeout"})


def rule_errors(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, list[dict]] | None:
    """Failures past their share. Tried before the client_bound flag: a target that refuses or
    breaks connections makes each closed-loop user fail at once and try again, and the client's
    CPU then goes to failing requests; the failures are the finding. Unless the client fell
    behind and the failures are mostly timeouts it can cause itself (CLIENT_CAUSED_FAILURES)."""
    share, dominant = failures(step)
    if share is None or share <= th.error_rate:
        return None
    client_bound = "client_bound" in (step.get("flags") or [])
    if client_bound and dominant in CLIENT_CAUSED_FAILURES:
        return None
    meaning = FAILURE_CLASSES.get(dominant)
    ev = [
        _ev(
            "failed share",
            round(share, 3),
            f"> {th.error_rate}; mostly {dominant}" + (f" ({meaning})" if meaning else ""),
        )
    ]
    if client_bound:
        ev.append(
            _ev(
                "flag", "client_bound", "the client's limits passed too: its CPU went to the failing requests"
            )
        )
    return "errors", ev
