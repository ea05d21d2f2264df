"""Losing a process of a distributed run: a worker on the master's side, the master on a worker's.

* **A worker lost** (killed, its host gone): Locust marks a worker ``missing`` after about four
  seconds without a heartbeat and drops it from the user dispatch, but fires no event. The master
  polls ``runner.clients`` here; each worker seen ``missing`` is logged, added to the run's
  ``workers_lost`` (summary.json, llm_stats.json) with when it was last heard from and when it
  was found lost, and its users are dispatched again onto the survivors (Locust does that itself
  only with ``--enable-rebalancing``). What it reported before it died stays in the results; the
  requests it made after its last report (at most one report interval) are lost with it.
* **The master lost**: Locust's worker quits after 60 s without a master heartbeat. The watchdog
  here ends the worker sooner, after :data:`MASTER_SILENCE_LIMIT_S` of its own one-second ticks
  without one (counted in ticks, so a worker that was itself stalled does not misread the
  silence), with exit code :data:`MASTER_LOST_EXIT_CODE`.
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust.env import Environment
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent

from tokenload.loadgen.locust_private import dispatch_in_progress

if TYPE_CHECKING:
    from tokenload.loadgen.plugin import RunContext

__all__ = [
    "MASTER_LOST_EXIT_CODE",
    "MASTER_SILENCE_LIMIT_S",
    "MasterWatchdog",
    "WorkerLossWatch",
    "step_at",
    "watch",
]

log = logging.getLogger("tokenload")

#: How often the master looks for workers Locust has marked missing.
POLL_S = 0.5
#: A worker quits after this many one-second ticks without a heartbeat from its master. Well above
#: the master's own pauses (Locust resets a broken RPC server within 5 s).
MASTER_SILENCE_LIMIT_S = 15
#: A worker that quit because its master went silent exits with this code: its run did not finish.
MASTER_LOST_EXIT_CODE = 1
#: How long a rebalance waits for a ramp-up in progress to finish before giving up.
REBALANCE_WAIT_S = 30.0


def step_at(windows: list[Any], t: float) -> int | None:
    """The index of the step window (see phases.StepWindow) that was open at time ``t``."""
    for w in reversed(windows):
        if w.start <= t and (w.end is None or t < w.end):
            return w.index
    return None


class WorkerLossWatch:
    """Master side: names every worker Locust marks missing, once, in ``lost`` (dicts, see
    :meth:`check`), and dispatches the run's users again onto the workers that are left."""

    def __init__(
        self,
        runner: MasterRunner,
        lost: list[dict[str, Any]],
        windows: Callable[[], list[Any]] = list,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runner = runner
        self.lost = lost
        self._windows = windows
        self._clock = clock
        #: client id -> Unix time the master last heard from it (heartbeat or report)
        self.last_seen: dict[str, float] = {}
        #: client id -> records it reported (kept in requests.jsonl)
        self.records: dict[str, int] = {}
        self._known: set[str] = set()
        self._stopped = False

    def on_heartbeat(self, client_id: str, timestamp: float | None = None, **_kw: Any) -> None:
        self.last_seen[client_id] = timestamp or self._clock()

    def on_report(self, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
        self.last_seen[client_id] = self._clock()
        payload = data.get("tokenload") or {}
        self.records[client_id] = self.records.get(client_id, 0) + len(payload.get("records") or [])

    def check(self) -> list[dict[str, Any]]:
        """Workers newly seen missing: appended to ``lost`` and returned."""
        now = self._clock()
        new = []
        for client_id in list(self.runner.clients):
            node = self.runner.clients.get(client_id)
            if node is None:
                continue
            if client_id in self._known:
                if node.state != STATE_MISSING:  # it came back (a network partition, not a death)
                    self._known.discard(client_id)
                    self._rejoined(client_id, now)
                continue
            if node.state != STATE_MISSING:
                continue
            self._known.add(client_id)
            index = self.runner.get_worker_index(client_id)
            seen = self.last_seen.get(client_id, now)
            windows = self._windows()
            step = step_at(windows, seen)
            entry = {
                "worker": client_id,
                "worker_index": index,
                "worker_name": f"w{index}",
                "last_seen_at": seen,
                "lost_at": now,
                "step": step if step is not None else step_at(windows, now),
                "records_reported": self.records.get(client_id, 0),
            }
            self.lost.append(entry)
            new.append(entry)
        return new

    def _rejoined(self, client_id: str, now: float) -> None:
        for entry in self.lost:
            if entry["worker"] == client_id and "rejoined_at" not in entry:
                entry["rejoined_at"] = now
                log.warning("tokenload: worker %s (%s) is back", entry["worker_name"], client_id)

    def rebalance(self) -> bool:
        """Dispatch the current target onto the remaining workers once no ramp-up is running."""
        runner = self.runner
        deadline = time.monotonic() + REBALANCE_WAIT_S
        while time.monotonic() < deadline and not self._stopped:
            if runner.state not in (STATE_RUNNING, STATE_SPAWNING) or not runner.target_user_count:
                return False
            if runner.worker_count <= 0:
                return False
            if runner.spawning_completed and not dispatch_in_progress(runner):
                runner.start(runner.target_user_count, runner.spawn_rate)
                return True
            gevent.sleep(0.2)
        return False

    def run(self) -> None:
        while not self._stopped:
            gevent.sleep(POLL_S)
            for entry in self.check():
                left = self.runner.worker_count
                log.warning(
                    "tokenload: worker %s (%s) lost: no heartbeat since %s, found missing at %s%s; its %d"
                    " reported requests are kept, requests after its last report are lost with it;"
                    " its users are rebalanced onto the %d remaining worker(s)",
                    entry["worker_name"],
                    entry["worker"],
                    _clock_text(entry["last_seen_at"]),
                    _clock_text(entry["lost_at"]),
                    "" if entry["step"] is None else f", in step {entry['step']}",
                    entry["records_reported"],
                    left,
                )
                gevent.spawn(self.rebalance)

    def stop(self, **_kw: Any) -> None:
        self._stopped = True


class MasterWatchdog:
    """Worker side: counts one-second ticks without a heartbeat from the master (only once one has
    arrived); at ``limit`` it ends this worker with ``exit_code``."""

    def __init__(self, quit: Callable[[], None], limit: int = MASTER_SILENCE_LIMIT_S) -> None:
        self._quit = quit
        self.limit = limit
        self.silent_ticks = 0
        self._heard = False
        self._ever = False
        self._stopped = False

    def on_heartbeat(self, **_kw: Any) -> None:
        self._heard = self._ever = True

    def tick(self) -> bool:
        """One tick: True when the master has been silent for ``limit`` ticks."""
        if self._heard:
            self._heard = False
            self.silent_ticks = 0
        elif self._ever:
            self.silent_ticks += 1
        return self.silent_ticks >= self.limit

    def run(self) -> None:
        while not self._stopped:
            gevent.sleep(1.0)
            if self.tick():
                log.error(
                    "tokenload: no heartbeat from the master for %d s: it is gone; this worker quits"
                    " (exit code %d)",
                    self.silent_ticks,
                    MASTER_LOST_EXIT_CODE,
                )
                self._stopped = True
                self._quit()

    def stop(self, **_kw: Any) -> None:
        self._stopped = True


def watch(environment: Environment, ctx: RunContext) -> None:
    """Start the watcher this process needs (``init``): ``ctx`` is the run's RunContext, whose
    ``workers_lost`` list the master fills."""
    runner = environment.runner
    events = environment.events
    if isinstance(runner, MasterRunner):
        loss = WorkerLossWatch(runner, ctx.fleet.workers_lost, lambda: ctx.steps.windows)
        events.heartbeat_sent.add_listener(loss.on_heartbeat)
        events.worker_report.add_listener(loss.on_report)
        events.quitting.add_listener(loss.stop)
        gevent.spawn(loss.run)
    elif isinstance(runner, WorkerRunner):

        def quit_worker() -> None:
            environment.process_exit_code = MASTER_LOST_EXIT_CODE
            runner.quit()

        dog = MasterWatchdog(quit_worker)
        events.heartbeat_received.add_listener(dog.on_heartbeat)
        events.quitting.add_listener(dog.stop)
        gevent.spawn(dog.run)
        log.info(
            "tokenload: worker %s (%s, pid %d) connected to the master at %s:%s",
            ctx.worker_name,
            runner.client_id,
            os.getpid(),
            runner.master_host,
            runner.master_port,
        )


def _clock_text(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 10)}"
