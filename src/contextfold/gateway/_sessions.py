"""Who a request belongs to, and what the gateway forwarded for that conversation before.

Identity, in order: ``x-contextfold-session`` (the caller's word, used as given);
``x-claude-code-session-id`` with ``x-claude-code-agent-id`` when Claude Code sends it;
else a hash of the system prompt and the first user message. Claude Code's subagents
share the session id, so a session id without an agent id is combined with that hash:
parallel subagents of one session start from different first messages and stay apart.

State is one small typed value per conversation (:class:`SessionState`), kept in memory
or, when a :class:`~contextfold.workspace.SessionStore` is configured (SQLite by
default on ``serve --state``), saved there after every decision, so a restarted gateway
forwards the same prefix it forwarded before the restart.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..workspace import SessionStore

if TYPE_CHECKING:
    from ._prefix import Checkpoint

__all__ = ["SessionState", "SessionStates", "content_digest", "session_key"]

SESSION_HEADER = "x-contextfold-session"
CLAUDE_SESSION_HEADER = "x-claude-code-session-id"
CLAUDE_AGENT_HEADER = "x-claude-code-agent-id"
_STATE_PREFIX = "gateway-transparent/"


def _plain(value: Any) -> Any:
    """``value`` without ``cache_control`` markers: they are not content, and clients move
    them every turn."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def content_digest(previous: str, value: Any) -> str:
    """A SHA-256 chained over ``previous`` and ``value``'s content (markers excluded)."""
    text = json.dumps(_plain(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{previous}\0{text}".encode()).hexdigest()


def _first_user(body: Mapping[str, Any]) -> Any:
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "user":
                return message.get("content")
    return None


def session_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    """The conversation a request belongs to (see the module's docstring for the order)."""
    explicit = headers.get(SESSION_HEADER)
    if explicit:
        return f"h:{explicit}"
    opening = content_digest("", [body.get("system"), _first_user(body)])[:32]
    claude = headers.get(CLAUDE_SESSION_HEADER)
    if claude:
        agent = headers.get(CLAUDE_AGENT_HEADER)
        return f"cc:{claude}:{agent}" if agent else f"cc:{claude}:{opening}"
    return f"x:{opening}"


@dataclass(frozen=True)
class SessionState:
    """What the gateway decided for one conversation: the client's first ``cut`` messages
    are replaced by ``summary`` (none before the first compaction).

    ``cut_digest`` is the chained digest of those messages: a request whose history does
    not start with them is a different conversation (or one the client rewrote), and
    starts again from nothing. ``seen`` and ``seen_digest`` are the client's messages of
    the previous request, whose end gets a cache breakpoint so the next request reads
    everything forwarded before however many blocks it adds.
    """

    cut: int = 0
    cut_digest: str = ""
    summary: str | None = None
    compactions: int = 0
    seen: int = 0
    seen_digest: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SessionState:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("session state: expected a JSON object")
        return cls(
            cut=int(data.get("cut", 0)),
            cut_digest=str(data.get("cut_digest", "")),
            summary=data.get("summary") if isinstance(data.get("summary"), str) else None,
            compactions=int(data.get("compactions", 0)),
            seen=int(data.get("seen", 0)),
            seen_digest=str(data.get("seen_digest", "")),
        )


class SessionStates:
    """Every conversation's :class:`SessionState`: the most recent ``size`` in memory, all
    of them in ``store`` when one is given (read through on a miss, written on every
    change). One lock per conversation orders its concurrent requests. Beside each state,
    in memory only, the :class:`~._prefix.Checkpoint` of the conversation's last request
    (what the next one need not hash or count again)."""

    def __init__(self, store: SessionStore | None = None, *, size: int = 10_000) -> None:
        self.store = store
        self.size = size
        self._states: OrderedDict[str, SessionState] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self._checkpoints: OrderedDict[str, Checkpoint] = OrderedDict()

    def checkpoint(self, key: str) -> Checkpoint | None:
        """The checkpoint of conversation ``key``'s last request, if kept."""
        return self._checkpoints.get(key)

    def keep_checkpoint(self, key: str, checkpoint: Checkpoint | None) -> None:
        """Keep ``checkpoint`` for ``key`` (``None`` forgets it); the most recent ``size``."""
        if checkpoint is None:
            self._checkpoints.pop(key, None)
            return
        self._checkpoints[key] = checkpoint
        self._checkpoints.move_to_end(key)
        while len(self._checkpoints) > self.size:
            self._checkpoints.popitem(last=False)

    def lock(self, key: str) -> asyncio.Lock:
        """The lock of conversation ``key``."""
        found = self._locks.get(key)
        if found is None:
            if len(self._locks) > self.size:
                self._locks = {k: v for k, v in self._locks.items() if v.locked()}
            found = self._locks[key] = asyncio.Lock()
        return found

    async def load(self, key: str) -> SessionState:
        """The conversation's state (an empty state for a new one)."""
        found = self._states.get(key)
        if found is not None:
            self._states.move_to_end(key)
            return found
        state = SessionState()
        if self.store is not None:
            text = await self.store.load_state(_STATE_PREFIX + key)
            if text is not None:
                state = SessionState.from_json(text)
        self._remember(key, state)
        return state

    async def save(self, key: str, state: SessionState) -> None:
        """Keep ``state`` as the conversation's (and save it in the store)."""
        if self.store is not None:
            await self.store.save_state(_STATE_PREFIX + key, state.to_json())
        self._remember(key, state)

    def _remember(self, key: str, state: SessionState) -> None:
        self._states[key] = state
        self._states.move_to_end(key)
        while len(self._states) > self.size:
            self._states.popitem(last=False)
