"""The message: who said what, as a list of typed blocks."""

from __future__ import annotations

import enum
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter

from ._blocks import (
    ContentBlock,
    DataBlock,
    HintBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

__all__ = ["Msg", "Role", "Usage", "msgs_from_jsonl", "msgs_to_jsonl"]

Role = Literal["user", "assistant", "system"]
_B = TypeVar("_B", bound=BaseModel)


def _new_id() -> str:
    # ``uuid.uuid4().hex`` without the UUID object (a third of the cost; every message
    # gets one): random bytes with the version-4 and RFC 4122 variant bits set.
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return raw.hex()


def _now() -> str:
    return datetime.now(UTC).isoformat()


class _Unset(enum.Enum):
    """A keyword not passed (``None`` is a value of ``Msg.usage``)."""

    UNSET = 0


class Usage(BaseModel):
    """Token usage the provider reported for one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    """Input tokens served from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Input tokens written to the provider's prompt cache."""


class Msg(BaseModel):
    """A message. ``Msg("user", "hello", "user")`` works positionally, as in the examples of
    context-management.zh.

    Treat a message as immutable once it is in an agent's context: token counts are
    cached per message, so changes go through ``model_copy(update=...)`` instead.
    """

    # Provider messages may carry Infinity/NaN in unknown fields (kept in ``metadata``);
    # the JSON form writes them as those constants, not null, so a stored copy is exact.
    # The outermost model's setting governs a dump, so this covers the blocks inside too.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    name: str
    content: str | list[ContentBlock]
    role: Role
    id: str = Field(default_factory=_new_id)
    created_at: str = Field(default_factory=_now)
    metadata: dict[str, Any] = Field(default_factory=dict)
    usage: Usage | None = None

    _token_cache: dict[str, int] = PrivateAttr(default_factory=dict)
    _wire_cache: dict[str, Any] = PrivateAttr(default_factory=dict)

    def __init__(self, *args: Any, **data: Any) -> None:
        if len(args) > 3:
            raise TypeError(
                f"Msg takes at most 3 positional arguments (name, content, role), got {len(args)}"
            )
        for field, value in zip(("name", "content", "role"), args, strict=False):
            if field in data:
                raise TypeError(f"Msg got two values for {field!r}")
            data[field] = value
        super().__init__(**data)

    @classmethod
    def of_blocks(
        cls,
        name: str,
        blocks: Sequence[ContentBlock],
        role: Role,
        *,
        usage: Usage | Literal[_Unset.UNSET] | None = _Unset.UNSET,
        metadata: dict[str, Any] | Literal[_Unset.UNSET] = _Unset.UNSET,
    ) -> Msg:
        """``Msg(name, blocks, role, usage=..., metadata=...)`` (each keyword passed only
        when given), without validating again what already is valid.

        The agent builds two or three messages a step from blocks that are block objects
        already, and validating them again costs about half of building the message. An
        argument whose validation could change or reject it sends the call through
        ``Msg(...)`` instead, so the result is the same message either way.
        """
        if not (
            cls is Msg
            and type(name) is str
            and type(role) is str
            and role in _ROLES
            and (usage is _Unset.UNSET or usage is None or type(usage) is Usage)
            and (metadata is _Unset.UNSET or _str_keyed(metadata))
            and _all_blocks(blocks)
        ):
            extra: dict[str, Any] = {}
            if usage is not _Unset.UNSET:
                extra["usage"] = usage
            if metadata is not _Unset.UNSET:
                extra["metadata"] = metadata
            return cls(name, blocks, role, **extra)
        fields_set = {"name", "content", "role"}
        if usage is _Unset.UNSET:
            usage = None
        else:
            fields_set.add("usage")
        if metadata is _Unset.UNSET:
            metadata = {}
        else:
            metadata = dict(metadata)
            fields_set.add("metadata")
        msg = cls.__new__(cls)
        # As validation leaves it: fields in declaration order, the content list and the
        # metadata dict copied (their items kept).
        object.__setattr__(
            msg,
            "__dict__",
            {
                "name": name,
                "content": list(blocks),
                "role": role,
                "id": _new_id(),
                "created_at": _now(),
                "metadata": metadata,
                "usage": usage,
            },
        )
        object.__setattr__(msg, "__pydantic_fields_set__", fields_set)
        object.__setattr__(msg, "__pydantic_extra__", None)
        object.__setattr__(msg, "__pydantic_private__", _no_caches())
        return msg

    @classmethod
    def from_json(cls, data: str | bytes) -> Msg:
        """Parse one message from its JSON form (as written by ``model_dump_json``)."""
        return cls.model_validate_json(data)

    def blocks(self) -> list[ContentBlock]:
        """The content as blocks (a string becomes one ``TextBlock``)."""
        if isinstance(self.content, str):
            return [TextBlock(text=self.content)] if self.content else []
        return list(self.content)

    @overload
    def get_blocks(self, kind: type[_B]) -> list[_B]: ...
    @overload
    def get_blocks(self, kind: None = None) -> list[ContentBlock]: ...
    def get_blocks(self, kind: type[Any] | None = None) -> list[Any]:
        """Blocks of one type (``msg.get_blocks(ToolCallBlock)``), or all of them."""
        blocks = self.blocks()
        return blocks if kind is None else [b for b in blocks if isinstance(b, kind)]

    def iter_data(self) -> Iterator[DataBlock]:
        """Every data block, including those nested in tool results."""
        for block in self.blocks():
            if isinstance(block, DataBlock):
                yield block
            elif isinstance(block, ToolResultBlock) and not isinstance(block.output, str):
                yield from (b for b in block.output if isinstance(b, DataBlock))

    @property
    def text(self) -> str:
        """Text and hint blocks joined by newlines (no thinking, no tool traffic)."""
        if isinstance(self.content, str):
            return self.content
        parts = [
            b.text if isinstance(b, TextBlock) else b.hint
            for b in self.content
            if isinstance(b, TextBlock | HintBlock)
        ]
        return "\n".join(parts)

    @property
    def tool_calls(self) -> list[ToolCallBlock]:
        """The tool calls in this message, in order."""
        return self.get_blocks(ToolCallBlock)

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        """The tool results in this message, in order."""
        return self.get_blocks(ToolResultBlock)

    @property
    def thinking(self) -> list[ThinkingBlock]:
        """The thinking blocks in this message."""
        return self.get_blocks(ThinkingBlock)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Msg:
        """A copy; cached token counts and wire forms are dropped when ``update`` changes
        anything."""
        copy = super().model_copy(update=update, deep=deep)
        private = copy.__pydantic_private__
        if update:
            object.__setattr__(copy, "__pydantic_private__", _no_caches())
        elif not deep and private is not None:
            # a shallow copy must not share the cache dicts with the original
            private["_token_cache"] = dict(private["_token_cache"])
            private["_wire_cache"] = dict(private["_wire_cache"])
        return copy

    def __eq__(self, other: object) -> bool:
        # Pydantic compares private attributes too; here they are caches only (token
        # counts, wire forms), so a counted message equals its uncounted copy.
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(other) is type(self) and self.__dict__ == other.__dict__

    # Both read __pydantic_private__ directly: pydantic's private-attribute lookup goes
    # through __getattr__ and costs ~50x more, on the hottest path of the engine.
    def cached_tokens(self, counter_name: str) -> int | None:
        """The token count cached for ``counter_name``, if any."""
        private = self.__pydantic_private__
        cache: dict[str, int] = private["_token_cache"] if private else {}
        return cache.get(counter_name)

    def cache_tokens(self, counter_name: str, count: int) -> None:
        """Remember this message's token count under ``counter_name``."""
        private = self.__pydantic_private__
        if private is None:
            self._token_cache[counter_name] = count
        else:
            private["_token_cache"][counter_name] = count

    def cached_wire(self, form: str) -> Any:
        """This message in the wire form ``form``, as a converter remembered it, or ``None``.

        Converters build a message's wire form once (the agent resends the whole history
        every step) and hand out copies of what they remembered: see
        :func:`contextfold.message.to_openai_messages`.
        """
        private = self.__pydantic_private__
        return private["_wire_cache"].get(form) if private else None

    def cache_wire(self, form: str, value: Any) -> None:
        """Remember this message's wire form ``form`` (the converter's own copy)."""
        private = self.__pydantic_private__
        if private is None:
            self._wire_cache[form] = value
        else:
            private["_wire_cache"][form] = value


def _no_caches() -> dict[str, Any]:
    """A message's private attributes as a new one has them: empty caches."""
    return {"_token_cache": {}, "_wire_cache": {}}


_ROLES = frozenset({"user", "assistant", "system"})
_BLOCK_TYPES = frozenset(
    {TextBlock, ThinkingBlock, DataBlock, ToolCallBlock, ToolResultBlock, HintBlock}
)
"""Exact block classes, which validation keeps as they are (not their subclasses)."""


def _all_blocks(blocks: object) -> bool:
    """Whether ``blocks`` is a list of exact block objects (kept as they are)."""
    return type(blocks) is list and all(type(block) in _BLOCK_TYPES for block in blocks)


def _str_keyed(metadata: object) -> bool:
    """Whether validation would keep ``metadata`` as it is (a copy of the same dict)."""
    return type(metadata) is dict and all(type(k) is str for k in metadata)


_MSG_LIST = TypeAdapter(list[Msg])


def msgs_to_jsonl(msgs: list[Msg]) -> str:
    """One JSON object per line, newline terminated."""
    return "".join(m.model_dump_json() + "\n" for m in msgs)


def msgs_from_jsonl(text: str) -> list[Msg]:
    """Parse the output of :func:`msgs_to_jsonl`; blank lines are skipped."""
    return [Msg.model_validate_json(line) for line in text.splitlines() if line.strip()]
