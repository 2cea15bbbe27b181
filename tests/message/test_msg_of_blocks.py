"""``Msg.of_blocks`` (the agent's unvalidated fast path) builds the same message as
``Msg(...)``, and falls back to ``Msg(...)`` for anything validation would change."""

import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from contextfold.message import (
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    URLSource,
    Usage,
)
from contextfold.message._msg import _new_id

BLOCKS: list[Any] = [
    TextBlock(text="hi"),
    ThinkingBlock(thinking="hm", signature="s"),
    DataBlock(source=URLSource(url="https://x/y.png", media_type="image/png")),
    ToolCallBlock(id="c1", name="bash", input={"command": "ls"}),
    ToolResultBlock(id="c1", name="bash", output="out", metadata={"k": 1}),
    HintBlock(hint="note"),
]
CASES: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("a", BLOCKS[:1] + BLOCKS[3:4], "assistant"), {}),
    (("a", BLOCKS[:2], "assistant"), {"usage": None}),
    (("a", BLOCKS[:1], "assistant"), {"usage": Usage(input_tokens=3)}),
    (("tool", BLOCKS[4:5], "user"), {}),
    (("runtime", BLOCKS[5:], "user"), {"metadata": {"marker": "x"}}),
    (("u", BLOCKS[2:3], "user"), {}),
    (("s", [], "system"), {}),
]


def _fixed(msg: Msg) -> dict[str, Any]:
    """Everything about ``msg`` but its random id and its timestamp."""
    return {
        "dict": {k: v for k, v in msg.__dict__.items() if k not in ("id", "created_at")},
        "order": list(msg.__dict__),
        "set": msg.model_fields_set,
        "private": msg.__pydantic_private__,
        "extra": msg.__pydantic_extra__,
        "json": msg.model_dump_json(exclude={"id", "created_at"}),
    }


@pytest.mark.parametrize(("args", "kwargs"), CASES)
def test_same_message_as_the_constructor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    fast, slow = Msg.of_blocks(*args, **kwargs), Msg(*args, **kwargs)
    assert _fixed(fast) == _fixed(slow)
    assert fast.content is not args[1]  # a copy, as validation makes
    assert all(a is b for a, b in zip(fast.content, slow.content, strict=True))
    if "metadata" in kwargs:
        assert fast.metadata is not kwargs["metadata"]
    uuid.UUID(hex=fast.id)
    assert fast.created_at[:4].isdigit()


def test_anything_validation_would_change_goes_through_validation() -> None:
    msg = Msg.of_blocks("a", [{"type": "text", "text": "x"}], "assistant")  # type: ignore[list-item]
    assert msg.content == [TextBlock(text="x")]
    with pytest.raises(ValidationError):
        Msg.of_blocks("a", [TextBlock(text="x")], "robot")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Msg.of_blocks("a", ["not a block"], "user")  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        Msg.of_blocks("a", [], "user", metadata={1: "x"})  # type: ignore[dict-item]


def test_new_ids_are_uuid4_hex() -> None:
    ids = {_new_id() for _ in range(500)}
    assert len(ids) == 500
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert parsed.hex == value
