"""A background loop on a greenlet of its own, started and stopped with its owner."""

from __future__ import annotations

import gevent

__all__ = ["GreenletTask"]


class GreenletTask:
    """Subclasses implement :meth:`_run`; :meth:`start` spawns it once, :meth:`stop` kills it
    without waiting."""

    _greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _run(self) -> None:
        raise NotImplementedError
