"""The API server in front of the emulated engine, as CPU that requests queue for. Pure.

A real vLLM's API server (one process, or ``--api-server-count`` of them) parses each request's
HTTP and JSON and tokenizes its prompt before the engine sees it. That is CPU work, done for one
request at a time per process: past the processes' capacity, requests queue *in front of* the
engine, whose own queue stays empty while its batch runs below the load. The emulator models it
as ``api_server_count`` first-come-first-served servers, a request going to each in turn (the
kernel spreads a listening port's connections over the processes), each request costing

    ``api_request_cpu_s + api_prompt_token_cpu_s * prompt_tokens``

seconds of one process (the profile's fields, zero in the built-in profiles: no public
measurement pins them). The engine gets the request when its process is done; its TTFT and E2E
count from its arrival at the server, its queue time from when the engine got it, as vLLM's
do. So a saturated API server shows where it does on a real one: the server's TTFT mostly
outside its queue and prefill, nothing waiting, fewer requests running than users.

Where the API server shares the engine's CPU core (``api_shares_engine_cpu``: vLLM's CPU build
on a host that gives the server one core, as the real-vLLM tier does), the two take turns on it:
the operating system's scheduler gives each half the core while both have work. A request's CPU
time then takes twice as long while the engine has work, and the engine loses that CPU time:
the driver adds it to the engine's next step (``SimEngine.add_stall``; :meth:`APIServer.admit_to`
does both). Without that, a twin of such a server would see its engine slow down with the request
rate (and more with longer prompts) and no term to explain it. An idle engine (one that finds
nothing to run when it schedules a step) drops the CPU time it is owed: it had that time to
spare, and no later busy step carries it.

Separate from the profile's ``frontend_request_s`` (``fixed_s`` here, added after the queue and
CPU), a fixed latency that queues nothing (what was fitted to a public table that cannot tell the
two apart), and from ``output_token_overhead_s``, a
per-token cost inside the engine's step (streaming where the API server shares the engine's
CPU). Per-token work on the API server's side of the stream (detokenizing, SSE framing) is not
in this model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenload.sim.engine import SimEngine

__all__ = ["APIServer"]


class APIServer:
    """``count`` first-come-first-served API processes, requests assigned round robin."""

    __slots__ = (
        "_busy_until",
        "_engine_cpu_s",
        "_next",
        "count",
        "fixed_s",
        "prompt_token_s",
        "request_s",
        "shares_engine_cpu",
    )

    def __init__(
        self,
        count: int = 1,
        request_s: float = 0.0,
        prompt_token_s: float = 0.0,
        shares_engine_cpu: bool = False,
        fixed_s: float = 0.0,
    ) -> None:
        if count < 1:
            raise ValueError(f"api_server_count: expected at least 1, got {count}")
        if request_s < 0 or prompt_token_s < 0 or fixed_s < 0:
            raise ValueError("the API server's costs must not be negative")
        self.count = count
        self.request_s = request_s
        self.prompt_token_s = prompt_token_s
        self.shares_engine_cpu = shares_engine_cpu
        self.fixed_s = fixed_s
        self._busy_until = [float("-inf")] * count
        self._next = 0
        self._engine_cpu_s = 0.0

    @classmethod
    def for_engine(cls, engine: SimEngine) -> APIServer:
        """The API server in front of ``engine``: its config's ``api_server_count`` processes, at
        its profile's ``api_request_cpu_s``, ``api_prompt_token_cpu_s``,
        ``api_shares_engine_cpu`` and fixed ``frontend_request_s``."""
        profile = engine.profile
        return cls(
            engine.config.api_server_count,
            profile.api_request_cpu_s,
            profile.api_prompt_token_cpu_s,
            profile.api_shares_engine_cpu,
            profile.frontend_request_s,
        )

    @property
    def active(self) -> bool:
        """Whether requests cost the API server anything (else :meth:`admit` is the identity)."""
        return self.request_s > 0 or self.prompt_token_s > 0

    def cost_s(self, prompt_tokens: int) -> float:
        """CPU seconds one process spends on a request with this many prompt tokens."""
        return self.request_s + self.prompt_token_s * prompt_tokens

    def capacity_rps(self, prompt_tokens: int) -> float:
        """Requests per second the processes can pass to the engine at most."""
        cost = self.cost_s(prompt_tokens)
        return self.count / cost if cost > 0 else float("inf")

    def admit(self, at_s: float, prompt_tokens: int, engine_busy: bool = False) -> float:
        """When the engine gets a request that reached the server at ``at_s``. Call in the order
        requests arrive: each process serves its requests one at a time, in that order.
        ``engine_busy``: whether the engine has work then (matters only where the API server
        shares its core: the request's CPU time then takes twice as long, half of it the
        engine's, owed to the engine's next step: :meth:`take_engine_cpu_s`)."""
        if not self.active:
            return at_s
        slot = self._next
        self._next = (slot + 1) % self.count
        start = max(at_s, self._busy_until[slot])
        cost = self.cost_s(prompt_tokens)
        if self.shares_engine_cpu and engine_busy:
            self._engine_cpu_s += cost
            cost *= 2
        done = start + cost
        self._busy_until[slot] = done
        return done

    def take_engine_cpu_s(self) -> float:
        """The engine's CPU time the API server took since the last call (0 unless it shares the
        engine's core), and forget it: the driver adds it to the engine's next step."""
        owed, self._engine_cpu_s = self._engine_cpu_s, 0.0
        return owed

    def admit_to(self, engine: SimEngine, at_s: float, prompt_tokens: int) -> float:
        """:meth:`admit` a request for ``engine`` (busy if it has work now), and hand the engine
        the CPU time the API server took from it (:meth:`take_engine_cpu_s`, to
        ``SimEngine.add_stall``), then add the fixed latency ``fixed_s``: when the engine gets
        the request."""
        ready_s = self.admit(at_s, prompt_tokens, engine.has_work)
        engine.add_stall(self.take_engine_cpu_s())
        return ready_s + self.fixed_s
