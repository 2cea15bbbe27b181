"""Conversion from the Anthropic Messages format.

A stored history (with its ``system`` parameter) or a model's answer becomes ``Msg``
objects. Thinking blocks keep their signature (or redacted data) verbatim. Block keys our
model does not express (``cache_control``, ``citations``, ``title`` ...) are kept in
``Msg.metadata["anthropic"]``, under :data:`KEY`, and restored by the encoder.
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
from ._msg import Msg, Usage
from ._wire import expect_dict, expect_list, expect_str, fail, image_media_type, json_type

__all__ = ["KEY", "from_anthropic_message", "from_anthropic_messages"]

KEY = "anthropic"
"""The ``Msg.metadata`` key of what the decoder kept (and ``Msg.cache_wire`` form)."""
_RESPONSE_KEYS = ("id", "model", "stop_reason", "stop_sequence", "type")


def from_anthropic_messages(
    messages: Sequence[Any], *, system: Any = None, strict: bool = True
) -> list[Msg]:
    """Convert a stored Anthropic history (and its ``system`` parameter) to ``Msg`` objects.

    ``strict`` (the default) raises ``MessageFormatError`` on a ``tool_use`` whose input
    is not an object and on thinking blocks without a signature.
    """
    if not isinstance(messages, list | tuple):
        raise MessageFormatError(f"expected a list of messages, got {json_type(messages)}")
    out: list[Msg] = []
    if system is not None:
        out.append(_system_from(system))
    call_names: dict[str, str] = {}
    for i, m in enumerate(messages):
        out.append(_from_one(m, i, strict=strict, call_names=call_names))
    return out


def from_anthropic_message(message: Any, *, strict: bool = False) -> Msg:
    """Convert one message, typically a model's answer (the Messages API response).

    Usage becomes ``Msg.usage``; ``id``, ``model`` and ``stop_reason`` go to
    ``Msg.metadata["anthropic"]``. Not strict by default: a ``tool_use`` input that is not
    an object sets ``ToolCallBlock.input_error`` instead of raising.
    """
    return _from_one(message, 0, strict=strict, call_names={})


def _system_from(system: Any) -> Msg:
    if isinstance(system, str):
        return Msg("system", system, "system")
    parts = expect_list(system, -1, "system")
    meta: dict[str, Any] = {}
    blocks: list[ContentBlock] = []
    for j, p in enumerate(parts):
        d = expect_dict(p, -1, f"system[{j}]")
        if d.get("type") != "text":
            fail(-1, f"system[{j}].type", f"must be 'text', got {d.get('type')!r}")
        blocks.append(TextBlock(text=expect_str(d.get("text"), -1, f"system[{j}].text")))
        _keep_extra(meta, str(j), d, "type", "text")
    msg = Msg("system", blocks, "system")
    if meta:
        msg.metadata[KEY] = meta
    return msg


def _from_one(raw: Any, i: int, *, strict: bool, call_names: dict[str, str]) -> Msg:
    d = expect_dict(raw, i, "")
    role = d.get("role")
    if role not in ("user", "assistant"):
        fail(i, "role", f"must be 'user' or 'assistant', got {role!r}")
    meta: dict[str, Any] = {}
    response = {k: d[k] for k in _RESPONSE_KEYS if k in d}
    extra = {k: v for k, v in d.items() if k not in ("role", "content", "usage", *_RESPONSE_KEYS)}
    if extra:
        meta["message"] = extra
    if response:
        meta["response"] = response
    usage = _usage_from(d.get("usage"), i) if "usage" in d else None
    content = d.get("content")
    if isinstance(content, str):
        msg = Msg(role, content, role, usage=usage)
    else:
        parts = expect_list(content, i, "content")
        blocks = [
            _block_from(p, i, f"content[{j}]", str(j), meta, role=role, strict=strict)
            for j, p in enumerate(parts)
        ]
        for b in blocks:
            if isinstance(b, ToolCallBlock):
                call_names[b.id] = b.name
            elif isinstance(b, ToolResultBlock) and not b.name:
                b.name = call_names.get(b.id, "")
        msg = Msg(role, blocks, role, usage=usage)
    if meta:
        msg.metadata[KEY] = meta
    return msg


def _usage_from(raw: Any, i: int) -> Usage | None:
    if raw is None:
        return None
    u = expect_dict(raw, i, "usage")

    def num(key: str) -> int:
        value = u.get(key) or 0
        if not isinstance(value, int) or isinstance(value, bool):
            fail(i, f"usage.{key}", f"must be an integer, got {json_type(value)}")
        return value

    return Usage(
        input_tokens=num("input_tokens"),
        output_tokens=num("output_tokens"),
        cache_read_tokens=num("cache_read_input_tokens"),
        cache_write_tokens=num("cache_creation_input_tokens"),
    )


def _keep_extra(meta: dict[str, Any], key: str, d: dict[str, Any], *known: str) -> None:
    extra = {k: v for k, v in d.items() if k not in known}
    if extra:
        meta.setdefault("blocks", {})[key] = extra


def _block_from(
    raw: Any, i: int, field: str, key: str, meta: dict[str, Any], *, role: str, strict: bool
) -> ContentBlock:
    d = expect_dict(raw, i, field)
    kind = d.get("type")
    block: ContentBlock
    if kind == "text":
        block = TextBlock(text=expect_str(d.get("text"), i, f"{field}.text"))
        _keep_extra(meta, key, d, "type", "text")
    elif kind in ("image", "document"):
        block = _data_from(d, i, field, key, meta)
    elif kind == "thinking" and role == "assistant":
        thinking = expect_str(d.get("thinking"), i, f"{field}.thinking")
        signature = d.get("signature")
        if signature is None and strict:
            fail(i, f"{field}.signature", "is missing; Anthropic rejects unsigned thinking")
        if signature is not None:
            expect_str(signature, i, f"{field}.signature")
        block = ThinkingBlock(thinking=thinking, signature=signature)
        _keep_extra(meta, key, d, "type", "thinking", "signature")
    elif kind == "redacted_thinking" and role == "assistant":
        data = expect_str(d.get("data"), i, f"{field}.data")
        block = ThinkingBlock(thinking="", redacted=data)
        _keep_extra(meta, key, d, "type", "data")
    elif kind == "tool_use" and role == "assistant":
        block = _tool_use_from(d, i, field, strict=strict)
        _keep_extra(meta, key, d, "type", "id", "name", "input")
    elif kind == "tool_result" and role == "user":
        block = _tool_result_from(d, i, field, key, meta)
    else:
        expected = (
            "text, image, document, thinking, redacted_thinking, tool_use"
            if role == "assistant"
            else "text, image, document, tool_result"
        )
        fail(i, f"{field}.type", f"must be one of {expected} in a {role} message, got {kind!r}")
    return block


def _tool_use_from(d: dict[str, Any], i: int, field: str, *, strict: bool) -> ToolCallBlock:
    call_id = expect_str(d.get("id"), i, f"{field}.id")
    name = expect_str(d.get("name"), i, f"{field}.name")
    value = d.get("input")
    if isinstance(value, dict):
        return ToolCallBlock(id=call_id, name=name, input=value)
    problem = f"must be an object, got {json_type(value)}"
    if strict:
        fail(i, f"{field}.input", problem)
    raw = value if isinstance(value, str) else None
    return ToolCallBlock(
        id=call_id, name=name, input={}, raw_input=raw, input_error=f"{field}.input {problem}"
    )


def _tool_result_from(
    d: dict[str, Any], i: int, field: str, key: str, meta: dict[str, Any]
) -> ToolResultBlock:
    call_id = expect_str(d.get("tool_use_id"), i, f"{field}.tool_use_id")
    is_error = d.get("is_error", False)
    if not isinstance(is_error, bool):
        fail(i, f"{field}.is_error", f"must be a boolean, got {json_type(is_error)}")
    output: str | list[Any]
    if "content" not in d:
        output = ""
        meta.setdefault("no_content", []).append(key)
    elif isinstance(d["content"], str):
        output = d["content"]
    else:
        items = expect_list(d["content"], i, f"{field}.content")
        output = []
        for j, item in enumerate(items):
            sub = f"{field}.content[{j}]"
            inner = expect_dict(item, i, sub)
            if inner.get("type") == "text":
                output.append(TextBlock(text=expect_str(inner.get("text"), i, f"{sub}.text")))
                _keep_extra(meta, f"{key}.{j}", inner, "type", "text")
            elif inner.get("type") in ("image", "document"):
                output.append(_data_from(inner, i, sub, f"{key}.{j}", meta))
            else:
                got = inner.get("type")
                fail(i, f"{sub}.type", f"must be text, image or document, got {got!r}")
    known = ["type", "tool_use_id", "content"]
    if is_error:  # an explicit ``"is_error": false`` stays in the extras, verbatim
        known.append("is_error")
    _keep_extra(meta, key, d, *known)
    return ToolResultBlock(id=call_id, name="", output=output, is_error=is_error)


def _data_from(d: dict[str, Any], i: int, field: str, key: str, meta: dict[str, Any]) -> DataBlock:
    src = expect_dict(d.get("source"), i, f"{field}.source")
    kind = src.get("type")
    source: Base64Source | URLSource
    if kind == "base64":
        source = Base64Source(
            media_type=expect_str(src.get("media_type"), i, f"{field}.source.media_type"),
            data=expect_str(src.get("data"), i, f"{field}.source.data"),
        )
        src_known: tuple[str, ...] = ("type", "media_type", "data")
    elif kind == "url":
        url = expect_str(src.get("url"), i, f"{field}.source.url")
        # URL documents are PDFs; the media type tells images and documents apart later
        media = image_media_type(url) if d.get("type") == "image" else "application/pdf"
        source = URLSource(url=url, media_type=media)
        src_known = ("type", "url")
    else:
        fail(i, f"{field}.source.type", f"must be 'base64' or 'url', got {kind!r}")
    if any(k not in src_known for k in src):
        fail(i, f"{field}.source", f"has unsupported keys {sorted(set(src) - set(src_known))}")
    title = d.get("title") if d.get("type") == "document" else None
    if title is not None:
        expect_str(title, i, f"{field}.title")
    block = DataBlock(source=source, name=title)
    if d.get("type") == "document":
        if block.kind == "image":
            fail(i, f"{field}.source.media_type", "is an image type; send images as image blocks")
        _keep_extra(meta, key, d, "type", "source", "title")
    else:
        if block.kind != "image":
            got = block.media_type
            fail(i, f"{field}.source.media_type", f"must be an image type, got {got!r}")
        _keep_extra(meta, key, d, "type", "source")
    return block
