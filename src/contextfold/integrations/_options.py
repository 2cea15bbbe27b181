"""What every integration is configured with: the engine's parts, and one folder per session."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Required, TypedDict, TypeVar

from ..context import (
    CompressionHook,
    ContextConfig,
    ContextEngine,
    ContextEventHandler,
    Summarizer,
)
from ..token import TokenCounter
from ..workspace import Offloader, WorkspaceReader
from ._folder import Codec, HistoryFolder
from ._readback import session_tools

__all__ = [
    "EngineOptions",
    "Sessions",
    "check_options",
    "readback_functions",
    "readback_reader",
]

T = TypeVar("T")


class EngineOptions(TypedDict, total=False):
    """The keyword arguments of every integration: the engine's parts, shared by its sessions.

    ``counter`` and ``context_size`` are required; the rest are those of
    :class:`~contextfold.context.ContextEngine`. ``readback`` (default true) offers
    ``Read``, ``Grep`` and ``Glob`` when the offloader is a workspace reader; without
    them (``readback=False``, or an offloader that cannot be read) the notes the engine
    writes into the model's input name no tool.
    """

    counter: Required[TokenCounter]
    context_size: Required[int]
    summarizer: Summarizer | None
    offloader: Offloader | None
    config: ContextConfig | None
    on_event: ContextEventHandler | None
    compression_hook: CompressionHook | None
    readback: bool


def check_options(options: Mapping[str, Any]) -> None:
    """Raise ``TypeError`` or ``ValueError`` naming the option when ``options`` cannot
    make an engine: at the integration's construction, not at the first model call deep
    inside the framework."""
    known = EngineOptions.__required_keys__ | EngineOptions.__optional_keys__
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(
            f"unknown option {unknown[0]!r}; the options are {', '.join(sorted(known))}"
        )
    for name, needs in _NEEDS.items():  # (``__required_keys__`` is empty under PEP 563)
        if name not in options:
            raise TypeError(f"the option {name!r} is required ({needs})")
    counter = options["counter"]
    if not isinstance(counter, TokenCounter):
        hint = (
            f"; for a model name use counter_for_model({counter!r})"
            if isinstance(counter, str)
            else ""
        )
        raise TypeError(
            f"counter must be a TokenCounter (count_text, count_message), got "
            f"{type(counter).__name__}{hint}"
        )
    size = options["context_size"]
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ValueError(f"context_size must be a positive number of tokens, got {size!r}")
    config = options.get("config")
    if config is not None:
        if not isinstance(config, ContextConfig):
            raise TypeError(
                f"config must be a ContextConfig, got {type(config).__name__} "
                "(write ContextConfig(**...))"
            )
        config.check_buffer()
    summarizer = options.get("summarizer")
    if summarizer is not None and not callable(getattr(summarizer, "summarize", None)):
        raise TypeError(
            f"summarizer must be a Summarizer (an async summarize(request)), got "
            f"{type(summarizer).__name__}; for a model use ModelSummarizer(model)"
        )
    offloader = options.get("offloader")
    if offloader is not None and not isinstance(offloader, Offloader):
        raise TypeError(
            f"offloader must be an Offloader (a workspace), got {type(offloader).__name__}"
        )
    for name in ("on_event", "compression_hook"):
        value = options.get(name)
        if value is not None and not callable(value):
            raise TypeError(f"{name} must be callable, got {type(value).__name__}")
    if not isinstance(options.get("readback", True), bool):
        raise TypeError(f"readback must be True or False, got {options['readback']!r}")


_NEEDS = {
    "counter": "a TokenCounter, e.g. contextfold.token.counter_for_model('gpt-4o')",
    "context_size": "the model's window in tokens",
}


def readback_functions(
    options: EngineOptions, *, session_id: str
) -> list[Callable[..., Awaitable[str]]]:
    """The read-back tools of one conversation as plain async functions: they see only
    ``session_id``'s items (none without a readable workspace, or with ``readback=False``).
    The integrations' own tools find the conversation of each call themselves."""
    offloader = readback_reader(options)
    if offloader is None:
        return []
    return session_tools(offloader, options.get("config"), session_id)


def readback_reader(options: EngineOptions) -> WorkspaceReader | None:
    """The workspace the read-back tools read, or ``None`` when there are none."""
    offloader = options.get("offloader")
    if not options.get("readback", True) or not isinstance(offloader, WorkspaceReader):
        return None
    return offloader


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

    def __post_init__(self) -> None:
        check_options(self.options)

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
                readback=readback_reader(options) is not None,
            )
            folder = HistoryFolder(
                engine,
                self.codec,
                rewrites_history=self.rewrites_history,
                readback_names=[
                    f.__name__ for f in readback_functions(options, session_id=session_id)
                ],
            )
        self._folders[session_id] = folder
        while len(self._folders) > self.max_sessions:
            self._folders.popitem(last=False)
        return folder

    def __len__(self) -> int:
        return len(self._folders)
