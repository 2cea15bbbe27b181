"""The fact extractor: files, commands, error lines, definitions, identifiers, constraints.

One extractor, deterministic, for the two readers of facts: the artifact ledger
(:mod:`._ledger`, which merges, ranks and renders what :func:`extract_ledger` finds) and
the extractive summarizer (:mod:`._extractive`, which lists the same files, errors and
definitions, plus identifiers and numbers from all the text). Every pattern lives here, so
the two cannot drift apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from ..message import Msg, TextBlock, ThinkingBlock, ToolCallBlock, ToolResultBlock

__all__ = [
    "LedgerKind",
    "clip",
    "command_lines",
    "command_of",
    "edited_files",
    "error_lines",
    "extract_ledger",
    "files",
    "identifiers",
    "numbers",
    "outline",
    "shell_lines",
    "symbols",
]

LedgerKind = Literal["command", "edit", "file", "error", "symbol", "identifier", "constraint"]
"""The kinds of fact."""

_LINE = 200
"""Characters kept of one error line, constraint or path."""

_COMMAND_LINE = 600
"""Characters of one command line a command in outline shows (chained commands run long)."""

_WHOLE_LINE = 8000
"""Characters kept of one command line: a one-line edit (``sed -i '12i...'``) runs past
:data:`_COMMAND_LINE`, and cut at extraction it would be lost whatever the room."""

_SHORT_BODY = 3
_SHORT_BODY_CHARS = 160
"""A heredoc body of at most this many lines and characters is never outlined."""

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
_URLISH = re.compile(r"^\w+://")
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
# word boundary before the keyword is checked in ``symbols``. The name must be followed by
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
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_CONSTRAINT = re.compile(
    r"\b(?:must|should|shouldn't|never|always|only|don't|do not|without|make sure|"
    r"required?|avoid|at least|at most|no more than)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
# What a shell line writes to: a redirect's target (not a descriptor or /dev/null), tee's
# files, and every file of an in-place sed or perl edit, of touch, and mv/cp's last word.
_REDIRECT = re.compile(r"(?<![0-9&<>])>>?\s*([^\s;&|<>()]+)")
_TEE = re.compile(r"\btee\s+(?:-\w+\s+)*([^\s;&|<>()]+)")
_IN_PLACE = re.compile(r"\b(?:sed\s+(?:-[^i\s]\w*\s+)*-\w*i|perl\s+-\w*i|touch)\b")
_MOVE = re.compile(r"\b(?:mv|cp)\s+(?:-\w+\s+)*\S+\s+([^\s;&|<>()]+)")
_EDIT_TOOLS = frozenset(
    {"edit", "multiedit", "write", "write_file", "edit_file", "create_file", "apply_patch"}
)
_EDIT_ARGUMENTS = ("path", "file_path", "filename", "file")


def clip(line: str, width: int = _LINE) -> str:
    """``line`` on one line (whitespace runs made one space), cut to ``width`` characters."""
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


def command_lines(command: str) -> list[str]:
    """The lines of a shell command as the agent typed them (each within a length, its
    whitespace kept), heredoc bodies (the text of a file being written, say) included,
    without blank lines: a file the agent wrote is its work, and a body replaced by a
    count is lost from every later request. :func:`outline` shortens the bodies when the
    ledger lacks room for them."""
    out: list[str] = []
    lines = command.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if line.strip():
            out.append(_as_typed(line))
        for match in _HEREDOC.finditer(line):
            end = match.group(2)
            start = i
            while i < len(lines) and lines[i].strip() != end:
                i += 1
            out.extend(_body_line(b) for b in lines[start:i] if b.strip())
            if i < len(lines):
                out.append(end)
            i += 1  # the terminator line
    return out


def _body_line(line: str) -> str:
    """A heredoc body line, as typed (see :func:`_as_typed`)."""
    return _as_typed(line.rstrip())


def _as_typed(line: str) -> str:
    """A command line as the agent typed it, cut to :data:`_WHOLE_LINE` characters: its
    indentation and the spaces inside it are kept (Python inserted by ``sed``, a tab in a
    Makefile, fixed-width text), so the command runs again as it ran."""
    return line if len(line) <= _WHOLE_LINE else line[: _WHOLE_LINE - 3] + "..."


def outline(listed: str) -> str:
    """A command as :func:`command_lines` lists it (lines joined, a status first or not),
    each heredoc body longer than a few short lines replaced by one line that counts its
    lines, and each line cut to :data:`_COMMAND_LINE` characters: the command stays
    recognisable and runnable in outline, and the whole of it stays in the saved
    messages. A short body costs about what its count would: it stays.

    A command without a heredoc with more than a few lines between its first and last,
    long ones (a script passed inline, ``python -c '...'`` over forty lines), is outlined
    the same way, its first and last lines kept: it is written code, as a heredoc's body
    is, and listed whole it took the room of several shorter commands (pytest-6197 at 16k
    lost its oldest commands whole while its inline scripts were listed in full)."""
    cut = _COMMAND_LINE - 3
    lines = [ln if len(ln) <= _COMMAND_LINE else ln[:cut] + "..." for ln in listed.split("\n")]
    if not any(_HEREDOC.search(line) for line in lines):
        middle = lines[1:-1]
        chars = sum(len(b.strip()) for b in middle)
        if len(middle) > _SHORT_BODY and chars > _SHORT_BODY_CHARS:
            return "\n".join([lines[0], f"[{len(middle)} script lines]", lines[-1]])
        return "\n".join(lines)
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        out.append(line)
        for match in _HEREDOC.finditer(line):
            end = match.group(2)
            start = i
            while i < len(lines) and lines[i].strip() != end:
                i += 1
            body = lines[start:i]
            if _short(body):
                out.extend(body)
            elif body:
                out.append(f"[{len(body)} heredoc lines]")
            if i < len(lines):
                out.append(lines[i])
            i += 1  # the terminator line
    return "\n".join(out)


def _short(body: Sequence[str]) -> bool:
    """Whether a body is short enough to stay in outline (its count would cost about as
    much)."""
    return len(body) <= _SHORT_BODY and sum(len(b.strip()) for b in body) <= _SHORT_BODY_CHARS


def command_of(arguments: Mapping[str, Any]) -> str | None:
    """The shell command a tool call ran (its ``command``, ``cmd`` or ``script``
    argument), or ``None``."""
    for key in ("command", "cmd", "script"):
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def edited_files(command: str) -> Iterator[str]:
    """The files a shell command writes or edits in place (heredoc bodies left out)."""
    for line in shell_lines(command):
        targets = [m.group(1) for m in _REDIRECT.finditer(line)]
        targets += [m.group(1) for m in _TEE.finditer(line)]
        targets += [m.group(1) for m in _MOVE.finditer(line)]
        if _IN_PLACE.search(line):
            targets += list(files(line))
        for target in targets:
            target = target.strip("'\"")
            if target and not target.startswith(("&", "/dev/")) and len(target) <= _LINE:
                yield target


def _edited_by_tool(name: str, arguments: Mapping[str, Any]) -> Iterator[str]:
    """The file an editing tool (``Edit``, ``Write``, ``str_replace_editor``'s writes)
    changes."""
    lowered = name.lower()
    editing = lowered in _EDIT_TOOLS or (
        lowered.startswith("str_replace") and arguments.get("command") not in (None, "view")
    )
    if editing:
        for key in _EDIT_ARGUMENTS:
            value = arguments.get(key)
            if isinstance(value, str) and value.strip() and len(value) <= _LINE:
                yield value.strip()
                return


def error_lines(text: str) -> Iterator[str]:
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


def files(text: str) -> Iterator[str]:
    """The file paths of ``text`` (``:line`` kept), then its bare file names."""
    words = text.split()
    for match in _PATH.finditer(_words_with(words, "/")):
        path = match.group(1)
        if not _URLISH.match(path) and len(path) <= _LINE:
            yield path
    for match in _BARE_FILE.finditer(_words_with(words, ".")):
        yield match.group(1)


def symbols(text: str) -> Iterator[str]:
    """Names defined in ``text`` (``def name``, ``class Name``, ...), in order."""
    pos = 0
    while (match := _DEF.search(text, pos)) is not None:
        start = match.start()
        if start and _WORD.match(text, start - 1):
            pos = start + 1  # inside a word ("undef x"): no boundary, look further on
            continue
        yield match.group(1) or match.group(2)
        pos = match.end()


def identifiers(text: str) -> list[str]:
    """snake_case and CamelCase names and codes like ``ZFA04Y`` in ``text``, in order."""
    return _IDENT.findall(text)


def numbers(text: str) -> list[str]:
    """Numbers of three digits or more in ``text`` (not parts of names or versions)."""
    return [n for n in _NUMBER.findall(text) if len(n.lstrip("-")) >= 3]


def _constraints(text: str) -> Iterator[str]:
    """The sentences of ``text`` that ask for something (must, never, at most, ...)."""
    for sentence in _SENTENCE.findall(text):
        if _CONSTRAINT.search(sentence) and len(sentence.split()) >= 3:
            yield clip(sentence.strip())


def _command_text(command: str, result: ToolResultBlock | None) -> str:
    status = "?"
    if result is not None:
        code = result.metadata.get("returncode")
        status = str(code) if isinstance(code, int) else ("error" if result.is_error else "ok")
    lines = command_lines(command) or [clip(command, _WHOLE_LINE)]
    return f"[{status}] " + "\n".join(lines)


def extract_ledger(msgs: Sequence[Msg]) -> list[tuple[LedgerKind, str]]:
    """The facts of ``msgs`` in order of appearance (deterministic)."""
    results = {r.id: r for m in msgs for r in m.tool_results}
    found: list[tuple[LedgerKind, str]] = []
    for msg in msgs:
        for block in msg.blocks():
            if isinstance(block, ToolCallBlock):
                command = command_of(block.input)
                arguments = command or json.dumps(block.input, ensure_ascii=False)
                if command is not None:
                    found.append(("command", _command_text(command, results.get(block.id))))
                    found.extend(("edit", f) for f in edited_files(command))
                found.extend(("edit", f) for f in _edited_by_tool(block.name, block.input))
                found.extend(("file", f) for f in files(arguments))
            elif isinstance(block, ToolResultBlock):
                # Files an output merely lists (``ls -R``) are not files the agent
                # touched: only those of traceback frames and error lines are kept.
                text = block.text()
                errors = [clip(line) for line in error_lines(text)]
                found.extend(("error", e) for e in errors)
                found.extend(("file", f) for f in _frame_files(text))
                found.extend(("file", f) for e in errors for f in files(e))
                found.extend(("symbol", s) for s in symbols(text))
            elif isinstance(block, TextBlock | ThinkingBlock):
                text = block.text if isinstance(block, TextBlock) else block.thinking
                found.extend(("file", f) for f in files(text))
                found.extend(("symbol", s) for s in symbols(text))
                if msg.role == "assistant":
                    for fence in _FENCE.finditer(text):
                        lines = command_lines(fence.group(1))
                        if lines:
                            found.append(("command", "[?] " + "\n".join(lines)))
                elif msg.role == "user":
                    found.extend(("error", clip(line)) for line in error_lines(text))
                    found.extend(("constraint", c) for c in _constraints(text))
                    found.extend(("identifier", i) for i in identifiers(text))
    return found
