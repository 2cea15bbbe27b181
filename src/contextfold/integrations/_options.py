"""What every integration is configured with: the engine's parts, and one folder per session."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Required, TypedDict, TypeVar

from ..context import (
    CompressionHook,
    ContextConfig,
    ContextEngine,
    ContextEventHandler,
    Summarizer,
)
from ..token import TokenCounter
from ..tool import readback_tools
from ..workspace import Offloader, WorkspaceReader
from ._folder import Codec, HistoryFolder

__all__ = ["EngineOptions", "Sessions", "readback_functions"]

T = TypeVar("T")

_CHARS_PER_TOKEN = 2  # as the agent: Read stops early so its result usually fits the limit


class EngineOptions(TypedDict, total=False):
    """The keyword arguments of every integration: the engine's parts, shared by its sessions.

    ``counter`` and ``context_size`` are required; the rest are those of
    :class:`~contextfold.context.ContextEngine`. ``readback`` (default true) offers
    ``Read``, ``Grep`` and ``Glob`` when the offloader is a workspace reader.
    """

    counter: Required[TokenCounter]
    context_size: Required[int]
    summarizer: Summarizer | None
    offloader: Offloader | None
    config: ContextConfig | None
    on_event: ContextEventHandler | None
    compression_hook: CompressionHook | None
    readback: bool


def readback_functions(options: EngineOptions) -> list[Callable[..., Awaitable[str]]]:
    """The read-back tools as plain async functions (none without a readable workspace)."""
    offloader = options.get("offloader")
    if not options.get("readback", True) or not isinstance(offloader, WorkspaceReader):
        return []
    limit = (options.get("config") or ContextConfig()).tool_result_limit
    return readback_tools(offloader, max_chars=limit * _CHARS_PER_TOKEN)


@dataclass
class Sessions(Generic[T]):
    """One :class:`HistoryFolder` per session id, each with its own engine, made on first
    use; at most ``max_sessions`` are held, the least recently used is let go (its state
    is in the workspace after every call, so it resumes from there when it comes back)."""

    options: EngineOptions
    codec: Codec[T]
    rewrites_history: bool
    max_sessions: int = 256
    _folders: OrderedDict[str, HistoryFolder[T]] = field(default_factory=OrderedDict)

    def get(self, session_id: str) -> HistoryFolder[T]:
        """The folder of ``session_id`` (a new engine the first time, or after eviction)."""
        folder = self._folders.pop(session_id, None)
        if folder is None:
            options = self.options
            engine = ContextEngine(
                counter=options["counter"],
                context_size=options["context_size"],
                summarizer=options.get("summarizer"),
                offloader=options.get("offloader"),
                config=options.get("config"),
                session_id=session_id,
                on_event=options.get("on_event"),
                compression_hook=options.get("compression_hook"),
            )
            folder = HistoryFolder(
                engine,
                self.codec,
                rewrites_history=self.rewrites_history,
                readback_names=[f.__name__ for f in readback_functions(options)],
            )
        self._folders[session_id] = folder
        while len(self._folders) > self.max_sessions:
            self._folders.popitem(last=False)
        return folder

    def __len__(self) -> int:
        return len(self._folders)
