"""The image limit as a policy: at most ``max_image_num`` images stay in the context.

compress-context.zh, section 限制图片数量 (Limiting the number of images): the oldest images
leave first, each replaced by a placeholder naming where it was saved. The policy keeps an
index of where the images are (absolute positions), so a step finds them without scanning
the history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

from ..message import DataBlock, Msg
from ..token import TokenCounter
from ._trim import count_images, remove_images
from ._types import ImageRemovalEvent

__all__ = ["ImageLimit"]


class ImageLimit:
    """The images of the context, oldest first, and the rule that removes the excess."""

    def __init__(self) -> None:
        self._index: deque[list[int]] = deque()  # [absolute position, images in it]
        self.total = 0

    def clear(self) -> None:
        self._index.clear()
        self.total = 0

    def note(self, position: int, msg: Msg) -> None:
        """Index ``msg``, appended at absolute ``position``."""
        images = count_images(msg)
        if images:
            self._index.append([position, images])
            self.total += images

    def reindex(self, start: int, context: list[Msg]) -> None:
        """Index ``context`` afresh, its first message at absolute position ``start`` (a
        compaction moved a kept message ahead of others)."""
        self.clear()
        for i, msg in enumerate(context):
            self.note(start + i, msg)

    def prune(self, start: int) -> None:
        """Forget images of messages before absolute position ``start`` (compressed)."""
        while self._index and self._index[0][0] < start:
            self.total -= self._index.popleft()[1]

    async def apply(
        self,
        context: list[Msg],
        *,
        start: int,
        limit: int,
        counter: TokenCounter,
        persist: Callable[[DataBlock], Awaitable[str | None]],
        adjust: Callable[[int], None],
        readback: bool = True,
    ) -> ImageRemovalEvent | None:
        """Remove the oldest images over ``limit`` from ``context`` in place, each message
        replaced whole and its change in tokens passed to ``adjust`` at once (so a
        cancelled step leaves the accounts true); the event, without token figures."""
        self.prune(start)
        excess = self.total - limit
        if excess <= 0:
            return None
        removed, refs = 0, []
        while excess > 0 and self._index:
            position, count = self._index[0]
            take = min(count, excess)
            index = position - start
            old = context[index]
            new, new_refs = await remove_images(
                old, take, limit=limit, persist=persist, readback=readback
            )
            context[index] = new
            adjust(counter.count_message(new) - counter.count_message(old))
            refs.extend(new_refs)
            removed += take
            excess -= take
            self.total -= take
            if take == count:
                self._index.popleft()
            else:
                self._index[0][1] = count - take
        return ImageRemovalEvent(
            images_removed=removed, offload_refs=refs, tokens_before=0, tokens_after=0
        )
