"""Agents SDK input items (the Responses format) to ``Msg`` and back.

A user or system item is one message; consecutive assistant-side items (reasoning, an
assistant message, tool calls, hosted tools' items) are one assistant message;
consecutive outputs of any tool are one message of tool results.

Every item type of the Responses input union passes (issue 26: a ``web_search_call``
raised). A call answered by an item of its own (``computer_call`` and
``computer_call_output``, ``mcp_approval_request`` and ``mcp_approval_response``, ...) is
a tool call holding the whole item, and its output a tool result, so the engine keeps the
pair together; the result's metadata carries the output's envelope (type, ids), so a cut
output goes back as its own type. An item complete in itself (a web search, a code
interpreter run, an MCP call, a compaction, ...) is a text block: a tag and the item's
JSON, which names its structure to a summary and converts back as it was; a generated
image is an image block after it. Images in messages and tool outputs are image blocks,
so they are counted by the image model and kept to ``max_image_num``. The folder sends
every message the engine did not change as the very items it came from.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from typing import Any

from ..._exceptions import MessageFormatError
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
)

__all__ = ["BLANK_SCREENSHOT", "ITEM_TAG", "AgentsCodec"]

Item = Any  # TResponseInputItem: a dict (or a model of one) in the Responses input format

_OUTPUTS = {
    "computer_call_output": "computer_call",
    "local_shell_call_output": "local_shell_call",
    "shell_call_output": "shell_call",
    "apply_patch_call_output": "apply_patch_call",
    "custom_tool_call_output": "custom_tool_call",
    "tool_search_output": "tool_search_call",
    "program_output": "program",
    "mcp_approval_response": "mcp_approval_request",
}
"""Output item type -> the call it answers (besides ``function_call_output``)."""
_CALLS = frozenset(_OUTPUTS.values())
_ENVELOPE = frozenset({"type", "id", "call_id", "approval_request_id", "status"})
_ITEM = "contextfold.responses_item"  # a result's metadata: its output item's envelope
_FORM = "contextfold.responses_form"  # ... and the form its payload was read from
_OUTCOME = "contextfold.shell_outcome"  # ... and a shell output's outcome

ITEM_TAG = "[Responses item] "
"""What starts the text of an item complete in itself, before the item's JSON."""

BLANK_SCREENSHOT = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhf"
    "DwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG: what a ``computer_call_output`` whose screenshot the image limit removed
shows (the Responses API wants a screenshot there); the placeholder text follows it."""


def _as_dict(item: Item) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if dump is None:
        raise MessageFormatError(f"expected a Responses input item, got {type(item).__name__}")
    result: dict[str, Any] = dump(exclude_unset=True)
    return result


def _kind(d: dict[str, Any]) -> str:
    kind = d.get("type")
    if kind == "message" or (kind is None and "role" in d):
        return "assistant" if d.get("role") == "assistant" else "message"
    return str(kind)


def _side(d: dict[str, Any]) -> str:
    """Which message an item belongs to: a user/system one, tool results, or the model's
    (an output without the id of its call, as a server-side tool search, is the model's)."""
    kind = _kind(d)
    if kind == "message":
        return "message"
    if kind == "function_call_output" or (kind in _OUTPUTS and _pair_id(d)):
        return "tool"
    return "assistant"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") or p.get("refusal") or "" for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if p)
    return ""


def _plain(content: Any) -> bool:
    """Whether message content is text only (a string, or text and refusal parts)."""
    if not isinstance(content, list):
        return True
    return all(
        isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "refusal")
        for p in content
    )


def _pair_id(d: dict[str, Any]) -> str:
    """The id a call and its output share ("" when the item has none)."""
    kind = _kind(d)
    if kind == "mcp_approval_request":
        value = d.get("id")
    elif kind == "mcp_approval_response":
        value = d.get("approval_request_id")
    elif kind == "local_shell_call_output":
        value = d.get("call_id") or d.get("id")
    else:
        value = d.get("call_id")
    return str(value) if value else ""


def _media_type(b64: str) -> str:
    for prefix, media in (("iVBOR", "image/png"), ("/9j/", "image/jpeg"), ("R0lGOD", "image/gif")):
        if b64.startswith(prefix):
            return media
    return "image/webp" if b64.startswith("UklGR") else "image/png"


def _image(url: str) -> DataBlock:
    if url.startswith("data:") and ";base64," in url[:200]:
        head, data = url.split(",", 1)
        return DataBlock(source=Base64Source(media_type=head[5:].split(";")[0], data=data))
    return DataBlock(source=URLSource(url=url, media_type="image/*"))


def _url(block: DataBlock) -> str:
    source = block.source
    if isinstance(source, Base64Source):
        return f"data:{source.media_type};base64,{source.data}"
    return source.url


def _parts_blocks(parts: list[Any]) -> list[ToolResultContent]:
    """Input content parts (text, images, files) as blocks; what is not text or an image
    inline or by URL is its tagged JSON, so it is counted, named and converts back."""
    blocks: list[ToolResultContent] = []
    for p in parts:
        if not isinstance(p, dict):
            blocks.append(TextBlock(text=str(p)))
        elif p.get("type") in ("input_text", "output_text", "text"):
            blocks.append(TextBlock(text=str(p.get("text", ""))))
        elif p.get("type") in ("input_image", "computer_screenshot") and p.get("image_url"):
            blocks.append(_image(str(p["image_url"])))
        elif p.get("type") == "input_file" and _inline_file(p):
            file = _image(str(p["file_data"]))
            blocks.append(file.model_copy(update={"name": p.get("filename")}))
        else:
            blocks.append(TextBlock(text=ITEM_TAG + json.dumps(p, default=str)))
    return blocks


def _inline_file(part: dict[str, Any]) -> bool:
    """Whether an ``input_file`` part is inline data and a name only (a data block)."""
    data = part.get("file_data")
    return (
        isinstance(data, str)
        and data.startswith("data:")
        and ";base64," in data[:200]
        and set(part) <= {"type", "filename", "file_data"}
    )


def _blocks_parts(blocks: Sequence[ContentBlock]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, DataBlock) and b.kind == "image":
            parts.append({"type": "input_image", "image_url": _url(b), "detail": "auto"})
        elif isinstance(b, DataBlock):
            named = {"filename": b.name} if b.name is not None else {}
            parts.append({"type": "input_file", **named, "file_data": _url(b)})
        elif isinstance(b, TextBlock):
            parts.append(_tagged(b.text) or {"type": "input_text", "text": b.text})
    return parts


def _tagged(text: str) -> dict[str, Any] | None:
    """The item a tagged text block stands for, or None for any other text."""
    if not text.startswith(ITEM_TAG):
        return None
    try:
        value = json.loads(text[len(ITEM_TAG) :])
    except ValueError:
        return None
    return value if isinstance(value, dict) and "type" in value else None


class AgentsCodec:
    """Responses input items as messages; items it did not make are kept as they are.

    The summary layer is a user message (one ``input_text`` part per part of the layer,
    so an appended part follows the parts the provider cached); Responses items have no
    field of ours to carry the layer's structure, so the codec remembers the layers it
    wrote, by content, and reads them back as layers.
    """

    def __init__(self) -> None:
        self._layers: dict[str, SummaryLayer] = {}

    def key(self, item: Item) -> Hashable:
        d = _as_dict(item)
        kind = _kind(d)
        if kind not in ("message", "assistant", "function_call", "function_call_output"):
            return (kind, json.dumps(d, default=str, sort_keys=True))
        body = d.get("content", d.get("output", d.get("arguments")))
        return (d.get("type"), d.get("role"), d.get("call_id"), json.dumps(body, default=str))

    def to_msgs(self, items: Sequence[Item]) -> list[tuple[Msg, list[Item]]]:
        out: list[tuple[Msg, list[Item]]] = []
        group: list[Item] = []
        group_kind = ""
        for item in items:
            side = _side(_as_dict(item))
            if group and (side != group_kind or side == "message"):
                out.append((self._msg(group), group))
                group = []
            group.append(item)
            group_kind = side
        if group:
            out.append((self._msg(group), group))
        return out

    def _msg(self, items: list[Item]) -> Msg:
        dicts = [_as_dict(i) for i in items]
        side = _side(dicts[0])
        if side == "message":
            d = dicts[0]
            content = d.get("content")
            if d.get("role") in ("system", "developer"):
                return Msg("system", _text(content), "system")
            layer = self._layers.get(json.dumps(content, default=str))
            if layer is not None:
                return layer.msg
            if isinstance(content, list) and not _plain(content):
                return Msg("user", list[ContentBlock](_parts_blocks(content)), "user")
            return Msg("user", _text(content), "user")
        if side == "tool":
            return Msg("tool", list[ContentBlock]([_result(d) for d in dicts]), "user")
        blocks: list[ContentBlock] = []
        for d in dicts:
            blocks.extend(_assistant_blocks(d))
        return Msg("assistant", blocks, "assistant")

    def from_msg(self, msg: Msg) -> list[Item]:
        if msg.role == "assistant":
            if any(_foreign(b) for b in msg.blocks()):
                return _assistant_items(msg)
            items: list[Item] = []
            if msg.text:
                items.append({"role": "assistant", "content": msg.text})
            items.extend(_function_call(call) for call in msg.tool_calls)
            return items
        if msg.role == "system":
            return [{"role": "system", "content": msg.text}]
        if is_summary(msg):
            layer = SummaryLayer.from_msg(msg)
            content: str | list[dict[str, str]] = (
                layer.parts[0]
                if len(layer.parts) == 1
                else [{"type": "input_text", "text": p} for p in layer.parts]
            )
            self._layers[json.dumps(content)] = layer
            return [{"role": "user", "content": content}]
        items = []
        notes: list[str] = []
        for r in msg.tool_results:
            items.append(_output_item(r, notes))
        blocks = [b for b in msg.blocks() if not isinstance(b, ToolResultBlock)]
        if any(isinstance(b, DataBlock) for b in blocks):
            items.append({"role": "user", "content": _blocks_parts(blocks)})
        elif msg.text:
            items.append({"role": "user", "content": msg.text})
        items.extend({"role": "user", "content": note} for note in notes)
        return items


def _foreign(block: ContentBlock) -> bool:
    if isinstance(block, ToolCallBlock):
        return block.raw_input is None and block.input.get("type") in _CALLS
    if isinstance(block, TextBlock):
        return _tagged(block.text) is not None
    return isinstance(block, DataBlock)


def _assistant_blocks(d: dict[str, Any]) -> list[ContentBlock]:
    kind = _kind(d)
    if kind == "reasoning":
        summary = _text(d.get("summary"))
        return [ThinkingBlock(thinking=summary)] if summary else []
    if kind == "assistant":
        text = _text(d.get("content"))
        return [TextBlock(text=text)] if text else []
    if kind == "function_call":
        return [_call(d)]
    if kind in _CALLS and _pair_id(d):
        name = d.get("name") if kind in ("custom_tool_call", "mcp_approval_request") else kind
        return [ToolCallBlock(id=_pair_id(d), name=str(name), input=dict(d))]
    result = d.get("result") if kind == "image_generation_call" else None
    if isinstance(result, str) and result:
        described = {k: v for k, v in d.items() if k != "result"}
        image = DataBlock(source=Base64Source(media_type=_media_type(result), data=result))
        return [TextBlock(text=ITEM_TAG + json.dumps(described, default=str)), image]
    return [TextBlock(text=ITEM_TAG + json.dumps(d, default=str))]


def _assistant_items(msg: Msg) -> list[Item]:
    """An assistant message holding foreign items, block by block in order."""
    items: list[Item] = []
    blocks = msg.blocks()
    for i, block in enumerate(blocks):
        if isinstance(block, ToolCallBlock):
            items.append(dict(block.input) if _foreign(block) else _function_call(block))
        elif isinstance(block, TextBlock):
            item = _tagged(block.text)
            if item is None:
                items.append({"role": "assistant", "content": block.text})
                continue
            if item["type"] == "image_generation_call":
                after = blocks[i + 1] if i + 1 < len(blocks) else None
                image = isinstance(after, DataBlock) and isinstance(after.source, Base64Source)
                item["result"] = after.source.data if image else None  # type: ignore[union-attr]
            items.append(item)
    return items


def _result(d: dict[str, Any]) -> ToolResultBlock:
    """An output item as a tool result: its payload as text and images."""
    kind = _kind(d)
    output = d.get("output")
    if kind == "function_call_output":
        if isinstance(output, list):
            return ToolResultBlock(id=_pair_id(d), name="", output=_parts_blocks(output))
        return ToolResultBlock(id=_pair_id(d), name="", output=_text(output))
    envelope = {k: v for k, v in d.items() if k in _ENVELOPE}
    metadata: dict[str, Any] = {_ITEM: envelope}
    payload = {k: v for k, v in d.items() if k not in _ENVELOPE}
    result: str | list[ToolResultContent]
    if kind == "computer_call_output" and isinstance(output, dict):
        metadata[_FORM] = "screenshot"
        result = _parts_blocks([output])
    elif set(payload) == {"output"} and isinstance(output, str):
        metadata[_FORM] = "text"
        result = output
    elif set(payload) == {"output"} and isinstance(output, list) and kind != "shell_call_output":
        metadata[_FORM] = "parts"
        result = _parts_blocks(output)
    elif kind == "shell_call_output" and isinstance(output, list) and output:
        metadata[_FORM] = "shell"
        metadata[_OUTCOME] = output[-1].get("outcome") if isinstance(output[-1], dict) else None
        result = "\n".join(
            str(o.get(stream) or "")
            for o in output
            if isinstance(o, dict)
            for stream in ("stdout", "stderr")
            if o.get(stream)
        )
    else:
        metadata[_FORM] = "json"
        result = json.dumps(payload, default=str)
    return ToolResultBlock(id=_pair_id(d), name="", output=result, metadata=metadata)


def _output_item(r: ToolResultBlock, notes: list[str]) -> Item:
    """A tool result as its output item; what its type cannot hold goes to ``notes``."""
    envelope = r.metadata.get(_ITEM)
    if not isinstance(envelope, dict):
        if isinstance(r.output, list) and any(isinstance(b, DataBlock) for b in r.output):
            return {
                "type": "function_call_output",
                "call_id": r.id,
                "output": _blocks_parts(r.output),
            }
        return {"type": "function_call_output", "call_id": r.id, "output": r.text()}
    form = r.metadata.get(_FORM)
    item = dict(envelope)
    blocks = r.output if isinstance(r.output, list) else [TextBlock(text=r.output)]
    if form == "text":
        item["output"] = r.text()
    elif form == "parts":
        item["output"] = _blocks_parts(blocks)
    elif form == "screenshot":
        shot = next((b for b in blocks if isinstance(b, DataBlock)), None)
        url = _url(shot) if shot is not None else BLANK_SCREENSHOT
        item["output"] = {"type": "computer_screenshot", "image_url": url}
        if r.text():
            notes.append(r.text())
    elif form == "shell":
        item["output"] = [{"stdout": r.text(), "stderr": "", "outcome": r.metadata.get(_OUTCOME)}]
    else:
        try:
            payload = json.loads(r.text())
        except ValueError:
            payload = None
        if isinstance(payload, dict):
            item.update(payload)
        else:  # cut: the payload no longer parses; its text goes after the item
            notes.append(r.text())
    return item


def _function_call(call: ToolCallBlock) -> Item:
    return {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.raw_input or json.dumps(call.input),
    }


def _call(d: dict[str, Any]) -> ToolCallBlock:
    raw = d.get("arguments") or "{}"
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return ToolCallBlock(
            id=str(d.get("call_id")),
            name=str(d.get("name")),
            raw_input=raw,
            input_error="arguments are not a JSON object",
        )
    return ToolCallBlock(
        id=str(d.get("call_id")), name=str(d.get("name")), input=value, raw_input=raw
    )
