"""HistoryFolder: the engine behind a framework's own message history.

Frameworks keep their history and hand all of it to a hook before every model call. The
folder feeds the engine only what is new since the last call (tool results through
``add_tool_results``, so they are truncated and offloaded), asks it for the next model
input, and converts that back, reusing the framework's own objects for every message the
engine did not change. A :class:`Codec` is the only framework-specific part.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, cast

from .._exceptions import MessageFormatError
from .._logging import logger
from .._structural import implements
from ..context import (
    CompressionEvent,
    ContextEngine,
    ContextEvent,
    ContextEventHandler,
    EngineState,
    ImageRemovalEvent,
    ModelInput,
    TruncationEvent,
    is_summary,
)
from ..message import READBACK_KEY, Msg, ToolResultBlock, ToolSpec
from ..workspace import SessionStore
from ._spans import FoldSpans

__all__ = ["Codec", "Folded", "HistoryFolder", "mark_readback"]

_KIND = "contextfold.history_folder/1"
"""What a folder's saved state says it is (beside an agent's, in the same store)."""


def _normal(key: Hashable) -> str:
    """A codec's key as it reads back from JSON (tuples become lists)."""
    return json.dumps(key, default=str, sort_keys=True)


T = TypeVar("T")

_CHANGES = (CompressionEvent, TruncationEvent, ImageRemovalEvent)


class Codec(Protocol[T]):
    """How one framework's history items become ``Msg`` objects and back."""

    def key(self, item: T) -> Hashable:
        """A value that changes when the item is replaced (an id, or the item's content)."""
        ...

    def to_msgs(self, items: Sequence[T]) -> list[tuple[Msg, list[T]]]:
        """Consecutive items as messages, each with the items it was made from."""
        ...

    def from_msg(self, msg: Msg) -> list[T]:
        """A message the engine made or changed, as new framework items."""
        ...


@dataclass
class Folded(Generic[T]):
    """One call's result: what to send, what the history should now hold, what happened."""

    request: list[T]
    """Items to send to the model: summary, kept context, and the usage note if any."""
    history: list[T]
    """Summary and kept context without the usage note: the history to store."""
    model_input: ModelInput
    events: list[ContextEvent] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether the engine compressed, truncated or removed images in this call."""
        return any(isinstance(e, _CHANGES) for e in self.events)


def mark_readback(msg: Msg, names: Iterable[str]) -> Msg:
    """``msg`` with results of the read-back tools marked (they are not offloaded again)."""
    wanted = set(names)
    blocks = msg.blocks()
    if not any(isinstance(b, ToolResultBlock) and b.name in wanted for b in blocks):
        return msg
    marked = [
        b.model_copy(update={"metadata": {**b.metadata, READBACK_KEY: True}})
        if isinstance(b, ToolResultBlock) and b.name in wanted
        else b
        for b in blocks
    ]
    return msg.model_copy(update={"content": marked})


class HistoryFolder(Generic[T]):
    """One conversation: its engine, and which framework items it has already seen.

    ``rewrites_history`` says whether the framework stores what :meth:`fold` returns as
    its history (LangGraph state, Pydantic AI) or keeps its own full history and only
    sends the folded one (the Agents SDK's input filter). A history that no longer
    extends what was seen (edited, or another conversation) is read again from the
    start; a summary item made by an earlier folder becomes the engine's summary.
    """

    def __init__(
        self,
        engine: ContextEngine,
        codec: Codec[T],
        *,
        rewrites_history: bool,
        readback_names: Iterable[str] = (),
        on_event: ContextEventHandler | None = None,
        persist: bool = True,
        tracer_provider: object = None,
    ) -> None:
        self.engine = engine
        self.store: SessionStore | None = (
            cast(SessionStore, engine.offloader)
            if persist and implements(engine.offloader, SessionStore)
            else None
        )
        """Where the folder keeps its state after every call (the engine's offloader, when
        it is a session store), so a new folder on the same session resumes from it."""
        self._restored = False
        self._spans = FoldSpans(engine.session_id, tracer_provider)
        self.codec = codec
        self.rewrites_history = rewrites_history
        self.readback_names = frozenset(readback_names)
        self._seen = 0
        self._last: Hashable = None
        self._origin: dict[str, tuple[Msg, list[T]]] = {}
        """Per message id, the message as fed and the framework items it was made from:
        reused while the engine holds that message unchanged (the image limit replaces a
        message under the same id)."""
        self._pending: dict[str, str] = {}  # names of calls whose result has not come yet
        self._events: list[ContextEvent] = []
        forward = on_event if on_event is not None else engine.on_event

        async def collect(event: ContextEvent) -> None:
            self._events.append(event)
            if forward is not None:
                result = forward(event)
                if inspect.isawaitable(result):
                    await result

        engine.on_event = collect
        engine.compression_hook = self._spans.around(engine.compression_hook)

    async def fold(
        self, history: Sequence[T], system_prompt: str, tools: Sequence[ToolSpec] = ()
    ) -> Folded[T]:
        """Feed the new items, prepare the next input (compressing if needed), convert back."""
        with self._spans.fold() as span:
            folded = await self._fold(history, system_prompt, tools)
            self._spans.finish(span, folded.model_input, folded.events)
            return folded

    async def _fold(
        self, history: Sequence[T], system_prompt: str, tools: Sequence[ToolSpec]
    ) -> Folded[T]:
        self._events = []
        if not self._seen and not self._restored:
            self._restored = True
            await self._restore(history)
        if self._seen and self._extends(history):
            await self._feed(self.codec.to_msgs(history[self._seen :]))
        else:
            await self._restart(history)
        model_input = await self.engine.prepare(system_prompt, tools)
        stored = [] if model_input.summary is None else [model_input.summary]
        stored.extend(self.engine.context)
        history_items = self._items(stored)
        request = list(history_items)
        for msg in model_input.context[len(self.engine.context) :]:
            request.extend(self.codec.from_msg(msg))  # the usage note, never stored
        self._origin = {m.id: self._origin[m.id] for m in stored}
        kept = history_items if self.rewrites_history else list(history)
        self._seen = len(kept)
        self._last = self.codec.key(kept[-1]) if kept else None
        if self.store is not None:
            await self._save()
        return Folded(request, history_items, model_input, list(self._events))

    async def _save(self) -> None:
        document = {
            "kind": _KIND,
            "seen": self._seen,
            "last": _normal(self._last),
            "pending": self._pending,
            "engine": self.engine.state().redacted(self.engine.config.redact).to_json(),
        }
        assert self.store is not None
        await self.store.save_state(self.engine.session_id, json.dumps(document))

    async def _restore(self, history: Sequence[T]) -> None:
        """Pick up the state a folder of this session saved, when ``history`` extends
        what it had seen: nothing seen then is fed (truncated, offloaded, summarized)
        again. Otherwise only the offload index is kept, so nothing is saved twice."""
        if self.store is None:
            return
        try:
            raw = await self.store.load_state(self.engine.session_id)
            document = json.loads(raw) if raw else None
            if not isinstance(document, dict) or document.get("kind") != _KIND:
                return
            state = EngineState.from_json(document["engine"])
            seen = int(document["seen"])
        except (ValueError, KeyError, TypeError, MessageFormatError) as exc:
            logger.warning(
                "saved history state of %r unreadable, ignored: %s", self.engine.session_id, exc
            )
            return
        if (
            0 < seen <= len(history)
            and _normal(self.codec.key(history[seen - 1])) == document["last"]
        ):
            self.engine.load(summary=state.summary, context=state.context, offloads=state.offloads)
            self._seen, self._last = seen, self.codec.key(history[seen - 1])
            pending = document.get("pending")
            self._pending = dict(pending) if isinstance(pending, dict) else {}
            self._origin = {}
        else:
            self.engine.load(summary=None, context=[], offloads=state.offloads)

    def _extends(self, history: Sequence[T]) -> bool:
        if len(history) < self._seen:
            return False
        return self.codec.key(history[self._seen - 1]) == self._last

    async def _restart(self, history: Sequence[T]) -> None:
        pairs = self.codec.to_msgs(history)
        summary: Msg | None = None
        self._origin, self._pending = {}, {}
        if pairs and is_summary(pairs[0][0]):
            summary, items = pairs.pop(0)
            self._origin[summary.id] = (summary, items)
        self.engine.load(summary=summary, context=[], offloads=None)
        await self._feed(pairs)

    async def _feed(self, pairs: Sequence[tuple[Msg, list[T]]]) -> None:
        for msg, originals in pairs:
            msg = mark_readback(self._named(msg), self.readback_names)
            if msg.tool_results:
                stored = await self.engine.add_tool_results(msg)
            else:
                self.engine.append(msg)
                stored = msg
            if stored is msg:
                self._origin[msg.id] = (msg, originals)

    def _named(self, msg: Msg) -> Msg:
        """Tool results named after their calls (some formats name only the call)."""
        for call in msg.tool_calls:
            self._pending[call.id] = call.name
        results = msg.tool_results
        if not results:
            return msg
        names = {r.id: r.name or self._pending.get(r.id, "") for r in results}
        for r in results:
            self._pending.pop(r.id, None)
        if all(r.name == names[r.id] for r in results):
            return msg
        blocks = [
            b.model_copy(update={"name": names[b.id]}) if isinstance(b, ToolResultBlock) else b
            for b in msg.blocks()
        ]
        return msg.model_copy(update={"content": blocks})

    def _items(self, msgs: Sequence[Msg]) -> list[T]:
        out: list[T] = []
        for msg in msgs:
            origin = self._origin.get(msg.id)
            if origin is None or not (origin[0] is msg or origin[0].content == msg.content):
                origin = (msg, self.codec.from_msg(msg))
                self._origin[msg.id] = origin
            out.extend(origin[1])
        return out
