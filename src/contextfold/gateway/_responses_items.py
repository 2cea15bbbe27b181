"""OpenAI Responses input items, as the compaction emulation reads and rewrites them.

The rules, kept by every route: a ``compaction`` item stands for everything before it
except the messages of the user, system and developer, which stay word for word (the
window ``/responses/compact`` documents: "all user messages, followed by a single
compaction item"); only the last compaction item counts; and before the upstream sees
the input, that item becomes a user message holding its readable summary. Every
compaction item is verified first: a forged one is an error, never skipped.

A compaction made while the model is in a tool loop also keeps the newest calls of that
loop with their outputs (:func:`recent`); its item records them (their number and
digest), so the requests after it forward them again right after the summary, where the
compacting request had them: the prefix the upstream cached changes once per compaction.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from ._compaction import SUMMARY_PREFIX
from ._seal import SealError, SealKey

__all__ = [
    "DEFAULT_COMPACT_THRESHOLD",
    "Expanded",
    "ResponsesError",
    "compaction_threshold",
    "expand",
    "input_items",
    "is_kept",
    "messages_of",
    "recent",
    "summary_message",
    "tail_digest",
    "without_trigger",
]

DEFAULT_COMPACT_THRESHOLD = 200_000
"""Threshold for ``{"type": "compaction"}`` without ``compact_threshold`` (the API does
not document its own default)."""

_KEPT_ROLES = frozenset({"user", "system", "developer"})


class ResponsesError(ValueError):
    """A request OpenAI would refuse with a 400: the message, the ``param`` at fault and
    the error ``code``."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


def compaction_threshold(value: Any) -> int | None:
    """The compaction threshold a ``context_management`` value asks for (``None``: no
    compaction entry); ``ResponsesError`` if malformed."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ResponsesError(
            "context_management: expected a list like [{'type': 'compaction', "
            "'compact_threshold': N}]",
            "context_management",
        )
    threshold: int | None = None
    for i, entry in enumerate(value):
        where = f"context_management[{i}]"
        if not isinstance(entry, dict) or entry.get("type") != "compaction":
            raise ResponsesError(f"{where}.type: expected 'compaction'", f"{where}.type")
        extra = set(entry) - {"type", "compact_threshold"}
        if extra:
            raise ResponsesError(f"{where}: unexpected field(s) {sorted(extra)}", where)
        if threshold is not None:
            raise ResponsesError(f"{where}: 'compaction' appears more than once", where)
        n = entry.get("compact_threshold")
        if n is None:
            n = DEFAULT_COMPACT_THRESHOLD
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ResponsesError(
                f"{where}.compact_threshold: expected a non-negative integer, got {n!r}",
                f"{where}.compact_threshold",
            )
        threshold = n
    return threshold


def input_items(value: Any) -> list[Any]:
    """The request's ``input`` as a list of items (a string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ResponsesError("input: expected a string or a list of items", "input")
    return value


def without_trigger(items: list[Any]) -> tuple[list[Any], bool]:
    """The items without a final ``compaction_trigger``, and whether there was one
    (anywhere else it is an error: it must be the last input item)."""
    for i, item in enumerate(items):
        if item.get("type") == "compaction_trigger" and i != len(items) - 1:
            raise ResponsesError("compaction_trigger must be the last input item", f"input[{i}]")
    if items and items[-1].get("type") == "compaction_trigger":
        return items[:-1], True
    return items, False


def is_kept(item: Any) -> bool:
    """Whether ``item`` survives a compaction as it is: a user, system or developer
    message."""
    return (
        isinstance(item, dict)
        and item.get("type", "message") == "message"
        and item.get("role") in _KEPT_ROLES
    )


def summary_message(summary: str) -> dict[str, Any]:
    """The user message a compaction item becomes upstream."""
    text = SUMMARY_PREFIX + summary
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def tail_digest(items: list[Any]) -> str:
    """The digest of the items a compaction kept after its summary."""
    data = json.dumps(items, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


def recent(tail: list[Any], budget: int, size: Callable[[Any], int]) -> list[Any]:
    """The newest items of ``tail`` (a tool loop in progress) within ``budget`` tokens,
    each item's tokens by ``size``, starting on a call or a message, never on an output
    (so no output loses its call); at least the newest such start."""
    start, total = len(tail), 0
    for k in range(len(tail) - 1, -1, -1):
        total += size(tail[k])
        if str(tail[k].get("type", "")).endswith("_output"):
            continue
        if start < len(tail) and total > budget:
            break
        start = k
    return tail[start:]


@dataclass(frozen=True)
class Expanded:
    """An input with its compaction items read: the messages kept from before the last
    item, that item's summary, the items of the turn in progress it kept (``carried``),
    and the items after it."""

    kept: list[Any]
    summary: str | None
    after: list[Any]
    carried: list[Any] = field(default_factory=list)

    @property
    def had_items(self) -> bool:
        """Whether the input carried compaction items (else it goes upstream as sent)."""
        return self.summary is not None

    def items(self) -> list[Any]:
        """The input as the upstream should see it."""
        if self.summary is None:
            return [*self.kept, *self.after]
        return [*self.kept, summary_message(self.summary), *self.carried, *self.after]

    def window(self) -> list[Any]:
        """What stays through a new compaction: every kept message, before and after."""
        return [*self.kept, *(item for item in self.after if is_kept(item))]

    def tail(self) -> list[Any]:
        """The items after the last kept message (the turn in progress: tool calls and
        their outputs), which the request being compacted still needs."""
        loop = [*self.carried, *self.after]
        last = max((i for i, item in enumerate(loop) if is_kept(item)), default=-1)
        return [item for item in loop[last + 1 :] if not is_kept(item)]


def expand(items: list[Any], key: SealKey) -> Expanded:
    """Read every compaction item of ``items`` (``ResponsesError`` for one this gateway
    did not seal) and split the input at the last one."""
    last = -1
    summary: str | None = None
    payload: dict[str, Any] = {}
    for i, item in enumerate(items):
        if item.get("type") != "compaction":
            continue
        where = f"input[{i}].encrypted_content"
        try:
            payload = key.open(item.get("encrypted_content"))
        except SealError as exc:
            raise ResponsesError(str(exc), where, "invalid_encrypted_content") from None
        text = payload.get("summary")
        if not isinstance(text, str):
            raise ResponsesError(
                "encrypted_content holds no summary", where, "invalid_encrypted_content"
            )
        last, summary = i, text
    if last < 0:
        return Expanded([], None, list(items))
    kept = [item for item in items[:last] if is_kept(item)]
    after = [item for item in items[last + 1 :] if item.get("type") != "compaction"]
    return Expanded(kept, summary, after, _carried(items[:last], payload))


def _carried(before: list[Any], payload: dict[str, Any]) -> list[Any]:
    """The items the compaction kept after its summary, found where the client keeps
    them (right before the item); none when the client dropped or changed them."""
    n = payload.get("tail")
    if not isinstance(n, int) or n <= 0 or n > len(before):
        return []
    found = before[len(before) - n :]
    if any(is_kept(i) or i.get("type") == "compaction" for i in found):
        return []
    return found if tail_digest(found) == payload.get("tail_sha") else []


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else json.dumps(content, ensure_ascii=False)
    parts: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        text = part.get("text", part.get("refusal"))
        if isinstance(text, str):
            parts.append(text)
        elif part.get("type") in ("input_image", "input_file", "input_audio"):
            parts.append(f"[{part['type'].removeprefix('input_')}]")
    return "\n".join(parts)


def _arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return {}, raw
        return (value, None) if isinstance(value, dict) else ({}, raw)
    return ({}, json.dumps(raw, ensure_ascii=False)) if raw is not None else ({}, None)


def messages_of(items: list[Any]) -> list[Msg]:
    """The items as library messages, to count and to summarize: messages by role,
    function and custom tool calls with their outputs, reasoning by its summary; any
    other item by its JSON."""
    names: dict[str, str] = {}
    out: list[Msg] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            text = _text(item.get("content"))
            if role == "assistant":
                out.append(Msg("assistant", text, "assistant"))
            elif role in ("system", "developer"):
                out.append(Msg("system", text, "system"))
            else:
                out.append(Msg("user", text, "user"))
        elif kind in ("function_call", "custom_tool_call"):
            call_id, name = str(item.get("call_id", "")), str(item.get("name", ""))
            names[call_id] = name
            raw = item.get("arguments") if kind == "function_call" else item.get("input")
            args, raw_input = _arguments(raw)
            block = ToolCallBlock(id=call_id, name=name, input=args, raw_input=raw_input)
            out.append(Msg.of_blocks("assistant", [block], "assistant"))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = str(item.get("call_id", ""))
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output)
            result = ToolResultBlock(id=call_id, name=names.get(call_id, ""), output=text)
            out.append(Msg.of_blocks("user", [result], "user"))
        elif kind == "reasoning":
            summary = _text(item.get("summary"))
            if summary:
                out.append(Msg.of_blocks("assistant", [TextBlock(text=summary)], "assistant"))
        else:
            out.append(Msg("assistant", json.dumps(item, ensure_ascii=False), "assistant"))
    return out
