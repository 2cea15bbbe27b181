"""ContextEngine: owns one session's summary and context and keeps it in the window."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from .._logging import logger
from ..message import HintBlock, Msg, ToolSpec
from ..model import ChatModelBase
from ..token import TokenCounter
from ..workspace import Offloader
from ._config import ContextConfig
from ._events import CompressionEvent, ContextEvent, ContextEventHandler
from ._input import ContextUsage, ModelInput

__all__ = ["ContextEngine"]


class ContextEngine:
    """The summary and context of one session, and the policies that keep them in budget.

    The agent calls :meth:`append` / :meth:`add_tool_results` as messages arrive,
    :meth:`prepare` before each reasoning step, and :meth:`compress` for manual or
    agent-initiated compression. Token counts are cached per message and the running
    total is kept incrementally.
    """

    def __init__(
        self,
        *,
        config: ContextConfig,
        model: ChatModelBase,
        session_id: str,
        summarizer: ChatModelBase | None = None,
        offloader: Offloader | None = None,
        on_event: ContextEventHandler | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.summarizer = summarizer or model
        self.session_id = session_id
        self.offloader = offloader
        self.on_event = on_event
        self._summary: Msg | None = None
        self._context: list[Msg] = []
        self._context_tokens = 0

    @property
    def counter(self) -> TokenCounter:
        """The model's token counter."""
        return self.model.token_counter

    @property
    def context_size(self) -> int:
        """The model's window."""
        return self.model.context_size

    @property
    def summary(self) -> Msg | None:
        """The summary message, once a compression happened."""
        return self._summary

    @property
    def context(self) -> tuple[Msg, ...]:
        """Recent, uncompressed messages."""
        return tuple(self._context)

    def load(self, *, summary: Msg | None, context: Sequence[Msg]) -> None:
        """Replace the state (used when a session is restored)."""
        self._summary = summary
        self._context = list(context)
        self._context_tokens = sum(self.counter.count_message(m) for m in self._context)

    def append(self, msg: Msg) -> None:
        """Add a message to the context."""
        self._context.append(msg)
        self._context_tokens += self.counter.count_message(msg)

    async def add_tool_results(self, msg: Msg) -> Msg:
        """Add a message of tool results, truncating oversized ones; return what was stored."""
        self.append(msg)
        return msg

    async def prepare(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        *,
        task_in_progress: bool = False,
    ) -> ModelInput:
        """Build the model input for the next reasoning step, compressing first if needed."""
        return self._build(system_prompt, tools)

    async def compress(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        *,
        config: ContextConfig | None = None,
        instructions: HintBlock | None = None,
        force: bool = False,
        threshold_ratio: float | None = None,
        trigger: str = "manual",
    ) -> CompressionEvent | None:
        """Compress now if usage is over the threshold (or ``force``); None if nothing done."""
        logger.debug("compress() not implemented yet; nothing done")
        return None

    def _build(self, system_prompt: str, tools: Sequence[ToolSpec]) -> ModelInput:
        counter = self.counter
        system = Msg("system", system_prompt, "system")
        usage = ContextUsage(
            system=counter.count_message(system),
            summary=counter.count_message(self._summary) if self._summary else 0,
            context=self._context_tokens,
            tools=counter.count_tools(tools),
            overhead=counter.count_request([], ()),
            context_size=self.context_size,
        )
        return ModelInput(system, self._summary, tuple(self._context), tuple(tools), usage)

    async def _emit(self, event: ContextEvent) -> None:
        logger.info("context event: %s", event.model_dump_json())
        if self.on_event is not None:
            result = self.on_event(event)
            if inspect.isawaitable(result):
                await result
