"""A request's ``context_management`` applied by the gateway: the plan the routes act on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..token import TokenCounter
from ._clear_thinking import clear_thinking
from ._clear_tools import clear_tool_uses
from ._compaction import PendingCompaction, apply_blocks
from ._count import CountCache, Tally
from ._edits import ClearThinking, ClearToolUses, Compact, parse_edits

__all__ = ["EditOutcome", "apply_context_management", "unedited"]


@dataclass(frozen=True)
class EditOutcome:
    """The body to send upstream (without ``context_management``), what was applied, and
    the input tokens before and after (the gateway's counter, counted on first use)."""

    body: dict[str, Any]
    applied_edits: tuple[dict[str, Any], ...]
    tally: Tally
    """The count of ``body``, lazy: reading the token figures counts what is not yet."""
    requested: bool
    """Whether the request carried ``context_management`` (else nothing is reported)."""
    compaction: PendingCompaction | None = None
    """A compaction the trigger asks for, to run before sending (``compact``)."""
    failed: bool = False
    """The edits could not be applied: the body goes upstream without the field and
    unedited, and the answer reports no ``applied_edits`` (fail open, never a claim)."""

    @property
    def tokens_saved(self) -> int:
        """Input tokens the edits removed (known without counting the request)."""
        return sum(int(e["cleared_input_tokens"]) for e in self.applied_edits)

    @property
    def input_tokens(self) -> int:
        """Tokens of ``body``."""
        return self.tally.total

    @property
    def original_input_tokens(self) -> int:
        """Tokens of the request before the edits."""
        return self.tally.total + self.tokens_saved

    def response_field(self) -> dict[str, Any]:
        """The ``context_management`` object a response carries."""
        return {"applied_edits": [dict(e) for e in self.applied_edits]}


def apply_context_management(
    body: dict[str, Any],
    counter: TokenCounter,
    *,
    compaction: bool = True,
    cache: CountCache | None = None,
) -> EditOutcome:
    """Apply ``body["context_management"]`` in order, each edit on the result of the ones
    before it, after the compaction blocks already in the history; ``EditError`` if the
    field is malformed. A compaction the trigger asks for is returned as
    ``EditOutcome.compaction`` (it needs I/O: :func:`compact` runs it, after the clearing
    edits whatever their order). ``compaction=False`` (token counting) never asks for one.
    ``cache`` keeps message counts across requests."""
    requested = "context_management" in body
    edits = parse_edits(body["context_management"]) if requested else ()
    out = {k: v for k, v in body.items() if k != "context_management"}
    messages = out.get("messages")
    if not isinstance(messages, list):
        return EditOutcome(out, (), Tally(counter, out, cache), requested)
    messages = apply_blocks(messages)
    out["messages"] = messages
    tally = Tally(counter, out, cache)
    applied: list[dict[str, Any]] = []
    pending: PendingCompaction | None = None
    for edit in edits:
        entry: dict[str, Any] | None = None
        if isinstance(edit, ClearThinking):
            messages, entry = clear_thinking(messages, edit, tally)
        elif isinstance(edit, ClearToolUses):
            messages, entry = clear_tool_uses(messages, edit, tally)
        elif isinstance(edit, Compact) and compaction and tally.total > edit.trigger_value:
            pending = PendingCompaction(edit, tuple(messages))
        if entry is not None:
            applied.append(entry)
    out["messages"] = messages
    return EditOutcome(out, tuple(applied), tally, requested, pending)


def unedited(body: dict[str, Any], counter: TokenCounter) -> EditOutcome:
    """The outcome of a request whose edits failed: sent without the field, unedited."""
    out = {k: v for k, v in body.items() if k != "context_management"}
    return EditOutcome(out, (), Tally(counter, out), "context_management" in body, failed=True)
