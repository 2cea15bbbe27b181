"""Conversion from the OpenAI Chat Completions message format.

One OpenAI message becomes one ``Msg``; a ``tool`` message becomes a user-role ``Msg``
holding one ``ToolResultBlock``. What ``Msg`` does not express is kept in
``Msg.metadata["openai"]`` (see ``_openai_shapes``) for the encoder to restore.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._exceptions import MessageFormatError
from ._blocks import (
    Base64Source,
    ContentBlock,
    DataBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    URLSource,
)
from ._msg import Msg
from ._openai_shapes import AUDIO_FORMATS, KEY, assistant_default_shape, default_shape
from ._wire import (
    expect_dict,
    expect_list,
    expect_str,
    fail,
    image_media_type,
    json_type,
    parse_arguments,
    split_data_url,
)

__all__ = ["from_openai_message", "from_openai_messages"]

_KNOWN = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "reasoning_content"},
    "tool": {"role", "content", "name", "tool_call_id"},
}


def from_openai_messages(messages: Sequence[Any], *, strict: bool = True) -> list[Msg]:
    """Convert a stored OpenAI message list to ``Msg`` objects.

    ``strict`` (the default, for histories) raises ``MessageFormatError`` on tool-call
    arguments that are not a JSON object; with ``strict=False`` such calls get
    ``input={}`` and ``input_error`` instead.
    """
    if not isinstance(messages, list | tuple):
        raise MessageFormatError(f"expected a list of messages, got {json_type(messages)}")
    call_names: dict[str, str] = {}
    return [_from_one(m, i, strict=strict, call_names=call_names) for i, m in enumerate(messages)]


def from_openai_message(message: Any, *, strict: bool = False) -> Msg:
    """Convert one message, typically a model's answer (``choices[0].message``).

    Not strict by default: arguments that are not a JSON object do not raise but set
    ``ToolCallBlock.input_error`` so the agent can answer with an error result.
    """
    return _from_one(message, 0, strict=strict, call_names={})


def _from_one(raw: Any, i: int, *, strict: bool, call_names: dict[str, str]) -> Msg:
    d = expect_dict(raw, i, "")
    role = d.get("role")
    if not isinstance(role, str) or role not in _KNOWN:
        fail(i, "role", f"must be one of {sorted(_KNOWN)}, got {role!r}")
    meta: dict[str, Any] = {}
    extra = {k: v for k, v in d.items() if k not in _KNOWN[role]}
    name: str | None = None
    if "name" in d:
        name = expect_str(d["name"], i, "name")
        meta["name"] = name
    if role == "assistant":
        msg = _assistant_from(d, i, meta, extra, strict=strict, call_names=call_names)
    elif role == "tool":
        msg = _tool_from(d, i, meta, call_names=call_names)
    else:
        if role == "developer":
            meta["role"] = "developer"
        msg_role = "user" if role == "user" else "system"
        content = _content_from(d, i, meta, allowed=("text", "image_url", "input_audio", "file"))
        if isinstance(content, list) and default_shape(content) == "string":
            meta["content"] = "parts"
        msg = Msg(name or msg_role, content, msg_role)
    if extra:
        meta["extra"] = extra
    if meta:
        msg.metadata[KEY] = meta
    return msg


def _content_from(
    d: dict[str, Any], i: int, meta: dict[str, Any], *, allowed: tuple[str, ...]
) -> str | list[ContentBlock]:
    """``content`` as a string or blocks; absent and null become ``[]`` (shape recorded)."""
    if "content" not in d:
        meta["content"] = "absent"
        return []
    content = d["content"]
    if content is None:
        meta["content"] = "null"
        return []
    if isinstance(content, str):
        return content
    parts = expect_list(content, i, "content")
    blocks: list[ContentBlock] = []
    for j, part in enumerate(parts):
        blocks.append(_part_from(part, i, j, meta, allowed=allowed, block_index=j))
    return blocks


def _part_from(
    part: Any,
    i: int,
    j: int,
    meta: dict[str, Any],
    *,
    allowed: tuple[str, ...],
    block_index: int,
) -> TextBlock | DataBlock:
    field = f"content[{j}]"
    p = expect_dict(part, i, field)
    kind = p.get("type")
    if kind not in allowed:
        fail(i, f"{field}.type", f"must be one of {list(allowed)}, got {kind!r}")
    block: TextBlock | DataBlock
    inner: dict[str, Any] = {}
    if kind == "text":
        block = TextBlock(text=expect_str(p.get("text"), i, f"{field}.text"))
        outer = _rest(p, "type", "text")
    elif kind == "refusal":
        block = TextBlock(text=expect_str(p.get("refusal"), i, f"{field}.refusal"))
        outer = _rest(p, "type", "refusal")
        _part_meta(meta, block_index)["refusal"] = True
    elif kind == "image_url":
        img = expect_dict(p.get("image_url"), i, f"{field}.image_url")
        url = expect_str(img.get("url"), i, f"{field}.image_url.url")
        block = DataBlock(source=_source_from_url(url))
        outer, inner = _rest(p, "type", "image_url"), _rest(img, "url")
    elif kind == "input_audio":
        audio = expect_dict(p.get("input_audio"), i, f"{field}.input_audio")
        data = expect_str(audio.get("data"), i, f"{field}.input_audio.data")
        fmt = expect_str(audio.get("format"), i, f"{field}.input_audio.format")
        media = AUDIO_FORMATS.get(fmt, f"audio/{fmt}")
        block = DataBlock(source=Base64Source(media_type=media, data=data))
        outer, inner = _rest(p, "type", "input_audio"), _rest(audio, "data", "format")
    else:  # file
        f = expect_dict(p.get("file"), i, f"{field}.file")
        if "file_data" not in f:
            fail(i, f"{field}.file", "needs file_data (a data: URL); file_id is not supported")
        url = expect_str(f["file_data"], i, f"{field}.file.file_data")
        split = split_data_url(url)
        if split is None:
            fail(i, f"{field}.file.file_data", "must be a data:<type>;base64,<data> URL")
        filename = f.get("filename")
        if filename is not None:
            expect_str(filename, i, f"{field}.file.filename")
        block = DataBlock(source=Base64Source(media_type=split[0], data=split[1]), name=filename)
        outer, inner = _rest(p, "type", "file"), _rest(f, "file_data", "filename")
    if outer:
        _part_meta(meta, block_index)["outer"] = outer
    if inner:
        _part_meta(meta, block_index)["inner"] = inner
    return block


def _rest(d: dict[str, Any], *known: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in known}


def _part_meta(meta: dict[str, Any], block_index: int) -> dict[str, Any]:
    parts: dict[str, Any] = meta.setdefault("parts", {})
    entry: dict[str, Any] = parts.setdefault(str(block_index), {})
    return entry


def _source_from_url(url: str) -> Base64Source | URLSource:
    split = split_data_url(url)
    if split is not None:
        return Base64Source(media_type=split[0], data=split[1])
    if url.startswith("data:"):
        media = url[5:].split(",", 1)[0].split(";", 1)[0]
        return URLSource(url=url, media_type=media if media.startswith("image/") else "image/*")
    return URLSource(url=url, media_type=image_media_type(url))


def _assistant_from(
    d: dict[str, Any],
    i: int,
    meta: dict[str, Any],
    extra: dict[str, Any],
    *,
    strict: bool,
    call_names: dict[str, str],
) -> Msg:
    blocks: list[ContentBlock] = []
    reasoning = d.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        blocks.append(ThinkingBlock(thinking=reasoning))
    elif "reasoning_content" in d:
        extra["reasoning_content"] = reasoning
    offset = len(blocks)
    shape_meta: dict[str, Any] = {}
    content = _content_from(d, i, shape_meta, allowed=("text", "refusal"))
    # part indices were recorded relative to the content list; shift them past thinking
    if "parts" in shape_meta:
        meta["parts"] = {str(int(k) + offset): v for k, v in shape_meta["parts"].items()}
    if isinstance(content, str):
        if content or "tool_calls" not in d:
            blocks.append(TextBlock(text=content))
        if not content:
            shape_meta["content"] = "string"
    else:
        blocks.extend(content)
        if "content" not in shape_meta:
            shape_meta["content"] = "parts"
    calls = d.get("tool_calls")
    if isinstance(calls, list) and calls:
        for k, call in enumerate(calls):
            blocks.append(_call_from(call, i, k, meta, strict=strict))
        for b in blocks:
            if isinstance(b, ToolCallBlock):
                call_names[b.id] = b.name
    elif "tool_calls" in d:
        if calls is not None and not isinstance(calls, list):
            fail(i, "tool_calls", f"must be an array, got {json_type(calls)}")
        extra["tool_calls"] = calls
    has_calls = any(isinstance(b, ToolCallBlock) for b in blocks)
    texts = [b for b in blocks if isinstance(b, TextBlock)]
    shape = shape_meta.get("content")
    if shape is not None and shape != assistant_default_shape(texts, has_calls=has_calls):
        meta["content"] = shape
    name = meta.get("name", "assistant")
    if not has_calls and offset == 0 and isinstance(content, str):
        return Msg(name, content, "assistant")
    return Msg(name, blocks, "assistant")


def _call_from(call: Any, i: int, k: int, meta: dict[str, Any], *, strict: bool) -> ToolCallBlock:
    field = f"tool_calls[{k}]"
    c = expect_dict(call, i, field)
    call_meta: dict[str, Any] = {}
    if "type" not in c:
        call_meta["no_type"] = True
    elif c["type"] != "function":
        fail(i, f"{field}.type", f"must be 'function', got {c['type']!r}")
    call_id = expect_str(c.get("id"), i, f"{field}.id")
    fn = expect_dict(c.get("function"), i, f"{field}.function")
    name = expect_str(fn.get("name"), i, f"{field}.function.name")
    args = fn.get("arguments")
    afield = f"{field}.function.arguments"
    if isinstance(args, dict) and not strict:
        block = ToolCallBlock(id=call_id, name=name, input=args)
    else:
        raw = expect_str(args, i, afield)
        value, error = parse_arguments(raw, strict=strict, index=i, field=afield)
        block = ToolCallBlock(id=call_id, name=name, input=value, raw_input=raw, input_error=error)
    outer, inner = _rest(c, "type", "id", "function"), _rest(fn, "name", "arguments")
    if outer:
        call_meta["outer"] = outer
    if inner:
        call_meta["inner"] = inner
    if call_meta:
        meta.setdefault("calls", {})[str(k)] = call_meta
    return block


def _tool_from(
    d: dict[str, Any], i: int, meta: dict[str, Any], *, call_names: dict[str, str]
) -> Msg:
    call_id = expect_str(d.get("tool_call_id"), i, "tool_call_id")
    content = d.get("content")
    output: str | list[Any]
    if isinstance(content, str):
        output = content
    elif isinstance(content, list):
        output = [
            _part_from(p, i, j, meta, allowed=("text",), block_index=j)
            for j, p in enumerate(content)
        ]
    else:
        fail(i, "content", f"must be a string or an array of text parts, got {json_type(content)}")
    name = meta.get("name") or call_names.get(call_id, "")
    block = ToolResultBlock(id=call_id, name=name, output=output)
    return Msg("tool", [block], "user")
