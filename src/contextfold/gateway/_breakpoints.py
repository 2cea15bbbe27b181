"""Anthropic prompt-cache breakpoints (``cache_control``) added to a forwarded request.

Anthropic caches a prefix only up to a breakpoint, and finds an earlier entry only within
20 blocks before one. Two cases lose the cache through no fault of the content:

- a client that places no breakpoint at all (a plain SDK call) caches nothing: the gateway
  marks the end of the system prompt (or of the tools) and the end of the last message;
- a turn that adds more than 20 blocks (many parallel tool results) moves the client's
  one message breakpoint too far from the previous entry: the gateway marks the end of
  what it forwarded last time, where that entry is, so it is read whatever came after.

At most 4 breakpoints per request (Anthropic's limit): the client's own come first and are
never moved or removed; a marker is added only to a block that is a list item (never by
rewriting string content, which would change the bytes of a cached prefix). The added
marker copies the client's last one (its ``ttl``), so longer lifetimes stay first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_BREAKPOINTS", "count_breakpoints", "place_breakpoints"]

MAX_BREAKPOINTS = 4
_EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}


def _parts(body: dict[str, Any]) -> Iterator[Any]:
    """Every block that can carry a marker, in request order."""
    yield from body.get("tools") or []
    system = body.get("system")
    if isinstance(system, list):
        yield from system
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            yield from content


def _markers(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The ``cache_control`` markers in ``body`` and a copy of the last one (in one pass:
    a long history has thousands of blocks)."""
    used, found = 0, _EPHEMERAL
    for part in _parts(body):
        if isinstance(part, dict) and "cache_control" in part:
            used += 1
            if isinstance(part["cache_control"], dict):
                found = part["cache_control"]
    return used, dict(found)


def count_breakpoints(body: dict[str, Any]) -> int:
    """The ``cache_control`` markers in ``body``."""
    return _markers(body)[0]


def _marked_message(message: Any, marker: dict[str, Any]) -> Any | None:
    """``message`` with its last block marked, or ``None`` when it cannot take one."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or not content or not isinstance(content[-1], dict):
        return None
    if "cache_control" in content[-1] or content[-1].get("type") in (
        "thinking",
        "redacted_thinking",
    ):
        return None
    return {**message, "content": [*content[:-1], {**content[-1], "cache_control": marker}]}


def place_breakpoints(body: dict[str, Any], *, previous_end: int | None) -> dict[str, Any]:
    """``body`` with the breakpoints described in the module docstring added.

    ``previous_end`` is the index, in ``body["messages"]``, of the last message the
    previous request of this conversation forwarded (``None``: no previous request).
    """
    messages = list(body.get("messages") or [])
    used, marker = _markers(body)
    out = dict(body)
    if used == 0:
        system = body.get("system")
        if isinstance(system, str) and system:
            out["system"] = [{"type": "text", "text": system, "cache_control": marker}]
            used += 1
        elif isinstance(system, list) and system and isinstance(system[-1], dict):
            out["system"] = [*system[:-1], {**system[-1], "cache_control": marker}]
            used += 1
        elif body.get("tools") and isinstance(body["tools"][-1], dict):
            tools = list(body["tools"])
            out["tools"] = [*tools[:-1], {**tools[-1], "cache_control": marker}]
            used += 1
        if messages:
            marked = _marked_message(messages[-1], marker)
            if marked is not None:
                messages[-1] = marked
                used += 1
    if (
        previous_end is not None
        and 0 <= previous_end < len(messages) - 1
        and used < MAX_BREAKPOINTS
    ):
        marked = _marked_message(messages[previous_end], marker)
        if marked is not None:
            messages[previous_end] = marked
    out["messages"] = messages
    return out
