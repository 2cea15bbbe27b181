"""What the model may choose at each step: valid values drawn from its current context.

Each builder turns the text the model has in front of it into a JSON schema that the
embedded model's arguments are decoded under (llama.cpp grammars), and says how many
values each field allows. Nothing comes from the task's known answers: a file name is
offered only when it is unread and named in the context, a reference only when it names
an offloaded item and appears in the context, a search term only when the context holds
it, an offset only within the item. A field with one allowed value is no choice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..message import HintBlock, Msg, TextBlock, ToolCallBlock, ToolResultBlock

__all__ = [
    "NO_ERROR",
    "Choice",
    "Constraint",
    "answer_constraint",
    "context_text",
    "error_lines",
    "evidence_lines",
    "grep_constraint",
    "paths_in",
    "read_constraint",
    "read_file_constraint",
    "run_grep_constraint",
    "user_text",
]

_GONE = "(its text has left the context)"
"""What a file's answer says once no line its read returned is in the context."""

NO_ERROR = "none seen"
"""The error a run's answer may give when it names none of those in the context."""

_MAX_TERMS = 200
_MAX_OPTIONS = 40
_LINE = 90
_READ_LIMIT = 15
_GREP_RESULTS = 6
_RUN_GREP_RESULTS = 1
"""One run's search: its first match is the error it met; more would crowd the window."""
_GREP_GLOB = "*.txt"
"""Tool results only: the compressed context's log holds whole messages per line."""
_QUOTED = re.compile(r"\"([^\"\n]{3,40})\"")
_WORD = re.compile(r"(?<![\w-])[A-Za-z_][\w]{3,30}(?![\w-])")
_SAFE_TERM = re.compile(r"^[\w][\w .:/-]*[\w:]$")
_PATH = re.compile(r"(?<![\w/.-])[\w.-]+(?:/[\w.-]+)+\.[A-Za-z]{1,5}(?![\w/])")
_ERROR = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception)\b:|^\s*FAILED\b|^E\s+\w+")
_GREP_LINE = re.compile(r"^(\S+?):\d+:(.*)$")
"""A Grep match: ``path:line:text``."""
_CODE = re.compile(r"^\s*(?:\d+\s+)?[-+]?\s*(?:raise|except|import|from|def|class|return|#)\b")


@dataclass(frozen=True)
class Choice:
    """One argument field: how many values it allowed, and where they came from."""

    field: str
    options: int | None
    """How many values the grammar allowed; None for free text."""
    source: str

    @property
    def is_choice(self) -> bool:
        """Whether the model had something to choose (two values or more, or free text)."""
        return self.options is None or self.options > 1


@dataclass(frozen=True)
class Constraint:
    """The schema a call's arguments are decoded under, and the choices it leaves."""

    schema: dict[str, Any]
    choices: tuple[Choice, ...] = ()

    @property
    def chosen(self) -> bool:
        """Whether any field left the model a choice."""
        return any(c.is_choice for c in self.choices)

    def describe(self) -> str:
        """The choices as one phrase, for the view."""
        if not self.choices:
            return "no arguments"
        return "; ".join(_phrase(c) for c in self.choices)


def _phrase(choice: Choice) -> str:
    if choice.options is None:
        return f"{choice.field}: {choice.source}"
    if choice.is_choice:
        return f"{choice.field}: 1 of {choice.options} {choice.source}"
    return f"{choice.field}: fixed (one value)"


def _text_of(msg: Msg) -> Iterable[str]:
    for block in msg.blocks():
        if isinstance(block, TextBlock):
            yield block.text
        elif isinstance(block, HintBlock):
            yield block.hint
        elif isinstance(block, ToolResultBlock):
            yield block.text()
        elif isinstance(block, ToolCallBlock):
            yield " ".join(str(v) for v in block.input.values())


def context_text(messages: Sequence[Msg]) -> str:
    """Everything the model reads in ``messages`` (tool results and calls included)."""
    return "\n".join(t for m in messages for t in _text_of(m))


def user_text(messages: Sequence[Msg]) -> str:
    """What the user wrote in ``messages`` (the task, and the summary that carries what
    the user asked), tool results left out."""
    parts = [
        t
        for m in messages
        if m.role == "user"
        for b in m.blocks()
        if isinstance(b, (TextBlock, HintBlock))
        for t in [b.text if isinstance(b, TextBlock) else b.hint]
    ]
    return "\n".join(parts)


def _literal_safe(value: Any) -> bool:
    # llama-cpp-python's schema converter does not escape backslashes in literals, so a
    # value holding one (a quote, a tab, JSON-escaped) would break the grammar.
    text = str(value)
    return '"' not in text and "\\" not in text and all(ord(c) >= 32 for c in text)


def _enum(values: Sequence[Any]) -> dict[str, Any]:
    safe = [v for v in values if _literal_safe(v)]
    return {"enum": safe or ["none seen"]}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def read_file_constraint(unread: Sequence[str], text: str) -> Constraint | None:
    """``read_file``'s path among the unread files the context names; None if none."""
    names = [n for n in unread if n in text]
    if not names:
        return None
    schema = _object({"path": _enum(names)})
    return Constraint(schema, (Choice("path", len(names), "unread files named in the context"),))


def refs_in(text: str, refs: Sequence[str]) -> list[str]:
    """The offloaded references ``text`` mentions, in the order given."""
    return [r for r in refs if r in text]


def _is_regex(term: str) -> bool:
    try:
        re.compile(term)
    except re.error:
        return False
    return True


def search_terms(text: str) -> list[str]:
    """Search terms the context holds: its phrases in double quotes (how a task names
    what to look for) that are valid regular expressions, most recent first; without
    any, its words."""
    quoted = [q.strip() for q in _QUOTED.findall(text)]
    terms = [t for t in reversed(quoted) if _is_regex(t) and t.strip("|")]
    if not terms:
        terms = [t for t in reversed(_WORD.findall(text)) if _SAFE_TERM.match(t)]
    return _unique(terms)[:_MAX_TERMS]


def grep_constraint(
    text: str, *, searched: Iterable[tuple[str, str | None]] | None = None
) -> Constraint | None:
    """``Grep``: a search term of ``text`` (what the user wrote: the task names what to
    look for), over every offloaded tool result. With ``searched`` (the searches made,
    as pattern and path), only the next term in the order the user quoted them that no
    search over every item has used: the task's searches, one after the other."""
    terms = search_terms(text)
    if searched is not None:
        everywhere = {pattern for pattern, path in searched if path is None}
        terms = [t for t in quoted_terms(text) if t not in everywhere][:1]
    if not terms:
        return None
    schema = _object(
        {
            "pattern": _enum(terms),
            "glob": _enum([_GREP_GLOB]),
            "max_results": _enum([_GREP_RESULTS]),
        }
    )
    return Constraint(
        schema,
        (
            Choice("pattern", len(terms), "search terms the user quoted"),
            Choice("glob", 1, "globs"),
            Choice("max_results", 1, "result limits"),
        ),
    )


def quoted_terms(text: str) -> list[str]:
    """The search terms the user quoted, in the order quoted (the order of the task)."""
    return list(reversed(search_terms(text))) if _QUOTED.search(text) else []


def grep_lines(text: str) -> dict[str, list[str]]:
    """Per offloaded item, the lines Grep matched in it that ``text`` shows."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = _GREP_LINE.match(line)
        if match is not None:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


def run_logs(text: str, subjects: Sequence[str]) -> dict[str, str]:
    """Per subject (a run's instance id), the offloaded item a Grep line of ``text`` ties
    to it: the item where a matched line names the run (its "outcome of" line)."""
    tied: dict[str, str] = {}
    for path, lines in grep_lines(text).items():
        for subject in subjects:
            if subject not in tied and any(subject in line for line in lines):
                tied[subject] = path
    return tied


def run_grep_constraint(
    text: str, user: str, subjects: Sequence[str], searched: Iterable[tuple[str, str | None]]
) -> Constraint | None:
    """``Grep`` in one run's log: the next term the user quoted that no search over every
    item has used, in a run's log the context ties to it (:func:`run_logs`) and that was
    not searched for that term yet. None when every tied log was searched."""
    done = set(searched)
    everywhere = {pattern for pattern, path in done if path is None}
    terms = [t for t in quoted_terms(user) if t not in everywhere][:1]
    if not terms:
        return None
    logs = [p for p in _unique(run_logs(text, subjects).values()) if (terms[0], p) not in done]
    if not logs:
        return None
    schema = _object(
        {
            "pattern": _enum(terms),
            "path": _enum(logs),
            "max_results": _enum([_RUN_GREP_RESULTS]),
        }
    )
    return Constraint(
        schema,
        (
            Choice("pattern", 1, "search terms the user quoted"),
            Choice("path", len(logs), "run logs not searched yet, tied to a run in the context"),
            Choice("max_results", 1, "result limits"),
        ),
    )


def _offsets(text: str, ref: str, lines: int) -> list[int]:
    """Offsets into ``ref`` the context points at (grep line numbers, "offset=N"), or
    every page of the item when it points at none; each within the item."""
    pointed = [int(n) - 1 for n in re.findall(re.escape(ref) + r"[:-](\d+)[:-]", text)]
    pointed += [int(n) for n in re.findall(r"offset=(\d+)", text)]
    found = sorted({max(n, 0) for n in pointed if 0 <= n < lines})
    if not found:
        found = list(range(0, max(lines, 1), _READ_LIMIT))
    return found[:_MAX_OPTIONS]


def read_constraint(text: str, items: dict[str, int]) -> Constraint | None:
    """``Read``: an offloaded item the context refers to, at an offset within it.

    ``items`` maps each reference to its number of lines."""
    shown = refs_in(text, list(items))
    if not shown:
        return None
    branches = [
        _object(
            {
                "path": {"const": ref},
                "offset": _enum(_offsets(text, ref, items[ref])),
                "limit": _enum([_READ_LIMIT]),
            }
        )
        for ref in shown
    ]
    offsets = max(len(_offsets(text, ref, items[ref])) for ref in shown)
    schema = branches[0] if len(branches) == 1 else {"anyOf": branches}
    return Constraint(
        schema,
        (
            Choice("path", len(shown), "offloaded references in the context"),
            Choice("offset", offsets, "offsets within the item"),
            Choice("limit", 1, "line limits"),
        ),
    )


def paths_in(text: str) -> list[str]:
    """File paths in ``text`` (git's ``a/`` and ``b/`` prefixes dropped), newest first."""
    found = [re.sub(r"^[ab]/", "", p) for p in reversed(_PATH.findall(text))]
    # The workspace's own references are where things were offloaded, not facts.
    return _unique(p for p in found if not p.startswith("sessions/"))


def evidence_lines(text: str, paths: Sequence[str]) -> list[str]:
    """Lines of ``text`` that name one of ``paths`` (a Grep match's "ref:n:" prefix
    dropped), newest first: what an answer can point at."""
    found = []
    for line in reversed(text.splitlines()):
        line = re.sub(r"^\S+:\d+:", "", line).strip()
        if 12 <= len(line) <= 2 * _LINE and any(p in line for p in paths):
            found.append(line)
    return _unique(found)[:_MAX_OPTIONS] or ["none seen"]


def error_lines(text: str) -> list[str]:
    """Error lines in ``text`` (exceptions, failed tests), clipped, newest first."""
    found = []
    for line in reversed(text.splitlines()):
        line = re.sub(r"^\S+:\d+:", "", line).strip()  # a Grep match's "ref:n:" prefix
        if _ERROR.search(line) and not _CODE.match(line) and '"' not in line:
            found.append(line[:_LINE])
    return _unique(found)


def _errors_by_run(text: str, runs: Sequence[str]) -> dict[str, list[str]]:
    """Per run, the error lines Grep matched in the log the context ties to it
    (:func:`run_logs`); for a run with none, the error lines tied to no run, or
    :data:`NO_ERROR`, the only honest value then."""
    matched = grep_lines(text)
    logs = run_logs(text, runs)
    tied = {s: error_lines("\n".join(matched[logs[s]])) if s in logs else [] for s in runs}
    taken = {e for found in tied.values() for e in found}
    loose = [e for e in error_lines(text) if e not in taken][: _MAX_OPTIONS - 1]
    return {s: tied[s][:_MAX_OPTIONS] or [*loose, NO_ERROR] for s in runs}


def _shared_lines(results: Sequence[str]) -> list[str]:
    """Lines that two tool results or more hold."""
    seen: dict[str, set[int]] = {}
    for i, result in enumerate(results):
        for line in result.splitlines():
            line = line.strip()
            if (
                12 <= len(line) <= _LINE
                and '"' not in line
                and "\\" not in line
                and not _is_marker(line)
            ):
                seen.setdefault(line, set()).add(i)
    return [line for line, where in seen.items() if len(where) > 1][:_MAX_OPTIONS]


def _common_phrases(lines: Sequence[str]) -> list[str]:
    """The longest runs of two words or more that every one of ``lines`` holds."""
    if len(lines) < 2:
        return []
    words = lines[0].split()
    found: list[str] = []
    for size in range(len(words), 1, -1):
        for start in range(len(words) - size + 1):
            phrase = " ".join(words[start : start + size])
            if all(phrase in line for line in lines[1:]) and not any(phrase in f for f in found):
                found.append(phrase)
    return found[:5]


def _is_marker(line: str) -> bool:
    """A line the engine wrote into a result (truncation, a reference), not the file's."""
    return any(
        m in line
        for m in (
            "<system-reminder>",
            "<<<TRUNCATED>>>",
            "tokens omitted ...]",
            "/sessions/",
            "(stopped at max_results",
        )
    )


def _file_lines(text: str) -> list[str]:
    """The lines of ``text`` an answer can quote (numbering and engine markers left out)."""
    return _unique(
        re.sub(r"^(?:\S+:\d+:|\s*\d+\t)", "", ln).strip()
        for ln in text.splitlines()
        if 12 <= len(ln.strip()) <= 2 * _LINE and not _is_marker(ln)
    )[:_MAX_OPTIONS]


def _lines_by_file(messages: Sequence[Msg]) -> dict[str, str]:
    """Per file name, the text of the ``read_file`` results for it still in ``messages``."""
    asked = {
        c.id: str(c.input.get("path"))
        for m in messages
        for c in m.get_blocks(ToolCallBlock)
        if c.name == "read_file"
    }
    found: dict[str, str] = {}
    for m in messages:
        for r in m.tool_results:
            if r.id in asked:
                found[asked[r.id]] = found.get(asked[r.id], "") + r.text()
    return found


def _fewest(options: dict[str, list[str]]) -> int:
    """The fewest values any subject allowed (a field is a choice only if it was one for
    every subject)."""
    return min((len(v) for v in options.values()), default=1)


def answer_constraint(
    messages: Sequence[Msg], subjects: Sequence[str], *, recorded: bool
) -> Constraint:
    """``final_answer``: for each subject (a run's instance id, or a file read) named in
    the context, facts chosen among the context's strings, then what they share."""
    text = context_text(messages)
    named = [s for s in subjects if s in text]
    choices: list[Choice] = []
    if recorded:
        paths = paths_in(text)[:_MAX_OPTIONS] or ["none seen"]
        errors = _errors_by_run(text, named)
        evidence = evidence_lines(text, paths)
        per_run = {s: [e for e in evidence if s in e] or evidence for s in named}
        # A run's files are the paths on the lines that name it, when some do: the tiny
        # model otherwise copies the first run's file into every run.
        run_paths = {
            s: [p for p in paths if any(p in e for e in per_run[s])] or paths for s in named
        }
        facts = {
            s: _object(
                {
                    "files_changed": {
                        "type": "array",
                        "items": _enum(run_paths[s]),
                        "minItems": 1,
                        "maxItems": 1,
                    },
                    "error": _enum(errors[s]),
                }
            )
            for s in named
        }
        # No "evidence" line per run: the answer of three runs then outgrew the model's
        # 400 tokens, and the run's line is what its files and the shared phrase come from.
        choices += [
            Choice("files_changed", _fewest(run_paths), "paths on those lines"),
            Choice("error", _fewest(errors), "error lines the context ties to the run"),
        ]
    else:
        own = _lines_by_file(messages)
        per_file = {s: _file_lines(own.get(s, "")) or [_GONE] for s in named}
        facts = {s: _object({"found": _enum(per_file[s])}) for s in named}
        choices.append(Choice("found", _fewest(per_file), "lines its read returned"))
    results = [b.text() for m in messages for b in m.tool_results]
    shared = _shared_lines(results)
    if recorded:
        # What every run's evidence says alike, e.g. how they all ended.
        # A heading ("## outcome of") is how the logs are laid out, not a finding.
        phrases = _common_phrases([per_run[s][0] for s in named])
        shared = [p for p in [*phrases, *shared] if "#" not in p]
    shared_schema: dict[str, Any] = (
        _enum(shared) if shared else {"type": "string", "maxLength": _LINE}
    )
    choices.append(
        Choice("shared", len(shared), "phrases or lines the runs or results share")
        if shared
        else Choice("shared", None, "free text, one line")
    )
    schema = _object(
        {
            "runs" if recorded else "files": _object(facts),
            "shared": shared_schema,
        }
    )
    return Constraint(schema, tuple(choices))
