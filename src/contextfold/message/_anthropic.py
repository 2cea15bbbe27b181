"""Conversion to and from the Anthropic Messages format.

Anthropic keeps the system prompt outside the message list, requires user and assistant
turns to alternate, and wants every ``tool_result`` for an assistant turn at the start of
the next user message. ``to_anthropic_request`` therefore hoists the leading system
messages, merges consecutive messages of one role, and moves tool results to the front of
each user message. A later system message, and any ``HintBlock``, is sent as user text
wrapped in ``<system-reminder>``.

Thinking blocks go back with their signature (or redacted data) verbatim; a thinking block
without either (e.g. from another provider) cannot be sent to Anthropic and is left out.
Whitespace-only text is left out as well, because Anthropic rejects it.
Block keys our model does not express (``cache_control``, ``citations``, ``title`` ...)
are kept in ``Msg.metadata["anthropic"]`` and restored on the way back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .._exceptions import MessageFormatError
from ._blocks import (
    Base64Source,
    ContentBlock,
    DataBlock,
    HintBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    URLSource,
)
from ._msg import Msg, Usage
from ._toolspec import ToolChoice, ToolSpec
from ._wire import (
    as_dict,
    copy_wire,
    data_kind,
    expect_dict,
    expect_list,
    expect_str,
    fail,
    image_media_type,
    json_type,
    split_data_url,
    wrap_hint,
)

__all__ = [
    "from_anthropic_message",
    "from_anthropic_messages",
    "to_anthropic_request",
    "to_anthropic_tool_choice",
    "to_anthropic_tools",
]

_KEY = "anthropic"
_UNSAFE_ID = re.compile(r"[^a-zA-Z0-9_-]")
_RESPONSE_KEYS = ("id", "model", "stop_reason", "stop_sequence", "type")
SystemPrompt = str | list[dict[str, Any]]
# (role, content, index of the first Msg it came from, message-level extra keys)
_Turn = tuple[str, list[dict[str, Any]] | str, int, dict[str, Any]]


# -------------------------------------------------------------------------- from Anthropic


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
        msg.metadata[_KEY] = meta
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
        msg.metadata[_KEY] = meta
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


# ---------------------------------------------------------------------------- to Anthropic


def to_anthropic_request(msgs: Sequence[Msg]) -> tuple[SystemPrompt, list[dict[str, Any]]]:
    """Convert messages to the ``system`` and ``messages`` parameters of the Messages API.

    ``system`` is a string (``""`` when there is none: omit the parameter then), or a list
    of text blocks when several system messages or blocks must stay apart. Raises
    ``MessageFormatError`` for content Anthropic cannot carry (e.g. audio).
    """
    system, messages, _, _ = _to_anthropic(msgs)
    return system, messages


def to_anthropic_counted(
    msgs: Sequence[Msg],
) -> tuple[SystemPrompt, list[dict[str, Any]], list[int]]:
    """:func:`to_anthropic_request`, plus how many content blocks each message became
    (system prompt messages: 0). Merging turns moves blocks but never adds or drops one,
    so the blocks before message ``k`` number ``sum(counts[:k])``: where a cache
    breakpoint goes, without converting each prefix again."""
    system, messages, _, counts = _to_anthropic(msgs)
    return system, messages, counts


def _to_anthropic(
    msgs: Sequence[Msg],
) -> tuple[SystemPrompt, list[dict[str, Any]], list[int], list[int]]:
    system_msgs: list[tuple[int, Msg]] = []
    turns: list[_Turn] = []
    ids = _IdMap()
    counts = [0] * len(msgs)
    for i, msg in enumerate(msgs):
        if not isinstance(msg, Msg):
            raise MessageFormatError(f"message {i}: expected a Msg, got {type(msg).__name__}")
        meta = _meta(msg)
        if msg.role == "system":
            if not turns:
                system_msgs.append((i, msg))
            else:
                text = "\n".join(_plain_text(b, i, j) for j, b in enumerate(msg.blocks()))
                if text.strip():
                    turns.append(("user", [{"type": "text", "text": wrap_hint(text)}], i, {}))
                    counts[i] = 1
            continue
        extra = as_dict(meta.get("message"))
        if isinstance(msg.content, str):
            if msg.content.strip():
                turns.append((msg.role, msg.content, i, extra))
                counts[i] = 1
            continue
        remembered: _Remembered | None = msg.cached_wire(_KEY)
        if remembered is None:
            remembered = _blocks_to(msg.content, msg.role, i, meta)
            msg.cache_wire(_KEY, remembered)
        blocks, hints = copy_wire(remembered[0]), copy_wire(remembered[1])
        # Call ids depend on the turns before (a repeated id gets a suffix): set per request.
        call_ids = iter(
            ids.new_turn([b.id for b in msg.content if isinstance(b, ToolCallBlock)])
            if msg.role == "assistant"
            else []
        )
        for wire in blocks:
            if wire["type"] == "tool_use":
                wire["id"] = next(call_ids)
            elif wire["type"] == "tool_result":
                wire["tool_use_id"] = ids.get(wire["tool_use_id"])
        if blocks:
            turns.append((msg.role, blocks, i, extra))
        if hints:
            turns.append(("user", hints, i, {}))
        counts[i] = len(blocks) + len(hints)
    merged = _merge(turns)
    messages = [{**x, "role": r, "content": c} for r, c, _, x in merged]
    return _system_to(system_msgs), messages, [o for _, _, o, _ in merged], counts


_Remembered = tuple[list[dict[str, Any]], list[dict[str, Any]]]
"""A message's content blocks (with its own call ids) and the hints sent after it."""


def _blocks_to(
    content: Sequence[ContentBlock], role: str, i: int, meta: dict[str, Any]
) -> _Remembered:
    """A message's content as Anthropic blocks, and an assistant's hints (sent as the next
    user turn). Built once per message (:meth:`Msg.cache_wire`): an agent resends its
    whole history every step."""
    blocks: list[dict[str, Any]] = []
    hints: list[dict[str, Any]] = []
    for j, b in enumerate(content):
        if isinstance(b, HintBlock) and role == "assistant":
            hints.append({"type": "text", "text": wrap_hint(b.hint)})
            continue
        wire = _block_to(b, i, j, meta, role=role)
        if wire is not None:
            blocks.append(wire)
    return blocks, hints


class _IdMap:
    """Tool-call ids as Anthropic accepts them: unique across the request and matching
    ``^[a-zA-Z0-9_-]+$``. OpenAI allows an id to recur in a later turn (recorded GPT-4o
    runs do it), so a repeat gets a suffix; a result maps to its latest call's id."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._current: dict[str, str] = {}

    def new_turn(self, call_ids: list[str]) -> list[str]:
        """The ids to send for one assistant turn's calls, in order."""
        out = []
        for call_id in call_ids:
            base = _UNSAFE_ID.sub("_", call_id) or "_"
            new, n = base, 1
            while new in self._used:
                n += 1
                new = f"{base}_{n}"
            self._used.add(new)
            self._current[call_id] = new
            out.append(new)
        return out

    def get(self, call_id: str) -> str:
        return self._current.get(call_id) or _UNSAFE_ID.sub("_", call_id) or "_"


def _meta(msg: Msg) -> dict[str, Any]:
    meta = msg.metadata.get(_KEY)
    return meta if isinstance(meta, dict) else {}


def _extra(meta: dict[str, Any], key: str) -> dict[str, Any]:
    blocks = meta.get("blocks")
    extra = blocks.get(key) if isinstance(blocks, dict) else None
    return extra if isinstance(extra, dict) else {}


def _plain_text(block: ContentBlock, i: int, j: int) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, HintBlock):
        return block.hint
    if isinstance(block, ThinkingBlock):
        return ""
    fail(i, f"content[{j}]", f"is a {block.type} block; a system message may hold only text")


def _system_to(system_msgs: list[tuple[int, Msg]]) -> SystemPrompt:
    if not system_msgs:
        return ""
    if len(system_msgs) == 1 and isinstance(system_msgs[0][1].content, str):
        return system_msgs[0][1].content
    out: list[dict[str, Any]] = []
    for i, msg in system_msgs:
        meta = _meta(msg)
        if isinstance(msg.content, str):
            if msg.content.strip():
                out.append({"type": "text", "text": msg.content})
            continue
        for j, b in enumerate(msg.content):
            text = _plain_text(b, i, j)
            if isinstance(b, HintBlock):
                text = wrap_hint(text)
            if text.strip():
                out.append({**_extra(meta, str(j)), "type": "text", "text": text})
    return out or ""


def _block_to(
    b: ContentBlock, i: int, j: int, meta: dict[str, Any], *, role: str
) -> dict[str, Any] | None:
    key = str(j)
    extra = _extra(meta, key)
    field = f"content[{j}]"
    if isinstance(b, TextBlock):
        if not b.text.strip():
            return None
        return {**extra, "type": "text", "text": b.text}
    if isinstance(b, HintBlock):
        return {"type": "text", "text": wrap_hint(b.hint)}
    if isinstance(b, DataBlock):
        if role == "assistant":
            fail(i, field, "is data; Anthropic assistant messages cannot carry data blocks")
        return _data_to(b, i, field, key, meta)
    if isinstance(b, ThinkingBlock):
        if role != "assistant":
            fail(i, field, "is thinking; only assistant messages may hold thinking")
        if b.redacted is not None:
            return {**extra, "type": "redacted_thinking", "data": b.redacted}
        if b.signature is None:
            return None
        return {**extra, "type": "thinking", "thinking": b.thinking, "signature": b.signature}
    if isinstance(b, ToolCallBlock):
        if role != "assistant":
            fail(i, field, "is a tool call; only assistant messages may hold tool calls")
        return {**extra, "type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
    if role != "user":
        fail(i, field, "is a tool result; tool results belong in user messages")
    out: dict[str, Any] = {**extra, "type": "tool_result", "tool_use_id": b.id}
    no_content = meta.get("no_content")
    if isinstance(b.output, str):
        if b.output or not (isinstance(no_content, list) and key in no_content):
            out["content"] = b.output
    else:
        content: list[dict[str, Any]] = []
        for k, item in enumerate(b.output):
            sub = f"{key}.{k}"
            if isinstance(item, TextBlock):
                content.append({**_extra(meta, sub), "type": "text", "text": item.text})
            else:
                content.append(_data_to(item, i, f"{field}.output[{k}]", sub, meta))
        out["content"] = content
    if b.is_error:
        out["is_error"] = True
    return out


def _data_to(b: DataBlock, i: int, field: str, key: str, meta: dict[str, Any]) -> dict[str, Any]:
    src = b.source
    source: dict[str, Any]
    kind = data_kind(b)
    if isinstance(src, URLSource):
        split = split_data_url(src.url)
        if split is not None:
            source = {"type": "base64", "media_type": split[0], "data": split[1]}
            # A data: URL carries its own media type, and that is what the provider sees.
            major = split[0].split("/", 1)[0]
            kind = major if major in ("image", "audio", "video") else "file"
        else:
            source = {"type": "url", "url": src.url}
    else:
        source = {"type": "base64", "media_type": src.media_type, "data": src.data}
    if kind == "image":
        return {**_extra(meta, key), "type": "image", "source": source}
    if kind in ("audio", "video"):
        fail(i, field, f"is {kind}, which Anthropic does not accept")
    out: dict[str, Any] = {**_extra(meta, key), "type": "document", "source": source}
    if b.name is not None:
        out["title"] = b.name
    return out


def _merge(turns: list[_Turn]) -> list[_Turn]:
    """Merge consecutive same-role turns; in user turns, tool results come first."""
    merged: list[_Turn] = []
    for role, content, origin, extra in turns:
        if merged and merged[-1][0] == role:
            _, prev, first, prev_extra = merged[-1]
            merged[-1] = (
                role,
                _as_blocks(prev) + _as_blocks(content),
                first,
                {**extra, **prev_extra},
            )
        else:
            merged.append((role, content, origin, extra))
    out: list[_Turn] = []
    for role, content, origin, extra in merged:
        if role == "user" and isinstance(content, list):
            results = [b for b in content if b.get("type") == "tool_result"]
            content = results + [b for b in content if b.get("type") != "tool_result"]
        out.append((role, content, origin, extra))
    return out


def _as_blocks(content: list[dict[str, Any]] | str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


# ----------------------------------------------------------------------------------- tools


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as the ``tools`` parameter of the Messages API."""
    out = []
    for t in tools:
        tool: dict[str, Any] = {"name": t.name, "input_schema": t.parameters}
        if t.description:
            tool["description"] = t.description
        out.append(tool)
    return out


def to_anthropic_tool_choice(choice: ToolChoice) -> dict[str, Any]:
    """``auto``/``none``/``required`` as Anthropic's ``auto``/``none``/``any``; a tool
    name as a forced ``tool`` choice."""
    if choice == "required":
        return {"type": "any"}
    if choice in ("auto", "none"):
        return {"type": choice}
    return {"type": "tool", "name": choice}
