"""Conversion to the Anthropic Messages format.

Anthropic keeps the system prompt outside the message list, requires user and assistant
turns to alternate, and wants every ``tool_result`` for an assistant turn at the start of
the next user message. ``to_anthropic_request`` therefore hoists the leading system
messages, merges consecutive messages of one role, and moves tool results to the front of
each user message. A later system message, and any ``HintBlock``, is sent as user text
wrapped in ``<system-reminder>``.

Thinking blocks go back with their signature (or redacted data) verbatim; a thinking block
without either (e.g. from another provider) cannot be sent to Anthropic and is left out.
Whitespace-only text is left out as well, because Anthropic rejects it.
Block keys the decoder kept in ``Msg.metadata["anthropic"]`` are restored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, assert_never

from .._exceptions import MessageFormatError
from ._anthropic_decode import KEY
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
from ._msg import Msg
from ._toolspec import ToolChoice, ToolSpec
from ._wire import as_dict, copy_wire, data_kind, fail, split_data_url, wrap_hint

__all__ = [
    "SystemPrompt",
    "to_anthropic_counted",
    "to_anthropic_request",
    "to_anthropic_tool_choice",
    "to_anthropic_tools",
    "to_anthropic_with_origins",
]

_UNSAFE_ID = re.compile(r"[^a-zA-Z0-9_-]")
SystemPrompt = str | list[dict[str, Any]]
# (role, content, index of the first Msg it came from, message-level extra keys)
_Turn = tuple[str, list[dict[str, Any]] | str, int, dict[str, Any]]


def to_anthropic_request(msgs: Sequence[Msg]) -> tuple[SystemPrompt, list[dict[str, Any]]]:
    """Convert messages to the ``system`` and ``messages`` parameters of the Messages API.

    ``system`` is a string (``""`` when there is none: omit the parameter then), or a list
    of text blocks when several system messages or blocks must stay apart. Raises
    ``MessageFormatError`` for content Anthropic cannot carry (e.g. audio).
    """
    system, messages, _, _ = to_anthropic_with_origins(msgs)
    return system, messages


def to_anthropic_counted(
    msgs: Sequence[Msg],
) -> tuple[SystemPrompt, list[dict[str, Any]], list[int]]:
    """:func:`to_anthropic_request`, plus how many content blocks each message became
    (system prompt messages: 0). Merging turns moves blocks but never adds or drops one,
    so the blocks before message ``k`` number ``sum(counts[:k])``: where a cache
    breakpoint goes, without converting each prefix again."""
    system, messages, _, counts = to_anthropic_with_origins(msgs)
    return system, messages, counts


def to_anthropic_with_origins(
    msgs: Sequence[Msg],
) -> tuple[SystemPrompt, list[dict[str, Any]], list[int], list[int]]:
    """:func:`to_anthropic_counted`, plus for each wire message the index of the first
    ``Msg`` it came from (merged turns hold several)."""
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
        remembered: _Remembered | None = msg.cached_wire(KEY)
        if remembered is None:
            remembered = _blocks_to(msg.content, msg.role, i, meta)
            msg.cache_wire(KEY, remembered)
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
    meta = msg.metadata.get(KEY)
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
    if isinstance(block, DataBlock | ToolCallBlock | ToolResultBlock):
        fail(i, f"content[{j}]", f"is a {block.type} block; a system message may hold only text")
    assert_never(block)


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
    if isinstance(b, ToolResultBlock):
        if role != "user":
            fail(i, field, "is a tool result; tool results belong in user messages")
        return _tool_result_to(b, i, j, meta)
    assert_never(b)


def _tool_result_to(b: ToolResultBlock, i: int, j: int, meta: dict[str, Any]) -> dict[str, Any]:
    key, field = str(j), f"content[{j}]"
    out: dict[str, Any] = {**_extra(meta, key), "type": "tool_result", "tool_use_id": b.id}
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
            elif isinstance(item, DataBlock):
                content.append(_data_to(item, i, f"{field}.output[{k}]", sub, meta))
            else:
                assert_never(item)
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
    elif isinstance(src, Base64Source):
        source = {"type": "base64", "media_type": src.media_type, "data": src.data}
    else:
        assert_never(src)
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
