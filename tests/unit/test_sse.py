"""SSE decoder: table tests for the edge cases and properties over arbitrary splits."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenload.client.sse import SSEDecodeError, SSEDecoder, SSEEvent


def decode(chunks: list[bytes]) -> list[SSEEvent]:
    d = SSEDecoder()
    events = []
    for c in chunks:
        events += d.feed(c)
    return events + d.close()


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (b"data: a\n\n", [SSEEvent("a")]),
        (b"data: a\r\n\r\n", [SSEEvent("a")]),
        (b"data: a\r\rdata: b\r\r", [SSEEvent("a"), SSEEvent("b")]),
        (b"data: line1\ndata: line2\n\n", [SSEEvent("line1\nline2")]),
        (b": keep-alive\n\ndata: x\n\n", [SSEEvent("x")]),
        (b"event: error\ndata: {}\n\n", [SSEEvent("{}", event="error")]),
        (b"id: 7\ndata: x\n\n", [SSEEvent("x", id="7")]),
        (b"data:nospace\n\n", [SSEEvent("nospace")]),
        (b"data:  two spaces\n\n", [SSEEvent(" two spaces")]),
        (b"data: [DONE]\n\n", [SSEEvent("[DONE]")]),
        (b"data: last-without-blank-line", [SSEEvent("last-without-blank-line")]),
        (b"data: last\n", [SSEEvent("last")]),
        (b"\n\n\n", []),
        (b"retry: 10\nunknown: y\ndata: z\n\n", [SSEEvent("z")]),
        ("data: héllo ✓\n\n".encode(), [SSEEvent("héllo ✓")]),
        (b"data\n\n", [SSEEvent("")]),
    ],
)
def test_cases(stream: bytes, expected: list[SSEEvent]) -> None:
    assert decode([stream]) == expected
    # Byte by byte gives the same events: splits, CRLF across chunks, UTF-8 across chunks.
    assert decode([stream[i : i + 1] for i in range(len(stream))]) == expected


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    assert decode([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [SSEEvent("a\nb")]


def test_event_type_resets_after_dispatch() -> None:
    assert decode([b"event: error\ndata: 1\n\ndata: 2\n\n"]) == [SSEEvent("1", event="error"), SSEEvent("2")]


def test_invalid_utf8_is_a_classified_error() -> None:
    with pytest.raises(SSEDecodeError):
        decode([b"data: \xff\xfe\n\n"])


def test_unbounded_line_is_a_classified_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tokenload.client.sse.MAX_LINE_BYTES", 100)
    d = SSEDecoder()
    with pytest.raises(SSEDecodeError):
        d.feed(b"data: " + b"x" * 200)


_field_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20
)


@st.composite
def valid_streams(draw: st.DrawFn) -> tuple[bytes, list[SSEEvent]]:
    events = draw(
        st.lists(
            st.tuples(st.lists(_field_text, min_size=1, max_size=3), st.sampled_from(["", "error", "x"])),
            max_size=6,
        )
    )
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    out, expected = [], []
    for lines, etype in events:
        if draw(st.booleans()):
            out.append(": comment" + eol)
        if etype:
            out.append(f"event: {etype}{eol}")
        out += [f"data: {line}{eol}" for line in lines]
        out.append(eol)
        expected.append(SSEEvent("\n".join(lines), event=etype or "message"))
    return "".join(out).encode(), expected


@settings(max_examples=300, deadline=None)
@given(valid_streams(), st.data())
def test_any_split_yields_the_same_events(case: tuple[bytes, list[SSEEvent]], data: st.DataObject) -> None:
    stream, expected = case
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert decode(chunks) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_random_bytes_raise_only_the_decoders_error(chunks: list[bytes]) -> None:
    try:
        decode(chunks)
    except SSEDecodeError:
        pass
