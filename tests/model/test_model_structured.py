"""Structured output: how many attempts it took, and what each retry tells the model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextfold import StructuredOutputError
from contextfold.message import Msg, ToolSpec
from contextfold.model import ScriptedModel, StructuredOutput, tool_reply

from .model_scenarios import PERSON_SCHEMA

ASK = [Msg("user", "Invent a person.", "user")]
VALID = {"name": "Ada", "age": 36}
INVALID: list[dict[str, Any]] = [{"name": "Ada"}, {"name": "Ada", "age": "old"}]


@pytest.mark.parametrize("invalid", [0, 1, 2])
async def test_the_result_counts_the_attempts_it_took(invalid: int) -> None:
    model = ScriptedModel([*INVALID[:invalid], VALID])
    out = await model.structured_output(ASK, PERSON_SCHEMA)
    assert out == StructuredOutput(value=VALID, attempts=invalid + 1)


async def test_the_error_after_the_last_attempt_carries_the_attempts_made() -> None:
    model = ScriptedModel(INVALID)
    with pytest.raises(StructuredOutputError) as info:
        await model.structured(ASK, PERSON_SCHEMA, max_attempts=2)
    assert info.value.attempts == 2
    assert "after 2 attempts" in str(info.value)


async def test_a_retry_is_the_first_request_plus_its_validation_error() -> None:
    model = ScriptedModel([INVALID[0], VALID])
    assert await model.structured(ASK, PERSON_SCHEMA) == VALID
    first, second = model.requests
    assert second.messages != first.messages
    assert second.messages[: len(first.messages)] == first.messages
    assert "'age' is a required property" in second.messages[-1].text


# -- text mode: the conversation's tools stay on offer, the answer is JSON as text ----------

READ = ToolSpec(name="read_log", description="Read a log.", parameters={"type": "object"})


async def test_a_text_mode_retry_asks_for_the_json_object_not_for_a_tool_call() -> None:
    """The retry note after a JSON answer that broke the schema (the attempt stays in
    text mode) must not ask for a tool call that is not on offer: it asks for the JSON
    object again, no tool called."""
    model = ScriptedModel([json.dumps(INVALID[0]), json.dumps(VALID)])
    out = await model.structured_output(ASK, PERSON_SCHEMA, name="person", offered=[READ])
    assert out == StructuredOutput(value=VALID, attempts=2)
    assert model.requests[1].tool_choice is None
    note = model.requests[1].messages[-1].text
    assert "'age' is a required property" in note
    assert "Call person" not in note
    assert "JSON object" in note


async def test_the_attempt_after_an_answer_that_ignored_the_format_forces_the_tool() -> None:
    """A model that called one of its tools instead of answering with the JSON is not
    asked for text again (it mostly does the same; llama-cpp-python's function-calling
    server cannot answer JSON text at all): the next attempt forces the schema's tool, and
    its note asks for that call, which is now on offer."""
    model = ScriptedModel([tool_reply(("read_log", {})), VALID])
    out = await model.structured_output(ASK, PERSON_SCHEMA, name="person", offered=[READ])
    assert out == StructuredOutput(value=VALID, attempts=2)
    first, second = model.requests
    assert first.tool_choice is None
    assert [t.name for t in first.tools] == ["read_log"]
    assert second.tool_choice == "person"
    assert [t.name for t in second.tools] == ["person"]
    note = second.messages[-1].text
    assert "called 'read_log'" in note
    assert "Call person" in note


async def test_text_mode_falls_back_to_the_forced_tool_when_answers_were_not_json() -> None:
    """After a text answer that held no JSON (prose), the attempts that follow force the
    schema's tool, even when a forced answer fails too: a constrained answer is worth the
    one prompt-cache miss (the forced requests after the first extend it)."""
    model = ScriptedModel(["I will read the log first.", INVALID[0], VALID])
    out = await model.structured_output(ASK, PERSON_SCHEMA, name="person", offered=[READ])
    assert out == StructuredOutput(value=VALID, attempts=3)
    first, second, last = model.requests
    assert first.tool_choice is None
    assert [t.name for t in first.tools] == ["read_log"]
    assert second.tool_choice == "person"
    assert last.tool_choice == "person"
    assert [t.name for t in last.tools] == ["person"]
    assert last.messages[: len(second.messages)] == second.messages


async def test_text_mode_keeps_the_offered_tools_when_the_answer_was_json() -> None:
    """A JSON answer that broke the schema is retried as text: the model can follow the
    format, and the request keeps the conversation's prefix."""
    model = ScriptedModel([json.dumps(INVALID[0]), json.dumps(INVALID[1]), json.dumps(VALID)])
    out = await model.structured_output(ASK, PERSON_SCHEMA, name="person", offered=[READ])
    assert out.attempts == 3
    assert all(r.tool_choice is None for r in model.requests)
    assert all([t.name for t in r.tools] == ["read_log"] for r in model.requests)
