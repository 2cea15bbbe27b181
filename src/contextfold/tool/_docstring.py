"""Read a function's summary and argument descriptions from its docstring.

Google (``Args:``), NumPy (``Parameters`` + dashes) and Sphinx (``:param x:``) styles are
understood; anything else leaves the argument descriptions empty.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

__all__ = ["ParsedDocstring", "parse_docstring"]

_GOOGLE_ARGS = re.compile(r"^(Args|Arguments|Parameters|Params|Keyword Args|Kwargs):\s*$")
_GOOGLE_OTHER = re.compile(
    r"^(Returns?|Yields?|Raises?|Examples?|Notes?|Attributes|See Also|Warnings?|Todo):\s*$"
)
_GOOGLE_ITEM = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_HEADER = re.compile(r"^-{3,}\s*$")
_NUMPY_ITEM = re.compile(r"^(\*{0,2}\w+)\s*(:.*)?$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")
_SPHINX_ANY = re.compile(r"^:\w+")


@dataclass
class ParsedDocstring:
    """The summary (text before the first section) and per-argument descriptions."""

    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> ParsedDocstring:
    """Split ``doc`` into a description and argument descriptions."""
    if not doc:
        return ParsedDocstring()
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    i = 0
    in_description = True
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        is_numpy = i + 1 < len(lines) and _NUMPY_HEADER.match(lines[i + 1].strip()) is not None
        if _GOOGLE_ARGS.match(stripped) and not line.startswith(" "):
            in_description = False
            i = _google_section(lines, i + 1, params)
            continue
        if is_numpy and not line.startswith(" "):
            in_description = False
            if stripped in ("Parameters", "Other Parameters", "Arguments"):
                i = _numpy_section(lines, i + 2, params)
            else:
                i = _skip_numpy_section(lines, i + 2)
            continue
        if _GOOGLE_OTHER.match(stripped) and not line.startswith(" "):
            in_description = False
        elif (match := _SPHINX_PARAM.match(stripped)) is not None:
            in_description = False
            params[match.group(1)] = match.group(2).strip()
        elif _SPHINX_ANY.match(stripped):
            in_description = False
        elif in_description:
            description.append(line)
        i += 1
    return ParsedDocstring("\n".join(description).strip(), params)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google_section(lines: list[str], i: int, params: dict[str, str]) -> int:
    item_indent: int | None = None
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        indent = _indent(line)
        if indent == 0:
            return i
        if item_indent is None:
            item_indent = indent
        match = _GOOGLE_ITEM.match(line.strip()) if indent == item_indent else None
        if match is not None:
            current = match.group(1).lstrip("*")
            params[current] = match.group(3).strip()
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()
        i += 1
    return i


def _numpy_section(lines: list[str], i: int, params: dict[str, str]) -> int:
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and _NUMPY_HEADER.match(lines[i + 1].strip()):
            return i
        if not line.strip():
            i += 1
            continue
        if _indent(line) == 0:
            match = _NUMPY_ITEM.match(line.strip())
            if match is None:
                return i
            names = [n.strip().lstrip("*") for n in match.group(1).split(",")]
            current = names[0]
            params[current] = ""
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()
        i += 1
    return i


def _skip_numpy_section(lines: list[str], i: int) -> int:
    while i < len(lines):
        if i + 1 < len(lines) and _NUMPY_HEADER.match(lines[i + 1].strip()):
            return i
        i += 1
    return i
