"""``SLOShape``: the SLO capacity search in open loop (``--shape slo``, ``locustfiles/slo.py``).

Each probe is an open-loop rate step (``--arrival`` over ``--max-in-flight`` users, or with
``--trace`` the trace replayed from its start and rescaled to the probe's rate) judged by
:mod:`tokenload.analysis.slo_search`; every probe starts from an idle server (the previous one's
requests have ended, as with ``--drain``): a probe above capacity leaves a queue that would
otherwise fail the next, lower one. summary.json's ``search`` holds the answer
(``slo_capacity_rps``), its bracket and every probe with its intervals.
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)

import logging
from typing import Any

from tokenload.analysis.slo_search import (
    PROBE_REQUESTS_FACTOR,
    NextProbe,
    Probe,
    SearchPlan,
    judge_probe,
    min_requests,
    next_probe,
    probe_timing,
    search_result,
)
from tokenload.loadgen.step_machine import StepShape, shape_option
from tokenload.loadgen.steps import Step
from tokenload.loadgen.trace_replay import replays_trace
from tokenload.report.capacity import SLO, good_share, parse_slo

__all__ = ["SLOShape"]

log = logging.getLogger("tokenload")


class SLOShape(StepShape):
    """Grow the request rate from ``--slo-start`` by ``--slo-factor`` while probes meet ``--slo``
    (and ``--slo-attainment``), then bisect until the bracket is within ``--slo-resolution``."""

    abstract = True
    open_loop = True

    def __init__(self) -> None:
        super().__init__()
        self.probes: list[Probe] = []
        self.outcome = "running"
        self._slo: SLO | None = None
        self._plan: SearchPlan | None = None
        self._pending: tuple[int, NextProbe] | None = None  # (step index, the probe)

    def drains(self) -> bool:
        return True

    def _settings(self) -> tuple[SLO, SearchPlan, float | None]:
        if self._slo is None or self._plan is None:
            text = str(shape_option(self, "slo") or "")
            if not text.strip():
                raise ValueError(
                    "--slo: the slo shape needs an SLO, e.g. --slo ttft_p95_ms=500,tpot_p95_ms=50"
                )
            self._slo = parse_slo(text)
            self._plan = SearchPlan(
                start=float(shape_option(self, "slo_start")),
                factor=float(shape_option(self, "slo_factor")),
                max_rate=float(shape_option(self, "slo_max")),
                resolution=float(shape_option(self, "slo_resolution")),
                repeats=int(shape_option(self, "slo_repeats")),
            )
        attainment = shape_option(self, "slo_attainment")
        return self._slo, self._plan, (float(attainment) if attainment is not None else None)

    def _stop_condition(self, steps: list[dict[str, Any]]) -> str | None:
        # A probe that breaks the SLO, fails requests or over-saturates the server is a failing
        # probe, not a reason to stop: the search bisects below it.
        return None

    def _judge(self, step: dict[str, Any], slo: SLO, attainment: float | None) -> Probe:
        assert self._pending is not None
        index, planned = self._pending
        rate, repeat = planned.rate_rps, planned.repeat
        records = self.ctx.steps.requests_of(index)  # tallied as they arrived (see next_step)
        share = good_share(records, index, slo)
        per_request: dict[str, list[tuple[float, float]]] = {}
        for r in records:
            if r["phase"] == "measure" and r["status"] == "ok" and r["wall_start"] is not None:
                for item in slo.items:
                    if (v := r.get(item.field)) is not None:
                        per_request.setdefault(item.field, []).append((r["wall_start"], v))
        outcome, meets, checks = judge_probe(
            step, slo, attainment, share, float(shape_option(self, "stop_error_rate")), per_request
        )
        probe = Probe(
            step=index,
            rate_rps=rate,
            duration_s=float(step.get("measured_s") or 0.0),
            outcome=outcome,
            meets=meets,
            checks=checks,
            bottleneck=(step.get("verdict") or {}).get("bottleneck"),
            repeat=repeat,
            requests_per_s=step.get("requests_per_s"),
            good_share=share.request_share,
            e2e_p90_s=((step.get("e2e_ms") or {}).get("p90") or 0.0) / 1000.0,
            screen=planned.screen,
        )
        failing = "; ".join(f"{c.name} {c.outcome}" for c in checks if c.outcome != "pass")
        kind = " (screen)" if planned.screen else ""
        log.warning(
            "tokenload: slo search: %g req/s%s %s%s", rate, kind, outcome, f" ({failing})" if failing else ""
        )
        return probe

    def next_step(self, index: int, steps: list[dict[str, Any]]) -> Step | None:
        slo, plan, attainment = self._settings()
        # The master keeps what judging a probe needs of each request, by step, as they arrive.
        self.ctx.steps.keep((*(i.field for i in slo.items), "output_tokens"))
        if steps and self._pending is not None:
            self.probes.append(self._judge(steps[-1], slo, attainment))
        nxt = next_probe(self.probes, plan)
        if isinstance(nxt, str):
            self.outcome = nxt
            self._pending = None
            return None
        rate, repeat = nxt.rate_rps, nxt.repeat
        self._pending = (index, nxt)
        # Long enough for the SLO's percentiles to be bounded at all (a p99 needs hundreds of
        # requests, whatever --step-duration says; a screen only --step-duration: see
        # analysis/slo_search.py), warmed up for as long as the highest passing probe's requests
        # lived (E2E p90: the batch fills from idle in about that time), and a repeat measures
        # twice as long as the probe before it.
        fill_s = max((p.e2e_p90_s for p in self.probes if p.outcome != "fail" and p.e2e_p90_s), default=0.0)
        needed = 0 if nxt.screen else min_requests(slo, attainment) * PROBE_REQUESTS_FACTOR * 2**repeat
        duration, warm = probe_timing(
            float(shape_option(self, "step_duration")) * 2**repeat,
            float(shape_option(self, "warmup")),
            rate,
            needed,
            fill_s,
        )
        # Over a trace (--trace): each probe replays it from its start, rescaled to the probe's rate.
        arrival = "trace" if replays_trace(self.ctx) else None
        return Step(
            index, int(shape_option(self, "max_in_flight")), duration, warm, round(rate, 6), arrival=arrival
        )

    def result(self) -> dict[str, Any]:
        slo, _, attainment = self._settings()
        outcome = self.outcome if self.outcome != "running" else "stopped"  # see stop_reason
        out = search_result(self.probes, outcome, slo, attainment)
        out["arrival"] = str(shape_option(self, "arrival"))
        return out
