"""Remembered wire forms: a request built from messages converted before is the request
built from fresh ones, whatever came before them, and editing it changes nothing else."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import MessageFormatError
from contextfold.message import (
    HintBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    anthropic_request,
    openai_request,
    to_openai_messages,
)

from .strategies import msg as any_msg

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# An agent's history: calls, results, hints in assistant turns (which change the user
# message after them), plain text; drawn often beside messages of any shape.
agent_msg = st.builds(
    Msg,
    name=st.just("agent"),
    content=st.text(max_size=8)
    | st.lists(
        st.builds(TextBlock, text=st.text(max_size=8))
        | st.builds(HintBlock, hint=st.text(max_size=8))
        | st.builds(ToolCallBlock, id=st.sampled_from(["c1", "c2"]), name=st.just("bash")),
        max_size=3,
    )
    | st.lists(
        st.builds(
            ToolResultBlock,
            id=st.sampled_from(["c1", "c2"]),
            name=st.just("bash"),
            output=st.text(max_size=8),
        ),
        min_size=1,
        max_size=2,
    ),
    role=st.sampled_from(["user", "assistant", "user", "system"]),
)
# Messages of any shape often make a request invalid (its error is compared then), so
# they come in short histories.
history = st.lists(agent_msg, max_size=8) | st.lists(agent_msg | any_msg, max_size=3)


def _fresh(msgs: list[Msg]) -> list[Msg]:
    """The same messages, never converted (an update drops what a message remembers)."""
    return [m.model_copy(update={"name": m.name}) for m in msgs]


def _build(kind: str, msgs: list[Msg]) -> Any:
    try:
        if kind == "openai":
            return openai_request(msgs)
        return anthropic_request(msgs, cache=True)
    except MessageFormatError as exc:
        return f"error: {exc}"


def _scribble(value: Any) -> None:
    """Edit a request in place, everywhere, as a caller might."""
    if isinstance(value, dict):
        for v in list(value.values()):
            _scribble(v)
        value["scribbled"] = True
    elif isinstance(value, list):
        for v in value:
            _scribble(v)
        value.append("scribbled")


@SETTINGS
@given(msgs=history, data=st.data(), kind=st.sampled_from(["openai", "anthropic"]))
def test_a_request_from_remembered_forms_is_the_request_from_fresh_messages(
    msgs: list[Msg], data: st.DataObject, kind: str
) -> None:
    first = _build(kind, msgs)
    assert first == _build(kind, _fresh(msgs))
    again = _build(kind, msgs)  # from what the messages remember
    assert again == first
    _scribble(again)
    assert _build(kind, msgs) == first
    # The same messages after other ones, in another order: the remembered forms must not
    # carry what came before them when they were first converted.
    repeats = st.lists(st.sampled_from(msgs), max_size=4) if msgs else st.just([])
    reordered = data.draw(st.permutations(msgs)) + data.draw(repeats)
    assert _build(kind, reordered) == _build(kind, _fresh(reordered))


def test_an_assistants_hint_reaches_the_next_user_message_it_was_converted_without() -> None:
    user = Msg("user", "look", "user")
    to_openai_messages([user])  # remembered without a hint before it
    hinted = Msg.of_blocks("agent", [TextBlock(text="ok"), HintBlock(hint="be brief")], "assistant")
    assert to_openai_messages([hinted, user]) == [
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>be brief</system-reminder>"},
                {"type": "text", "text": "look"},
            ],
        },
    ]
    assert to_openai_messages([user]) == [{"role": "user", "content": "look"}]


def test_editing_a_request_in_place_leaves_the_next_one_alone() -> None:
    call = Msg.of_blocks(
        "agent", [ToolCallBlock(id="c1", name="bash", input={"a": 1})], "assistant"
    )
    result = Msg.of_blocks("user", [ToolResultBlock(id="c1", name="bash", output="done")], "user")
    body = openai_request([call, result])
    body["messages"][0]["tool_calls"][0]["function"]["name"] = "rm"
    body["messages"][1]["content"] = "edited"
    again = openai_request([call, result])
    assert again["messages"][0]["tool_calls"][0]["function"]["name"] == "bash"
    assert again["messages"][1]["content"] == "done"


def test_a_copy_with_changes_is_converted_again() -> None:
    msg = Msg("user", "before", "user")
    to_openai_messages([msg])
    changed = msg.model_copy(update={"content": "after"})
    assert to_openai_messages([changed]) == [{"role": "user", "content": "after"}]
    assert to_openai_messages([msg]) == [{"role": "user", "content": "before"}]


def test_editing_a_breakpoint_leaves_the_next_request_alone() -> None:
    msgs = [Msg("system", "Be brief.", "system"), Msg("user", "hi", "user")]
    body = anthropic_request(msgs, cache=True)
    body["system"][0]["cache_control"]["ttl"] = "1h"
    body["messages"][0]["content"][0]["cache_control"]["ttl"] = "1h"
    again = anthropic_request(msgs, cache=True)
    assert again["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert again["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_what_a_message_remembers_does_not_change_what_it_equals() -> None:
    from contextfold.token import OpenAITokenCounter

    msg = Msg.of_blocks(
        "agent", [TextBlock(text="ok"), ToolCallBlock(id="c1", name="bash")], "assistant"
    )
    twin = msg.model_copy()
    OpenAITokenCounter().count_message(msg)
    to_openai_messages([msg])
    anthropic_request([msg], cache=True)
    assert msg == twin
    assert twin == msg
    assert msg != msg.model_copy(update={"name": "other"})
