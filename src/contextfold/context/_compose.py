"""The summary layer: compose the rendered summary, cap it, wrap it as a message."""

from __future__ import annotations

from typing import Any

from ..message import Msg
from ..token import TokenCounter
from ._config import ContextConfig
from ._ledger import ArtifactLedger
from ._summary import SummaryDraft, render_summary
from ._truncate import head_within

__all__ = ["SUMMARY_NAME", "cap_summary", "compose_summary", "ledger_of", "summary_msg"]

SUMMARY_NAME = "summary"
"""``Msg.name`` of the summary message."""


def compose_summary(
    fields: dict[str, Any],
    *,
    config: ContextConfig,
    ledger: ArtifactLedger,
    draft: SummaryDraft,
    ref: str | None,
    compressed: int,
) -> str:
    """Render ``fields`` with the template, adding notes, the offload ref and the ledger.

    The additions go into ``context_to_preserve`` when the template shows that field,
    else after the rendered text, so a custom template never loses them.
    """
    extras: list[str] = []
    if draft.omitted or draft.cut:
        extras.append(
            f"Note: the {draft.omitted} oldest of the {compressed} compressed messages did "
            "not fit the summarizer's window and are not covered by this summary"
            + (" (the oldest one included was cut)" if draft.cut else "")
            + "."
        )
    if ref is not None:
        extras.append(f"The compressed messages are saved in '{ref}'.")
    ledger_text = ledger.render()
    if ledger_text:
        extras.append(ledger_text)
    values = dict(fields)
    if "{context_to_preserve}" in config.summary_template:
        own = values.get("context_to_preserve")
        own_text = own if isinstance(own, str) else render_summary("{v}", {"v": own})
        values["context_to_preserve"] = "\n\n".join(p for p in (own_text, *extras) if p)
        return render_summary(config.summary_template, values)
    return "\n\n".join([render_summary(config.summary_template, values), *extras])


def cap_summary(text: str, *, counter: TokenCounter, config: ContextConfig, size: int) -> str:
    """Cut a runaway summary to half the room between reserve and trigger."""
    cap = max(128, int((config.trigger_ratio - config.reserve_ratio) * size) // 2)
    if counter.count_text(text) <= cap:
        return text
    return head_within(counter, text, cap - 24) + "\n[summary cut to fit the window]"


def summary_msg(text: str, ledger: ArtifactLedger, fields: dict[str, Any] | None) -> Msg:
    """The summary as a user-role message; ledger and fields ride in its metadata.

    The ledger lets the next compression merge it; the fields let callers read the
    structured summary without parsing the rendered text.
    """
    metadata: dict[str, Any] = {"contextfold": "summary", "ledger": ledger.model_dump()}
    if fields is not None:
        metadata["fields"] = fields
    return Msg(SUMMARY_NAME, text, "user", metadata=metadata)


def ledger_of(summary: Msg | None) -> ArtifactLedger:
    """The ledger carried by a summary message (empty when there is none)."""
    data = summary.metadata.get("ledger") if summary is not None else None
    return ArtifactLedger.model_validate(data) if isinstance(data, dict) else ArtifactLedger()
