"""Anthropic's ``context_management.edits``, read into typed values and checked.

The shapes and defaults are Anthropic's (``clear_tool_uses_20250919``,
``clear_thinking_20251015``, ``compact_20260112``); a malformed edit is an
``EditError`` whose message names the field, answered with a 400 as Anthropic would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CLEAR_THINKING",
    "CLEAR_TOOL_USES",
    "COMPACT",
    "ClearThinking",
    "ClearToolUses",
    "Compact",
    "Edit",
    "EditError",
    "parse_edits",
]

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
COMPACT = "compact_20260112"


class EditError(ValueError):
    """A ``context_management`` value Anthropic would reject."""


@dataclass(frozen=True)
class ClearToolUses:
    """``clear_tool_uses_20250919`` with Anthropic's defaults."""

    trigger: Literal["input_tokens", "tool_uses"] = "input_tokens"
    trigger_value: int = 100_000
    keep: int = 3
    clear_at_least: int | None = None
    exclude_tools: frozenset[str] = frozenset()
    clear_tool_inputs: bool | frozenset[str] = False

    def clears_input_of(self, name: str) -> bool:
        """Whether a cleared use of tool ``name`` also loses its input."""
        if isinstance(self.clear_tool_inputs, bool):
            return self.clear_tool_inputs
        return name in self.clear_tool_inputs


@dataclass(frozen=True)
class ClearThinking:
    """``clear_thinking_20251015``: ``keep`` assistant turns' thinking (``None``: all)."""

    keep: int | None = 1


@dataclass(frozen=True)
class Compact:
    """``compact_20260112`` with Anthropic's defaults."""

    trigger_value: int = 150_000
    pause_after_compaction: bool = False
    instructions: str | None = None


Edit = ClearToolUses | ClearThinking | Compact


def _count(value: Any, where: str, kinds: tuple[str, ...]) -> tuple[str, int]:
    if not isinstance(value, dict):
        raise EditError(f"{where}: expected an object like {{'type': ..., 'value': N}}")
    kind, n = value.get("type"), value.get("value")
    if kind not in kinds:
        raise EditError(f"{where}.type: expected one of {list(kinds)}, got {kind!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise EditError(f"{where}.value: expected a non-negative integer, got {n!r}")
    extra = set(value) - {"type", "value"}
    if extra:
        raise EditError(f"{where}: unexpected field(s) {sorted(extra)}")
    return kind, n


def _names(value: Any, where: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise EditError(f"{where}: expected a list of tool names")
    return frozenset(value)


def _known(raw: dict[str, Any], where: str, *fields: str) -> None:
    extra = set(raw) - {"type", *fields}
    if extra:
        raise EditError(f"{where}: unexpected field(s) {sorted(extra)}")


def _clear_tool_uses(raw: dict[str, Any], where: str) -> ClearToolUses:
    _known(raw, where, "trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs")
    trigger: Literal["input_tokens", "tool_uses"] = "input_tokens"
    trigger_value = 100_000
    if raw.get("trigger") is not None:
        kind, trigger_value = _count(
            raw["trigger"], f"{where}.trigger", ("input_tokens", "tool_uses")
        )
        trigger = "tool_uses" if kind == "tool_uses" else "input_tokens"
    keep = 3
    if raw.get("keep") is not None:
        keep = _count(raw["keep"], f"{where}.keep", ("tool_uses",))[1]
    at_least = None
    if raw.get("clear_at_least") is not None:
        at_least = _count(raw["clear_at_least"], f"{where}.clear_at_least", ("input_tokens",))[1]
    exclude = frozenset[str]()
    if raw.get("exclude_tools") is not None:
        exclude = _names(raw["exclude_tools"], f"{where}.exclude_tools")
    inputs: bool | frozenset[str] = False
    value = raw.get("clear_tool_inputs")
    if isinstance(value, bool):
        inputs = value
    elif value is not None:
        inputs = _names(value, f"{where}.clear_tool_inputs")
    return ClearToolUses(trigger, trigger_value, keep, at_least, exclude, inputs)


def _clear_thinking(raw: dict[str, Any], where: str) -> ClearThinking:
    _known(raw, where, "keep")
    keep = raw.get("keep")
    if keep is None:
        return ClearThinking()
    if keep == "all" or (isinstance(keep, dict) and keep == {"type": "all"}):
        return ClearThinking(keep=None)
    return ClearThinking(keep=_count(keep, f"{where}.keep", ("thinking_turns",))[1])


def _compact(raw: dict[str, Any], where: str) -> Compact:
    _known(raw, where, "trigger", "pause_after_compaction", "instructions")
    trigger = 150_000
    if raw.get("trigger") is not None:
        trigger = _count(raw["trigger"], f"{where}.trigger", ("input_tokens",))[1]
    pause = raw.get("pause_after_compaction", False)
    if not isinstance(pause, bool):
        raise EditError(f"{where}.pause_after_compaction: expected a boolean, got {pause!r}")
    instructions = raw.get("instructions")
    if instructions is not None and (not isinstance(instructions, str) or not instructions):
        raise EditError(f"{where}.instructions: expected a non-empty string or null")
    return Compact(trigger, pause, instructions)


def parse_edits(value: Any) -> tuple[Edit, ...]:
    """The edits of a ``context_management`` value, in order; ``EditError`` if malformed."""
    if not isinstance(value, dict):
        raise EditError("context_management: expected an object with 'edits'")
    _known(value, "context_management", "edits")
    raws = value.get("edits") or []
    if not isinstance(raws, list):
        raise EditError("context_management.edits: expected a list")
    edits: list[Edit] = []
    seen: set[str] = set()
    for i, raw in enumerate(raws):
        where = f"context_management.edits[{i}]"
        if not isinstance(raw, dict):
            raise EditError(f"{where}: expected an object")
        kind = raw.get("type")
        if kind in seen:
            raise EditError(f"{where}: {kind} appears more than once")
        if kind == CLEAR_TOOL_USES:
            edits.append(_clear_tool_uses(raw, where))
        elif kind == CLEAR_THINKING:
            if edits:
                raise EditError(f"{where}: {CLEAR_THINKING} must come first in edits")
            edits.append(_clear_thinking(raw, where))
        elif kind == COMPACT:
            edits.append(_compact(raw, where))
        else:
            known = [CLEAR_TOOL_USES, CLEAR_THINKING, COMPACT]
            raise EditError(f"{where}.type: expected one of {known}, got {kind!r}")
        seen.add(str(kind))
    return tuple(edits)
