"""Which chunks count as content, how many tokens each carries, and the stream's end states."""

import json

import pytest

from tokenload.client.openai_stream import MalformedChunk, StreamState, build_request_body


def cmpl(text, finish=None, usage=None, logprobs=None, cid="cmpl-1"):
    obj = {"id": cid, "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj)


def chat(delta, finish=None, usage=None):
    obj = {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj)


def test_completions_counts_incomplete_utf8_chunk_but_not_terminator() -> None:
    s = StreamState(chat=False)
    s.on_event(cmpl("a"), 1.0)
    s.on_event(cmpl(""), 2.0)  # a token that completes no character yet: vLLM sends ""
    s.on_event(cmpl("é"), 3.0)
    s.on_event(cmpl("", finish="length"), 4.0)  # terminator only
    s.on_event(
        json.dumps({"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}),
        5.0,
    )
    s.on_event("[DONE]", 6.0)
    assert s.content_times == [1.0, 2.0, 3.0]
    assert s.chunk_tokens == 3 and s.output_tokens == 3 and s.prompt_tokens == 5
    assert s.finished and s.finish_reason == "length" and s.response_id == "cmpl-1"


def test_chat_role_chunk_and_usage_chunk_are_not_content() -> None:
    s = StreamState(chat=True)
    s.on_event(chat({"role": "assistant", "content": ""}), 1.0)
    s.on_event(chat({"content": "Hi"}), 2.0)
    s.on_event(chat({"content": ""}), 3.0)
    s.on_event(chat({"content": "!"}, finish="stop"), 4.0)
    s.on_event(json.dumps({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}), 4.5)
    assert s.content_times == [2.0, 3.0, 4.0]
    assert s.output_tokens == 3


def test_chat_reasoning_and_tool_calls_are_content() -> None:
    s = StreamState(chat=True)
    s.on_event(chat({"reasoning_content": "think"}), 1.0)
    s.on_event(chat({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}), 2.0)
    assert s.content_times == [1.0, 2.0]


def test_continuous_usage_gives_exact_tokens_per_chunk() -> None:
    s = StreamState(chat=False)
    s.on_event(cmpl("ab", usage={"prompt_tokens": 4, "completion_tokens": 2}), 1.0)
    s.on_event(cmpl("cde", usage={"prompt_tokens": 4, "completion_tokens": 5}), 2.0)
    s.on_event(cmpl("", finish="length", usage={"prompt_tokens": 4, "completion_tokens": 5}), 3.0)
    assert s.content_tokens == [2, 3]
    assert s.output_tokens == 5


def test_logprobs_give_tokens_per_chunk() -> None:
    s = StreamState(chat=False)
    s.on_event(cmpl("ab", logprobs={"tokens": ["a", "b"], "token_logprobs": [0, 0]}), 1.0)
    assert s.content_tokens == [2]


def test_python_json_extras_still_parse() -> None:
    # Python's json writes -Infinity for a -inf logprob; the fast parser refuses it, the fallback reads it.
    s = StreamState(chat=False)
    s.on_event(cmpl("ab", logprobs={"tokens": ["a", "b"], "token_logprobs": [float("-inf"), 0]}), 1.0)
    assert s.content_tokens == [2]


@pytest.mark.parametrize(
    "payload",
    [
        json.dumps({"error": {"object": "error", "message": "boom", "code": 500}}),
        json.dumps({"object": "error", "message": "boom", "type": "InternalServerError", "code": 500}),
    ],
)
def test_error_objects_in_the_stream(payload: str) -> None:
    s = StreamState(chat=False)
    s.on_event(payload, 1.0)
    assert s.error == "boom"


@pytest.mark.parametrize(
    "payload",
    ["{not json", "[1, 2]", json.dumps({"choices": [{"delta": "x"}]}), json.dumps({"choices": "x"})],
)
def test_malformed_chunks(payload: str) -> None:
    with pytest.raises(MalformedChunk):
        StreamState(chat=True).on_event(payload, 1.0)


def test_request_body_has_vllm_extras() -> None:
    body = json.loads(
        build_request_body(
            chat=False, model="m", prompt=[1, 2, 3], max_tokens=8, ignore_eos=True, min_tokens=8
        )
    )
    assert body["prompt"] == [1, 2, 3] and body["ignore_eos"] is True and body["min_tokens"] == 8
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    chat_body = json.loads(build_request_body(chat=True, model="m", prompt="hi", continuous_usage=False))
    assert chat_body["messages"] == [{"role": "user", "content": "hi"}]
    assert chat_body["stream_options"] == {"include_usage": True}
