"""Every worker reads the same workload files as the master, or it sends nothing.

The master fingerprints the files its workload reads (size and SHA-256: workload/files.py) and
puts them in its options, which Locust hands every worker with the spawn message. A worker then
checks, before its users start: its workload validates (every file it names exists) and each
file's bytes are the master's. If not, it says why in one line, tells the master, and exits
(code 2) without sending a request; the master prints the line and ends the run (exit code 2).
A worker started with a workload of its own (``--workload``, TOKENLOAD_WORKLOAD) checks the
files exist already at start.
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

import gevent

from tokenload.loadgen.option_table import option_value
from tokenload.loadgen.workload import load_spec
from tokenload.workload.errors import WorkloadError
from tokenload.workload.files import fingerprint, mismatches, workload_files
from tokenload.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from tokenload.loadgen.plugin import RunContext

__all__ = ["FILES_OPTION", "REJECTED_MESSAGE", "on_master", "on_worker_start", "worker_files_exist"]

log = logging.getLogger("tokenload")

#: The master's fingerprints, an attribute of its parsed options (forwarded at spawn).
FILES_OPTION = "tokenload_workload_files"
#: Worker -> master: this worker refused the run ({"worker", "reason"}).
REJECTED_MESSAGE = "tokenload_worker_rejected"


def _fingerprints(ctx: RunContext, spec: WorkloadSpec | None = None) -> dict[str, list[Any]]:
    opts = ctx.environment.parsed_options
    if spec is None:
        spec = load_spec(ctx.config)  # raises WorkloadError, one line
    trace = str(option_value(opts, "trace") or "") if opts is not None else ""
    return fingerprint(workload_files(spec, ctx.config.workload_file, trace))


def on_master(environment: Environment, ctx: RunContext, spec: WorkloadSpec) -> None:
    """Master or local runner, at init, with the workload it validated: publish the
    fingerprints; a master also listens for workers that refuse."""
    opts = environment.parsed_options
    if opts is not None:
        setattr(opts, FILES_OPTION, _fingerprints(ctx, spec))
    runner = environment.runner
    if isinstance(runner, MasterRunner):

        def rejected(msg: Any, **_: Any) -> None:
            line = f"tokenload: worker {msg.data.get('worker')} refused the run: {msg.data.get('reason')}"
            print(line, file=sys.stderr, flush=True)
            log.error(line)
            environment.process_exit_code = 2
            gevent.spawn(runner.quit)

        runner.register_message(REJECTED_MESSAGE, rejected)


def worker_files_exist(ctx: RunContext) -> None:
    """A worker at start, with its own options: a workload it names must validate."""
    if ctx.config.workload_file:
        try:
            load_spec(ctx.config)
        except WorkloadError as exc:
            sys.exit(f"tokenload: worker: {exc}")


def on_worker_start(environment: Environment, ctx: RunContext) -> None:
    """A worker at test start (the master's options just arrived, no user started yet)."""
    runner = environment.runner
    if not isinstance(runner, WorkerRunner):
        return
    expected = getattr(environment.parsed_options, FILES_OPTION, None) or {}
    try:
        problems = mismatches(expected, _fingerprints(ctx))
    except WorkloadError as exc:
        problems = [str(exc)]
    if not problems:
        return
    reason = "; ".join(problems)
    print(
        f"tokenload: worker {ctx.worker_name}: the workload is not the master's: {reason}",
        file=sys.stderr,
        flush=True,
    )
    runner.send_message(REJECTED_MESSAGE, {"worker": ctx.worker_name, "reason": reason})
    gevent.sleep(0.5)  # the message leaves; no user has started (this runs before they spawn)
    os._exit(2)
