"""A deterministic, extractive five-field summarizer shared by both systems.

Both agents get the same summarizer so that the retention figure compares what each
framework *feeds* and *keeps*, not two different models. Input is a neutral list of
``(role, text)`` items (each driver flattens its own message types); output is the dict
of the five summary fields both frameworks use (``task_overview``, ``current_state``,
``important_discoveries``, ``next_steps``, ``context_to_preserve``).

The summary is bounded, as a model's would be: each kind of fact is capped, keeping the
most recently mentioned ones, so retention can fall below 100% on long spans.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = ["FACT_KINDS", "extract_facts", "summarize"]

FACT_KINDS = ("paths", "functions", "errors", "numbers")

_PATH = re.compile(r"(?<![\w/.-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w-]+\.[A-Za-z]\w{0,5}\b")
# Definitions, snake_case calls, and the function of each traceback frame.
_FUNC = re.compile(
    r"\b(?:def|class)\s+([A-Za-z_]\w*)|\b([a-z_][a-z0-9]*_[a-z0-9_]+)\(|, in ([A-Za-z_]\w*)$",
    re.M,
)
_ERROR = re.compile(
    r"^\s*((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Warning|Failure)\b:?[^\n]{0,160})", re.M
)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
_SECTION = re.compile(r"#\s*task overview\s*\n(.*?)(?:\n#\s|\Z|</system-info>)", re.I | re.S)

# Caps per kind: generous, but finite like a real summary.
_CAPS = {"paths": 60, "functions": 40, "errors": 15, "numbers": 40}


def _unique_recent(values: Iterable[str], cap: int) -> list[str]:
    """The last ``cap`` distinct values, in order of their last mention."""
    last: dict[str, int] = {}
    for i, v in enumerate(values):
        last[v] = i
    ordered = sorted(last, key=last.__getitem__)
    return ordered[-cap:]


def extract_facts(text: str) -> dict[str, list[str]]:
    """Paths, function names, error lines and numbers (3+ characters) found in ``text``."""
    paths = _PATH.findall(text)
    funcs = [a or b or c for a, b, c in _FUNC.findall(text)]
    errors = [e.strip() for e in _ERROR.findall(text) if len(e.strip()) > 8]
    numbers = [n for n in _NUMBER.findall(text) if len(n) >= 3]
    return {"paths": paths, "functions": funcs, "errors": errors, "numbers": numbers}


def _is_prompt(text: str) -> bool:
    return text.lstrip().startswith(("<system-hint>", "<system-reminder>Now you **MUST**"))


def summarize(items: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The five-field summary of ``items`` (``(role, text)`` pairs, oldest first)."""
    body = [(r, t) for r, t in items if r != "system" and t and not _is_prompt(t)]
    task = ""
    for role, text in body:
        prev = _SECTION.search(text) if "<system-info>" in text else None
        if prev:
            task = prev.group(1).strip()
            break
        if role == "user":
            task = text.strip()
            break
    everything = "\n".join(t for _, t in body)
    facts = extract_facts(everything)
    kept = {k: _unique_recent(facts[k], _CAPS[k]) for k in FACT_KINDS}
    last_assistant = next((t for r, t in reversed(body) if r == "assistant"), "")
    return {
        "task_overview": task[:2000],
        "current_state": (
            f"{len(body)} earlier items were compressed. Files seen or changed: "
            + (", ".join(kept["paths"]) or "none")
        ),
        "important_discoveries": "Errors met:\n" + ("\n".join(kept["errors"]) or "none"),
        "next_steps": "Continue from the last step: " + last_assistant.strip()[:800],
        "context_to_preserve": (
            "Functions: "
            + (", ".join(kept["functions"]) or "none")
            + "\nNumbers: "
            + (", ".join(kept["numbers"]) or "none")
        ),
    }
