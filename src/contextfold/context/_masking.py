"""Observation masking: old tool results replaced by a placeholder, before any summary.

A compaction tier that costs no model call: every old tool result (outside the kept part,
or in it for ``strip`` tools) becomes one line naming where the whole output is saved, all
in one batch, so the prefix before the first masked result stays cached. It applies only
when that brings usage to halfway between reserve and trigger; otherwise the compaction
goes on to the summary.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from ..message import CACHE_POINT_KEY, MASKED_KEY, Msg, ToolResultBlock, is_readback
from ..token import TokenCounter
from ._trim import replace_content

__all__ = ["MaskingPlan", "mask_message", "mask_plan", "plan_masking"]

_TYPICAL_REF = "x" * 48
"""A reference of typical length: the masked size is estimated before anything is saved."""


def mask_plan(
    msgs: Sequence[Msg], *, k: int, protect: int, policies: Mapping[str, str]
) -> list[tuple[int, int, ToolResultBlock]]:
    """The tool results to mask: ``(message index, block index, block)``.

    Results before ``k`` (the kept part's start) are masked unless their tool is
    ``protect``-ed; ``strip`` tools are masked up to ``protect`` (the newest turn) too.
    Already masked results and read-back results are left alone.
    """
    plan = []
    for i, msg in enumerate(msgs[:protect]):
        for j, block in enumerate(msg.blocks()):
            if not isinstance(block, ToolResultBlock) or MASKED_KEY in block.metadata:
                continue
            if is_readback(block):
                continue
            policy = policies.get(block.name, "mask")
            if policy == "protect" or (policy == "mask" and i >= k):
                continue
            plan.append((i, j, block))
    return plan


def mask_message(msg: Msg, masks: Mapping[int, tuple[str, int]], *, readback: bool = True) -> Msg:
    """``msg`` with the tool results at the given block indexes replaced by placeholders
    (``ref`` of the whole output, its size in tokens); without ``readback`` (the model
    cannot read ``ref``) the placeholder says the output was omitted."""
    blocks = msg.blocks()
    for j, (ref, tokens) in masks.items():
        block = blocks[j]
        assert isinstance(block, ToolResultBlock)
        note = (
            f"[{block.name} output ({tokens} tokens) masked to save context; the whole "
            f"output is saved in '{ref}': Read it to see it again.]"
            if readback
            else f"[{block.name} output ({tokens} tokens) omitted to save context.]"
        )
        blocks[j] = block.model_copy(
            update={"output": note, "metadata": {**block.metadata, MASKED_KEY: ref}}
        )
    return replace_content(msg, blocks)


@dataclass(frozen=True)
class MaskingPlan:
    """The results one masking replaces, decided before anything is offloaded."""

    blocks: tuple[tuple[int, int, ToolResultBlock], ...]
    """``(message index, block index, block)`` of each result to mask."""
    sizes: Mapping[int, Mapping[int, int]]
    """Message index -> block index -> the result's tokens."""

    def apply(
        self,
        snapshot: Sequence[Msg],
        refs: Mapping[tuple[int, int], str],
        *,
        readback: bool = True,
    ) -> list[Msg]:
        """``snapshot`` with the results masked (``refs``: where each was saved) and a
        cache point on the message before the first masked one."""
        context = list(snapshot)
        for i, msg in _masked(snapshot, self.sizes, refs, readback).items():
            context[i] = msg
        first = min(self.sizes)
        if first > 0:
            before = context[first - 1]
            context[first - 1] = before.model_copy(
                update={"metadata": {**before.metadata, CACHE_POINT_KEY: True}}
            )
        return context

    async def offload(
        self, save: Callable[[ToolResultBlock], Awaitable[str | None]]
    ) -> dict[tuple[int, int], str]:
        """Save every result to mask; where each went."""
        return {
            (i, j): await save(block) or "(not saved: no offloader)" for i, j, block in self.blocks
        }


def plan_masking(
    snapshot: Sequence[Msg],
    *,
    k: int,
    protect: int,
    policies: Mapping[str, str],
    total: int,
    goal: float,
    counter: TokenCounter,
) -> MaskingPlan | None:
    """What masking would replace, or ``None`` when there is nothing to mask or the
    request would still be over ``goal`` tokens (``total`` now) after it."""
    blocks = mask_plan(snapshot, k=min(k, protect), protect=protect, policies=policies)
    if not blocks:
        return None
    sizes: dict[int, dict[int, int]] = {}
    for i, j, block in blocks:
        sizes.setdefault(i, {})[j] = counter.count_text(block.text())
    trial = _masked(snapshot, sizes, {(i, j): _TYPICAL_REF for i, j, _ in blocks})
    count = counter.count_message
    after = total - sum(count(snapshot[i]) - count(m) for i, m in trial.items())
    if after > goal:
        return None
    return MaskingPlan(blocks=tuple(blocks), sizes=sizes)


def _masked(
    snapshot: Sequence[Msg],
    sizes: Mapping[int, Mapping[int, int]],
    refs: Mapping[tuple[int, int], str],
    readback: bool = True,
) -> dict[int, Msg]:
    return {
        i: mask_message(
            snapshot[i], {j: (refs[(i, j)], n) for j, n in blocks.items()}, readback=readback
        )
        for i, blocks in sizes.items()
    }
