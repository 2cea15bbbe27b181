"""LangChain messages to ``Msg`` and back: one message each way, ids kept stable.

Every content block of langchain-core 1.x passes (issue 26: a prompt with a standard
``image`` or ``file`` block raised, and a tool message's image was not counted and was
lost when the message was cut). Images, audio, video and files given inline or by URL are
data blocks (images counted by the image model and kept to ``max_image_num``); a
``reasoning`` block is thinking; any other block (a server tool's call and result, a file
by id, provider-native blocks) is a text block: a tag and the block's JSON, which names it
to a summary and converts back as it was. The middleware sends every message the engine
did not change as the very message it came from.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Hashable, Sequence
from typing import Any, cast

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.utils.function_calling import convert_to_openai_tool

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
    ToolSpec,
    URLSource,
    Usage,
    from_openai_message,
    to_openai_messages,
)

__all__ = ["BLOCK_TAG", "LangChainCodec", "tool_specs"]

_KEY = "contextfold"  # additional_kwargs key: the summary layer's JSON

BLOCK_TAG = "[LangChain block] "
"""What starts the text of a content block carried as its JSON."""

_DATA = ("image", "audio", "video", "file")


class LangChainCodec:
    """One LangChain message is one ``Msg``; the summary is a ``HumanMessage`` marked in
    ``additional_kwargs``, so a restored state (a checkpointer) is read as a summary."""

    def key(self, item: AnyMessage) -> Hashable:
        if item.id is None:
            item.id = str(uuid.uuid4())  # the add_messages reducer wants ids as well
        return item.id

    def to_msgs(self, items: Sequence[AnyMessage]) -> list[tuple[Msg, list[AnyMessage]]]:
        return [(to_msg(item), [item]) for item in items]

    def from_msg(self, msg: Msg) -> list[AnyMessage]:
        if _rich(msg):
            out = _rich_messages(msg)
            for item in out:
                item.id = str(uuid.uuid4())
            return out
        out = cast(list[AnyMessage], convert_to_messages(to_openai_messages([msg])))
        for item in out:
            item.id = str(uuid.uuid4())
        if is_summary(msg):
            out[0].additional_kwargs[_KEY] = SummaryLayer.from_msg(msg).to_json()
        return out


def to_msg(item: BaseMessage) -> Msg:
    """One LangChain message as a ``Msg`` (tool messages as a user message of one result)."""
    if isinstance(item, ToolMessage):
        output: str | list[ToolResultContent] = (
            item.content if isinstance(item.content, str) else item.text
        )
        if isinstance(item.content, list) and not _plain(item.content):
            output = [b for b in _blocks(item.content) if not isinstance(b, ThinkingBlock)]
        block = ToolResultBlock(
            id=item.tool_call_id,
            name=item.name or "",
            output=output,
            is_error=item.status == "error",
        )
        return Msg("tool", [block], "user")
    if isinstance(item, AIMessage):
        blocks: list[ContentBlock] = [TextBlock(text=item.text)] if item.text else []
        if isinstance(item.content, list) and not _plain(item.content):
            blocks = list(_blocks(item.content))
        blocks.extend(
            ToolCallBlock(id=call["id"] or "", name=call["name"], input=call["args"])
            for call in item.tool_calls
        )
        msg = Msg(item.name or "assistant", blocks, "assistant")
        if item.usage_metadata:
            msg.usage = _usage(item.usage_metadata)
        return msg
    if isinstance(item, SystemMessage):
        return Msg("system", item.text, "system")
    if isinstance(item, HumanMessage):
        saved = item.additional_kwargs.get(_KEY)
        if isinstance(saved, dict):
            # Written by an earlier version: {"metadata": the summary message's metadata}.
            legacy = saved.get("metadata")
            return SummaryLayer.restore(
                legacy if isinstance(legacy, dict) else saved, _summary_parts(item)
            ).msg
        if isinstance(item.content, str):
            return Msg(item.name or "user", item.content, "user")
        if _plain(item.content):
            return from_openai_message({"role": "user", "content": item.content})
        return Msg(item.name or "user", list(_blocks(item.content)), "user")
    # Any other message (a ChatMessage, a FunctionMessage, ...): its JSON, as the user's.
    return Msg("user", [TextBlock(text=BLOCK_TAG + item.model_dump_json())], "user")


def _plain(content: str | list[Any]) -> bool:
    """Whether content is text only (the OpenAI ``image_url`` form is read as before)."""
    if isinstance(content, str):
        return True
    return all(
        isinstance(b, str) or (isinstance(b, dict) and b.get("type") in ("text", "image_url"))
        for b in content
    )


def _blocks(content: list[Any]) -> list[ToolResultContent | ThinkingBlock]:
    """Content blocks as ours: text, data inline or by URL, reasoning; the rest tagged."""
    out: list[ToolResultContent | ThinkingBlock] = []
    for b in content:
        if isinstance(b, str):
            out.append(TextBlock(text=b))
            continue
        kind = b.get("type") if isinstance(b, dict) else None
        rest = set(b) - {"type", "mime_type", "base64", "url"} if isinstance(b, dict) else set()
        if kind == "text" and set(b) <= {"type", "text"}:
            out.append(TextBlock(text=str(b.get("text", ""))))
        elif kind == "reasoning" and set(b) <= {"type", "reasoning"}:
            out.append(ThinkingBlock(thinking=str(b.get("reasoning", ""))))
        elif kind == "image_url" and isinstance(b.get("image_url"), dict):
            out.append(_url_block(str(b["image_url"].get("url", "")), "image/*"))
        elif kind in _DATA and not rest and isinstance(b.get("base64"), str):
            media = str(b.get("mime_type") or f"{kind}/*")
            out.append(DataBlock(source=Base64Source(media_type=media, data=b["base64"])))
        elif kind in _DATA and not rest and isinstance(b.get("url"), str):
            out.append(_url_block(b["url"], b.get("mime_type") or f"{kind}/*"))
        else:
            out.append(TextBlock(text=BLOCK_TAG + json.dumps(b, default=str)))
    return out


def _url_block(url: str, media: str) -> DataBlock:
    if url.startswith("data:") and ";base64," in url[:200]:
        head, data = url.split(",", 1)
        return DataBlock(source=Base64Source(media_type=head[5:].split(";")[0], data=data))
    return DataBlock(source=URLSource(url=url, media_type=media))


def _tagged(block: ContentBlock) -> dict[str, Any] | None:
    if not isinstance(block, TextBlock) or not block.text.startswith(BLOCK_TAG):
        return None
    try:
        value = json.loads(block.text[len(BLOCK_TAG) :])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _rich(msg: Msg) -> bool:
    """Whether ``msg`` holds anything the OpenAI form would lose (data, tagged blocks,
    reasoning): then it converts back block by block."""
    if any(True for _ in msg.iter_data()) or msg.thinking:
        return True
    for b in msg.blocks():
        inner = b.output if isinstance(b, ToolResultBlock) else [b]
        if not isinstance(inner, str) and any(_tagged(x) is not None for x in inner):
            return True
    return False


def _raw(block: ContentBlock) -> dict[str, Any] | None:
    """One of our blocks as a LangChain standard content block."""
    if isinstance(block, TextBlock):
        return _tagged(block) or {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "reasoning", "reasoning": block.thinking}
    if isinstance(block, DataBlock):
        source = block.source
        raw: dict[str, Any] = {"type": block.kind}
        if isinstance(source, Base64Source):
            raw["base64"] = source.data
        else:
            raw["url"] = source.url
        if not block.media_type.endswith("/*") and block.media_type != "application/octet-stream":
            raw["mime_type"] = block.media_type
        return raw
    return None


def _raws(blocks: Sequence[ContentBlock]) -> list[Any]:
    return [r for r in (_raw(b) for b in blocks) if r is not None]


def _rich_messages(msg: Msg) -> list[AnyMessage]:
    if msg.role == "assistant":
        calls = [{"name": c.name, "args": c.input, "id": c.id} for c in msg.tool_calls]
        return [AIMessage(content=_raws(msg.blocks()), tool_calls=calls)]
    out: list[AnyMessage] = []
    for r in msg.tool_results:
        status = "error" if r.is_error else "success"
        content: Any = r.output if isinstance(r.output, str) else _raws(r.output)
        out.append(ToolMessage(content=content, tool_call_id=r.id, name=r.name, status=status))
    rest = [b for b in msg.blocks() if not isinstance(b, ToolResultBlock)]
    if rest:
        out.append(HumanMessage(content=_raws(rest)))
    return out


def _summary_parts(item: HumanMessage) -> list[str]:
    """The summary's text parts as they were written: one per part, since ``item.text``
    joins them without a separator and the next appended part would then follow one
    merged block, not the blocks the provider cached."""
    if isinstance(item.content, str):
        return [item.content]
    parts: list[str] = []
    for part in item.content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
    return parts or [item.text]


def _usage(meta: Any) -> Usage:
    details = meta.get("input_token_details") or {}
    return Usage(
        input_tokens=meta.get("input_tokens", 0),
        output_tokens=meta.get("output_tokens", 0),
        cache_read_tokens=details.get("cache_read", 0) or 0,
        cache_write_tokens=details.get("cache_creation", 0) or 0,
    )


def tool_specs(tools: Sequence[Any]) -> list[ToolSpec]:
    """LangChain tools (or OpenAI tool dicts) as ``ToolSpec``s, for counting."""
    specs = []
    for tool in tools:
        fn = convert_to_openai_tool(tool).get("function", {})
        specs.append(
            ToolSpec(
                name=fn.get("name", ""),
                description=fn.get("description", ""),
                parameters=fn.get("parameters") or {"type": "object", "properties": {}},
            )
        )
    return specs
