"""The skeptic's trivial summarizer: paste the span's commands and error lines, capped.

No ranking, no ledger, no model: every command of the compressed span and every output
line a ``grep -E 'Traceback|Error|Exception|FAILED|^E '`` would print, appended to what the
previous summary pasted, the newest lines kept within ``budget`` tokens. Whatever a
mechanism scores above this row is what it adds over pasting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = ["paste_lines", "paste_summary", "previous_pasted"]

_GREP = re.compile(r"Traceback|Error|Exception|FAILED|^E\s")
HEADING = "# Context to Preserve\n"
"""Where AgentScope's summary template puts the field the paste fills."""


def paste_lines(commands: Sequence[str], outputs: Sequence[str]) -> list[str]:
    """``$ command`` for each command, then the grep-matching lines of each output."""
    lines = [f"$ {' '.join(c.split())}" for c in commands]
    lines += [ln.strip() for out in outputs for ln in out.splitlines() if _GREP.search(ln)]
    return lines


def paste_summary(
    previous: Sequence[str], new: Sequence[str], budget: int, count: Callable[[str], int]
) -> str:
    """``previous`` then ``new`` lines, newest first, each kept if it still fits ``budget``."""
    kept: list[str] = []
    used = 0
    for line in reversed([*previous, *new]):
        tokens = count(line) + 1
        if used + tokens > budget:
            continue  # a line too long for what is left; older, shorter ones may fit
        kept.append(line)
        used += tokens
    return "\n".join(reversed(kept))


def previous_pasted(summary: str | None) -> list[str]:
    """The lines a previous paste left in AgentScope's summary slot."""
    if not summary or HEADING not in summary:
        return []
    body = summary.split(HEADING, 1)[1].split("</system-info>", 1)[0]
    return [ln for ln in body.splitlines() if ln.strip()]
