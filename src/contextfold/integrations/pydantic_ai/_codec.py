"""Pydantic AI messages to ``Msg`` and back: a request or a response is one message.

System prompt parts are not history: the processor takes them off the first request
before folding and puts them back on the first message it returns.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from pydantic_ai.messages import (
    CachePoint,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ..._exceptions import MessageFormatError
from ...context import SummaryLayer, is_summary
from ...message import (
    ContentBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    Usage,
)

__all__ = ["PydanticAICodec", "split_system", "with_system"]

_KEY = "contextfold"  # ModelRequest.metadata key of the summary layer's JSON (never sent)


class PydanticAICodec:
    """One ``ModelRequest`` or ``ModelResponse`` is one ``Msg``."""

    def key(self, item: ModelMessage) -> Hashable:
        parts = [
            (p.part_kind, str(getattr(p, "content", "")), getattr(p, "tool_call_id", None))
            for p in item.parts
        ]
        return (item.kind, json.dumps(parts, default=str))

    def to_msgs(self, items: Sequence[ModelMessage]) -> list[tuple[Msg, list[ModelMessage]]]:
        return [(to_msg(item), [item]) for item in items]

    def from_msg(self, msg: Msg) -> list[ModelMessage]:
        if msg.role == "assistant":
            parts: list[ModelResponsePart] = [
                ThinkingPart(content=b.thinking, signature=b.signature) for b in msg.thinking
            ]
            if msg.text:
                parts.append(TextPart(content=msg.text))
            parts.extend(
                ToolCallPart(tool_name=c.name, args=c.input, tool_call_id=c.id)
                for c in msg.tool_calls
            )
            return [ModelResponse(parts=parts)]
        if is_summary(msg):
            # One text per part of the summary, then a cache point: the model's adapter
            # (Anthropic, Bedrock, ...) marks the summary's end as a prefix to cache, and an
            # appended part follows the blocks the provider cached.
            layer = SummaryLayer.from_msg(msg)
            prompt = UserPromptPart(content=[*layer.parts, CachePoint()])
            return [ModelRequest(parts=[prompt], metadata={_KEY: layer.to_json()})]
        request: list[ModelRequestPart] = [
            ToolReturnPart(tool_name=r.name, content=r.text(), tool_call_id=r.id)
            for r in msg.tool_results
        ]
        if msg.text:
            request.append(UserPromptPart(content=msg.text))
        return [ModelRequest(parts=request)]


def to_msg(item: ModelMessage) -> Msg:
    """One Pydantic AI message as a ``Msg``."""
    blocks: list[ContentBlock] = []
    if isinstance(item, ModelResponse):
        for part in item.parts:
            if isinstance(part, TextPart):
                blocks.append(TextBlock(text=part.content))
            elif isinstance(part, ThinkingPart):
                blocks.append(ThinkingBlock(thinking=part.content, signature=part.signature))
            elif isinstance(part, ToolCallPart):
                blocks.append(
                    ToolCallBlock(
                        id=part.tool_call_id, name=part.tool_name, input=part.args_as_dict()
                    )
                )
        msg = Msg("assistant", blocks, "assistant")
        u = item.usage
        msg.usage = Usage(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_tokens,
        )
        return msg
    saved = (item.metadata or {}).get(_KEY)
    for rpart in item.parts:
        if isinstance(rpart, ToolReturnPart):
            blocks.append(
                ToolResultBlock(
                    id=rpart.tool_call_id, name=rpart.tool_name, output=rpart.model_response_str()
                )
            )
        elif isinstance(rpart, RetryPromptPart):
            if rpart.tool_name:
                blocks.append(
                    ToolResultBlock(
                        id=rpart.tool_call_id,
                        name=rpart.tool_name,
                        output=rpart.model_response(),
                        is_error=True,
                    )
                )
            else:
                blocks.append(TextBlock(text=rpart.model_response()))
        elif isinstance(rpart, UserPromptPart):
            content = rpart.content
            if isinstance(content, str):
                blocks.append(TextBlock(text=content))
            elif isinstance(saved, dict):  # the summary's parts, one block each
                blocks.extend(TextBlock(text=text) for text in _texts(content))
            else:
                blocks.append(TextBlock(text="\n".join(_texts(content))))
        elif not isinstance(rpart, SystemPromptPart):
            raise MessageFormatError(f"cannot fold a Pydantic AI {rpart.part_kind!r} part")
    if isinstance(saved, dict):
        texts = [b.text for b in blocks if isinstance(b, TextBlock)]
        return SummaryLayer.restore(saved, texts).msg
    return Msg("user", blocks, "user")


def _texts(content: Sequence[Any]) -> list[str]:
    """The text items of a user prompt's content; cache points are markers, not content."""
    items = [c for c in content if not isinstance(c, CachePoint)]
    texts = [c for c in items if isinstance(c, str)]
    if len(texts) != len(items):
        raise MessageFormatError(
            "cannot fold a user prompt with images or files yet: only text parts are supported"
        )
    return texts


def split_system(messages: list[ModelMessage]) -> tuple[list[SystemPromptPart], list[ModelMessage]]:
    """The first request's system prompt parts, and the history without them."""
    if not messages or not isinstance(messages[0], ModelRequest):
        return [], messages
    first = messages[0]
    system = [p for p in first.parts if isinstance(p, SystemPromptPart)]
    if not system:
        return [], messages
    rest = [p for p in first.parts if not isinstance(p, SystemPromptPart)]
    return system, [replace(first, parts=rest), *messages[1:]]


def with_system(system: list[SystemPromptPart], messages: list[ModelMessage]) -> list[ModelMessage]:
    """``messages`` with ``system`` on the first request (a new one if it is a response)."""
    if not system:
        return messages
    if messages and isinstance(messages[0], ModelRequest):
        first = messages[0]
        return [replace(first, parts=[*system, *first.parts]), *messages[1:]]
    return [ModelRequest(parts=list(system)), *messages]
