"""A request's ``context_management`` applied by the gateway: the plan the routes act on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..token import TokenCounter
from ._clear_thinking import clear_thinking
from ._clear_tools import clear_tool_uses
from ._count import Tally
from ._edits import COMPACT, ClearThinking, ClearToolUses, Compact, EditError, parse_edits

__all__ = ["EditOutcome", "apply_context_management"]


@dataclass(frozen=True)
class EditOutcome:
    """The body to send upstream (without ``context_management``), what was applied, and
    the input tokens before and after (the gateway's counter)."""

    body: dict[str, Any]
    applied_edits: tuple[dict[str, Any], ...]
    original_input_tokens: int
    input_tokens: int
    requested: bool
    """Whether the request carried ``context_management`` (else nothing is reported)."""

    @property
    def tokens_saved(self) -> int:
        """Input tokens the edits removed."""
        return self.original_input_tokens - self.input_tokens

    def response_field(self) -> dict[str, Any]:
        """The ``context_management`` object a response carries."""
        return {"applied_edits": [dict(e) for e in self.applied_edits]}


def apply_context_management(
    body: dict[str, Any], counter: TokenCounter, *, compaction: bool = True
) -> EditOutcome:
    """Apply ``body["context_management"]`` in order, each edit on the result of the ones
    before it; ``EditError`` if the field is malformed or asks for what is not emulated.
    ``compaction=False`` (token counting) skips compaction, which counting never runs."""
    requested = "context_management" in body
    edits = parse_edits(body["context_management"]) if requested else ()
    out = {k: v for k, v in body.items() if k != "context_management"}
    tally = Tally(counter, out)
    original = tally.total
    messages = out.get("messages")
    if not isinstance(messages, list):
        return EditOutcome(out, (), original, original, requested)
    applied: list[dict[str, Any]] = []
    for edit in edits:
        entry: dict[str, Any] | None
        if isinstance(edit, ClearThinking):
            messages, entry = clear_thinking(messages, edit, tally)
        elif isinstance(edit, ClearToolUses):
            messages, entry = clear_tool_uses(messages, edit, tally)
        elif isinstance(edit, Compact):
            if not compaction:
                continue
            raise EditError(f"{COMPACT} is not emulated by this gateway yet")
        if entry is not None:
            applied.append(entry)
    out["messages"] = messages
    return EditOutcome(out, tuple(applied), original, tally.total, requested)
