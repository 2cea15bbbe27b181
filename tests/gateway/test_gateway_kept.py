"""A request whose edits cannot change it (``_kept``) is forwarded as the full path
forwards it, byte for byte, without its messages decoded; anything its edits or a
compaction block may change is left to the full path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.gateway import apply_context_management
from contextfold.gateway._kept import kept_as_is
from contextfold.gateway._wire import ParsedBody, parse_body
from contextfold.token import AnthropicEstimator

pytest.importorskip("msgspec")

NO_OP = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}


def full_path(raw: bytes) -> tuple[bytes, bool]:
    """What the full path forwards, and whether the request carried the field."""
    parsed = parse_body(raw)
    assert isinstance(parsed, ParsedBody)
    outcome = apply_context_management(parsed.data, AnthropicEstimator())
    return parsed.dumps(outcome.body), outcome.requested


def conversation(tool_output: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Fix it é."},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "look", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "make"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": tool_output}],
        },
    ]


_OUTPUT = st.text(st.characters(codec="utf-8"), max_size=40)
_FIELD = st.sampled_from(
    [
        None,
        NO_OP,
        {"edits": []},
        {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "all"}}]},
    ]
)


@settings(max_examples=200, deadline=None)
@given(output=_OUTPUT, field=_FIELD, ascii_only=st.booleans(), first=st.booleans())
def test_what_is_kept_is_what_the_full_path_forwards(
    output: str, field: dict[str, Any] | None, ascii_only: bool, first: bool
) -> None:
    body: dict[str, Any] = {"model": "m", "max_tokens": 10, "messages": conversation(output)}
    if field is not None:
        body = (
            {"context_management": field, **body}
            if first
            else {**body, "context_management": field}
        )
    raw = json.dumps(body, ensure_ascii=ascii_only).encode()
    kept = kept_as_is(raw)
    assert kept is not None  # ANSI escapes and the like do not spell "compaction"
    assert (kept.body, kept.requested) == full_path(raw)


@pytest.mark.parametrize(
    "raw",
    [
        # A compaction block, as sent or with a letter escaped: the full path applies it.
        json.dumps(
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "compaction", "content": "s"}]}
                ],
                "context_management": NO_OP,
            }
        ).encode(),
        b'{"messages":[{"role":"assistant","content":[{"type":"compactio\\u006E","content":"s"}]}]}',
        # Edits that may change the messages, or a field the full path rejects.
        json.dumps(
            {
                "messages": [],
                "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
            }
        ).encode(),
        json.dumps(
            {
                "messages": [],
                "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": 1}]},
            }
        ).encode(),
        json.dumps({"messages": [], "context_management": {"edits": "all"}}).encode(),
        # Not a list of messages, no messages, a repeated key, not JSON msgspec takes.
        b'{"messages":{"role":"user"}}',
        b'{"model":"m"}',
        b'{"messages":[],"messages":[]}',
        b'{"messages":[],"x":NaN}',
    ],
)
def test_what_the_edits_may_change_is_left_to_the_full_path(raw: bytes) -> None:
    assert kept_as_is(raw) is None


def test_escapes_do_not_hide_a_compaction_block() -> None:
    """Block types are read as JSON strings: a type spelled with escapes is still read,
    and many escapes elsewhere (ANSI colours in tool output) do not stop the reading."""
    colours = json.dumps({"messages": conversation("\x1b[0m" * 1000), "context_management": NO_OP})
    assert kept_as_is(colours.encode()) is not None
    hidden = colours.replace('"type": "thinking"', '"type": "compactio\\u006e"')
    assert hidden != colours
    assert kept_as_is(hidden.encode()) is None
    unhashable = colours.replace('"type": "thinking"', '"type": {"a": 1}')
    assert unhashable != colours
    assert kept_as_is(unhashable.encode()) is not None
