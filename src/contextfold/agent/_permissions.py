"""Permissions: allow, deny or ask before a tool runs."""

from __future__ import annotations

import fnmatch
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Literal, TypeAlias

from .._logging import logger
from ..message import ToolCallBlock

__all__ = ["AskCallback", "Decision", "Permissions"]

Decision: TypeAlias = Literal["allow", "deny", "ask"]

AskCallback: TypeAlias = Callable[[ToolCallBlock], Awaitable[bool] | bool]
"""Asked about a call whose tool matched an ``ask`` rule; True lets it run."""


class Permissions:
    """Rules per tool name (``fnmatch`` patterns such as ``"write_*"``).

    The strictest matching rule wins: ``deny`` over ``ask`` over ``allow``; a tool no rule
    matches gets ``default``. ``ask`` calls ``ask_callback`` with the call; with no callback
    an ``ask`` is a denial. The agent's built-in tools (``CompressContext``, the read-back
    tools ``Read``/``Grep``/``Glob`` over its own offload workspace, and the task tools)
    are never checked: they only touch the agent's own state.

    Example::

        Permissions(deny=["delete_*"], ask=["write_file"], ask_callback=confirm)
    """

    def __init__(
        self,
        *,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        ask: Iterable[str] = (),
        default: Decision = "allow",
        ask_callback: AskCallback | None = None,
    ) -> None:
        self.allow = list(allow)
        self.deny = list(deny)
        self.ask = list(ask)
        self.default: Decision = default
        self.ask_callback = ask_callback

    def decide(self, tool_name: str) -> Decision:
        """The rule that applies to ``tool_name``, before asking anyone."""
        for decision, patterns in (("deny", self.deny), ("ask", self.ask), ("allow", self.allow)):
            if any(fnmatch.fnmatchcase(tool_name, p) for p in patterns):
                return decision  # type: ignore[return-value]
        return self.default

    async def check(self, call: ToolCallBlock) -> str | None:
        """None when ``call`` may run, else the reason it may not (shown to the model)."""
        decision = self.decide(call.name)
        if decision == "allow":
            return None
        if decision == "deny":
            return f"Permission denied: the tool {call.name!r} is not allowed in this session."
        if self.ask_callback is None:
            return (
                f"Permission denied: the tool {call.name!r} needs the user's approval and "
                "no one is available to approve it."
            )
        try:
            answer = self.ask_callback(call)
            approved = bool(await answer if inspect.isawaitable(answer) else answer)
        except Exception as exc:
            logger.warning("permission callback failed for %s: %s", call.name, exc)
            approved = False
        if approved:
            return None
        return f"Permission denied: the user did not approve this call to {call.name!r}."
