"""The engine loop's own writes at a step's end: what the socket did not take, or a client gone,
lands where the sink's slower path expects it (backlog, dues, closed), and lateness is counted
once per token."""

from __future__ import annotations

import gc
import time

import gevent

from tokenload.serving.http import Connection
from tokenload.sim.api import SimAPI
from tokenload.sim.engine import EngineConfig, RequestOutput, SimEngine
from tokenload.sim.faults import FaultConfig, FaultPlan
from tokenload.sim.loop import _sleep_until
from tokenload.sim.sinks import StreamSink


class _RawSock:
    """What gevent's socket wraps: a non-blocking ``send`` scripted per call."""

    def __init__(self, result: int | OSError | None) -> None:
        self.result = result
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> int:
        if isinstance(self.result, OSError):
            raise self.result
        n = len(data) if self.result is None else self.result
        self.sent.append(data[:n])
        return n


class _Sock:
    def __init__(self, result: int | OSError | None) -> None:
        self._sock = _RawSock(result)
        self.head = b""

    def sendall(self, data: bytes) -> None:
        self.head += data

    def settimeout(self, timeout: float | None) -> None:
        pass


def _api() -> SimAPI:
    return SimAPI(
        SimEngine("h100-llama3.1-8b", EngineConfig(max_model_len=4096)), None, FaultPlan(FaultConfig())
    )


def _stream(api: SimAPI, rid: str, result: int | OSError | None) -> StreamSink:
    sink = StreamSink(api, Connection(_Sock(result)), rid, False, [rid], [7], {}, None)  # type: ignore[arg-type]
    sink.begin()
    return sink


def _step(api: SimAPI, sinks: list[StreamSink], k: int, due: float) -> list:
    loop = api.loop
    writes = [s.prepare(RequestOutput(s.rid, [1], "a", False, None, 7, k, 0)) for s in sinks]
    sent_s = loop._write_all(writes, due)
    loop._finish_writes(writes, sent_s, due)
    loop._fold_lateness()
    return writes


def test_full_partial_blocked_and_gone_writes() -> None:
    api = _api()
    full = _stream(api, "full", None)
    partial = _stream(api, "partial", 10)
    blocked = _stream(api, "blocked", BlockingIOError())
    gone = _stream(api, "gone", BrokenPipeError())
    writes = _step(api, [full, partial, blocked, gone], 1, due=0.0)
    assert all(w[0] is not None for w in writes)  # all four were the loop's own writes
    data = [w[1] for w in writes]

    assert full.conn.sock._sock.sent == [data[0]] and not full.backlog
    assert partial.backlog == data[1][10:] and partial.backlog_dues == [] and partial.wake.is_set()
    assert blocked.backlog == data[2] and blocked.backlog_dues == [0.0] and blocked.wake.is_set()
    assert gone.closed and not gone.conn._keep_alive and gone.wake.is_set() and not gone.backlog
    for sink in (full, partial, blocked, gone):
        assert sink.first_sent[0] is not None and sink.last_sent[0] == sink.first_sent[0]
    # Lateness of a token counts once its first byte is out: the blocked one's when it drains.
    assert api.loop.lateness_ms.count == 2

    # Next step: the sinks with a backlog queue behind it (their own greenlet drains it), the
    # closed one gets nothing, the healthy one is written by the loop again.
    writes = _step(api, [full, partial, blocked], 2, due=1.0)
    assert [w[0] is not None for w in writes] == [True, False, False]
    assert partial.backlog.endswith(writes[1][1][2]) and partial.backlog_dues == [1.0]
    assert blocked.backlog_dues == [0.0, 1.0]
    assert gone.prepare(RequestOutput("gone", [1], "a", False, None, 7, 2, 0)) is None
    assert api.loop.lateness_ms.count == 3
    assert full.last_sent[0] > full.first_sent[0]


class _Collect:
    def __init__(self) -> None:
        self.outs: list[tuple[RequestOutput, float]] = []
        self.gc_on_delivery: list[bool] = []

    def prepare(self, out: RequestOutput) -> tuple:
        return (None, out, self)

    def deliver(self, out: RequestOutput, due_s: float) -> None:
        self.outs.append((out, due_s))
        self.gc_on_delivery.append(gc.isenabled())


def test_cyclic_gc_is_off_while_steps_run_and_back_when_idle() -> None:
    api = _api()
    loop = api.loop
    assert gc.isenabled()
    loop.start()
    try:
        sink = _Collect()
        loop.submit("r", sink, prompt_token_ids=[1] * 10, max_tokens=4, ignore_eos=True)
        deadline = time.monotonic() + 10
        while len(sink.outs) < 4 and time.monotonic() < deadline:
            gevent.sleep(0.01)
        gevent.sleep(0.01)
        assert [o.num_output_tokens for o, _ in sink.outs] == [1, 2, 3, 4] and sink.outs[-1][0].finished
        assert sink.gc_on_delivery == [False] * 4
        assert gc.isenabled()  # idle again
        assert loop.lateness_ms.count == 0  # a sink that writes nothing itself reports nothing
    finally:
        loop.stop()
        gevent.sleep(0)
    assert gc.isenabled()


def test_sleep_until_wakes_shortly_before_the_target() -> None:
    early_ms = []
    for ahead_s in (0.0003, 0.0012, 0.0021, 0.0049, 0.0123):
        target = time.perf_counter() + ahead_s
        _sleep_until(target)
        early_ms.append((target - time.perf_counter()) * 1000)
    # Whole-millisecond timers: never more than ~1.25 ms early (late only if the OS says so).
    assert max(early_ms) < 1.3, early_ms
