"""A completions user whose process stalls its event loop on purpose: 25 ms of blocking work
every 50 ms (bounded: at most 600 stalls), so reads fall behind the tokens queued for them."""

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust import events

import time

import gevent

from tokenload.loadgen.user import CompletionsUser

STALL_S, EVERY_S, MOST = 0.025, 0.05, 600


@events.test_start.add_listener
def _stall(**_kw: object) -> None:
    def loop() -> None:
        for _ in range(MOST):
            time.sleep(STALL_S)  # not gevent's: nothing else runs meanwhile
            gevent.sleep(EVERY_S - STALL_S)

    gevent.spawn(loop)


class Stalled(CompletionsUser):
    pass
