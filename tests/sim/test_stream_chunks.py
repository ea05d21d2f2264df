"""The streamed chunks the engine loop writes itself are byte for byte the generic ones."""

from __future__ import annotations

import pytest

from tokenload.serving.http import Connection
from tokenload.sim.api import SimAPI
from tokenload.sim.engine import EngineConfig, RequestOutput, SimEngine
from tokenload.sim.faults import FaultConfig, FaultPlan
from tokenload.sim.sinks import StreamSink


def _sink(chat: bool, opts: dict) -> StreamSink:
    engine = SimEngine("h100-llama3.1-8b", EngineConfig(max_model_len=4096))
    api = SimAPI(engine, None, FaultPlan(FaultConfig()))
    return StreamSink(api, Connection(None), "cmpl-abc", chat, ["cmpl-abc"], [7], opts, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("text", ["a", " the", "", '"', "\\", "\n", "é", "日本", "\U0001f600", "\x00"])
def test_fast_chunk_is_the_generic_chunk(chat: bool, text: str) -> None:
    sink = _sink(chat, {})
    sink.send = len  # stands in for the socket's send
    out = RequestOutput("cmpl-abc", [1], text, False, None, 7, 3, 0)
    send, framed, owner = sink.prepare(out)
    assert owner is sink and send is len  # written by the loop itself
    assert framed == Connection.frame(sink._chunk(0, text, None))


def test_continuous_usage_and_last_chunks_take_the_generic_path() -> None:
    sink = _sink(False, {"include_usage": True, "continuous_usage_stats": True})
    sink.send = len
    send, framed, _ = sink.prepare(RequestOutput("cmpl-abc", [1], "a", False, None, 7, 3, 0))
    assert send is len and framed == Connection.frame(sink._chunk(0, "a", None))
    assert b'"completion_tokens":3' in framed
    sink = _sink(False, {})
    sink.send = len
    send, _, _ = sink.prepare(RequestOutput("cmpl-abc", [2], "b", True, "length", 7, 4, 0))
    assert send is None  # the last token also ends the stream: the sink delivers it
