"""Counting's shortcut past the converter gives the converter's count, for any message."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock, openai_wire_texts
from contextfold.token import OpenAITokenCounter

from ..message.strategies import msg as any_msg

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Shapes the shortcut takes, drawn often; converter metadata sends a message the long way.
common_msg = st.builds(
    Msg,
    name=st.just("agent"),
    content=st.text(max_size=20)
    | st.lists(
        st.builds(TextBlock, text=st.text(max_size=20))
        | st.builds(
            ToolCallBlock,
            id=st.just("c1"),
            name=st.text(max_size=8),
            input=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5)),
        ),
        max_size=4,
    )
    | st.lists(
        st.builds(
            ToolResultBlock,
            id=st.just("c1"),
            name=st.just("bash"),
            output=st.text(max_size=30) | st.lists(st.builds(TextBlock, text=st.text(max_size=9))),
        ),
        min_size=1,
        max_size=3,
    ),
    role=st.sampled_from(["user", "assistant", "system"]),
    metadata=st.just({}) | st.just({"openai": {"content": "parts"}}) | st.just({"openai": 1}),
)


def _converted(counter: OpenAITokenCounter, msg: Msg) -> int:
    return counter._count_converted(msg) + sum(counter.count_text(b.thinking) for b in msg.thinking)


@SETTINGS
@given(msg=common_msg | any_msg)
def test_the_shortcut_counts_what_the_converter_sends(msg: Msg) -> None:
    counter = OpenAITokenCounter()
    assert counter.count_message(msg) == _converted(counter, msg)


@SETTINGS
@given(msg=common_msg)
def test_common_shapes_take_the_shortcut(msg: Msg) -> None:
    kinds = {type(b) for b in msg.blocks()}
    if msg.role == "assistant":
        plain = kinds <= {TextBlock, ToolCallBlock}
    else:
        plain = kinds <= {TextBlock} or (msg.role == "user" and kinds == {ToolResultBlock})
    valid = plain and not isinstance(msg.metadata.get("openai"), dict)
    assert (openai_wire_texts(msg) is not None) == valid


def test_an_assistant_turn_with_two_texts_counts_them_as_two_parts() -> None:
    msg = Msg(
        "agent",
        [TextBlock(text="first"), TextBlock(text="second"), ToolCallBlock(id="c", name="f")],
        "assistant",
    )
    assert openai_wire_texts(msg) == [(["assistant", "first", "second", "f", "{}"], 1)]
