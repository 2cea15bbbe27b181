"""The body decoded by msgspec (``_wire_fast``) is the body the standard library's
scanner gives: the same values (types included), the same places of its members and
messages, the same bytes forwarded; and a body msgspec does not take is left to the
standard library, which parses it as ``json.loads`` does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.gateway import _wire
from contextfold.gateway._wire import ParsedBody, parse_body
from contextfold.gateway._wire_fast import locate

pytest.importorskip("msgspec")

_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": _TEXT | st.lists(_VALUE)}
)
_BODY = st.dictionaries(_TEXT, _VALUE, max_size=4).flatmap(
    lambda rest: st.fixed_dictionaries(
        {"model": _TEXT, "messages": st.lists(_MESSAGE, max_size=4) | _VALUE}
    ).map(lambda main: {**rest, **main})
)
_FORMAT = st.sampled_from(
    [
        {"separators": (",", ":"), "ensure_ascii": False},
        {"ensure_ascii": True},
        {"indent": 2, "ensure_ascii": False},
        {"indent": "\t", "ensure_ascii": True},
    ]
)


def _slow(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``raw`` parsed by the standard library's path alone."""
    with monkeypatch.context() as patch:
        patch.setattr(_wire, "locate", lambda raw, text: None)
        return parse_body(raw)


@settings(max_examples=300, deadline=None)
@given(body=_BODY, options=_FORMAT)
def test_msgspec_parses_as_the_standard_library_does(
    body: dict[str, Any], options: dict[str, Any]
) -> None:
    monkeypatch = pytest.MonkeyPatch()
    raw = json.dumps(body, **options).encode()
    assert locate(raw, raw.decode()) is not None  # the fast path is the one tested
    fast, slow = parse_body(raw), _slow(raw, monkeypatch)
    assert isinstance(fast, ParsedBody)
    assert isinstance(slow, ParsedBody)
    assert repr(fast.data) == repr(slow.data)  # 1 and 1.0, -0.0 and 0.0 told apart
    assert fast.members == slow.members
    assert (fast.first, fast.sizes, fast.ends) == (slow.first, slow.sizes, slow.ends)
    assert fast.dumps(fast.data) == slow.dumps(slow.data) == raw
    # A member dropped, one replaced, the messages cut: the same bytes forwarded.
    key = next(iter(body))
    outs = []
    for parsed in (fast, slow):
        out = {k: v for k, v in parsed.data.items() if k != key}
        out["model"] = "replaced é"
        messages = parsed.data["messages"]
        if isinstance(messages, list) and messages:
            out["messages"] = messages[1:]
        outs.append(parsed.dumps(out))
    assert outs[0] == outs[1]
    assert json.loads(outs[0])["model"] == "replaced é"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":NaN,"messages":[]}',
        b'{"a":1e400}',
        b'{"a":"\\ud800","messages":[{"b":"\\udc00x"}]}',
        b'{"a":1,"b":2,"a":1}',
        b'{"a":1,"a":1,"b":2}',
        b'{"messages":[1],"messages":[1]}',
        b'{"a":"\xed\xa0\x80"}',
        b'\xef\xbb\xbf{"a":1}',
        b"[1]",
        b'{"a":1} x',
    ],
)
def test_what_msgspec_does_not_take_is_parsed_as_json_loads_parses_it(raw: bytes) -> None:
    monkeypatch = pytest.MonkeyPatch()
    try:
        expected: Any = ("value", repr(json.loads(raw)))
    except ValueError as exc:
        expected = ("error", type(exc))
    try:
        parsed = parse_body(raw)
        got: Any = ("value", repr(parsed.data if isinstance(parsed, ParsedBody) else parsed))
    except ValueError as exc:
        got = ("error", type(exc))
    assert got == expected
    if isinstance(parsed := _try(raw), ParsedBody):
        slow = _slow(raw, monkeypatch)
        assert parsed.members == slow.members


def _try(raw: bytes) -> Any:
    try:
        return parse_body(raw)
    except ValueError:
        return None
