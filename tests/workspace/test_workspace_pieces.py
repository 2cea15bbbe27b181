"""Large bodies are encoded, serialized and indexed in pieces, to the same bytes and text.

Issue 28, point 7: a 100 MB tool result or message was encoded, dumped to JSON and
parsed for the index in single calls that hold the GIL (and so the event loop) for 0.1 to
0.5 s each. The piecewise versions must give exactly what the single calls give; the
pieces are made tiny here so every boundary case (an escape, a multi-byte character, a
surrogate pair cut by a window) is crossed by short strings.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.context import _offload
from contextfold.message import (
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from contextfold.workspace import _line_text, _pieces
from contextfold.workspace._search import context_docs
from contextfold.workspace._terms import message_text

CHARS = st.sampled_from(
    ["a", "b", " ", '"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "€", "😀", "\u2028", "/"]
)
TEXT = st.lists(CHARS, max_size=60).map("".join)


def _blocks(draw: st.DrawFn) -> Msg:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return Msg("u", draw(TEXT), "user")
    if kind == 1:
        return Msg.of_blocks("t", [ToolResultBlock(id="r", name="n", output=draw(TEXT))], "user")
    blocks = [
        TextBlock(text=draw(TEXT)),
        ThinkingBlock(thinking=draw(TEXT), signature=draw(TEXT)),
        HintBlock(hint=draw(TEXT)),
        ToolResultBlock(id="r", name="n", output=[TextBlock(text=draw(TEXT))]),
    ]
    if kind == 3:  # arguments re-encoded by the index: a large string there is parsed whole
        blocks.append(ToolCallBlock(id="c", name="n", input={"a": draw(TEXT)}))
    return Msg.of_blocks("t", blocks, "assistant", metadata={"k": draw(TEXT)})


messages = st.composite(_blocks)()


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pieces, "PIECE_CHARS", 5)
    monkeypatch.setattr(_line_text, "HUGE_LINE", 40)
    monkeypatch.setattr(_line_text, "_BIG", 4)
    monkeypatch.setattr(_line_text, "_WINDOW", 7)


# No deadline: the first long string starts a worker process (contextfold._process).
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(msgs=st.lists(messages, min_size=1, max_size=3), text=TEXT)
def test_pieces_are_the_bytes_of_the_single_calls(tiny: None, msgs: list[Msg], text: str) -> None:
    want = "".join(f"{m.model_dump_json()}\n" for m in msgs).encode()
    assert b"".join(_pieces.message_lines(msgs)) == want
    assert _pieces.join_pieces(_pieces.encode_pieces(text)) == text.encode()


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msgs=st.lists(messages, min_size=1, max_size=3), limit=st.integers(1, 80))
def test_huge_line_text_is_the_parsed_text_cut(tiny: None, msgs: list[Msg], limit: int) -> None:
    payload = "".join(f"{m.model_dump_json()}\n" for m in msgs).encode()
    got = list(_line_text.line_texts(payload, limit))
    lines = payload.decode().split("\n")[:-1]
    assert len(got) == len(lines)
    for line, text in zip(lines, got, strict=True):
        whole = message_text(line)
        if len(line.encode()) > _line_text.HUGE_LINE:
            assert text == whole[:limit]
        else:
            assert text == whole


@pytest.mark.parametrize(
    "line",
    [
        b'{"content": "abc\\q bad escape, long enough to be big"}',  # json.loads refuses
        b'{"content": "raw \x01 control character in a long string"}',
        b'["not", "a", "message, but a long enough string to hide"]',
        b'{"content": "\\ud83d\\ude00\\ud83d\\ude00\\ud83d\\ude00 pairs cut by windows"}',
        b'{"content": "invalid \xff\xfe utf-8 \xe2\x82 in a long enough string"}',
        b'{"content": [{"type": "text", "text": "unterminated string that is long',
    ],
)
def test_odd_huge_lines_read_as_the_parser_reads_them(tiny: None, line: bytes) -> None:
    whole = message_text(line.decode("utf-8", "replace"))
    assert list(_line_text.line_texts(line + b"\n", 1000)) == [whole]
    assert list(_line_text.line_texts(line, 10)) == [whole[:10]]


def test_context_docs_of_a_huge_message_match_the_whole_parse() -> None:
    """Real sizes: a 3 MB message is indexed from its skeleton, to the same documents."""
    text = "".join(f'line {n} with words_and.paths/x.py "quoted" é\n' for n in range(60_000))
    msg = Msg.of_blocks("t", [ToolResultBlock(id="r", name="n", output=text)], "user")
    payload = b"".join(_pieces.message_lines([msg, Msg("u", "small one", "user")]))
    assert len(payload) > 2 * _line_text.HUGE_LINE
    docs = context_docs(payload, 3)
    lines = payload.decode().split("\n")[:-1]
    assert json.loads(lines[0])["content"][0]["output"] == text
    assert [d.line for d in docs] == [3, 4]
    assert docs[0].text == message_text(lines[0])[:20_000]
    assert docs[0].source == message_text(lines[0])[:2_000_000]
    assert docs[1].text == "small one"


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300)
@given(value=JSONISH)
def test_offload_digest_in_pieces_is_the_single_digest(value: object) -> None:
    """The engine's offload index key (``SessionOffload``) of a long tool result is
    computed a piece at a time in a worker thread; it is the same key (keys are saved in
    the session state, so a resumed session must find what it offloaded)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_offload, "_PIECE", 3)
        assert _offload._digest_in_pieces("result", ["n", value]) == _offload._digest(
            "result", ["n", value]
        )
