"""LocalChatModel: the embedded model, in-process through llama.cpp.

The adapter composes its parts: ``_local_completion`` (one llama.cpp completion),
``_local_kvcache`` (what the KV cache served), ``_local_grammar`` (decoding grammars),
``_local_turn`` (a chat request as completions) and ``_local_json`` (structured output).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._embedded import embedded_model_path
from ..message import Msg, ToolChoice, ToolSpec, chatml_prompt
from ..token import LlamaTokenCounter
from ._base import ChatModelBase, StructuredAnswer
from ._local_completion import Completion, complete, load_llama
from ._local_grammar import GrammarCache, bounded_strings
from ._local_json import RETRY, json_answer, json_response, schema_instruction
from ._local_kvcache import KVCacheMeter, KVCacheStats
from ._local_speed import measure_speed
from ._local_turn import Emit, Turn, TurnRunner, check_tool_choice
from ._response import ChatResponse, ModelStreamEvent, ResponseCompleted
from ._speed import ModelSpeed

if TYPE_CHECKING:
    from ._local_runtime import LlamaRuntime

__all__ = ["LocalChatModel"]

_SUPPORTED_FORMATS = ("chatml-function-calling",)


class LocalChatModel(ChatModelBase):
    """The embedded model (SmolLM2-135M-Instruct by default) run in-process by llama.cpp.

    Weights are loaded lazily on the first call and kept; calls run in a worker thread,
    one at a time (a llama.cpp context is not thread safe). Tool calls follow the
    ``chatml-function-calling`` protocol with grammar-constrained arguments, so forced
    calls always parse; with ``tool_choice="auto"`` the model first picks between a
    message and one tool (one call per turn). The prompt starts with the tool list and
    the system prompt and never varies there, so llama.cpp reuses its KV cache for the
    shared prefix of consecutive calls. Each response's ``usage.cache_read_tokens`` says
    how many prompt tokens that reuse served (measured from llama.cpp's counters, not
    predicted); :attr:`kv_cache` keeps running totals, structured output included.

    ``context_size`` is llama.cpp's ``n_ctx`` (default 8192, SmolLM2's trained window).
    ``constrain`` (settable later as :attr:`constrain`) narrows the grammar of a call's
    arguments per call: the prompt still shows each tool's own schema, so the prompt
    prefix, and the KV cache, do not change. Requires the ``local`` extra.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        context_size: int | None = None,
        n_threads: int | None = None,
        chat_format: str = "chatml-function-calling",
        max_tokens: int = 512,
        temperature: float = 0.2,
        seed: int | None = 0,
        constrain: Callable[[ToolSpec], dict[str, Any] | None] | None = None,
        **kwargs: Any,
    ) -> None:
        if chat_format not in _SUPPORTED_FORMATS:
            raise ValueError(
                f"chat_format {chat_format!r} is not supported; use one of {_SUPPORTED_FORMATS}"
            )
        path = Path(model_path) if model_path is not None else embedded_model_path()
        if not path.is_file():
            raise FileNotFoundError(f"GGUF model file not found: {path}")
        counter = LlamaTokenCounter(path, framing="local")
        kwargs.setdefault("max_retries", 0)  # local failures are not transient
        super().__init__(
            f"local/{path.stem}",
            context_size=context_size or 8192,
            token_counter=counter,
            **kwargs,
        )
        self.model_path = path
        self.n_threads = n_threads
        self.chat_format = chat_format
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.constrain = constrain
        """Given the tool about to be called, the JSON schema its arguments are decoded
        under (narrower than its own, e.g. an ``enum`` of the values valid now), or
        ``None`` for the tool's own schema."""
        self._counter = counter
        self._llama: LlamaRuntime | None = None
        self._lock = threading.Lock()
        self._grammars = GrammarCache()
        self._meter = KVCacheMeter()
        self._speed: ModelSpeed | None = None

    @property
    def token_counter(self) -> LlamaTokenCounter:
        """The embedded model's exact counter for the prompts this class sends."""
        return self._counter

    @property
    def kv_cache(self) -> KVCacheStats:
        """A snapshot of the KV-cache totals over every completion this model ran."""
        return self._meter.snapshot()

    async def measure_speed(self) -> ModelSpeed:
        """This machine's speed for this model: loads the weights if they are not yet, then
        times one short completion of a fixed prompt (a few hundred tokens read, a few
        dozen written: seconds). Measured once and kept. Why: a caller timing a call before
        making one (the background compaction's first summary) has no other measure; a
        constant guess was minutes off on a loaded CPU. Not counted in :attr:`kv_cache`."""
        if self._speed is None:
            self._speed = await asyncio.to_thread(self._measure)
        return self._speed

    # -- llama.cpp, always called with self._lock held, in a worker thread ------------

    def _measure(self) -> ModelSpeed:
        with self._lock:
            if self._speed is None:
                self._speed = measure_speed(
                    self._load(), model_name=self.model_name, context_size=self.context_size
                )
            return self._speed

    def _load(self) -> LlamaRuntime:
        if self._llama is None:
            self._llama = load_llama(
                self.model_path, n_ctx=self.context_size, n_threads=self.n_threads
            )
        return self._llama

    def _complete(
        self,
        prompt: str,
        *,
        grammar: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        return complete(
            self._load(),
            prompt,
            model_name=self.model_name,
            context_size=self.context_size,
            max_tokens=max_tokens or self.max_tokens,
            temperature=self.temperature if temperature is None else temperature,
            seed=self.seed,
            grammar=grammar,
            on_text=on_text,
            meter=self._meter,
        )

    def _run(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
        emit: Emit | None,
    ) -> Turn:
        check_tool_choice(tools, tool_choice)
        prompt = chatml_prompt(messages, tools, tool_choice)
        with self._lock:
            runner = TurnRunner(self._complete, self._grammars, self.constrain)
            return runner.run(prompt, tools, tool_choice, emit)

    # -- the async interface ---------------------------------------------------------

    async def _generate(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> ChatResponse:
        turn = await asyncio.to_thread(self._run, messages, tools, tool_choice, None)
        return turn.response(self.model_name)

    async def _stream(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> AsyncIterator[ModelStreamEvent]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[ModelStreamEvent | None] = asyncio.Queue()
        cancelled = threading.Event()

        def emit(event: ModelStreamEvent) -> None:
            if cancelled.is_set():
                raise _StreamCancelled
            loop.call_soon_threadsafe(queue.put_nowait, event)

        def work() -> Turn | None:
            try:
                return self._run(messages, tools, tool_choice, emit)
            except _StreamCancelled:
                return None
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        task = asyncio.ensure_future(asyncio.to_thread(work))
        try:
            while (event := await queue.get()) is not None:
                yield event
            turn = await task
        except BaseException:
            cancelled.set()  # the worker stops at its next token and releases the lock
            raise
        if turn is not None:
            yield ResponseCompleted(response=turn.response(self.model_name))

    # -- structured output: JSON under the schema's grammar ----------------------------

    _structured_retry = RETRY
    _structured_text_retry = RETRY

    async def _structured_attempt(
        self, messages: Sequence[Msg], feedback: Sequence[Msg], tool: ToolSpec
    ) -> StructuredAnswer:
        """One answer decoded under a grammar built from the schema, instead of a tool call.

        The schema is shown after the conversation (the prefix stays cached), then the
        earlier answers and their errors.
        """
        sent = [*messages, schema_instruction(tool), *feedback]
        return await self._json_attempt(sent, (), tool.parameters)

    async def _structured_text_attempt(
        self,
        messages: Sequence[Msg],
        feedback: Sequence[Msg],
        tool: ToolSpec,
        offered: Sequence[ToolSpec],
    ) -> StructuredAnswer:
        """One answer decoded under the schema's grammar after the conversation as it was
        sent (its tools listed first), so llama.cpp reuses the KV cache of its prompt."""
        return await self._json_attempt([*messages, *feedback], offered, tool.parameters)

    async def _json_attempt(
        self, sent: list[Msg], tools: Sequence[ToolSpec], schema: dict[str, Any]
    ) -> StructuredAnswer:
        """``sent`` (with ``tools`` listed) answered under ``schema``'s grammar, reported
        to the listeners like any call."""
        prompt = chatml_prompt(sent, tools)
        done = await asyncio.to_thread(self._locked_json, prompt, schema)
        self._completed(sent, tools, None, json_response(done))
        return json_answer(done, self.model_name)

    def _locked_json(self, prompt: str, schema: dict[str, Any]) -> Completion:
        bounded = bounded_strings(schema, self.max_tokens)
        with self._lock:
            return self._complete(prompt, grammar=self._grammars.schema(bounded))


class _StreamCancelled(Exception):
    """Raised inside the worker when the consumer of a stream went away."""
