"""The workload layer wired to the target: one :class:`RequestPlanner` per process and API,
with the server's ``/tokenize`` as the token counter when it has one.

``auto`` lengths fall back to an estimate (records say ``exact: false``) with one warning when
the target has no ``/tokenize``; ``--length-method tokenize`` makes that an error instead.
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust.runners import WorkerRunner

import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any

import gevent
import gevent.lock

from tokenload.client.http_stream import StreamTarget
from tokenload.workload.errors import PromptCountError, WorkloadError
from tokenload.workload.plan import RequestPlanner, merge_fit
from tokenload.workload.spec import WorkloadSpec, load_workload_file, parse_workload
from tokenload.workload.tokenize_api import TokenizeClient

if TYPE_CHECKING:
    from tokenload.loadgen.plugin import RunContext

__all__ = ["fit_counts", "load_spec", "planner_for"]

log = logging.getLogger("tokenload")
_lock = gevent.lock.Semaphore()


def load_spec(cfg: Any) -> WorkloadSpec:
    """The run's workload: the ``--workload`` file, else the length options. Raises WorkloadError
    with one line naming the file or option."""
    if cfg.workload_file:
        return load_workload_file(cfg.workload_file)
    data = {
        "input_tokens": cfg.prompt_tokens,
        "output_tokens": cfg.output_tokens,
        "length_method": cfg.length_method,
    }
    return parse_workload(data, source="options")


def fit_counts(ctx: RunContext) -> dict[str, int | None] | None:
    """What this process's planners did to the workload's draws (workload.plan.FIT_COUNTS)."""
    return merge_fit([p.fit_counts() for p in list(ctx.cache.planners.values())])


def planner_for(
    ctx: RunContext, chat: bool, host: str, api_key: str | None, model: str, prompt_tokens: str | None = None
) -> RequestPlanner:
    """This process's planner for the chat or the completions API (built once, on first use);
    ``prompt_tokens`` replaces the run's prompt length spec (a step's own, in a context sweep)."""
    key = (chat, prompt_tokens)
    planners = ctx.cache.planners
    cached = planners.get(key)
    if cached is not None:
        return cached
    with _lock:
        cached = planners.get(key)
        if cached is None:
            cached = planners[key] = _build(ctx, chat, host, api_key, model, prompt_tokens)
    return cached


#: A /tokenize that fails now and then (429, 5xx, a timeout) is asked again before the run
#: falls back to estimated lengths: one unlucky answer should not decide the whole run.
_PROBE_TRIES = 3


def _probe(client: TokenizeClient) -> None:
    for attempt in range(_PROBE_TRIES):
        try:
            client("probe")
            return
        except PromptCountError:
            if attempt == _PROBE_TRIES - 1:
                raise
            gevent.sleep(0.2 * (attempt + 1))


def _build(
    ctx: RunContext, chat: bool, host: str, api_key: str | None, model: str, prompt_tokens: str | None
) -> RequestPlanner:
    cfg = ctx.config
    if prompt_tokens is not None and not cfg.workload_file:
        cfg = dataclasses.replace(cfg, prompt_tokens=prompt_tokens)
    spec = load_spec(cfg)
    counter: TokenizeClient | None = None
    max_model_len = None
    if spec.length_method in ("auto", "tokenize") and not spec.tokenizer_file:
        target = StreamTarget(host, api_key=api_key, pool_size=8)
        client = TokenizeClient(lambda payload: target.post("/tokenize", json.dumps(payload).encode()), model)
        try:
            _probe(client)
            counter, max_model_len = client, client.max_model_len
        except WorkloadError as exc:
            if spec.length_method == "tokenize":
                raise
            log.warning("tokenload: %s: prompt lengths are estimates (records say exact=false)", exc)
    runner = ctx.environment.runner
    worker_index, n_workers = 0, 1
    if isinstance(runner, WorkerRunner):
        worker_index = max(runner.worker_index, 0)
        n_workers = max(
            int(getattr(ctx.environment.parsed_options, "expect_workers", 1) or 1), worker_index + 1
        )
    planner = RequestPlanner(
        spec,
        chat=chat,
        worker_index=worker_index,
        n_workers=n_workers,
        count_tokens=counter,
        max_model_len=max_model_len,
        model=model,
    )
    log.info(
        "tokenload: workload %s, lengths %s (%s)",
        spec.kind,
        "exact" if planner.maker.exact else "estimated",
        planner.maker.method,
    )
    return planner
