"""Who a request belongs to, and what the gateway forwarded for that conversation before.

Identity, in order: ``x-contextfold-session`` (the caller's word, used as given);
``x-claude-code-session-id`` with ``x-claude-code-agent-id`` when Claude Code sends it;
the body's ``prompt_cache_key`` (OpenAI chat and Responses bodies); else a hash of the
system prompt (``instructions``) and the first user message (input item). Claude Code's
subagents share the session id, and one ``prompt_cache_key`` may group many
conversations that share a prefix (OpenAI's own advice), so both are combined with that
hash when no agent id narrows them: parallel subagents start from different first
messages and stay apart.

State is one small typed value per conversation (:class:`SessionState`), kept in memory
or, when a :class:`~contextfold.workspace.SessionStore` is configured (``serve --state``:
a SQLite file or a PostgreSQL DSN), read from and saved there on every decision: the
store is the truth, so a restarted gateway, or another replica on the same store,
forwards the same prefix. A store that grants leases
(:class:`~contextfold.workspace.SessionLease`) gives one replica at a time the
conversation for the length of a decision (:mod:`._session_lease`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..workspace import SessionStore
from ._session_lease import Held, SessionBusy, held

if TYPE_CHECKING:
    from ._prefix import Checkpoint

__all__ = [
    "Held",
    "SessionBusy",
    "SessionState",
    "SessionStates",
    "content_digest",
    "session_key",
]

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
    if not isinstance(messages, list):  # a Responses body: its input items
        messages = body.get("input")
        if isinstance(messages, str):
            return messages
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "user":
                return message.get("content")
    return None


def _system(body: Mapping[str, Any]) -> Any:
    """Anthropic's ``system``, Responses' ``instructions``, or a chat body's first
    message when it is a system (or developer) message."""
    if "system" in body:
        return body["system"]
    if "instructions" in body:
        return body["instructions"]
    messages = body.get("messages")
    first = messages[0] if isinstance(messages, list) and messages else None
    if isinstance(first, dict) and first.get("role") in ("system", "developer"):
        return first.get("content")
    return None


def _opening(body: Mapping[str, Any]) -> str:
    """The hash of the system prompt and the first user message (or input item)."""
    return content_digest("", [_system(body), _first_user(body)])[:32]


def session_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    """The conversation a request belongs to (see the module's docstring for the order)."""
    explicit = headers.get(SESSION_HEADER)
    if explicit:
        return f"h:{explicit}"
    opening = _opening(body)
    claude = headers.get(CLAUDE_SESSION_HEADER)
    if claude:
        agent = headers.get(CLAUDE_AGENT_HEADER)
        return f"cc:{claude}:{agent}" if agent else f"cc:{claude}:{opening}"
    cache_key = body.get("prompt_cache_key")
    if isinstance(cache_key, str) and cache_key:
        return f"pk:{cache_key}:{opening}"
    return f"x:{opening}"


@dataclass(frozen=True)
class SessionState:
    """What the gateway decided for one conversation: the client's first ``cut`` messages
    are replaced by ``summary`` (none before the first compaction).

    ``cut_digest`` is the chained digest of those messages: a request whose history does
    not start with them is a different conversation (or one the client rewrote), and
    starts again from nothing. ``seen`` and ``seen_digest`` are the client's messages of
    the previous request, whose end gets a cache breakpoint so the next request reads
    everything forwarded before however many blocks it adds; ``before_seen`` and
    ``before_digest`` are the same for the request before it, so the previous request
    sent again (a retry) is forwarded with the same bytes.
    """

    cut: int = 0
    cut_digest: str = ""
    summary: str | None = None
    compactions: int = 0
    seen: int = 0
    seen_digest: str = ""
    before_seen: int = 0
    before_digest: str = ""

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
            before_seen=int(data.get("before_seen", 0)),
            before_digest=str(data.get("before_digest", "")),
        )


class SessionStates:
    """Every conversation's :class:`SessionState`: the most recent ``size`` in memory when
    there is no ``store``; with one, every state is read from it and written to it (it is
    shared by restarts and replicas, so a copy in memory could be stale). One lock per
    conversation orders its concurrent requests in this process; :meth:`hold` also takes
    the store's lease on it, when the store grants leases, for ``lease_ttl`` seconds
    (renewed while held), waiting at most ``wait`` seconds for either. Beside each state,
    in memory only, the :class:`~._prefix.Checkpoint` of the conversation's last request
    in this process (what the next one need not hash or count again; it is checked
    against the request's bytes before use, so one left stale by a replica is unused)."""

    def __init__(
        self,
        store: SessionStore | None = None,
        *,
        size: int = 10_000,
        lease_ttl: float = 10.0,
        wait: float = 15.0,
    ) -> None:
        if lease_ttl <= 0 or wait < 0:
            raise ValueError(
                f"lease_ttl must be positive and wait not negative, got {lease_ttl} and {wait}"
            )
        self.store = store
        self.size = size
        self.lease_ttl = lease_ttl
        self.wait = wait
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

    def hold(self, key: str) -> AbstractAsyncContextManager[Held]:
        """Conversation ``key`` held for one decision: its lock here and its lease in the
        store (when it grants leases), then its state loaded; :class:`SessionBusy` when
        either is still held by another request after ``wait`` seconds."""
        return held(self, key, _STATE_PREFIX + key)

    async def load(self, key: str) -> SessionState:
        """The conversation's state (an empty state for a new one)."""
        if self.store is not None:
            text = await self.store.load_state(_STATE_PREFIX + key)
            return SessionState() if text is None else SessionState.from_json(text)
        found = self._states.get(key)
        if found is not None:
            self._states.move_to_end(key)
            return found
        state = SessionState()
        self._remember(key, state)
        return state

    async def save(self, key: str, state: SessionState) -> None:
        """Keep ``state`` as the conversation's (in the store, when there is one)."""
        if self.store is not None:
            await self.store.save_state(_STATE_PREFIX + key, state.to_json())
            return
        self._remember(key, state)

    def _remember(self, key: str, state: SessionState) -> None:
        self._states[key] = state
        self._states.move_to_end(key)
        while len(self._states) > self.size:
            self._states.popitem(last=False)
