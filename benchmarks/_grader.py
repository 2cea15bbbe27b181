"""Retention graded on the request as sent, with facts taken independently of the ledger.

The facts of a compressed span come from the recording itself, parsed here (not through
contextfold's loaders, ledger or summarizers), by fixed rules:

- **commands**: each recorded shell command, with heredoc bodies removed (the lines from
  ``<<WORD`` to a line holding only ``WORD``), split at ``&&``, ``||``, ``;`` and ``|``;
  each piece's first line, whitespace collapsed, is a fact when it has at least two words
  or eight characters (``cd /testbed``, ``python -m pytest tests/test_x.py``);
  at most its first 80 characters are looked for.
- **paths**: the words of the commands (``shlex`` split, falling back to whitespace) that
  hold a ``/`` or end in a dotted extension of 1-5 letters and digits, once quotes,
  redirections, ``--flag=`` prefixes and trailing punctuation are stripped, with a letter
  in them, and not URLs or options.
- **error lines**: in each recorded output, every Python traceback's exception line (the
  first unindented, non-empty line after ``Traceback (most recent call last):``, when it
  starts with a dotted name followed by ``:`` or nothing), its first 80 characters.

Only facts the model could know are graded: a fact must appear in the last request sent
before the compression (an error line truncated out of an output before that is lost to
truncation, not to compression).

A fact counts as **kept** when it appears (whitespace collapsed) in the summary layer of
the first request sent after the compression; it is reported **elsewhere** (and not
counted either way) when the system prompt or the kept messages of that request hold it;
otherwise it is **lost**. The span of a compression is the recorded steps that were in
the previous request and are not in this one, by step count (assistant messages), so no
fact text decides which facts are graded.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ._data import Session

__all__ = [
    "FACT_KINDS",
    "Grade",
    "SentRequest",
    "commands_of",
    "error_lines_of",
    "grade",
    "paths_of",
]

FACT_KINDS = ("paths", "commands", "errors")
_MAX = 80

_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_]\w*)\1")
_SPLIT = re.compile(r"&&|\|\||;|\|")
_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,5}$")
_STRIP = "'\"`,;:()[]{}<>"
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(:|$)")


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _without_heredocs(command: str) -> str:
    out: list[str] = []
    lines = command.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        for match in _HEREDOC.finditer(line):
            word = match.group(2)
            while i < len(lines) and lines[i].strip() != word:
                i += 1
            i += 1
    return "\n".join(out)


def commands_of(command: str) -> list[str]:
    """The command facts of one recorded shell command."""
    facts: list[str] = []
    for piece in _SPLIT.split(_without_heredocs(command)):
        first = _collapse(piece.strip().split("\n", 1)[0]) if piece.strip() else ""
        if len(first.split()) >= 2 or len(first) >= 8:
            facts.append(first[:_MAX])
    return facts


def paths_of(command: str) -> list[str]:
    """The path facts of one recorded shell command."""
    text = _without_heredocs(command)
    try:
        words = shlex.split(text, comments=False, posix=True)
    except ValueError:
        words = text.split()
    facts: list[str] = []
    for word in words:
        word = word.lstrip("<>|&0123456789").lstrip(">").strip(_STRIP)
        if word.startswith("-"):
            if "=" not in word:
                continue
            word = word.split("=", 1)[1]
        word = word.rstrip(".").strip(_STRIP)
        if not word or "://" in word or not re.search(r"[A-Za-z]", word) or " " in word:
            continue
        if ("/" in word or _EXTENSION.search(word)) and len(word) >= 3:
            facts.append(word[:_MAX])
    return facts


def error_lines_of(output: str) -> list[str]:
    """The exception line of every Python traceback in one recorded output."""
    facts: list[str] = []
    lines = output.split("\n")
    for i, line in enumerate(lines):
        if line.strip() != "Traceback (most recent call last):":
            continue
        for later in lines[i + 1 :]:
            if later.strip() and not later[:1].isspace():
                if _EXCEPTION_LINE.match(later) and not later.startswith("Traceback"):
                    facts.append(_collapse(later)[:_MAX])
                break
    return facts


def step_facts(session: Session, steps: Iterable[int]) -> dict[str, set[str]]:
    """The distinct facts of the given recorded steps."""
    facts: dict[str, set[str]] = {k: set() for k in FACT_KINDS}
    for s in steps:
        step = session.steps[s]
        facts["commands"].update(commands_of(step.command))
        facts["paths"].update(paths_of(step.command))
        facts["errors"].update(error_lines_of(step.output))
    return facts


@dataclass
class SentRequest:
    """One reasoning request as sent, reduced to what grading needs."""

    step: int
    """The recorded step (assistant turn) this request precedes."""
    summary: str
    """The text of the summary layer."""
    rest: str
    """The text of everything else: system prompt, kept messages, runtime notes."""
    kept_steps: int
    """Assistant messages in the kept context (recorded steps still verbatim)."""
    summary_tokens: int = 0


@dataclass
class Grade:
    """Facts of compressed spans: how many, kept in the summary, found elsewhere, lost."""

    facts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FACT_KINDS, 0))
    kept: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FACT_KINDS, 0))
    elsewhere: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FACT_KINDS, 0))
    unseen: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FACT_KINDS, 0))
    """Facts of a span that the request before the compression did not hold (cut away by
    truncation earlier): not graded."""
    compressions: int = 0
    summary_share: list[float] = field(default_factory=list)
    """Summary tokens over the window, at every request after a compression."""

    def add(self, other: Grade) -> None:
        for kind in FACT_KINDS:
            self.facts[kind] += other.facts[kind]
            self.kept[kind] += other.kept[kind]
            self.elsewhere[kind] += other.elsewhere[kind]
            self.unseen[kind] += other.unseen[kind]
        self.compressions += other.compressions
        self.summary_share += other.summary_share

    def rate(self, kind: str) -> float | None:
        """Kept over graded (facts not found elsewhere)."""
        graded = self.facts[kind] - self.elsewhere[kind]
        return self.kept[kind] / graded if graded else None


def grade(session: Session, requests: Sequence[SentRequest], *, window: int) -> Grade:
    """Grade one replayed run from the reasoning requests it sent, in step order."""
    result = Grade()
    left_before = 0  # recorded steps no longer verbatim in the previous request
    previous = ""
    for request in requests:
        left = request.step - request.kept_steps
        if left <= left_before:
            left_before = max(left_before, left)
            previous = _collapse(request.summary + "\n" + request.rest)
            continue
        result.compressions += 1
        result.summary_share.append(request.summary_tokens / window)
        summary, rest = _collapse(request.summary), _collapse(request.rest)
        for kind, facts in step_facts(session, range(left_before, left)).items():
            for fact in facts:
                if fact not in previous:
                    result.unseen[kind] += 1
                    continue
                result.facts[kind] += 1
                if fact in rest:
                    result.elsewhere[kind] += 1
                elif fact in summary:
                    result.kept[kind] += 1
        left_before = left
        previous = _collapse(request.summary + "\n" + request.rest)
    return result
