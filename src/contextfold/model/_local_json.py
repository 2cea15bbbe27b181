"""Structured output from the embedded model: one JSON answer decoded under a grammar
built from the schema, instead of a tool call the tiny model would fumble."""

from __future__ import annotations

import json

from ..message import Msg, TextBlock, ToolSpec
from ._base import DEFAULT_STRUCTURED_DESCRIPTION, StructuredAnswer
from ._local_completion import Completion
from ._response import ChatResponse

__all__ = ["RETRY", "json_answer", "json_response", "schema_instruction"]

RETRY = "That output was invalid ({problem}). Try again."
"""What a retry tells the model after its answer (the ``_structured_retry`` hook)."""


def schema_instruction(tool: ToolSpec) -> Msg:
    """The system message showing the schema after the conversation (the prefix stays
    cached). The tiny model copes best with the bare schema; a custom description goes
    first."""
    custom = tool.description != DEFAULT_STRUCTURED_DESCRIPTION
    instruction = (
        (tool.description + "\n" if custom else "")
        + "Reply with only a JSON object matching this JSON schema:\n"
        + json.dumps(tool.parameters, ensure_ascii=False)
    )
    return Msg("system", instruction, "system")


def json_response(done: Completion) -> ChatResponse:
    """The answer as the model's listeners see it, like any call."""
    return ChatResponse(content=[TextBlock(text=done.text)], usage=done.usage())


def json_answer(done: Completion, model_name: str) -> StructuredAnswer:
    """The parsed answer, or the problem a retry reports back with the answer shown."""
    shown = (Msg(model_name, done.text, "assistant"),)
    try:
        # strict=False: the grammar lets a raw newline or tab into a string, which the
        # small model writes; the value is plain, and a retry would resend the answer.
        value = json.loads(done.text, strict=False)
    except json.JSONDecodeError as exc:
        problem = f"not valid JSON ({exc}); the answer may have hit max_tokens"
        return StructuredAnswer(problem=problem, shown=shown)
    return StructuredAnswer(value, shown=shown)
