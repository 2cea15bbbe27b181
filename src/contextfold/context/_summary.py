"""Rendering the summary layer's parts: the summarizer's fields through a template,
plus what the engine adds itself, within the layer's budget.

A part's text is the summarizer's fields through ``summary_template`` (or
``summary_update_template`` for an appended part), plus the engine's additions: a note on
what the summarizer could not read, the offload reference of the compressed messages, the
user's earlier messages word for word and the artifact ledger. The additions go where
the template has ``{artifacts}``, else after the rendered template; never inside a field
the model wrote.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..message import runtime_note
from ..token import TokenCounter
from ._config import ContextConfig
from ._cut import HeadTailCut
from ._facts import LedgerKind
from ._layer import summary_budget
from ._ledger import ArtifactLedger

__all__ = [
    "compose_summary",
    "fallback_summary",
    "part_fields",
    "part_ledger",
    "render_requests",
    "render_summary",
    "safe_format",
]

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


def part_ledger(
    previous: ArtifactLedger,
    found: Sequence[tuple[LedgerKind, str]],
    counter: TokenCounter,
    budget: int,
    *,
    rewrite: ArtifactLedger,
    stated: str = "",
) -> tuple[ArtifactLedger, ArtifactLedger] | None:
    """The facts a part appended to the summary lists, and the whole layer's ledger; or
    ``None`` when the part has no room for a fact of this compaction that ``rewrite`` (the
    ledger a rewritten summary would list) keeps: appending keeps what rewriting would.

    A fact the earlier parts list already is not listed again (it counts as seen again in
    the layer's ledger); of the new ones, the best-ranked that fit ``budget`` are (less
    what ``stated``, the user's messages kept word for word, says already).
    """
    merged = previous.merge(found)
    listed = {(e.kind, e.text) for e in previous.entries}
    new = ArtifactLedger(
        entries=[e for e in merged.entries if (e.kind, e.text) not in listed],
        compactions=merged.compactions,
    ).select(counter, budget, stated)
    listed |= {(e.kind, e.text) for e in new.entries}
    kept = {(e.kind, e.text) for e in rewrite.entries if e.last == rewrite.compactions}
    if not kept <= listed:
        return None
    # The new facts as the part lists them (a command in outline stays so).
    shown = {(e.kind, e.text): e for e in new.entries}
    layer = ArtifactLedger(
        entries=[
            shown.get((e.kind, e.text), e) for e in merged.entries if (e.kind, e.text) in listed
        ],
        compactions=merged.compactions,
        dropped=merged.dropped + new.dropped,
    )
    return new, layer


def part_fields(
    fields: Mapping[str, Any], previous: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What an appended part renders, and the fields the summary message carries.

    A non-empty ``task_overview`` (the task changed) is rendered under a ``# Task
    changes`` heading. The message carries the newest part's fields, with the earlier
    values of the fields it left empty.
    """
    shown = dict(fields)
    task = _as_text(shown.get("task_overview")).strip()
    if "task_overview" in shown:
        shown["task_overview"] = f"# Task changes\n{task}\n\n" if task else ""
    carried = dict(previous or {})
    carried.update({k: v for k, v in fields.items() if _as_text(v).strip()})
    return shown, carried


def compose_summary(
    fields: Mapping[str, Any],
    *,
    config: ContextConfig,
    counter: TokenCounter,
    size: int,
    ledger: ArtifactLedger,
    ref: str | None,
    compressed: int,
    uncovered: int = 0,
    cut: bool = False,
    template: str | None = None,
    budget: int | None = None,
    requests: Sequence[str] = (),
    readback: bool = True,
) -> str:
    """Render ``fields`` with the template, plus what the engine adds, within the budget.

    The engine's additions (a note on what the summarizer could not read, the reference to
    the offloaded messages, the ledger) are never cut: the model-written fields are, each
    within its own share of what the additions and the template leave
    (:func:`summary_budget` in all, or ``budget``). The additions go where the template
    has ``{artifacts}``, else after the rendered template: a user's template renders the
    fields the model wrote verbatim.
    ``template`` replaces ``config.summary_template`` (a part appended to the summary).
    Without ``readback`` (the model has no read-back tools) no addition names one.
    """
    template = config.summary_template if template is None else template
    extras: list[str] = []
    if uncovered:
        extras.append(
            f"Note: the {uncovered} oldest of the {compressed} compressed messages did "
            "not fit the summarizer's window and are not covered by this summary"
            + (" (the oldest one included was cut)" if cut else "")
            + "."
        )
    elif cut:
        extras.append(
            "Note: a compressed message too long for the summarizer's window was read only "
            "in part (its head and tail)."
        )
    if ref is not None:
        extras.append(
            f"The compressed messages are saved in '{ref}'; find details there with Search "
            "(by a few words), Grep or Read."
            if readback
            else "The compressed messages are not readable from here: this summary is what "
            "remains of them."
        )
    if requests:
        extras.append(render_requests(requests))
    values = {k: _as_text(v) for k, v in fields.items()}

    def additions_to(values: Mapping[str, str]) -> str:
        # The ledger leaves out what the fields (as they stand after any cut) state.
        said = "\n".join(values.values())
        return "\n\n".join(p for p in (*extras, ledger.render(said, readback=readback)) if p)

    budget = summary_budget(config, size) if budget is None else budget
    for _ in range(4):
        text = _render_with(template, values, additions_to(values))
        over = counter.count_text(text) - budget
        if over <= 0:
            return text
        values = _shrink(values, counter, over)
    empty = dict.fromkeys(values, "")
    return _render_with(template, empty, additions_to(empty))


def render_requests(requests: Sequence[str]) -> str:
    """The user's earlier messages as the summary shows them, word for word."""
    quoted = "\n\n".join(f"<user_message>\n{text}\n</user_message>" for text in requests)
    return f"The user's earlier messages, word for word (oldest first):\n\n{quoted}"


def _render_with(template: str, values: Mapping[str, str], additions: str) -> str:
    values = dict(values)
    if "{artifacts}" in template:
        values["artifacts"] = additions
        return safe_format(template, values)
    return "\n\n".join(p for p in (safe_format(template, values), additions) if p)


_CUT = " [...]"
_FIELD_CUT = HeadTailCut(marker=_CUT, marker_room=2)
_PREVIOUS_CUT = HeadTailCut(marker=_CUT, marker_room=4)


def _shrink(values: Mapping[str, str], counter: TokenCounter, excess: int) -> dict[str, str]:
    """``values`` with ``excess`` tokens (and a little more) taken from the longest fields.

    Water filling: every field is cut to one common level, the highest that frees enough;
    fields already below it are left whole.
    """
    sizes = {k: counter.count_text(v) for k, v in values.items()}
    target = sum(sizes.values()) - excess - 4 * len(sizes)
    level = _level(sorted(sizes.values()), max(target, 0))
    out: dict[str, str] = {}
    for key, value in values.items():
        out[key] = _FIELD_CUT.cut(counter, value, level, tokens=sizes[key])
    return out


def _level(sizes: list[int], total: int) -> int:
    """The largest level ``L`` with ``sum(min(s, L) for s in sizes) <= total``."""
    remaining, n = total, len(sizes)
    for i, size in enumerate(sizes):
        share = remaining // (n - i)
        if size > share:
            return share
        remaining -= size
    return sizes[-1] if sizes else 0


def fallback_summary(
    *,
    removed: int,
    ref: str | None,
    error: BaseException,
    previous: str | None,
    ledger: ArtifactLedger,
    counter: TokenCounter,
    budget: int,
    requests: Sequence[str] = (),
    readback: bool = True,
) -> str:
    """What takes the summary's place when every attempt failed: ``removed`` older
    messages were dropped unsummarized (and saved, when there is an offloader; without
    ``readback`` the model is not told to read them).

    The ledger still holds their facts. The previous summary, if any, is still true of the
    history before them, so it is kept below, cut to what the budget leaves.
    """
    if ref and readback:
        where = f" They were saved to '{ref}'; read them from there if you need details."
    elif ref:
        where = " They were saved outside this conversation."
    else:
        where = " They were discarded."
    note = runtime_note(
        f"The context was shortened: {removed} earlier message(s) were removed "
        f"because a summary of them could not be generated ({type(error).__name__}).{where}"
    )
    shown = render_requests(requests) if requests else ""
    text = "\n\n".join(p for p in (note, shown, ledger.render(readback=readback)) if p)
    if previous:
        intro = "\n\nThe summary of the history before them was:\n"
        room = budget - counter.count_text(text + intro)
        if room > 32:
            text += intro + _PREVIOUS_CUT.cut(counter, previous, room)
    return text
