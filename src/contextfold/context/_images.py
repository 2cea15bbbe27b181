"""Image limit: the oldest images leave the context with a placeholder."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..message import ContentBlock, DataBlock, Msg, TextBlock, ToolResultBlock, ToolResultContent
from ._replace import replace_content

__all__ = ["count_images", "image_placeholder", "remove_images"]


def _is_image(block: object) -> bool:
    return isinstance(block, DataBlock) and block.kind == "image"


def count_images(msg: Msg) -> int:
    """Images in a message, including those inside tool results."""
    if isinstance(msg.content, str):
        return 0
    return sum(1 for b in msg.iter_data() if b.kind == "image")


def image_placeholder(*, limit: int, ref: str | None) -> str:
    """What stands in for a removed image."""
    if ref is None:
        return (
            f"[An image was removed from the context: at most {limit} images are kept, "
            "and no offloader was set, so it was discarded.]"
        )
    return (
        f"[An image was removed from the context: at most {limit} images are kept. "
        f"It was saved to '{ref}'; read it from there if you need it again.]"
    )


async def remove_images(
    msg: Msg,
    count: int,
    *,
    limit: int,
    persist: Callable[[DataBlock], Awaitable[str | None]],
) -> tuple[Msg, list[str]]:
    """A copy of ``msg`` without its first ``count`` images, and the offload references."""
    refs: list[str] = []
    left = count

    async def swap(block: DataBlock) -> TextBlock:
        nonlocal left
        left -= 1
        ref = await persist(block)
        if ref is not None:
            refs.append(ref)
        return TextBlock(text=image_placeholder(limit=limit, ref=ref))

    new_blocks: list[ContentBlock] = []
    for block in msg.blocks():
        if left > 0 and isinstance(block, DataBlock) and _is_image(block):
            new_blocks.append(await swap(block))
        elif left > 0 and isinstance(block, ToolResultBlock) and not isinstance(block.output, str):
            output: list[ToolResultContent] = []
            for part in block.output:
                if left > 0 and isinstance(part, DataBlock) and _is_image(part):
                    output.append(await swap(part))
                else:
                    output.append(part)
            new_blocks.append(block.model_copy(update={"output": output}))
        else:
            new_blocks.append(block)
    return replace_content(msg, new_blocks), refs
