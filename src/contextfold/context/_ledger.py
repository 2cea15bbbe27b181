"""Artifact ledger: files, commands, errors and symbols, extracted deterministically.

Summarizers forget file paths more than anything else, so the engine extracts them with
regular expressions from every compressed span and merges them into the summary's
``context_to_preserve``. The ledger is carried across compressions in the summary
message's metadata, so it survives even a fallback to truncation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from ..message import Msg, TextBlock, ThinkingBlock, ToolCallBlock, ToolResultBlock

__all__ = ["ArtifactLedger", "extract_ledger"]

_LIMITS = {"files": 40, "commands": 20, "errors": 12, "symbols": 30}

_PATH = re.compile(
    r"(?<![\w/.:-])"
    r"((?:/|\./|\.\./|~/)?(?:[\w.-]+/)+[\w.-]+\.[A-Za-z0-9]{1,8}"
    r"|/(?:[\w.-]+/)+[\w.-]+)"
    r"(?::\d+)?(?![\w/])"
)
_BARE_FILE = re.compile(
    r"(?<![\w/.-])([\w-]++\.(?:py|pyi|js|ts|tsx|jsx|go|rs|java|c|h|cc|cpp|hpp|rb|"
    r"md|rst|txt|toml|yaml|yml|json|cfg|ini|sh|sql|html|css))(?![\w])"
)
_FENCE = re.compile(r"```(?:bash|sh|shell|console|zsh)\n(.*?)```", re.DOTALL)
_PROMPT = re.compile(r"^\s*\$ (.+)$", re.MULTILINE)
# Error lines are found from a literal every marker contains (which the regex engine
# scans for quickly), then checked with the full pattern on that line only: a
# ``^.*(?:...).*$`` pattern over the whole text tried every alternative at every
# character and was most of a compression's cost.
_ERROR_HINT = re.compile(r"Error|Exception|Traceback|FAILED|error|fatal:|panic:")
_ERROR = re.compile(
    r"\b[A-Z]\w*(?:Error|Exception)\b|Traceback \(most recent call last\)|\bFAILED\b"
    r"|\berror(?:\[\w+\])?:|\bfatal:|\bpanic:"
)
# Without a leading ``\b`` the engine can skip ahead to the keywords' first letters; the
# word boundary before the keyword is checked in ``_symbols``.
_DEF = re.compile(r"(?:def|class|func|fn|function|interface|struct)\s+([A-Za-z_]\w*)")
_WORD = re.compile(r"\w")
_CALL_IN_TICKS = re.compile(r"`([A-Za-z_][\w.]*)(?:\(\))?`")
_URLISH = re.compile(r"^\w+://")


class ArtifactLedger(BaseModel):
    """What the compressed history touched, most recent last."""

    files: list[str] = []
    commands: list[str] = []
    errors: list[str] = []
    symbols: list[str] = []

    def merge(self, newer: ArtifactLedger) -> ArtifactLedger:
        """Both ledgers, deduplicated, newest kept when a list is over its limit."""
        return ArtifactLedger(
            files=_merge(self.files, newer.files, _LIMITS["files"]),
            commands=_merge(self.commands, newer.commands, _LIMITS["commands"]),
            errors=_merge(self.errors, newer.errors, _LIMITS["errors"]),
            symbols=_merge(self.symbols, newer.symbols, _LIMITS["symbols"]),
        )

    def is_empty(self) -> bool:
        """True when nothing was found."""
        return not (self.files or self.commands or self.errors or self.symbols)

    def render(self) -> str:
        """Plain text for ``context_to_preserve``."""
        if self.is_empty():
            return ""
        lines = ["Artifacts from the compressed history (extracted automatically):"]
        if self.files:
            lines.append("Files: " + ", ".join(self.files))
        if self.commands:
            lines.append("Commands run:")
            lines.extend(f"- {c}" for c in self.commands)
        if self.errors:
            lines.append("Errors seen:")
            lines.extend(f"- {e}" for e in self.errors)
        if self.symbols:
            lines.append("Symbols: " + ", ".join(self.symbols))
        return "\n".join(lines)


def _merge(old: Sequence[str], new: Sequence[str], limit: int) -> list[str]:
    seen: dict[str, None] = {}
    for item in [*old, *new]:
        seen.pop(item, None)  # re-insert, so a repeated item counts as recent
        seen[item] = None
    return list(seen)[-limit:]


def _clip(line: str, width: int = 200) -> str:
    line = " ".join(line.split())
    return line if len(line) <= width else line[: width - 3] + "..."


def _texts(msg: Msg) -> Iterable[tuple[str, str]]:
    """(kind, text) pairs: ``text`` from prose and results, ``call`` from tool calls."""
    for block in msg.blocks():
        if isinstance(block, TextBlock):
            yield "text", block.text
        elif isinstance(block, ThinkingBlock):
            yield "text", block.thinking
        elif isinstance(block, ToolCallBlock):
            yield "call", json.dumps(block.input, ensure_ascii=False)
            for key in ("command", "cmd", "script"):
                value = block.input.get(key)
                if isinstance(value, str) and value.strip():
                    yield "command", value
        elif isinstance(block, ToolResultBlock):
            yield "result", block.text()


def _error_lines(text: str) -> Iterable[str]:
    """Each line of ``text`` holding an error marker, once, in order."""
    pos = 0
    while (hint := _ERROR_HINT.search(text, pos)) is not None:
        start = text.rfind("\n", 0, hint.start()) + 1
        end = text.find("\n", hint.end())
        end = len(text) if end < 0 else end
        if _ERROR.search(text, start, end) is not None:
            yield text[start:end]
        pos = end + 1


def _words_with(words: Sequence[str], char: str) -> str:
    """The words (of ``str.split()``) that contain ``char``, joined by spaces.

    Paths and file names hold no whitespace and their patterns look only one character
    either side, which is whitespace (or the end) at a word's edge either way, so the
    patterns find exactly the same matches here, in the same order, while the regex engine
    scans a fraction of the text.
    """
    return " ".join(word for word in words if char in word)


def _symbols(text: str) -> Iterable[str]:
    """Names defined in ``text`` (``def name``, ``class Name``, ...), in order."""
    pos = 0
    while (match := _DEF.search(text, pos)) is not None:
        start = match.start()
        if start and _WORD.match(text, start - 1):
            pos = start + 1  # inside a word ("undef x"): no boundary, look further on
            continue
        yield match.group(1)
        pos = match.end()


def extract_ledger(msgs: Sequence[Msg]) -> ArtifactLedger:
    """Extract files, commands, errors and symbols from ``msgs`` (deterministic)."""
    files: list[str] = []
    commands: list[str] = []
    errors: list[str] = []
    symbols: list[str] = []
    for msg in msgs:
        for kind, text in _texts(msg):
            if kind == "command":
                commands.append(_clip(text))
                continue
            words = text.split()
            for match in _PATH.finditer(_words_with(words, "/")):
                path = match.group(1)
                if not _URLISH.match(path) and len(path) <= 200:
                    files.append(path)
            files.extend(m.group(1) for m in _BARE_FILE.finditer(_words_with(words, ".")))
            if kind == "text" and msg.role == "assistant":
                for fence in _FENCE.finditer(text):
                    commands.extend(_clip(c) for c in fence.group(1).strip().splitlines()[:3] if c)
            commands.extend(_clip(m.group(1)) for m in _PROMPT.finditer(text))
            if kind == "result" or msg.role != "assistant":
                errors.extend(_clip(line) for line in _error_lines(text))
            symbols.extend(_symbols(text))
            symbols.extend(m.group(1) for m in _CALL_IN_TICKS.finditer(text) if "(" in m.group(0))
    empty = ArtifactLedger()
    return empty.merge(
        ArtifactLedger(files=files, commands=commands, errors=errors, symbols=symbols)
    )
