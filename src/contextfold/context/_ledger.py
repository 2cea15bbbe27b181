"""The artifact ledger: facts the next step needs, kept beside the summary's five fields.

Summarizers forget file paths, commands and exact error lines more than anything else, and
an empty or failed summary keeps nothing at all. So the engine extracts, deterministically,
what the compressed messages touched: files, the commands run with their exit status, error
lines, function and class names, identifiers from the user's messages and the user's
constraints. The ledger is merged across chained compactions (an item seen again counts as
used again and as recent), ranked by recency then use, and rendered within a token budget
(``ContextConfig.ledger_ratio`` of the window); what falls out stays in the offloaded
messages, where the read-back tools find it. It rides in the summary message's metadata, so
it survives a fallback to truncation too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

from pydantic import BaseModel

from ..message import Msg, TextBlock, ThinkingBlock, ToolCallBlock, ToolResultBlock
from ..token import TokenCounter

__all__ = ["ArtifactLedger", "LedgerEntry", "LedgerKind", "extract_ledger"]

LedgerKind = Literal["command", "file", "error", "symbol", "identifier", "constraint"]

_ORDER: tuple[LedgerKind, ...] = ("constraint", "command", "file", "error", "symbol", "identifier")
"""Rendering order, and the tie-break of ranking (earlier kinds first)."""

_HEADINGS: dict[LedgerKind, str] = {
    "constraint": "The user asked",
    "command": "Commands run (exit status)",
    "file": "Files",
    "error": "Errors seen",
    "symbol": "Functions and classes",
    "identifier": "Identifiers",
}
_INLINE: frozenset[LedgerKind] = frozenset({"file", "symbol", "identifier"})
"""Kinds rendered as one comma-separated line rather than one item per line."""

_MAX_STORED = 600

_KIND_CAP: dict[LedgerKind, int] = {"constraint": 12, "symbol": 30, "identifier": 20}
"""Most entries rendered of the kinds that are context rather than record: past these,
they would crowd out the commands, files and errors the next step needs."""
"""Entries carried in the summary's metadata at most (beyond the rendered ones, for ranking)."""

_LINE = 200
"""Characters kept of one error line, constraint or path."""

_COMMAND_LINE = 600
"""Characters kept of one command line (chained commands run long)."""

# A relative path's extension holds a letter: ``-0.05/0.055`` is a ratio, not a file.
_PATH = re.compile(
    r"(?<![\w/.:-])"
    r"((?:(?:/|\./|\.\./|~/)?(?:[\w.-]+/)+[\w.-]+\.(?=[0-9]{0,7}[A-Za-z])[A-Za-z0-9]{1,8}"
    r"|/(?:[\w.-]+/)+[\w.-]+)"
    r"(?::\d+)?)(?![\w/])"
)
_BARE_FILE = re.compile(
    r"(?<![\w/.-])([\w-]++\.(?:py|pyi|js|ts|tsx|jsx|go|rs|java|c|h|cc|cpp|hpp|rb|"
    r"md|rst|txt|toml|yaml|yml|json|cfg|ini|sh|sql|html|css))(?![\w])"
)
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
_FENCE = re.compile(r"```(?:bash|sh|shell|console|zsh)[ \t]*\n(.*?)```", re.DOTALL)
# Error lines are found from a literal every marker contains (which the regex engine scans
# for quickly), then checked with the full pattern on that line only.
_ERROR_HINT = re.compile(r"Error|Exception|Traceback|FAILED|ERROR|error|fatal:|panic:")
_ERROR = re.compile(
    r"^\s*(?:E\s+)?[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b"
    r"|\bFAILED\b|\bERROR\b|\berror(?:\[\w+\])?:|\bfatal:|\bpanic:"
)
# A line of source code that merely names an exception (a listing, a diff) is no error.
_CODE = re.compile(
    r"^\s*(?:\d+\s+)?(?:[-+]\s*)?(?:except|raise|import|from|def|class|return|if|elif|try|"
    r"assert|with|for|while|#|//)\b"
)
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"[A-Za-z_][\w.]*(?::|$)")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')
# Without a leading ``\b`` the engine can skip ahead to the keywords' first letters; the
# word boundary before the keyword is checked in ``_symbols``. The name must be followed by
# what a definition has next (a parameter list, a base, a body, a type parameter), so prose
# ("the class is ...", "a struct of three") names nothing.
_DEF = re.compile(
    r"(?:(?:def|func|fn|function)[ \t]+([A-Za-z_]\w*)[ \t]*[(<]"
    r"|(?:class|interface|struct)[ \t]+([A-Za-z_]\w*)"
    r"(?=[ \t]*(?:[(:{<;]|$)|[ \t]+(?:extends|implements)\b))",
    re.MULTILINE,
)
_WORD = re.compile(r"\w")
_IDENT = re.compile(
    r"\b(?:[A-Za-z]+_[A-Za-z0-9_]*[A-Za-z0-9]"  # snake_case, ids like mia_li_3668
    r"|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+"  # CamelCase
    r"|(?=[A-Z0-9]*[A-Z])(?=[A-Z0-9]*[0-9])[A-Z0-9]{5,12})\b"  # codes like ZFA04Y
)
_CONSTRAINT = re.compile(
    r"\b(?:must|should|shouldn't|never|always|only|don't|do not|without|make sure|"
    r"required?|avoid|at least|at most|no more than)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_URLISH = re.compile(r"^\w+://")


class LedgerEntry(BaseModel):
    """One fact: what it is, its text, when it was last seen and how often."""

    kind: LedgerKind
    text: str
    last: int = 0
    """The compaction (1, 2, ...) in which the fact was last seen."""
    uses: int = 1
    """In how many compactions the fact was seen."""


class ArtifactLedger(BaseModel):
    """What the compressed history touched; rendered within a token budget."""

    entries: list[LedgerEntry] = []
    compactions: int = 0
    """Compactions merged into this ledger."""

    def merge(self, found: Sequence[tuple[LedgerKind, str]]) -> ArtifactLedger:
        """This ledger with the facts of one more compaction (in order of appearance)."""
        index = self.compactions + 1
        merged: dict[tuple[str, str], LedgerEntry] = {
            (e.kind, e.text): e.model_copy() for e in self.entries
        }
        for kind, text in found:
            key = (kind, text)
            entry = merged.pop(key, None)
            if entry is None:
                entry = LedgerEntry(kind=kind, text=text, last=index, uses=0)
            if entry.last != index or entry.uses == 0:
                entry.uses += 1  # once per compaction: a log repeating a line is no use
            entry.last = index
            merged[key] = entry  # re-inserted: the most recently seen come last
        entries = list(merged.values())
        if len(entries) > _MAX_STORED:
            keep = {id(e) for e in _ranked(entries)[:_MAX_STORED]}
            entries = [e for e in entries if id(e) in keep]
        return ArtifactLedger(entries=entries, compactions=index)

    def is_empty(self) -> bool:
        """True when nothing was found."""
        return not self.entries

    def select(self, counter: TokenCounter, budget: int) -> ArtifactLedger:
        """The best-ranked entries whose rendering fits ``budget`` tokens."""
        chosen: list[LedgerEntry] = []
        used = counter.count_text(_TITLE) + 8
        per_kind: dict[str, int] = {}
        for entry in _ranked(self.entries):
            taken = per_kind.get(entry.kind, 0)
            if taken >= _KIND_CAP.get(entry.kind, budget):
                continue
            cost = counter.count_text(entry.text) + 2
            if not taken:
                cost += counter.count_text(_HEADINGS[entry.kind]) + 3
            if used + cost > budget:
                continue
            chosen.append(entry)
            per_kind[entry.kind] = taken + 1
            used += cost
        order = {id(e): i for i, e in enumerate(self.entries)}
        chosen.sort(key=lambda e: order[id(e)])
        return ArtifactLedger(entries=chosen, compactions=self.compactions)

    def render(self, said: str = "") -> str:
        """The facts as plain text, grouped by kind, most recently seen last.

        ``said`` is the rest of the summary (the model-written fields): a fact it already
        states verbatim is not repeated, since every repeated token is written to the
        prompt cache again at each compaction. Commands are always listed, for their exit
        status.
        """
        if not self.entries:
            return ""
        commands = [e.text for e in self.entries if e.kind == "command"]
        lines = [_TITLE]
        for kind in _ORDER:
            items = [e.text for e in self.entries if e.kind == kind]
            if kind in ("file", "identifier"):
                # Already on the page inside a command line: no need to say it twice.
                items = [t for t in items if not any(t in c for c in commands)]
            if said and kind != "command":
                items = [t for t in items if not _stated(t, said)]
            if not items:
                continue
            if kind in _INLINE:
                lines.append(f"{_HEADINGS[kind]}: " + ", ".join(items))
            else:
                lines.append(f"{_HEADINGS[kind]}:")
                lines.extend(f"- {item}" for item in items)
        return "\n".join(lines)


_TITLE = (
    "Facts from the compressed history (kept by the engine; Read or Grep the saved "
    "messages for more):"
)


def _stated(fact: str, text: str) -> bool:
    """Whether ``text`` holds ``fact`` verbatim as a whole item (not inside a longer
    word, name or path)."""
    start = text.find(fact)
    while start >= 0:
        end = start + len(fact)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before in "_./-") and not (after.isalnum() or after in "_/-"):
            return True
        start = text.find(fact, start + 1)
    return False


def _ranked(entries: Iterable[LedgerEntry]) -> list[LedgerEntry]:
    """Most recent compaction first, then most used, then by kind, newest first."""
    indexed = list(enumerate(entries))
    indexed.sort(key=lambda p: (-p[1].last, -p[1].uses, _ORDER.index(p[1].kind), -p[0]))
    return [e for _, e in indexed]


def _clip(line: str, width: int = _LINE) -> str:
    line = " ".join(line.split())
    return line if len(line) <= width else line[: width - 3] + "..."


def shell_lines(command: str) -> list[str]:
    """The lines of a shell command that the shell reads as commands: heredoc bodies (the
    text of a file being written, say) are left out."""
    out: list[str] = []
    lines = command.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.strip():
            out.append(line.strip())
        for match in _HEREDOC.finditer(line):
            end = match.group(2)
            while i < len(lines) and lines[i].strip() != end:
                i += 1
            i += 1  # the terminator line
    return out


def _command_text(command: str, result: ToolResultBlock | None) -> str:
    status = "?"
    if result is not None:
        code = result.metadata.get("returncode")
        status = str(code) if isinstance(code, int) else ("error" if result.is_error else "ok")
    lines = [_clip(line, _COMMAND_LINE) for line in shell_lines(command)]
    lines = lines or [_clip(command, _COMMAND_LINE)]
    return f"[{status}] " + " ; ".join(lines)


def _error_lines(text: str) -> Iterator[str]:
    """The error lines of ``text``, in order: each traceback's exception line, and lines
    that report an error (an exception name first, FAILED, ERROR, ``error:``, ...), not
    source lines that merely mention one."""
    lines = text.split("\n")
    skip = -1
    for i, line in enumerate(lines):
        if i <= skip:
            continue
        if line.strip() == _TRACEBACK:
            for j in range(i + 1, len(lines)):
                later = lines[j]
                if later.strip() and not later[:1].isspace():
                    if _EXCEPTION.match(later) and not later.startswith("Traceback"):
                        yield later
                        skip = j
                    break
            continue
        if _ERROR_HINT.search(line) and _ERROR.search(line) and not _CODE.match(line):
            yield line


def _frame_files(text: str) -> Iterator[str]:
    """``path:line`` of every traceback frame in ``text``."""
    for line in text.split("\n"):
        match = _FRAME.match(line)
        if match is not None:
            yield f"{match.group(1)}:{match.group(2)}"


def _words_with(words: Sequence[str], char: str) -> str:
    """The words (of ``str.split()``) that contain ``char``, joined by spaces.

    Paths and file names hold no whitespace and their patterns look only one character
    either side, so the patterns find the same matches here while the regex engine scans a
    fraction of the text.
    """
    return " ".join(word for word in words if char in word)


def _files(text: str) -> Iterator[str]:
    words = text.split()
    for match in _PATH.finditer(_words_with(words, "/")):
        path = match.group(1)
        if not _URLISH.match(path) and len(path) <= _LINE:
            yield path
    for match in _BARE_FILE.finditer(_words_with(words, ".")):
        yield match.group(1)


def _symbols(text: str) -> Iterator[str]:
    """Names defined in ``text`` (``def name``, ``class Name``, ...), in order."""
    pos = 0
    while (match := _DEF.search(text, pos)) is not None:
        start = match.start()
        if start and _WORD.match(text, start - 1):
            pos = start + 1  # inside a word ("undef x"): no boundary, look further on
            continue
        yield match.group(1) or match.group(2)
        pos = match.end()


def _constraints(text: str) -> Iterator[str]:
    for sentence in _SENTENCE.findall(text):
        if _CONSTRAINT.search(sentence) and len(sentence.split()) >= 3:
            yield _clip(sentence.strip())


def _command_of(call: ToolCallBlock) -> str | None:
    for key in ("command", "cmd", "script"):
        value = call.input.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def extract_ledger(msgs: Sequence[Msg]) -> list[tuple[LedgerKind, str]]:
    """The facts of ``msgs`` in order of appearance (deterministic)."""
    results = {r.id: r for m in msgs for r in m.tool_results}
    found: list[tuple[LedgerKind, str]] = []
    for msg in msgs:
        for block in msg.blocks():
            if isinstance(block, ToolCallBlock):
                command = _command_of(block)
                arguments = command or json.dumps(block.input, ensure_ascii=False)
                if command is not None:
                    found.append(("command", _command_text(command, results.get(block.id))))
                found.extend(("file", f) for f in _files(arguments))
            elif isinstance(block, ToolResultBlock):
                # Files an output merely lists (``ls -R``) are not files the agent
                # touched: only those of traceback frames and error lines are kept.
                text = block.text()
                errors = [_clip(line) for line in _error_lines(text)]
                found.extend(("error", e) for e in errors)
                found.extend(("file", f) for f in _frame_files(text))
                found.extend(("file", f) for e in errors for f in _files(e))
                found.extend(("symbol", s) for s in _symbols(text))
            elif isinstance(block, TextBlock | ThinkingBlock):
                text = block.text if isinstance(block, TextBlock) else block.thinking
                found.extend(("file", f) for f in _files(text))
                found.extend(("symbol", s) for s in _symbols(text))
                if msg.role == "assistant":
                    for fence in _FENCE.finditer(text):
                        lines = [_clip(line, _COMMAND_LINE) for line in shell_lines(fence.group(1))]
                        if lines:
                            found.append(("command", "[?] " + " ; ".join(lines)))
                elif msg.role == "user":
                    found.extend(("error", _clip(line)) for line in _error_lines(text))
                    found.extend(("constraint", c) for c in _constraints(text))
                    found.extend(("identifier", i) for i in _IDENT.findall(text))
    return found
