"""The summary layer: the rendered summary message, its additions and its cap.

The middle layer of the model input (context-management.zh, section 概述, Overview). Its
text is the summarizer's fields through ``summary_template``, plus what the engine adds
itself: the offload reference of the compressed messages and the artifact ledger.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..message import MARKER_KEY, Marker, Msg, runtime_note
from ..token import TokenCounter, head_within
from ._config import ContextConfig
from ._ledger import ArtifactLedger

__all__ = [
    "SUMMARY_NAME",
    "cap_summary",
    "compose_summary",
    "fallback_note",
    "ledger_of",
    "render_summary",
    "safe_format",
    "summary_msg",
    "with_note",
]

SUMMARY_NAME = "summary"
"""``Msg.name`` of the summary message."""

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*)\}")


def safe_format(template: str, values: Mapping[str, Any]) -> str:
    """Fill ``{name}`` placeholders; never raises.

    Unknown placeholders become empty, other braces (JSON examples, lone ``{``) stay as
    they are, and ``{{`` / ``}}`` become single braces as in ``str.format``.
    """

    def fill(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        value = values.get(match.group(1), "")
        return value if isinstance(value, str) else _as_text(value)

    return _PLACEHOLDER.sub(fill, template)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(f"- {_as_text(v)}" for v in value)
    return json.dumps(value, ensure_ascii=False, indent=1)


def render_summary(template: str, fields: Mapping[str, Any]) -> str:
    """The summary as the model will see it."""
    return safe_format(template, {k: _as_text(v) for k, v in fields.items()})


def compose_summary(
    fields: Mapping[str, Any],
    *,
    config: ContextConfig,
    ledger: ArtifactLedger,
    ref: str | None,
    compressed: int,
    uncovered: int = 0,
    cut: bool = False,
) -> str:
    """Render ``fields`` with the template, adding notes, the offload ref and the ledger.

    The additions go into ``context_to_preserve`` when the template shows that field,
    else after the rendered text, so a custom template never loses them.
    """
    extras: list[str] = []
    if uncovered or cut:
        extras.append(
            f"Note: the {uncovered} oldest of the {compressed} compressed messages did "
            "not fit the summarizer's window and are not covered by this summary"
            + (" (the oldest one included was cut)" if cut else "")
            + "."
        )
    if ref is not None:
        extras.append(
            f"The compressed messages are saved in '{ref}'; find details there with Search "
            "(by a few words), Grep or Read."
        )
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


def fallback_note(
    *, removed: int, ref: str | None, error: BaseException, previous: str | None
) -> str:
    """What takes the summary's place when every attempt failed: ``removed`` older
    messages were dropped unsummarized.

    The previous summary, if any, is still true of the history before them, so it is kept
    below the note rather than lost with the failed attempt.
    """
    where = (
        f" They were saved to '{ref}'; read them from there if you need details."
        if ref
        else " They were discarded."
    )
    note = runtime_note(
        f"The context was shortened: {removed} earlier message(s) were removed "
        f"because a summary of them could not be generated ({type(error).__name__}).{where}"
    )
    if previous:
        note += f"\n\nThe summary of the history before them was:\n{previous}"
    return note


def cap_summary(text: str, *, counter: TokenCounter, config: ContextConfig, size: int) -> str:
    """Cut a runaway summary to half the room between reserve and trigger."""
    cap = max(128, int((config.trigger_ratio - config.reserve_ratio) * size) // 2)
    if counter.count_text(text) <= cap:
        return text
    return head_within(counter, text, cap - 24) + "\n[summary cut to fit the window]"


def summary_msg(text: str, ledger: ArtifactLedger, fields: Mapping[str, Any] | None) -> Msg:
    """The summary as a user-role message; ledger and fields ride in its metadata.

    The ledger lets the next compression merge it; the fields let callers (and the next
    summarizer) read the structured summary without parsing the rendered text.
    """
    metadata: dict[str, Any] = {MARKER_KEY: Marker.SUMMARY.value, "ledger": ledger.model_dump()}
    if fields is not None:
        metadata["fields"] = dict(fields)
    return Msg(SUMMARY_NAME, text, "user", metadata=metadata)


def with_note(summary: Msg, note: str) -> Msg:
    """``summary`` with ``note`` appended (ledger and fields kept)."""
    fields = summary.metadata.get("fields")
    return summary_msg(
        f"{summary.text}\n\n{note}",
        ledger_of(summary),
        fields if isinstance(fields, Mapping) else None,
    )


def ledger_of(summary: Msg | None) -> ArtifactLedger:
    """The ledger carried by a summary message (empty when there is none)."""
    data = summary.metadata.get("ledger") if summary is not None else None
    return ArtifactLedger.model_validate(data) if isinstance(data, dict) else ArtifactLedger()
