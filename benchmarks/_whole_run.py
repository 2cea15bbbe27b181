"""Retention over the whole run, graded by rules written from the recordings alone.

The grader knows what the recorded agent did (its commands, their outputs) and what each
system sent; it shares no rule with contextfold's ledger or summarizers. Its own rules:

* **kept verbatim**: a recorded message is kept in a request when every one of its keys
  (the assistant's text before its first bash block and that block; a user message's text
  with the ``<returncode>``/``<output>`` tags removed; whitespace collapsed) occurs in the
  text of the request's kept context (system prompt and kept messages, the summary left
  out). A message not kept at some request is *compressed* from then on.
* **paths** (:func:`paths_in`): the executed command is split on whitespace, quotes and
  shell punctuation; a token is a path when it is made of ``[\\w./-]``, holds a letter, is
  not an option, URL or ``s/x/y/`` script, and either contains ``/`` (with a part of 3+
  characters, no single-character first part) or ends in a file extension from a fixed list.
  ``/testbed/``, ``./`` and a trailing ``/`` are stripped; found with path boundaries.
* **commands**: the whole bash block, whitespace collapsed (strict), and its first non-empty
  line (loose); found as substrings of the request's whitespace-collapsed text.
* **error lines** (:func:`error_lines_in`): output lines holding ``SomeError:`` or
  ``SomeException:`` (a capitalized word ending in Error/Exception, then a colon), pytest's
  ``FAILED ...`` summary lines and its ``E   ...`` detail lines; whitespace collapsed.
* **names** (:func:`names_in`, for needed-fact coverage): long options (``--name``), pytest
  node ids after ``::``, and identifiers of 4+ characters holding ``_`` or a lower-to-upper
  case change (``get_inlines``, ``ModelAdmin``, ``DJANGO_SETTINGS_MODULE``); found as words.

Whole-run retention: a fact of a compressed message is graded from the request where its
message was first compressed, and is lost if any request from then on lacks it anywhere
(summary, system prompt or kept messages). Needed-fact coverage: at each compaction point
(a request that no longer keeps a message the previous request kept), the paths and names
of the recorded agent's next three commands that it had met before (in the task, an earlier
command or an earlier output) must be in that request.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "NEEDED_KINDS",
    "RETENTION_KINDS",
    "Coverage",
    "Recorded",
    "Recording",
    "Retention",
    "SentView",
    "error_lines_in",
    "grade_needed",
    "grade_whole_run",
    "load_recording",
    "names_in",
    "norm",
    "paths_in",
    "view_from_texts",
]

RETENTION_KINDS = ("paths", "commands", "command first lines", "error lines")
NEEDED_KINDS = ("paths", "names")
NEXT_COMMANDS = 3

_BASH = re.compile(r"```bash\s*\n(.*?)```", re.DOTALL)
_TAGS = re.compile(r"<returncode>-?\d+</returncode>|</?output>")
_SPLIT = re.compile(r"[\s'\"`;|&()<>=,:\[\]{}*$!?#\\]+")
_PATH_TOKEN = re.compile(r"^[\w./-]+$")
_EXTENSIONS = "py|pyi|pyx|pxd|c|h|cc|cpp|txt|rst|md|cfg|toml|ini|json|yaml|yml|js|ts|css|html|sh"
_EXT = re.compile(r"\.(?:" + _EXTENSIONS + r"|patch|diff|log|csv|xml|in|lock)$")
_ERROR = re.compile(r"^(?:E\s+)?(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b:")
_PYTEST = re.compile(
    r"^(?:FAILED \S|E {3,}(?:assert\b|(?:\w+\.)*[A-Z]\w*(?:Error|Exception|Failed)\b))"
)
_IDENT = re.compile(r"(?<![\w\\-])[A-Za-z_][A-Za-z0-9_]{3,}(?!\w)")
_OPTION = re.compile(r"(?<![\w-])--[A-Za-z][\w-]+")
_NODE = re.compile(r"::([A-Za-z_]\w*)")
_CAMEL = re.compile(r"[a-z][A-Z]")


EXACT_WHITESPACE = os.environ.get("CONTEXTFOLD_BENCH_EXACT_WHITESPACE") == "1"
"""``--exact-whitespace`` (it sets that variable, for the AgentScope subprocess too):
texts compared as sent (no whitespace collapsed), and a command kept only when each of
its non-blank lines is in the request exactly as typed (a list's indentation before it
allowed): spaces inside a line (Python inserted by ``sed``, fixed-width text) are part of
the command."""


def norm(text: str) -> str:
    """Whitespace collapsed to single spaces (as is under ``EXACT_WHITESPACE``)."""
    return text if EXACT_WHITESPACE else " ".join(text.split())


def _strip_path(token: str) -> str:
    for prefix in ("/testbed/", "./"):
        if token.startswith(prefix):
            token = token[len(prefix) :]
    return token.rstrip("/")


def _is_path(token: str) -> bool:
    if not _PATH_TOKEN.match(token) or token.startswith("-") or not re.search("[A-Za-z]", token):
        return False
    if "/" in token:
        parts = [p for p in token.split("/") if p]
        if not parts or re.match(r"^\w/", token) or token.startswith("//"):
            return False
        if len(parts[-1]) == 1 or (token.startswith("/") and len(parts) < 2):
            return False  # sed's /pattern/p, /word
        rooted = token.startswith(("/", "./", "../"))
        shaped = rooted or token.count("/") >= 2 or bool(_EXT.search(token))
        return shaped and any(len(p) >= 3 for p in parts) and token not in ("/dev/null", "/tmp")
    return bool(_EXT.search(token)) and not token.startswith(".")


def paths_in(command: str) -> set[str]:
    """File paths the command names (see the module docstring for the rule)."""
    found: set[str] = set()
    for token in _SPLIT.split(command.replace("://", " URL ")):
        if _is_path(token):
            path = _strip_path(token)
            if len(path) >= 3:
                found.add(path)
    return found


def error_lines_in(output: str) -> set[str]:
    """Error lines of a command's output (see the module docstring for the rule)."""
    lines = set()
    for raw in output.splitlines():
        line = raw.strip()
        if _ERROR.match(line) or _PYTEST.match(raw):
            lines.add(norm(line))
    return {line for line in lines if line}


def names_in(command: str) -> set[str]:
    """Names of functions, tests, options and variables a command uses."""
    names = {m.group(0) for m in _OPTION.finditer(command)}
    names |= {m.group(1) for m in _NODE.finditer(command)}
    for m in _IDENT.finditer(command):
        word = m.group(0)
        if "_" in word.strip("_") or word.startswith("__") or _CAMEL.search(word):
            names.add(word)
    return names


@lru_cache(maxsize=65536)
def _pattern(kind: str, fact: str) -> re.Pattern[str]:
    escaped = re.escape(fact)
    if kind == "paths":
        return re.compile(r"(?<![\w.-])" + escaped + r"(?![\w-])")
    return re.compile(r"(?<![\w-])" + escaped + r"(?![\w-])")


def present(kind: str, fact: str, text: str) -> bool:
    """Whether ``fact`` (of ``kind``) is in the whitespace-collapsed ``text``."""
    if kind == "commands" and EXACT_WHITESPACE:
        return all(line.rstrip() in text for line in fact.splitlines() if line.strip())
    if kind in ("paths", "names"):
        return fact in text and _pattern(kind, fact).search(text) is not None
    return fact in text


@dataclass(frozen=True)
class Recorded:
    """One recorded message after the system prompt, with what the grader reads of it."""

    index: int
    role: str
    keys: tuple[str, ...]
    command: str | None = None
    """The first bash block of an assistant turn that was executed (an output follows)."""
    output: str | None = None
    """The text of a command's output (tags removed)."""
    text: str = ""


@dataclass
class Recording:
    """A recorded run: its messages (task first) and where each assistant turn sits."""

    name: str
    system: str
    messages: list[Recorded]
    assistant_at: list[int]
    """Index in ``messages`` of each assistant turn, in order."""
    raw: list[dict[str, str]] = field(default_factory=list)
    """The recorded messages themselves (system first), as chat messages."""

    def before(self, step: int) -> list[Recorded]:
        """The messages the agent had when it wrote assistant turn ``step``."""
        end = self.assistant_at[step] if step < len(self.assistant_at) else len(self.messages)
        return self.messages[:end]

    def commands_from(self, step: int, count: int) -> list[str]:
        """The first ``count`` bash blocks of assistant turns ``step`` on."""
        blocks: list[str] = []
        for at in self.assistant_at[step:]:
            match = _BASH.search(self.messages[at].text)
            if match:
                blocks.append(match.group(1).strip())
            if len(blocks) == count:
                break
        return blocks


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(str(v.get("text", "")) if isinstance(v, dict) else str(v) for v in value)
    return "" if value is None else str(value)


def load_recording(path: Path) -> Recording:
    """A mini-swe-agent ``.traj.json`` run as the grader reads it."""
    data = json.loads(path.read_text(encoding="utf-8"))
    raw = [{"role": m["role"], "content": _content(m["content"])} for m in data["messages"]]
    messages: list[Recorded] = []
    assistant_at: list[int] = []
    for i, m in enumerate(raw[1:], start=1):
        text, role = m["content"], m["role"]
        following = raw[i + 1]["content"] if i + 1 < len(raw) else ""
        if role == "assistant":
            assistant_at.append(len(messages))
            match = _BASH.search(text)
            if match is None:
                keys: tuple[str, ...] = (norm(text),)
                command = None
            else:
                block = match.group(1).strip()
                keys = tuple(k for k in (norm(text[: match.start()]), norm(block)) if k)
                command = block if following.lstrip().startswith("<returncode>") else None
            messages.append(Recorded(i, role, keys, command=command, text=text))
        else:
            body = _TAGS.sub("", text)
            is_output = text.lstrip().startswith("<returncode>")
            messages.append(
                Recorded(i, role, (norm(body),), output=body if is_output else None, text=text)
            )
    return Recording(
        path.name.removesuffix(".traj.json"), raw[0]["content"], messages, assistant_at, raw
    )


@dataclass(frozen=True)
class SentView:
    """One reasoning request as sent: the step it precedes and its texts, collapsed."""

    step: int
    """Recorded assistant turns before this request (the turn it is answered by)."""
    context: str
    """The system prompt and kept messages (no summary)."""
    full: str
    """Everything the request carries."""


def view_from_texts(step: int, context: Iterable[str], summary: Iterable[str] = ()) -> SentView:
    """A :class:`SentView` from the texts of its kept messages and of its summary."""
    kept = "\x00".join(norm(t) for t in context)
    extra = "\x00".join(norm(t) for t in summary)
    return SentView(step, kept, f"{extra}\x00{kept}" if extra else kept)


def _facts(message: Recorded) -> list[tuple[str, str]]:
    facts: list[tuple[str, str]] = []
    if message.command is not None:
        facts.extend(("paths", p) for p in sorted(paths_in(message.command)))
        facts.append(("commands", norm(message.command)))
        first = next((ln for ln in message.command.splitlines() if ln.strip()), "")
        facts.append(("command first lines", norm(first)))
    if message.output is not None:
        facts.extend(("error lines", e) for e in sorted(error_lines_in(message.output)))
    return facts


def _per_kind(kinds: tuple[str, ...]) -> Callable[[], dict[str, int]]:
    return lambda: dict.fromkeys(kinds, 0)


@dataclass
class Retention:
    """Whole-run retention: facts graded and lost, per kind."""

    graded: dict[str, int] = field(default_factory=_per_kind(RETENTION_KINDS))
    lost: dict[str, int] = field(default_factory=_per_kind(RETENTION_KINDS))
    checks: dict[str, int] = field(default_factory=_per_kind(RETENTION_KINDS))
    """(fact, request) pairs looked up."""
    misses: dict[str, int] = field(default_factory=_per_kind(RETENTION_KINDS))
    lost_first: dict[str, int] = field(default_factory=_per_kind(RETENTION_KINDS))
    """Facts missing from the very request where they were first compressed (the old
    "next request only" reading, for comparison)."""
    examples: dict[str, list[str]] = field(default_factory=dict)
    """A few lost facts per kind (for the report)."""
    compaction_points: int = 0
    requests: int = 0

    def add(self, other: Retention) -> None:
        for kind in RETENTION_KINDS:
            self.graded[kind] += other.graded[kind]
            self.lost[kind] += other.lost[kind]
            self.checks[kind] += other.checks[kind]
            self.misses[kind] += other.misses[kind]
            self.lost_first[kind] += other.lost_first[kind]
            self.examples.setdefault(kind, []).extend(other.examples.get(kind, [])[:2])
        self.compaction_points += other.compaction_points
        self.requests += other.requests

    def kept_rate(self, kind: str) -> float | None:
        graded = self.graded[kind]
        return None if graded == 0 else 1 - self.lost[kind] / graded


@dataclass
class Coverage:
    """Needed-fact coverage: needed facts at compaction points and those the request had."""

    needed: dict[str, int] = field(default_factory=_per_kind(NEEDED_KINDS))
    covered: dict[str, int] = field(default_factory=_per_kind(NEEDED_KINDS))
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, other: Coverage) -> None:
        for kind in NEEDED_KINDS:
            self.needed[kind] += other.needed[kind]
            self.covered[kind] += other.covered[kind]
            self.examples.setdefault(kind, []).extend(other.examples.get(kind, [])[:2])

    def rate(self, kind: str) -> float | None:
        needed = self.needed[kind]
        return None if needed == 0 else self.covered[kind] / needed


def _compressions(recording: Recording, views: Sequence[SentView]) -> list[tuple[list[int], bool]]:
    """Per request: the messages first found not kept there (positions in ``messages``),
    and whether a message the previous request kept is among them (a compaction point)."""
    compressed: set[int] = set()
    result: list[tuple[list[int], bool]] = []
    previous_end = 0
    for view in views:
        before = recording.before(view.step)
        newly = [
            pos
            for pos, message in enumerate(before)
            if pos not in compressed and not all(k in view.context for k in message.keys)
        ]
        compressed.update(newly)
        lost_kept = any(pos < previous_end for pos in newly)
        result.append((newly, lost_kept))
        previous_end = len(before)
    return result


def grade_whole_run(recording: Recording, views: Sequence[SentView]) -> Retention:
    """Every fact of a compressed message, looked up in every request from its compression."""
    out = Retention(requests=len(views))
    graded: dict[tuple[str, str], int] = {}
    lost: set[tuple[str, str]] = set()
    compressions = _compressions(recording, views)
    for at, (view, (positions, lost_kept)) in enumerate(zip(views, compressions, strict=True)):
        out.compaction_points += int(lost_kept)
        for pos in positions:
            for fact in _facts(recording.messages[pos]):
                graded.setdefault(fact, at)
        for fact, since in graded.items():
            kind, text = fact
            out.checks[kind] += 1
            if not present(kind, text, view.full):
                out.misses[kind] += 1
                out.lost_first[kind] += int(since == at)
                if fact not in lost:
                    lost.add(fact)
                    out.examples.setdefault(kind, []).append(f"{recording.name}: {text[:120]}")
    for kind, _ in graded:
        out.graded[kind] += 1
    for kind, _ in lost:
        out.lost[kind] += 1
    return out


def _met_text(messages: Sequence[Recorded]) -> str:
    parts = []
    for pos, m in enumerate(messages):
        if pos == 0:  # the task
            parts.append(m.text)
        elif m.command is not None:
            parts.append(m.command)
        elif m.output is not None:
            parts.append(m.output)
    return "\x00".join(norm(p) for p in parts)


def grade_needed(recording: Recording, views: Sequence[SentView]) -> Coverage:
    """At each compaction point, the met facts of the agent's next commands, looked up."""
    out = Coverage()
    for view, (_, lost_kept) in zip(views, _compressions(recording, views), strict=True):
        if not lost_kept:
            continue
        met = _met_text(recording.before(view.step))
        commands = recording.commands_from(view.step, NEXT_COMMANDS)
        wanted = {
            "paths": set().union(*(paths_in(c) for c in commands)) if commands else set(),
            "names": set().union(*(names_in(c) for c in commands)) if commands else set(),
        }
        for kind in NEEDED_KINDS:
            for fact in sorted(wanted[kind]):
                if not present(kind, fact, met):
                    continue
                out.needed[kind] += 1
                if present(kind, fact, view.full):
                    out.covered[kind] += 1
                else:
                    out.examples.setdefault(kind, []).append(
                        f"{recording.name}@{view.step}: {fact}"
                    )
    return out
