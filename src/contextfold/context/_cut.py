"""One way to cut a text to a token budget: a head, a marker where the middle was, a tail.

Every token cut of the context goes through :class:`HeadTailCut`: a truncated tool
result, a message cut to fit a summarizer's window, the transcript's oldest entry and
the previous summary it shows, a summary field shrunk to the layer's budget. Tokens can
merge across the joins (the head's last word with the marker's first), so the result is
counted whole and, when it is over, cut again smaller by the overshoot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from ..token import TokenCounter, head_within, tail_within

__all__ = ["HeadTailCut"]


@dataclass(frozen=True)
class HeadTailCut:
    """How a text over its budget is cut: ``head + marker + tail + end``.

    The head and the tail share the room the budget leaves beside the marker and the end,
    ``head_share`` to the head, each share rounded down; the tail is taken from what
    follows the head, so the two never overlap. A text within its budget is returned
    whole, without the marker.
    """

    head_share: Fraction = Fraction(1)
    """Share of the room the head gets (1: the head alone; 0: the tail alone)."""
    marker: str | Callable[[int], str] = ""
    """What stands where text was cut out; a callable gets the number of tokens omitted."""
    marker_room: int | None = None
    """Tokens set aside for the marker; ``None`` counts it (a callable marker needs one)."""
    end: str = ""
    """What a cut text ends with, after the tail (a notice the reader must see last)."""
    attempts: int = 4
    """Cuts tried, each smaller by the last one's overshoot, before giving up on the text."""

    def __post_init__(self) -> None:
        if not 0 <= self.head_share <= 1:
            raise ValueError(f"head_share must be within [0, 1], not {self.head_share}")
        if callable(self.marker) and self.marker_room is None:
            raise ValueError("a marker computed from the omitted tokens needs a marker_room")

    def cut(
        self, counter: TokenCounter, text: str, budget: int, *, tokens: int | None = None
    ) -> str:
        """``text`` within ``budget`` tokens of ``counter``; ``tokens`` is its count, when
        the caller has it.

        When no cut keeps any text within the budget (it holds little more than the
        marker and the end), the result is :meth:`bare`: only then can it be over.
        """
        total = counter.count_text(text) if tokens is None else tokens
        if total <= budget:
            return text
        room = budget - counter.count_text(self.end)
        for _ in range(self.attempts):
            if room <= 0:
                break
            head, tail = self._ends(counter, text, room)
            if not head and not tail:
                break
            result = f"{head}{self._marker(counter, total, head, tail)}{tail}{self.end}"
            over = counter.count_text(result) - budget
            if over <= 0:
                return result
            room -= over
        return self.bare(total)

    def bare(self, total: int) -> str:
        """What a cut that keeps none of a ``total``-token text is: the end (without the
        whitespace that would part it from the text), else the marker."""
        end = self.end.lstrip()
        if end:
            return end
        return self.marker if isinstance(self.marker, str) else self.marker(total)

    def _marker(self, counter: TokenCounter, total: int, head: str, tail: str) -> str:
        if isinstance(self.marker, str):
            return self.marker
        return self.marker(max(total - counter.count_text(head) - counter.count_text(tail), 0))

    def _ends(self, counter: TokenCounter, text: str, room: int) -> tuple[str, str]:
        """The head and the tail within ``room`` tokens less the marker's."""
        if self.marker_room is not None:
            room -= self.marker_room
        elif isinstance(self.marker, str):
            room -= counter.count_text(self.marker)
        if room <= 0:
            return "", ""
        share = self.head_share
        head = head_within(counter, text, room * share.numerator // share.denominator)
        tail_tokens = room * (share.denominator - share.numerator) // share.denominator
        return head, tail_within(counter, text[len(head) :], tail_tokens)
