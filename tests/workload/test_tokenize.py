"""The /tokenize-backed counter: its payloads and one-line errors, and exact prompts checked
against a real ``tokenload sim`` over loopback (prompt_tokens in usage, prefix-cache hits)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tokenload.serving.process import ServerProcess
from tokenload.workload.errors import PromptCountError, WorkloadError
from tokenload.workload.frames import Chat
from tokenload.workload.maker import PromptMaker
from tokenload.workload.prefix import SharedPrefixes, requested_hit_rate
from tokenload.workload.seeds import stream_for
from tokenload.workload.tokenize_api import TokenizeClient


class FakeServer:
    def __init__(self, status: int = 200, body: bytes | None = None, exc: OSError | None = None) -> None:
        self.status, self.body, self.exc = status, body, exc
        self.payloads: list[dict] = []

    def __call__(self, payload: dict) -> tuple[int, bytes]:
        self.payloads.append(payload)
        if self.exc is not None:
            raise self.exc
        if self.body is not None:
            return self.status, self.body
        n = len(payload.get("prompt") or json.dumps(payload.get("messages")))
        return self.status, json.dumps({"count": n, "max_model_len": 8192, "tokens": list(range(n))}).encode()


def test_payload_shapes_follow_vllm() -> None:
    server = FakeServer()
    client = TokenizeClient(server, "qwen")
    assert client("hello") == 5
    client([{"role": "user", "content": "hi"}])
    assert server.payloads[0] == {"model": "qwen", "prompt": "hello", "add_special_tokens": True}
    assert server.payloads[1] == {
        "model": "qwen",
        "messages": [{"role": "user", "content": "hi"}],
        "add_generation_prompt": True,
    }
    assert client.max_model_len == 8192 and client.calls == 2
    assert client.tokenize("abc").tokens == (0, 1, 2)


@pytest.mark.parametrize(
    ("server", "message"),
    [
        (
            FakeServer(exc=ConnectionRefusedError(111, "Connection refused")),
            "POST /tokenize: server unreachable ([Errno 111] Connection refused); "
            "exact prompt lengths need it",
        ),
        (
            FakeServer(exc=TimeoutError()),
            "POST /tokenize: server unreachable (TimeoutError); exact prompt lengths need it",
        ),
        (
            FakeServer(404, b'{"detail":"Not Found"}'),
            "POST /tokenize: 404, this server has no tokenize endpoint; give a tokenizer_file or use "
            "length_method: estimate",
        ),
        (
            FakeServer(400, b'{"error": {"message": "model `x` does not exist", "code": 400}}'),
            "POST /tokenize: HTTP 400: 'model `x` does not exist'",
        ),
        (FakeServer(500, b"<html>oops</html>"), "POST /tokenize: HTTP 500: b'<html>oops</html>'"),
        (FakeServer(200, b"not json"), "POST /tokenize: expected a JSON body, got b'not json'"),
        (
            FakeServer(200, b'{"tokens": [1, 2]}'),
            "POST /tokenize: expected a JSON object with an integer 'count', got {'tokens': [1, 2]}",
        ),
        (
            FakeServer(200, b'{"count": "3"}'),
            "POST /tokenize: expected a JSON object with an integer 'count', got {'count': '3'}",
        ),
    ],
)
def test_failures_are_one_line(server: FakeServer, message: str) -> None:
    with pytest.raises(WorkloadError) as e:
        TokenizeClient(server, "m")("x")
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("server", "passing"),
    [
        (FakeServer(exc=ConnectionRefusedError(111, "Connection refused")), True),
        (FakeServer(exc=TimeoutError()), True),
        (FakeServer(429, b"{}"), True),
        (FakeServer(503, b"{}"), True),
        (FakeServer(500, b"{}"), True),
        (FakeServer(404, b"{}"), False),
        (FakeServer(400, b"{}"), False),
        (FakeServer(200, b"not json"), False),
    ],
)
def test_failures_that_may_pass_fail_the_prompt_the_rest_the_run(server: FakeServer, passing: bool) -> None:
    # A busy server (429, 5xx, unreachable, a timeout) fails the prompt being counted; an endpoint
    # that is missing or answers nonsense is a set-up error that ends the run with one line.
    with pytest.raises(WorkloadError) as e:
        TokenizeClient(server, "m")("x")
    assert isinstance(e.value, PromptCountError) == passing


def test_the_error_reaches_the_caller_of_an_exact_search() -> None:
    maker = PromptMaker(count_tokens=TokenizeClient(FakeServer(exc=ConnectionResetError("reset")), "m"))
    with pytest.raises(WorkloadError, match=r"^POST /tokenize: server unreachable \(reset\)"):
        maker.make(100)


# -- against the real emulator ------------------------------------------------------------------


def _post(url: str, payload: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with ServerProcess(
        ["-m", "tokenload.sim", "--port", "0", "--max-model-len", "4096", "--enable-prefix-caching"]
    ) as srv:
        yield srv.url


def _prompt_tokens(url: str, path: str, body: dict) -> int:
    status, raw = _post(url + path, {**body, "max_tokens": 1})
    assert status == 200, raw
    return json.loads(raw)["usage"]["prompt_tokens"]


def _model(url: str) -> str:
    with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
        return json.load(r)["data"][0]["id"]


def test_exact_prompts_match_the_servers_usage(sim: str) -> None:
    model = _model(sim)
    client = TokenizeClient(lambda p: _post(sim + "/tokenize", p), model)
    maker = PromptMaker(model=model, count_tokens=client)
    for n in (121, 511, 2041):
        p = maker.make(n, seed=n)
        assert _prompt_tokens(sim, "/v1/completions", {"model": model, "prompt": p.render()}) == n
        c = maker.make(n, seed=n, frame=Chat(system="Be concise."))
        assert _prompt_tokens(sim, "/v1/chat/completions", {"model": model, "messages": c.render()}) == n
    assert client.max_model_len == 4096


def test_an_unreachable_tokenize_is_one_line() -> None:
    client = TokenizeClient(lambda p: _post("http://127.0.0.1:9/tokenize", p), "m")
    with pytest.raises(WorkloadError, match=r"^POST /tokenize: server unreachable \(.*\)"):
        client("hello")


def _scrape(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_requested_hit_rate_matches_the_servers_prefix_cache(sim: str) -> None:
    model = _model(sim)
    maker = PromptMaker(
        model=model, count_tokens=TokenizeClient(lambda p: _post(sim + "/tokenize", p), model)
    )
    prefixes = SharedPrefixes(maker, groups=3, prefix_tokens=600, chat=False, seed=11)
    rng = stream_for(0, 11)
    hits0 = _scrape(sim, "vllm:prefix_cache_hits_total")
    queries0 = _scrape(sim, "vllm:prefix_cache_queries_total")
    n_requests, n_tokens = 30, 1000
    for _ in range(n_requests):
        req = prefixes.next(n_tokens, rng)
        assert (
            _prompt_tokens(sim, "/v1/completions", {"model": model, "prompt": req.prompt.render()})
            == n_tokens
        )
    measured = (_scrape(sim, "vllm:prefix_cache_hits_total") - hits0) / (
        _scrape(sim, "vllm:prefix_cache_queries_total") - queries0
    )
    assert prefixes.requested_hit_rate == pytest.approx(0.6)
    # The server caches whole 16-token blocks and the first request of each group is a miss.
    warm = requested_hit_rate(600, n_tokens, block_size=16)
    assert measured == pytest.approx(warm * (n_requests - 3) / n_requests, abs=0.01)
