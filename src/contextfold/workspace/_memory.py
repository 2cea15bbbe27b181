"""MemoryWorkspace: the workspace protocol in process memory (tests, no disk)."""

from __future__ import annotations

import threading

from ._base import BaseWorkspace
from ._names import CONTEXT_FILE, ItemPath, tool_file

__all__ = ["MemoryWorkspace"]


class MemoryWorkspace(BaseWorkspace):
    """Keeps everything in dictionaries; lost when the process exits.

    Same references and behaviour as the other backends (relative references such as
    ``sessions/s1/context.jsonl``); safe to share between tasks and threads. Ready when
    built (:meth:`initialize` is a no-op kept for the protocol).
    """

    def __init__(self) -> None:
        self._initialized = True
        self._lock = threading.Lock()
        self._ids: dict[str, str] = {}
        self._context: dict[str, bytearray] = {}
        self._tools: dict[str, dict[str, bytes]] = {}
        self._data: dict[str, bytes] = {}
        self._refs: dict[str, set[str]] = {}
        self._states: dict[str, bytes] = {}

    async def initialize(self) -> None:
        """Nothing to create."""

    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        with self._lock:
            self._ids.setdefault(skey, session_id)
            self._context.setdefault(skey, bytearray()).extend(payload)

    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        with self._lock:
            self._ids.setdefault(skey, session_id)
            tools = self._tools.setdefault(skey, {})
            name = tool_file(tkey)
            while name in tools:
                name = tool_file(tkey, unique=True)
            tools[name] = bytes(body)
            return name

    async def _put_data(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        with self._lock:
            self._ids.setdefault(skey, session_id)
            self._refs.setdefault(skey, set()).add(name)
            self._data.setdefault(name, bytes(payload))

    async def _get(self, item: ItemPath) -> bytes | None:
        with self._lock:
            if item.kind == "data":
                return self._data.get(item.name)
            if item.kind == "context":
                buf = self._context.get(item.session_key or "")
                return None if buf is None else bytes(buf)
            return self._tools.get(item.session_key or "", {}).get(item.name)

    async def _sessions(self) -> list[str]:
        with self._lock:
            return list(self._ids.values())

    async def _items(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        with self._lock:
            keys = list(self._ids) if skey is None else [skey]
            out: list[tuple[ItemPath, int, str | None]] = []
            for key in keys:
                sid = self._ids.get(key)
                if key in self._context:
                    item = ItemPath("context", key, CONTEXT_FILE)
                    out.append((item, len(self._context[key]), sid))
                for name, body in self._tools.get(key, {}).items():
                    out.append((ItemPath("tool_result", key, name), len(body), sid))
            names = set(self._data) if skey is None else self._refs.get(skey, set())
            owner = None if skey is None else self._ids.get(skey)
            for name in names:
                if name in self._data:
                    out.append((ItemPath("data", None, name), len(self._data[name]), owner))
            return out

    async def _purge(self, skey: str) -> None:
        with self._lock:
            for table in (self._ids, self._context, self._tools, self._states):
                table.pop(skey, None)
            for name in self._refs.pop(skey, set()):
                if not any(name in refs for refs in self._refs.values()):
                    self._data.pop(name, None)

    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        with self._lock:
            self._ids.setdefault(skey, session_id)
            self._states[skey] = bytes(state)

    async def _load_state(self, skey: str) -> bytes | None:
        with self._lock:
            return self._states.get(skey)
