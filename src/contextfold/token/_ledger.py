"""A running token total over a growing, front-trimmed history."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from ..message import Msg
from ._protocol import TokenCounter

__all__ = ["RunningTotal"]


class RunningTotal:
    """The summed ``count_message`` of a sequence of messages, kept incrementally.

    Appending counts only the new message (cached on it, so a message counted before
    costs a dict lookup); dropping from the front subtracts stored counts. Both are O(1)
    per message, whatever the length of the history.
    """

    def __init__(self, counter: TokenCounter, msgs: Iterable[Msg] = ()) -> None:
        self.counter = counter
        self._counts: deque[int] = deque()
        self._total = 0
        self.extend(msgs)

    @property
    def total(self) -> int:
        """Sum of the message counts."""
        return self._total

    def __len__(self) -> int:
        return len(self._counts)

    def counts(self) -> list[int]:
        """Each message's count, oldest first."""
        return list(self._counts)

    def append(self, msg: Msg) -> int:
        """Add ``msg`` at the end; return its count."""
        n = self.counter.count_message(msg)
        self._counts.append(n)
        self._total += n
        return n

    def extend(self, msgs: Iterable[Msg]) -> None:
        """Append each of ``msgs``."""
        for msg in msgs:
            self.append(msg)

    def pop_front(self, n: int = 1) -> int:
        """Drop the ``n`` oldest messages; return the tokens removed."""
        if n < 0 or n > len(self._counts):
            raise ValueError(f"cannot drop {n} of {len(self._counts)} messages")
        removed = 0
        for _ in range(n):
            removed += self._counts.popleft()
        self._total -= removed
        return removed

    def pop(self) -> int:
        """Drop the newest message; return its count."""
        if not self._counts:
            raise IndexError("pop from an empty RunningTotal")
        n = self._counts.pop()
        self._total -= n
        return n

    def clear(self) -> None:
        """Forget every message."""
        self._counts.clear()
        self._total = 0
