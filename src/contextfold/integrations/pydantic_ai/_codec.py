"""Pydantic AI messages to ``Msg`` and back: a request or a response is one message.

System prompt parts are not history: the processor takes them off the first request
before folding and puts them back on the first message it returns.

Every part type passes (issue 26: an image in a prompt raised, and a cut tool return lost
its image). Images, documents, audio and video in prompts, tool returns and generated
files are data blocks, so images are counted by the image model and kept to
``max_image_num`` (the oldest replaced by a text marker). A tool return's result carries
its part's envelope (kind, outcome, metadata), so a cut return goes back as the same part
with its files. Any other part (built-in tools' calls and returns, compaction, speech,
the capability and instruction deltas, an uploaded file, ...) is a text block: a tag and
the part's JSON, which names its structure to a summary and converts back as it was. The
folder sends every message the engine did not change as the very message it came from.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Hashable, Sequence
from contextlib import suppress
from dataclasses import replace
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    CachePoint,
    DocumentUrl,
    FilePart,
    FileUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
    VideoUrl,
)

from ...context import SummaryLayer, is_summary
from ...message import (
    Base64Source,
    ContentBlock,
    DataBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultContent,
    URLSource,
    Usage,
)

__all__ = ["PART_TAG", "PydanticAICodec", "split_system", "with_system"]

_KEY = "contextfold"  # ModelRequest.metadata key of the summary layer's JSON (never sent)
_PART = "contextfold.pydantic_ai_part"  # a result's metadata: its tool return's envelope

PART_TAG = "[Pydantic AI part] "
"""What starts the text of a part carried as its JSON."""

_REQUEST = TypeAdapter(ModelRequestPart)
_RESPONSE = TypeAdapter(ModelResponsePart)
_USER = TypeAdapter(UserContent)
_URLS: dict[str, type[ImageUrl] | type[AudioUrl] | type[VideoUrl]] = {
    "image": ImageUrl,
    "audio": AudioUrl,
    "video": VideoUrl,
}
_DEFAULT_MEDIA = {ImageUrl: "image/*", AudioUrl: "audio/*", VideoUrl: "video/*"}


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
            if any(_tagged(b) is not None or isinstance(b, DataBlock) for b in msg.blocks()):
                return [ModelResponse(parts=_response_parts(msg.blocks()))]
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
        request: list[ModelRequestPart] = [_return_part(r) for r in msg.tool_results]
        rest = [b for b in msg.blocks() if not isinstance(b, ToolResultBlock)]
        if any(_tagged(b) is not None or isinstance(b, DataBlock) for b in rest):
            request.extend(_request_parts(rest))
        elif msg.text:
            request.append(UserPromptPart(content=msg.text))
        return [ModelRequest(parts=request)]


def to_msg(item: ModelMessage) -> Msg:
    """One Pydantic AI message as a ``Msg``."""
    blocks: list[ContentBlock] = []
    if isinstance(item, ModelResponse):
        for part in item.parts:
            blocks.extend(_response_blocks(part))
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
            blocks.append(_result(rpart))
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
            elif all(isinstance(c, str | CachePoint) for c in content):
                blocks.append(TextBlock(text="\n".join(_texts(content))))
            else:
                blocks.extend(_user_blocks(content))
        else:
            blocks.append(TextBlock(text=PART_TAG + _REQUEST.dump_json(rpart).decode()))
    if isinstance(saved, dict):
        texts = [b.text for b in blocks if isinstance(b, TextBlock)]
        return SummaryLayer.restore(saved, texts).msg
    return Msg("user", blocks, "user")


def _texts(content: Sequence[Any]) -> list[str]:
    """The text items of a user prompt's content; cache points are markers, not content."""
    return [c for c in content if isinstance(c, str)]


def _data(item: BinaryContent | FileUrl) -> DataBlock:
    if isinstance(item, BinaryContent):
        encoded = base64.b64encode(item.data).decode()
        return DataBlock(source=Base64Source(media_type=item.media_type, data=encoded))
    try:
        media: str | None = item.media_type
    except ValueError:  # not inferable from the URL: the kind's wildcard
        media = _DEFAULT_MEDIA.get(type(item), "application/octet-stream")
    return DataBlock(source=URLSource(url=item.url, media_type=media))


def _user_blocks(content: Sequence[Any]) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for c in content:
        if isinstance(c, str):
            blocks.append(TextBlock(text=c))
        elif isinstance(c, TextContent):
            blocks.append(TextBlock(text=c.content))
        elif isinstance(c, BinaryContent | FileUrl):
            blocks.append(_data(c))
        elif not isinstance(c, CachePoint):
            blocks.append(TextBlock(text=PART_TAG + _USER.dump_json(c).decode()))
    return blocks


def _file(block: DataBlock) -> BinaryContent | ImageUrl | AudioUrl | VideoUrl | DocumentUrl:
    source = block.source
    if isinstance(source, Base64Source):
        return BinaryContent(data=source.decode(), media_type=source.media_type)
    media = None if source.media_type in (None, *_DEFAULT_MEDIA.values()) else source.media_type
    url_type = _URLS.get(block.kind)
    if url_type is None:
        return DocumentUrl(url=source.url, media_type=media)
    return url_type(url=source.url, media_type=media)


def _tagged(block: ContentBlock) -> dict[str, Any] | None:
    """The JSON of a part (or prompt item) a text block carries, or None."""
    if not isinstance(block, TextBlock) or not block.text.startswith(PART_TAG):
        return None
    try:
        value = json.loads(block.text[len(PART_TAG) :])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _request_parts(blocks: Sequence[ContentBlock]) -> list[ModelRequestPart]:
    """A request's blocks besides tool results: tagged parts as they were, the rest as
    user prompts (text and files; a tagged prompt item back in its prompt)."""
    parts: list[ModelRequestPart] = []
    prompt: list[UserContent] = []
    for block in blocks:
        tagged = _tagged(block)
        if tagged is not None and "part_kind" in tagged:
            if prompt:
                parts.append(UserPromptPart(content=prompt))
                prompt = []
            parts.append(_REQUEST.validate_python(tagged))
        elif tagged is not None:
            prompt.append(_USER.validate_python(tagged))
        elif isinstance(block, DataBlock):
            prompt.append(_file(block))
        elif isinstance(block, TextBlock):
            prompt.append(block.text)
    if prompt:
        parts.append(UserPromptPart(content=prompt))
    return parts


def _response_blocks(part: ModelResponsePart) -> list[ContentBlock]:
    if isinstance(part, TextPart):
        return [TextBlock(text=part.content)]
    if isinstance(part, ThinkingPart):
        return [ThinkingBlock(thinking=part.content, signature=part.signature)]
    if isinstance(part, ToolCallPart):
        call = ToolCallBlock(id=part.tool_call_id, name=part.tool_name, input=part.args_as_dict())
        return [call]
    if isinstance(part, FilePart):
        described = _RESPONSE.dump_python(part, mode="json")
        described.pop("content", None)
        return [TextBlock(text=PART_TAG + json.dumps(described)), _data(part.content)]
    return [TextBlock(text=PART_TAG + _RESPONSE.dump_json(part).decode())]


def _response_parts(blocks: Sequence[ContentBlock]) -> list[ModelResponsePart]:
    """An assistant message holding foreign parts, block by block in order; a file the
    image limit removed leaves its placeholder as text."""
    parts: list[ModelResponsePart] = []
    for i, block in enumerate(blocks):
        tagged = _tagged(block)
        if tagged is not None and tagged.get("part_kind") == "file":
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            if isinstance(after, DataBlock):
                parts.append(FilePart(**_file_fields(tagged), content=_binary(after)))
        elif tagged is not None:
            parts.append(_RESPONSE.validate_python(tagged))
        elif isinstance(block, TextBlock):
            parts.append(TextPart(content=block.text))
        elif isinstance(block, ThinkingBlock):
            parts.append(ThinkingPart(content=block.thinking, signature=block.signature))
        elif isinstance(block, ToolCallBlock):
            parts.append(
                ToolCallPart(tool_name=block.name, args=block.input, tool_call_id=block.id)
            )
    return parts


def _file_fields(tagged: dict[str, Any]) -> dict[str, Any]:
    return {k: tagged.get(k) for k in ("id", "provider_name", "provider_details")}


def _binary(block: DataBlock) -> BinaryContent:
    file = _file(block)
    if isinstance(file, BinaryContent):
        return file
    return BinaryContent(data=b"", media_type=block.media_type)


def _result(part: ToolReturnPart) -> ToolResultBlock:
    """A tool return as a result: its text and files, and its envelope to convert back."""
    envelope = _REQUEST.dump_python(part, mode="json")
    for field in ("content", "content_file_digests"):
        envelope.pop(field, None)
    text = part.model_response_str()
    files = part.files
    output: str | list[ToolResultContent] = text
    if files:
        output = [TextBlock(text=text)]
        for f in files:
            if isinstance(f, BinaryContent | FileUrl):
                output.append(_data(f))
            else:  # an uploaded file: named, converts back
                output.append(TextBlock(text=PART_TAG + _USER.dump_json(f).decode()))
    return ToolResultBlock(
        id=part.tool_call_id, name=part.tool_name, output=output, metadata={_PART: envelope}
    )


def _return_part(r: ToolResultBlock) -> ModelRequestPart:
    """A result as its tool return: the cut text, and the files the image limit left."""
    blocks = r.output if isinstance(r.output, list) else [TextBlock(text=r.output)]
    text = "\n".join(b.text for b in blocks if isinstance(b, TextBlock) and _tagged(b) is None)
    files: list[Any] = [_file(b) for b in blocks if isinstance(b, DataBlock)]
    files.extend(_USER.validate_python(t) for b in blocks if (t := _tagged(b)) is not None)
    content: Any = [text, *files] if files else text
    envelope = r.metadata.get(_PART)
    if isinstance(envelope, dict):
        candidates = [content]
        if envelope.get("tool_kind") and not files:
            with suppress(ValueError):  # a framework tool's typed return, when not cut
                candidates.insert(0, json.loads(text))
        for candidate in candidates:
            try:
                # The text already holds the error wrapping: the envelope must not add it again.
                fields = {**envelope, "content": candidate, "outcome": "success"}
                return _REQUEST.validate_python(fields)
            except ValidationError:
                continue
    return ToolReturnPart(tool_name=r.name, content=content, tool_call_id=r.id)


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
