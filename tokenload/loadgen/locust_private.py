"""Every use of a private Locust API, in one place, each with the public API that would replace
it. Nothing else in tokenload reaches into Locust's internals (tests/unit/test_locust_private.py
checks), so a Locust release that moves one breaks here, visibly, and only here.
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust.runners import MasterRunner, WorkerRunner

__all__ = ["dispatch_in_progress", "send_report_now"]


def send_report_now(runner: WorkerRunner) -> None:
    """Send this worker's report to the master now, not at its next tick (every 3 s).

    Private: ``WorkerRunner._send_stats``, what Locust's own report loop calls. Public
    replacement: none yet (a ``runner.send_report()`` or a configurable report interval per
    message would do)."""
    runner._send_stats()


def dispatch_in_progress(runner: MasterRunner) -> bool:
    """Whether the master is still handing users out to workers (a ramp is running).

    Private: ``MasterRunner._users_dispatcher.dispatch_in_progress``. Public replacement:
    ``runner.spawning_completed`` covers a finished ramp but not one a worker's loss restarted;
    none covers both."""
    dispatcher = runner._users_dispatcher
    return dispatcher is not None and dispatcher.dispatch_in_progress
