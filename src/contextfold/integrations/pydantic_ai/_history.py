"""ContextfoldHistory: the engine as a Pydantic AI capability or history processor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Unpack

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.toolsets import FunctionToolset

from ...message import ToolSpec
from .._options import EngineOptions, Sessions, readback_reader
from .._readback import bound_readback
from ._codec import PydanticAICodec, split_system, with_system

__all__ = ["ContextfoldHistory"]


@dataclass(init=False)
class ContextfoldHistory(AbstractCapability[Any]):
    """Keeps every model request of a Pydantic AI agent in its window.

    As a capability (``Agent(..., capabilities=[ContextfoldHistory(...)])``) it sees the
    request's tools, so the count is exact, and it gives the agent ``Read``, ``Grep`` and
    ``Glob``. As a history processor (``capabilities=[ProcessHistory(history)]``) it counts the
    system prompt and history only; add :attr:`toolset` to the agent for the read-back
    tools. Either way the history Pydantic AI keeps becomes the summary and the kept
    messages, whole tool-call pairs only. One engine per ``conversation_id``; the
    read-back tools see only the items of the conversation they are called in. Takes the
    :class:`~contextfold.integrations.EngineOptions`.
    """

    def __init__(self, **options: Unpack[EngineOptions]) -> None:
        self.sessions: Sessions[ModelMessage] = Sessions(
            options, PydanticAICodec(), rewrites_history=True
        )
        reader = readback_reader(options)
        functions = (
            bound_readback(
                reader,
                options.get("config"),
                context=("ctx", RunContext[Any]),
                session_of=_conversation_of,
                why="the tool was called without a RunContext",
            )
            if reader is not None
            else []
        )
        self.toolset: FunctionToolset[Any] | None = (
            FunctionToolset(functions, docstring_format="google") if functions else None
        )

    def get_toolset(self) -> FunctionToolset[Any] | None:
        """The read-back tools, when the offloader is a workspace."""
        return self.toolset

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Fold the request's messages (its tools counted) and store the result as history."""
        tools = [
            ToolSpec(
                name=t.name, description=t.description or "", parameters=t.parameters_json_schema
            )
            for t in request_context.model_request_parameters.function_tools
        ]
        messages = await self._fold(ctx, list(request_context.messages), tools)
        request_context.messages = messages.copy()
        ctx.messages[:] = messages
        return request_context

    async def __call__(
        self, ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        """The history-processor form: ``capabilities=[ProcessHistory(history)]``."""
        return await self._fold(ctx, messages, [])

    async def _fold(
        self, ctx: RunContext[Any], messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> list[ModelMessage]:
        folder = self.sessions.get(_conversation_of(ctx) or "default")
        system, history = split_system(messages)
        prompt = "\n\n".join(p.content for p in system)
        last = messages[-1] if messages else None
        if isinstance(last, ModelRequest) and last.instructions:
            prompt = f"{prompt}\n\n{last.instructions}" if prompt else last.instructions
        folded = await folder.fold(history, prompt, tools)
        # The history is stored as returned, so the usage note (never stored) is not sent.
        return with_system(system, folded.history)


def _conversation_of(ctx: object) -> str | None:
    """The conversation of a model request or a tool call (its ``RunContext``):
    ``conversation_id`` (Pydantic AI gives every run one), ``"default"`` without it,
    ``None`` when there is no context at all."""
    if ctx is None:
        return None
    conversation = getattr(ctx, "conversation_id", None)
    return conversation if isinstance(conversation, str) and conversation else "default"
