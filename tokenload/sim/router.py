"""Several emulated replicas behind one address (``tokenload sim --replicas N --routing ...``):
what a gateway in front of a vLLM fleet looks like from the load generator. Each replica is a
whole emulated server on a port of its own, with its own engine and its own ``/metrics``; the
router's address takes the generation requests and hands each to one replica, in-process.

Routing policies (:data:`POLICIES`): ``round_robin``; ``random`` (seeded); ``least_requests``
(the fewest running plus waiting, as gateways' least-load policies do); ``weighted:W1,W2,...``
(replica i gets Wi of every sum(W) requests, spread as nginx's smooth weighted round robin does:
an uneven split, such as a sticky-session or prefix-affinity router sends a fleet). The router's
other routes (models, health, tokenize) are the first replica's; ``GET /sim/replicas`` lists
each replica's address and ``/metrics``; the router's own ``/metrics`` answers 404 naming them
(a gateway exports no engine's figures: scrape each replica, ``tokenload sweep --metrics-url
URL`` once per replica).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import Any

from tokenload.serving.http import Connection, HTTPServer, Request

__all__ = ["POLICIES", "Router", "parse_routing"]

POLICIES = ("round_robin", "random", "least_requests", "weighted:W1,W2,...")


def parse_routing(text: str, replicas: int) -> tuple[str, tuple[float, ...]]:
    """``(policy, weights)`` of a ``--routing`` value for ``replicas`` replicas; ValueError with
    one line naming what was expected."""
    name, _, rest = text.partition(":")
    if name in ("round_robin", "random", "least_requests") and not rest:
        return name, ()
    if name == "weighted":
        try:
            weights = tuple(float(w) for w in rest.split(","))
        except ValueError:
            weights = ()
        if len(weights) == replicas and all(w >= 0 for w in weights) and sum(weights) > 0:
            return name, weights
        if replicas == 1:
            raise ValueError(f"--routing: {text!r} routes between replicas: give --replicas 2 or more")
        raise ValueError(
            f"--routing: expected weighted:W1,...,W{replicas} (one weight >= 0 per replica), got {text!r}"
        )
    raise ValueError(f"--routing: expected one of {', '.join(POLICIES)}, got {text!r}")


class Router:
    """Picks a replica for each generation request by ``policy`` and serves it there."""

    def __init__(
        self,
        apis: Sequence[Any],
        urls: Sequence[str],
        policy: str,
        weights: tuple[float, ...] = (),
        seed: int = 0,
    ) -> None:
        self.apis = list(apis)
        self.urls = list(urls)
        self.policy = policy
        self.weights = weights
        self._rng = random.Random(seed)
        self._cycle = itertools.cycle(range(len(self.apis)))
        self._credit = [0.0] * len(self.apis)
        self._handlers = {
            path: [a.handler("POST", path) for a in self.apis]
            for path in ("/v1/completions", "/v1/chat/completions")
        }
        #: Generation requests handed to each replica.
        self.routed = [0] * len(self.apis)

    def pick(self) -> int:
        if self.policy == "round_robin":
            i = next(self._cycle)
        elif self.policy == "random":
            i = self._rng.randrange(len(self.apis))
        elif self.policy == "least_requests":
            load = [a.engine.num_running + a.engine.num_waiting for a in self.apis]
            i = load.index(min(load))
        else:
            # Smooth weighted round robin (nginx's upstream weights): deterministic, and each
            # replica's share of any run of requests is its weight's share, evenly spread.
            for j, w in enumerate(self.weights):
                self._credit[j] += w
            i = self._credit.index(max(self._credit))
            self._credit[i] -= sum(self.weights)
        self.routed[i] += 1
        return i

    def register(self, http: HTTPServer) -> None:
        first = self.apis[0]
        for path in self._handlers:
            http.route("POST", path)(self._generation(path))
        for method, path in (
            ("GET", "/v1/models"),
            ("GET", "/health"),
            ("GET", "/version"),
            ("POST", "/tokenize"),
            ("POST", "/detokenize"),
        ):
            http.routes[(method, path)] = first.handler(method, path)
        http.route("GET", "/sim/replicas")(self.replicas)
        http.route("GET", "/metrics")(self.metrics)

    def _generation(self, path: str) -> Callable[[Request, Connection], None]:
        handlers = self._handlers[path]

        def handle(req: Request, conn: Connection) -> None:
            handlers[self.pick()](req, conn)

        return handle

    def replicas(self, req: Request, conn: Connection) -> None:
        weights = ":" + ",".join(f"{w:g}" for w in self.weights) if self.weights else ""
        conn.respond_json(
            200,
            {
                "routing": self.policy + weights,
                "replicas": [
                    {"url": u, "metrics_url": f"{u}/metrics", "routed": n}
                    for u, n in zip(self.urls, self.routed, strict=True)
                ],
            },
        )

    def metrics(self, req: Request, conn: Connection) -> None:
        conn.respond_json(
            404,
            {
                "error": {
                    "message": "a router exports no engine's metrics: scrape each replica's "
                    + ", ".join(f"{u}/metrics" for u in self.urls),
                    "type": "NotFoundError",
                    "param": None,
                    "code": 404,
                }
            },
        )
