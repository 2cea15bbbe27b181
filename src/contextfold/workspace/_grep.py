"""Regex search over stored text with a deadline, so hostile patterns cannot hang."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NoReturn

import regex

from ._types import GrepMatch

__all__ = ["Searcher"]


class Searcher:
    """One grep run: a compiled pattern, a shared deadline and a result budget.

    The ``regex`` engine checks the deadline while matching, so a catastrophic pattern
    (``(a|aa)+$``) raises ``TimeoutError`` instead of spinning.
    """

    def __init__(self, pattern: str, *, timeout: float, max_results: int, context: int) -> None:
        try:
            self._pattern = regex.compile(pattern)
        except regex.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
        self._deadline = time.monotonic() + timeout
        self._timeout = timeout
        self._context = max(0, context)
        self.remaining = max(0, max_results)
        self.matches: list[GrepMatch] = []

    def search(self, ref: str, lines: Sequence[str]) -> None:
        """Add the matching lines of one item; raise ``TimeoutError`` past the deadline."""
        ctx = self._context
        for i, line in enumerate(lines):
            if self.remaining <= 0:
                return
            left = self._deadline - time.monotonic()
            if left <= 0:
                self._expired()
            try:
                found = self._pattern.search(line, timeout=left)
            except TimeoutError:
                self._expired()
            if found is None:
                continue
            self.matches.append(
                GrepMatch(
                    ref=ref,
                    line_number=i + 1,
                    line=line,
                    before=tuple(lines[max(0, i - ctx) : i]),
                    after=tuple(lines[i + 1 : i + 1 + ctx]),
                )
            )
            self.remaining -= 1

    def _expired(self) -> NoReturn:
        raise TimeoutError(
            f"the pattern did not finish within {self._timeout:g}s; "
            "use a simpler regular expression or a narrower glob"
        )
