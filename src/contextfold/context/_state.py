"""EngineState: what an engine holds, as one typed, portable value.

An integration stores it with the framework's session so a resumed (or switched, or
evicted) conversation picks up where it was: the summary layer, the kept context as the
engine holds it (results already cut), and what was offloaded, keyed by content so an
offload is never done twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from .._exceptions import MessageFormatError
from ..message import Msg
from ._layer import SummaryLayer
from ._redact import redact_messages

__all__ = ["EngineState"]

_VERSION = 1


@dataclass(frozen=True)
class EngineState:
    """The summary layer, the kept context and the offload index of one engine."""

    summary: SummaryLayer | None
    context: tuple[Msg, ...]
    offloads: Mapping[str, str] = field(default_factory=dict)
    """Content digest of each thing offloaded -> its reference."""

    def redacted(self, redact: Callable[[str], str] | None) -> EngineState:
        """This state with every text passed through ``redact`` (what is stored holds no
        secret the live context still shows); itself when ``redact`` is ``None``."""
        if redact is None:
            return self
        summary = None if self.summary is None else self.summary.redacted(redact)
        return EngineState(summary, tuple(redact_messages(self.context, redact)), self.offloads)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready document (:meth:`from_json` reads it back)."""
        return {
            "version": _VERSION,
            "summary": None if self.summary is None else self.summary.to_json(),
            "context": [json.loads(m.model_dump_json()) for m in self.context],
            "offloads": dict(self.offloads),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EngineState:
        """Read a :meth:`to_json` document; a malformed one raises
        :class:`~contextfold.MessageFormatError`."""
        if not isinstance(data, Mapping) or data.get("version") != _VERSION:
            raise MessageFormatError("not an engine state of version 1")
        context, offloads = data.get("context"), data.get("offloads", {})
        if not isinstance(context, Sequence) or not isinstance(offloads, Mapping):
            raise MessageFormatError("an engine state's 'context' and 'offloads' are malformed")
        try:
            msgs = tuple(Msg.model_validate(m) for m in context)
        except ValidationError as exc:
            raise MessageFormatError(f"an engine state's message is malformed: {exc}") from exc
        summary = data.get("summary")
        return cls(
            summary=None if summary is None else SummaryLayer.from_json(summary),
            context=msgs,
            offloads={str(k): str(v) for k, v in offloads.items()},
        )
