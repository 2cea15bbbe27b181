"""Transparent mode on a route: which requests it takes, their session, their state.

A request "asks for nothing" when it carries no ``context_management``, or only
``clear_thinking_20251015`` with ``keep: "all"`` (a no-op Claude Code sends whenever
thinking is on). Such requests get the route's :class:`TransparentPolicy`; a request that
asks for edits or compaction gets exactly what it asked for, and nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from starlette.requests import Request

from ..workspace import SessionStore
from ._metrics import Metrics
from ._response_chain import ResponseChains
from ._retrieval import Items, ResultStore
from ._sessions import SessionStates, session_key
from ._transparent import TransparentPolicy
from ._transparent_ahead import Ahead

__all__ = [
    "CHAT_ROUTE",
    "MESSAGES_ROUTE",
    "RESPONSES_ROUTE",
    "TransparentMode",
    "asks_for_nothing",
    "mode_of",
]

MESSAGES_ROUTE = "/v1/messages"
CHAT_ROUTE = "/v1/chat/completions"
RESPONSES_ROUTE = "/v1/responses"
ROUTES = frozenset({MESSAGES_ROUTE, CHAT_ROUTE, RESPONSES_ROUTE})
"""Routes with a transparent mode: all three offload tool results, answer the
read-back tool and compact (a ``/v1/responses`` request chained by
``previous_response_id`` is never compacted)."""


@dataclass
class TransparentMode:
    """The policy of each route in transparent mode, every conversation's state, the
    tool results it offloaded (in the state store when it holds items, which every
    built-in workspace does; else in memory), and which conversation each response id
    it gave back belongs to."""

    policies: Mapping[str, TransparentPolicy]
    states: SessionStates = field(default_factory=SessionStates)
    results: ResultStore = field(default_factory=ResultStore)
    chains: ResponseChains = field(default_factory=ResponseChains)
    """The response ids given back on ``/v1/responses``, to their conversations."""
    ahead: Ahead = field(default_factory=lambda: Ahead(Metrics()))
    """Each conversation's compaction prepared in the background (a policy's
    ``background``); the app gives it its own metrics."""

    @classmethod
    def of(
        cls,
        transparent: TransparentPolicy | Mapping[str, TransparentPolicy],
        store: SessionStore | None,
        *,
        lease_ttl: float = 10.0,
        wait: float = 15.0,
        metrics: Metrics | None = None,
    ) -> TransparentMode:
        """``transparent`` as one policy (for ``/v1/messages``) or by route; ``lease_ttl``
        and ``wait`` as in :class:`SessionStates`; ``metrics``: the app's."""
        policies = (
            {MESSAGES_ROUTE: transparent}
            if isinstance(transparent, TransparentPolicy)
            else dict(transparent)
        )
        unknown = sorted(set(policies) - ROUTES)
        if unknown:
            raise ValueError(f"transparent mode is not available on {unknown}")
        items = cast(Items, store) if _holds_items(store) else None
        return cls(
            policies,
            SessionStates(store, lease_ttl=lease_ttl, wait=wait),
            ResultStore(items),
            ResponseChains(store),
            Ahead(metrics if metrics is not None else Metrics()),
        )

    def key(self, request: Request, body: Mapping[str, Any]) -> str:
        """The conversation ``request`` belongs to."""
        return session_key(request.headers, body)


def _holds_items(store: object) -> bool:
    return callable(getattr(store, "offload_tool_result", None)) and callable(
        getattr(store, "read", None)
    )


def mode_of(
    request: Request, route: str = MESSAGES_ROUTE
) -> tuple[TransparentMode, TransparentPolicy] | None:
    """The app's transparent mode and the route's policy, when it has one."""
    mode: TransparentMode | None = getattr(request.app.state, "transparent", None)
    if mode is None or route not in mode.policies:
        return None
    return mode, mode.policies[route]


def _keeps_all(edit: Any) -> bool:
    if not isinstance(edit, dict) or edit.get("type") != "clear_thinking_20251015":
        return False
    keep = edit.get("keep")
    return keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all")


def asks_for_nothing(body: Mapping[str, Any]) -> bool:
    """Whether the request leaves context management to the gateway (see the docstring)."""
    field_ = body.get("context_management")
    if field_ is None:
        return True
    edits = field_.get("edits") if isinstance(field_, dict) else None
    return isinstance(edits, list) and all(_keeps_all(e) for e in edits)
