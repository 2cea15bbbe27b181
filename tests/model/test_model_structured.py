"""Structured output: how many attempts it took, and what each retry tells the model."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold import StructuredOutputError
from contextfold.message import Msg
from contextfold.model import ScriptedModel, StructuredOutput

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
