"""One chat request as llama.cpp completions, like ``chatml-function-calling``: a plain
answer, a forced tool call, or first a constrained choice between a message and a tool
and then its body; tool arguments are decoded under their schema's grammar."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._exceptions import ModelError
from ..message import (
    ContentBlock,
    TextBlock,
    ToolCallBlock,
    ToolChoice,
    ToolSpec,
    Usage,
    forced_tool,
    tools_shown,
)
from ._local_completion import Complete, Completion
from ._local_grammar import GrammarCache
from ._response import ChatResponse, ModelStreamEvent, TextDelta, ToolCallDelta

__all__ = ["Constrain", "Emit", "Turn", "TurnRunner", "call_block", "check_tool_choice"]

Emit = Callable[[ModelStreamEvent], None]
Constrain = Callable[[ToolSpec], dict[str, Any] | None]


@dataclass
class Turn:
    """What one request produced, before it becomes a ChatResponse."""

    content: list[ContentBlock] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    stop_reason: str | None = None

    def response(self, model: str) -> ChatResponse:
        return ChatResponse(
            content=self.content,
            usage=Usage(
                input_tokens=self.prompt_tokens,
                output_tokens=self.completion_tokens,
                cache_read_tokens=self.cached_tokens,
            ),
            stop_reason=self.stop_reason,
            model=model,
        )


def check_tool_choice(tools: Sequence[ToolSpec], tool_choice: ToolChoice | None) -> None:
    """Raise ``ValueError`` for a choice the offered ``tools`` cannot satisfy."""
    names = {t.name for t in tools}
    if tool_choice not in (None, "auto", "none", "required") and tool_choice not in names:
        raise ValueError(f"tool_choice {tool_choice!r} names no offered tool: {sorted(names)}")
    if tool_choice == "required" and not tools:
        raise ValueError("tool_choice='required' needs at least one tool")


@dataclass(frozen=True)
class TurnRunner:
    """Plays one request through ``complete``; the caller holds the model's lock."""

    complete: Complete
    grammars: GrammarCache
    constrain: Constrain | None
    """Given the tool about to be called, the schema its arguments are decoded under."""

    def run(
        self,
        prompt: str,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
        emit: Emit | None,
    ) -> Turn:
        on_text = None if emit is None else (lambda t: emit(TextDelta(text=t)))
        if not tools_shown(tools, tool_choice):
            done = self.complete(prompt, on_text=on_text)
            return _text_turn(done, request=done)
        forced = forced_tool(tools, tool_choice)
        if forced is not None:
            return self._call(prompt, _by_name(tools, forced), emit, request=None)
        # Like chatml-function-calling: first a constrained choice, then its body.
        choice = self.complete(
            prompt,
            grammar=self.grammars.choice(tools, allow_message=tool_choice != "required"),
            max_tokens=64,
            temperature=0.0,
        )
        picked = choice.text.strip().removesuffix(":")
        if picked.startswith("functions."):
            turn = self._call(
                prompt + f"{picked}:\n",
                _by_name(tools, picked.removeprefix("functions.")),
                emit,
                request=choice,
            )
        else:
            done = self.complete(prompt + "message:\n", on_text=on_text)
            turn = _text_turn(done, request=choice)
        turn.completion_tokens += choice.completion_tokens
        return turn

    def _call(
        self, prompt: str, tool: ToolSpec, emit: Emit | None, *, request: Completion | None
    ) -> Turn:
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        on_text: Callable[[str], None] | None = None
        if emit is not None:
            emit(ToolCallDelta(index=0, id=call_id, name=tool.name))
            on_text = lambda t: emit(ToolCallDelta(index=0, arguments=t))  # noqa: E731
        schema = (self.constrain(tool) if self.constrain is not None else None) or tool.parameters
        done = self.complete(prompt, grammar=self.grammars.schema(schema), on_text=on_text)
        block = call_block(call_id, tool.name, done.text)
        stop = "max_tokens" if done.finish_reason == "length" else "tool_use"
        # The forced "functions.<name>:" prefix is prompt for llama.cpp; for a call the
        # model chose, the request's prompt is what it saw before choosing.
        first = done if request is None else request
        return Turn(
            content=[block],
            prompt_tokens=first.prompt_tokens,
            cached_tokens=first.cached_tokens,
            completion_tokens=done.completion_tokens,
            stop_reason=stop,
        )


def _by_name(tools: Sequence[ToolSpec], name: str) -> ToolSpec:
    for tool in tools:
        if tool.name == name:
            return tool
    raise ModelError(f"the model chose an unknown tool {name!r}")


def _text_turn(done: Completion, *, request: Completion) -> Turn:
    """A text answer; ``request`` is the completion that first read the request's prompt.

    When the model first chose between a message and a tool, that choice read the prompt
    and the answer's completion re-read it almost entirely from the cache: the response
    reports the choice's prompt figures, as a provider would for one request.
    """
    stop = "max_tokens" if done.finish_reason == "length" else "end_turn"
    content: list[ContentBlock] = [TextBlock(text=done.text.strip())] if done.text.strip() else []
    return Turn(
        content,
        prompt_tokens=request.prompt_tokens,
        cached_tokens=request.cached_tokens,
        completion_tokens=done.completion_tokens,
        stop_reason=stop,
    )


def call_block(call_id: str, name: str, text: str) -> ToolCallBlock:
    """A call with its parsed arguments, or with ``input_error`` when they are not an object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return ToolCallBlock(
            id=call_id, name=name, raw_input=text, input_error=f"arguments are not JSON: {exc}"
        )
    if not isinstance(value, dict):
        return ToolCallBlock(
            id=call_id,
            name=name,
            raw_input=text,
            input_error=f"arguments are a JSON {type(value).__name__}, not an object",
        )
    return ToolCallBlock(id=call_id, name=name, input=value, raw_input=text)
