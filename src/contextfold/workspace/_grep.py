"""Regex and glob matching over stored text with a deadline, off the event loop.

A process runs many sessions on one event loop, so a hostile pattern must neither hang
nor stall the others. Matching therefore

- runs in the matching threads (:mod:`._match_threads`: :func:`off_loop`), never on the
  loop, at its caller's priority until it has run ``PATTERN_GRACE_S``, then at the lowest;
- stops at its deadline inside the matcher: the ``regex`` engine checks the time while it
  backtracks (``timeout=``), so the thread really stops (a thread cannot be killed), and
  the caller is answered at the deadline in wall time all the same (``off_loop``);
- is bounded before it starts: ``regex`` expands counted repeats when it compiles, so
  ``a{99999999}`` would allocate gigabytes before any deadline applies. A pattern is
  refused when it is longer than ``MAX_PATTERN_LENGTH`` or when its repeats expand to more
  than ``MAX_REPEAT_EXPANSION`` items (see ``check_pattern_size``).
"""

from __future__ import annotations

import importlib
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import regex

from ._match_threads import (
    MATCH_THREADS,
    MAX_OVERDUE_THREADS,
    PATTERN_GRACE_S,
    Deadline,
    off_loop,
)
from ._types import GrepMatch

__all__ = [
    "MATCH_THREADS",
    "MAX_OVERDUE_THREADS",
    "MAX_PATTERN_LENGTH",
    "MAX_REPEAT_EXPANSION",
    "PATTERN_GRACE_S",
    "Deadline",
    "Searcher",
    "check_pattern_size",
    "match_glob",
    "off_loop",
]

GREP_TIMEOUT = (
    "the pattern did not finish within {seconds}s; "
    "use a simpler regular expression or a narrower glob"
)
GLOB_TIMEOUT = "the glob pattern did not finish within {seconds}s; use fewer '*' and '**' wildcards"


def _match_paths(
    matcher: regex.Pattern[str], paths: Sequence[str], deadline: Deadline
) -> list[bool]:
    out: list[bool] = []
    for path in paths:
        try:
            out.append(matcher.fullmatch(path, timeout=deadline.left()) is not None)
        except TimeoutError:
            raise deadline.expired() from None
    return out


async def match_glob(
    matcher: regex.Pattern[str], paths: Sequence[str], *, time_limit: float
) -> list[bool]:
    """Whether each path fully matches a compiled glob (``glob_to_regex``), matched off
    the event loop; ``TimeoutError`` past ``time_limit`` seconds in all."""
    deadline = Deadline(time_limit, GLOB_TIMEOUT)
    return await off_loop(_match_paths, matcher, list(paths), deadline, deadline=deadline)


MAX_PATTERN_LENGTH = 1_000
"""Longest pattern, in characters, that ``grep`` compiles."""

MAX_REPEAT_EXPANSION = 10_000
"""Most items a pattern may expand to: every atom counts 1, ``x{m,n}`` counts ``n`` copies
of ``x`` (``x{m,}`` counts ``m``; ``*``, ``+`` and ``?`` count 1), nested repeats multiply
and the parts of a sequence or alternation add up. ``a{10000}`` is the largest single
repeat; compiling it takes a few MB."""

try:  # the stdlib's own regex parser: private, so its absence only loses precision
    _sre_parser: Any = importlib.import_module("re._parser")
    _sre_constants: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - a Python that moved its parser
    _sre_parser = _sre_constants = None

_DIGITS = frozenset("0123456789")
_REPEAT_OPS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def check_pattern_size(pattern: str) -> None:
    """Raise ``ValueError`` when compiling ``pattern`` could take too much memory.

    The expansion is measured on the stdlib parser's tree. Where that parser reads the
    pattern differently from ``regex`` (``regex``-only syntax, or verbose mode, in which
    ``regex`` skips blanks and comments inside ``{m,n}``), a coarser bound is used: the
    pattern length times the product of every count-like ``{m,n}`` in the text.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(
            f"the regular expression is {len(pattern):,} characters long, over the limit of "
            f"{MAX_PATTERN_LENGTH:,}; search for a shorter, more specific pattern"
        )
    size = _tree_expansion(pattern)
    if size is None:
        size = _textual_expansion(pattern)
    if size > MAX_REPEAT_EXPANSION:
        raise ValueError(
            f"the regular expression {pattern[:80]!r} repeats too much: its counted repeats "
            f"({{m,n}}) expand to more than {MAX_REPEAT_EXPANSION:,} items; use smaller "
            "counts, or '+' / '*' instead of large {m,n}"
        )


def _tree_expansion(pattern: str) -> int | None:
    """The expansion per the stdlib parser, or ``None`` when it cannot be trusted."""
    if _sre_parser is None:
        return None
    try:
        tree = _sre_parser.parse(pattern)
    except Exception:  # re.error, OverflowError, RecursionError: regex-only syntax or odd
        return None
    if tree.state.flags & _sre_constants.SRE_FLAG_VERBOSE:
        return None
    try:
        return _weigh(tree)
    except _VerboseScope:
        return None
    except RecursionError:  # pragma: no cover - the parser recursed deeper than we do
        return None


class _VerboseScope(Exception):
    """A ``(?x:...)`` group: the stdlib reads counts there differently from ``regex``."""


def _weigh(seq: Any) -> int:
    """Items ``seq`` (a parsed ``SubPattern``) expands to, saturating past the limit."""
    total = 0
    for op, av in seq:
        if any(op is _sre_constants.__dict__.get(name) for name in _REPEAT_OPS):
            low, high, body = av
            copies = _copies(low, None if high == _sre_constants.MAXREPEAT else high)
            total += copies * _weigh(body)
        else:
            if op is _sre_constants.SUBPATTERN and av[1] & _sre_constants.SRE_FLAG_VERBOSE:
                raise _VerboseScope
            # Any other node: itself plus whatever subpatterns it holds (groups,
            # lookarounds, alternatives, conditionals), found generically so a new
            # node kind cannot hide a repeat.
            total += 1 + sum(_weigh(sub) for sub in _subpatterns(av))
        total = min(total, MAX_REPEAT_EXPANSION + 1)
    return total


def _subpatterns(av: Any) -> list[Any]:
    found: list[Any] = []
    if isinstance(av, _sre_parser.SubPattern):
        found.append(av)
    elif isinstance(av, (tuple, list)):
        for item in av:
            found.extend(_subpatterns(item))
    return found


def _copies(low: int, high: int | None) -> int:
    """How many copies of its body a repeat makes ``regex`` allocate, at least 1."""
    return max(1, min(high if high is not None else low, MAX_REPEAT_EXPANSION + 1))


def _textual_expansion(pattern: str) -> int:
    """An upper bound read off the text: every character may sit inside every count.

    Counts are found the way ``regex`` reads them, blanks and ``#`` comments skipped, so
    ``(?x)a{1 0}`` counts 10; a brace that is really a literal only makes the bound larger.
    """
    limit = MAX_REPEAT_EXPANSION + 1
    product = len(pattern)
    for start, ch in enumerate(pattern):
        if ch == "{":
            product = min(product * _count_at(pattern, start + 1), limit)
    return max(product, 1)


def _count_at(pattern: str, pos: int) -> int:
    """The copies a ``{m,n}`` whose body starts at ``pos`` makes, or 1 if it is none."""
    low = high = ""
    comma = False
    while pos < len(pattern):
        ch = pattern[pos]
        if ch.isspace():
            pos += 1
        elif ch == "#":
            end = pattern.find("\n", pos)
            if end < 0:
                return 1
            pos = end + 1
        elif ch in _DIGITS:
            if comma:
                high += ch
            else:
                low += ch
            pos += 1
        elif ch == "," and not comma:
            comma = True
            pos += 1
        elif ch == "}":
            if not comma and not low:
                return 1
            return _copies(int(low or 0), int(high) if high else None)
        else:
            return 1
    return 1


class Searcher:
    """One grep run: a compiled pattern, a shared deadline and a result budget.

    The ``regex`` engine checks the deadline while matching, so a catastrophic pattern
    (``(a|aa)+$``) raises ``TimeoutError`` instead of spinning. :meth:`search` is
    synchronous: call it through :func:`off_loop`.
    """

    def __init__(self, pattern: str, *, timeout: float, max_results: int, context: int) -> None:
        check_pattern_size(pattern)
        try:
            # Not cached: a model sending many large patterns must not pin them all.
            self._pattern = regex.compile(pattern, cache_pattern=False)
        except regex.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
        except RecursionError as exc:
            raise ValueError(
                f"the regular expression {pattern[:80]!r} nests groups too deeply; "
                "use fewer nested parentheses"
            ) from exc
        self.pattern = pattern
        self._screen = _screen(pattern)
        self.deadline = Deadline(timeout, GREP_TIMEOUT)
        self.context = max(0, context)
        self.remaining = max(0, max_results)
        self.matches: list[GrepMatch] = []

    def search(self, ref: str, blocks: Iterable[str], path: str | None = None) -> None:
        """Add the matching lines of one item; raise ``TimeoutError`` past the deadline.

        ``blocks`` are the item's lines, a few thousand at a time joined by newlines (see
        ``_lines.iter_blocks``), read once, in order, and no further than the last match
        needs (its context after), so a large item is never held whole. A block the pattern
        cannot match anywhere is skipped in one call of the engine instead of line by line
        (see ``_screen``).
        """
        ctx = self.context
        before: deque[str] = deque(maxlen=ctx)
        waiting: deque[tuple[int, str, tuple[str, ...], list[str]]] = deque()
        number = 0

        def flush(final: bool) -> None:
            while waiting and (final or len(waiting[0][3]) >= ctx):
                n, line, seen, after = waiting.popleft()
                self.matches.append(GrepMatch(ref, n, line, seen, tuple(after), path))

        try:
            for block in blocks:
                if self.remaining <= 0 and not waiting:
                    return
                if not waiting and self._screen is not None and self.remaining > 0:
                    try:
                        hit = self._screen.search(block, timeout=self.deadline.left())
                    except TimeoutError:
                        raise self.deadline.expired() from None
                    if hit is None:
                        number += block.count("\n") + 1
                        if ctx:
                            before.extend(block.rsplit("\n", ctx)[-ctx:])
                        continue
                for line in block.split("\n"):
                    number += 1
                    for _, _, _, after in waiting:
                        after.append(line)
                    flush(final=False)
                    if self.remaining <= 0:
                        if not waiting:
                            return
                    else:
                        try:
                            found = self._pattern.search(line, timeout=self.deadline.left())
                        except TimeoutError:
                            raise self.deadline.expired() from None
                        if found is not None:
                            waiting.append((number, line, tuple(before), []))
                            self.remaining -= 1
                            if not ctx:  # no context after: done now, not with the next line
                                flush(final=False)
                    before.append(line)
        finally:
            flush(final=True)


_SCREEN_UNSAFE = regex.compile(r"\\[AZzG]|\(\?<?[=!]|\(\?[a-zA-Z0-9]*[-^]|\(\?\(")
"""What may match a line alone but not the same line inside a block: string anchors,
lookarounds (they see past the line's end), and flags turned off inline (``(?-m)``)."""


def _screen(pattern: str) -> regex.Pattern[str] | None:
    """``pattern`` in multiline mode, to search a block of lines at once: wherever a line
    matches alone, the block matches too (``^`` and ``$`` match at the line's ends, ``\\b``
    sees the newline as it sees the line's end), so a block without a match holds no
    matching line. ``None`` for a pattern where that may not hold."""
    if _SCREEN_UNSAFE.search(pattern):
        return None
    try:
        return regex.compile(pattern, regex.MULTILINE, cache_pattern=False)
    except (regex.error, ValueError):  # pragma: no cover - compiled once already
        return None
