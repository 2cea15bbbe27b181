"""Offloaded tool results and the read-back tool the gateway resolves itself.

In transparent mode a tool result over ``tool_result_limit`` is cut to its head and tail;
with offload on, the whole text is kept in the conversation's workspace and the note
in the middle names it (``item r<16 hex>``) and the characters left out. The model reads
them back with :data:`READ_TOOL`, which the gateway adds after the client's own tools
and answers itself: the model's calls to it never reach the client.

Why each choice:

- The item id is a digest of the result's text, and the note is a pure function of the
  text, so a result resent every turn is cut to the same bytes (the prefix stays cached)
  and stored once.
- An item is looked up only under the asking conversation's own workspace session
  (derived from its session key), never by a reference the model supplies: a
  conversation cannot read another's items, even by guessing an id.
- The tool definition is constant and goes last in ``tools``, so the client's tools keep
  their bytes and the request's prefix is the same on every turn.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from .._exceptions import WorkspaceError
from ..message import ToolResultBlock
from ..token import TokenCounter, head_within
from ..workspace import MemoryWorkspace, encode_key

__all__ = [
    "OFFLOAD_NOTE",
    "READ_TOOL",
    "Offload",
    "ResultStore",
    "anthropic_read_tool",
    "chat_read_tool",
    "item_id",
    "offload_note",
    "read_arguments",
    "responses_read_tool",
]

READ_TOOL = "contextfold_read_result"
"""The name of the gateway's read-back tool (a client tool of that name turns offload
off for the request: its calls would be ambiguous)."""

_DESCRIPTION = (
    "Read the part of a tool result that was shortened to fit the context. A shortened "
    "result says which item holds the whole text and from which character offset the "
    "omitted part starts. Returns the text from that offset on, a page at a time, and the "
    "offset to continue from."
)
_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The item named in the note, e.g. r0123abcd..."},
        "offset": {
            "type": "integer",
            "minimum": 0,
            "description": "The character offset to read from (0: the beginning).",
        },
    },
    "required": ["id"],
}

OFFLOAD_NOTE = (
    "\n\n[... {omitted} tokens of this tool result omitted by the gateway (characters "
    "{start} to {end} of {total}); the whole result is item {id}: call "
    + READ_TOOL
    + ' with {{"id": "{id}", "offset": {start}}} to read them ...]\n\n'
)
"""What stands in the middle of an offloaded tool result."""

_ID = re.compile(r"r[0-9a-f]{16}")


def anthropic_read_tool() -> dict[str, Any]:
    """The tool as an Anthropic ``tools`` entry (a fresh copy: callers may mark it)."""
    return {"name": READ_TOOL, "description": _DESCRIPTION, "input_schema": _copy(_SCHEMA)}


def chat_read_tool() -> dict[str, Any]:
    """The tool as a Chat Completions ``tools`` entry."""
    function = {"name": READ_TOOL, "description": _DESCRIPTION, "parameters": _copy(_SCHEMA)}
    return {"type": "function", "function": function}


def responses_read_tool() -> dict[str, Any]:
    """The tool as a Responses ``tools`` entry."""
    return {
        "type": "function",
        "name": READ_TOOL,
        "description": _DESCRIPTION,
        "parameters": _copy(_SCHEMA),
    }


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def item_id(text: str) -> str:
    """The item that holds ``text`` (the same text, the same id)."""
    return "r" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def offload_note(text: str, head: str, tail: str, omitted: int) -> str:
    """The note between ``head`` and ``tail`` of ``text``, naming the omitted characters."""
    start, end = len(head), len(text) - len(tail)
    return OFFLOAD_NOTE.format(
        omitted=omitted, start=start, end=end, total=len(text), id=item_id(text)
    )


@dataclass(frozen=True)
class Offload:
    """One tool result's whole text, to keep under ``id`` in the conversation's workspace."""

    id: str
    text: str


def read_arguments(arguments: Any) -> tuple[str, int] | str:
    """``(id, offset)`` from a call's arguments, or what is wrong with them."""
    if not isinstance(arguments, dict):
        return "the arguments must be an object with an 'id'"
    found = arguments.get("id")
    offset = arguments.get("offset", 0)
    if not isinstance(found, str) or not _ID.fullmatch(found.strip()):
        return "'id' must be the item named in a shortened result, e.g. r0123456789abcdef"
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        return "'offset' must be a character offset of 0 or more"
    return found.strip(), offset


class Items(Protocol):
    """What the store needs of a workspace: ``offload_tool_result`` and ``read``."""

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str: ...

    async def read(self, ref: str, *, offset: int = 0, limit: int | None = None) -> str: ...


class ResultStore:
    """Offloaded tool results, one workspace session per conversation.

    ``workspace`` is the gateway's state store when it can hold items (every built-in
    workspace can), else an in-memory one. Which items are already stored is remembered
    (the most recent ``size``), so a result resent every turn costs one lookup per
    process, not one per turn.
    """

    def __init__(
        self, workspace: Items | None = None, *, size: int = 100_000, sessions: int = 1_000
    ) -> None:
        self._memory = MemoryWorkspace() if workspace is None else None
        self.workspace: Items = workspace if workspace is not None else self._memory  # type: ignore[assignment]
        self.size = size
        self.sessions = sessions
        """In memory only: the conversations whose items are kept, the least recently
        offloaded purged first (a workspace given keeps them all)."""
        self._stored: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._recent: OrderedDict[str, None] = OrderedDict()

    @staticmethod
    def session_of(key: str) -> str:
        """The workspace session of conversation ``key`` (a digest: keys hold any text)."""
        return "gateway-" + hashlib.sha256(key.encode()).hexdigest()[:24]

    def _ref(self, key: str, item: str) -> str:
        session = encode_key(self.session_of(key), what="session_id")
        return f"sessions/{session}/tool_result-{encode_key(item, what='tool-call id')}.txt"

    async def _read(self, key: str, item: str) -> str | None:
        try:
            return await self.workspace.read(self._ref(key, item))
        except (WorkspaceError, KeyError, FileNotFoundError):
            return None

    async def keep(self, key: str, offloads: Iterable[Offload]) -> int:
        """Store each of ``offloads`` under conversation ``key``, once; how many were new."""
        stored = 0
        offloads = list(offloads)
        if offloads and self._memory is not None:
            await self._touch(key)
        for offload in offloads:
            mark = (key, offload.id)
            if mark in self._stored:
                self._stored.move_to_end(mark)
                continue
            if await self._read(key, offload.id) is None:
                block = ToolResultBlock(id=offload.id, name=READ_TOOL, output=offload.text)
                await self.workspace.offload_tool_result(self.session_of(key), block)
                stored += 1
            self._stored[mark] = None
            while len(self._stored) > self.size:
                self._stored.popitem(last=False)
        return stored

    async def _touch(self, key: str) -> None:
        self._recent[key] = None
        self._recent.move_to_end(key)
        while len(self._recent) > self.sessions and self._memory is not None:
            old, _ = self._recent.popitem(last=False)
            await self._memory.purge(self.session_of(old))
            self._stored = OrderedDict((k, None) for k in self._stored if k[0] != old)

    async def answer(
        self, key: str, arguments: Any, *, page: int, counter: TokenCounter
    ) -> tuple[str, bool]:
        """The read-back tool's result for ``arguments`` in conversation ``key``: at most
        ``page`` tokens of the item from the offset, and whether it is an error."""
        parsed = read_arguments(arguments)
        if isinstance(parsed, str):
            return parsed, True
        item, offset = parsed
        text = await self._read(key, item)
        if text is None:
            return f"no item {item} in this conversation", True
        if offset >= len(text):
            return f"item {item} has {len(text)} characters; offset {offset} is past its end", True
        chunk = head_within(counter, text[offset:], page) or text[offset : offset + 1]
        end = offset + len(chunk)
        more = f"; continue with offset {end}" if end < len(text) else "; the end of the item"
        return f"[item {item}, characters {offset} to {end} of {len(text)}{more}]\n{chunk}", False
