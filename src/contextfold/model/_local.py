"""LocalChatModel: the embedded model, in-process through llama.cpp."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._embedded import close_at_exit, embedded_model_path
from .._exceptions import (
    ContextWindowExceededError,
    MissingDependencyError,
    ModelError,
)
from .._logging import logger
from ..message import (
    ContentBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolChoice,
    ToolSpec,
    Usage,
    chatml_prompt,
    forced_tool,
    tools_shown,
)
from ..token import LlamaTokenCounter
from ._base import DEFAULT_STRUCTURED_DESCRIPTION, ChatModelBase, StructuredAnswer
from ._response import ChatResponse, ModelStreamEvent, ResponseCompleted, TextDelta, ToolCallDelta

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_grammar import LlamaGrammar

__all__ = ["KVCacheStats", "LocalChatModel"]

_STOP = ["<|im_end|>"]
_SUPPORTED_FORMATS = ("chatml-function-calling",)

Emit = Callable[[ModelStreamEvent], None]


@dataclass
class KVCacheStats:
    """Running totals of llama.cpp's prompt work for one :class:`LocalChatModel`.

    Every llama.cpp completion counts: a chat request (two when the model picks a tool
    itself: the choice, then the arguments) and each structured-output attempt; one cut
    off by a cancelled stream or an error does not. Read from
    :attr:`LocalChatModel.kv_cache`.
    """

    completions: int = 0
    prompt_tokens: int = 0
    """Prompt tokens llama.cpp was given."""
    cache_read_tokens: int = 0
    """Of those, tokens served from the KV cache (a prefix shared with the previous call)."""
    prompt_eval_seconds: float = 0.0
    """Time llama.cpp spent evaluating the rest (its ``t_p_eval_ms``)."""

    @property
    def evaluated_tokens(self) -> int:
        """Prompt tokens llama.cpp actually evaluated."""
        return self.prompt_tokens - self.cache_read_tokens


@dataclass
class _Completion:
    text: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens served from the KV cache, as measured by :class:`_PerfMark`."""
    completion_tokens: int = 0
    finish_reason: str | None = None


@dataclass
class _Turn:
    """What one request produced, before it becomes a ChatResponse."""

    content: list[ContentBlock] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    stop_reason: str | None = None


@dataclass(frozen=True)
class _PerfMark:
    """llama.cpp's performance counters for one context, read before and after a call.

    llama.cpp counts every token it decodes: a batch of one as ``n_eval``, a larger one
    as ``n_p_eval``. Their sum is therefore every token decoded, whatever the batching;
    llama-cpp-python decodes the prompt tokens past the prefix it reuses, then each
    sampled token but the last. The prefix it reused is what the KV cache served.

    llama.cpp reports a counter that is still 0 as 1, so on a fresh context the
    difference can come out short by up to 2 and overstate the reuse: the caller bounds
    the result by the prefix the cache could have served at all.
    """

    decoded: int
    prompt_ms: float

    @classmethod
    def read(cls, llama: Llama) -> _PerfMark:
        import llama_cpp

        data = llama_cpp.llama_perf_context(llama.ctx)
        return cls(decoded=int(data.n_p_eval) + int(data.n_eval), prompt_ms=data.t_p_eval_ms)

    def cached_tokens(self, after: _PerfMark, *, prompt_tokens: int, n_tokens: int) -> int:
        """Prompt tokens not evaluated between this mark and ``after``.

        ``n_tokens`` is ``Llama.n_tokens`` after the call: the prompt plus the sampled
        tokens that were fed back, so the excess over the prompt is generation work.
        """
        sampled = max(n_tokens - prompt_tokens, 0)
        evaluated = after.decoded - self.decoded - sampled
        return prompt_tokens - min(max(evaluated, 0), prompt_tokens)


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
        self._llama: Llama | None = None
        self._lock = threading.Lock()
        self._grammars: dict[str, LlamaGrammar] = {}
        self._stats = KVCacheStats()
        self._stats_lock = threading.Lock()

    @property
    def token_counter(self) -> LlamaTokenCounter:
        """The embedded model's exact counter for the prompts this class sends."""
        return self._counter

    @property
    def kv_cache(self) -> KVCacheStats:
        """A snapshot of the KV-cache totals over every completion this model ran."""
        # Not self._lock: that one is held for a whole completion.
        with self._stats_lock:
            return replace(self._stats)

    # -- llama.cpp, always called with self._lock held, in a worker thread ------------

    def _load(self) -> Llama:
        if self._llama is None:
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise MissingDependencyError("llama-cpp-python", "local") from exc
            logger.info("loading %s (n_ctx=%d)", self.model_path, self.context_size)
            try:
                self._llama = Llama(
                    str(self.model_path),
                    n_ctx=self.context_size,
                    n_threads=self.n_threads,
                    verbose=False,
                )
            except (ValueError, RuntimeError) as exc:
                raise ModelError(f"could not load {self.model_path}: {exc}") from exc
            close_at_exit(self._llama)
        return self._llama

    def _grammar(self, key: str, build: Callable[[], LlamaGrammar]) -> LlamaGrammar:
        if key not in self._grammars:
            self._grammars[key] = build()
        return self._grammars[key]

    def _schema_grammar(self, schema: dict[str, Any]) -> LlamaGrammar:
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        # In the schema's own order: properties are written in that order, so a later
        # field's allowed values can depend on an earlier one (through ``anyOf``).
        text = json.dumps(schema)

        def build() -> LlamaGrammar:
            try:
                return LlamaGrammar.from_json_schema(text, verbose=False)
            except Exception as exc:  # llama.cpp cannot express every schema as a grammar
                logger.info("schema not expressible as a grammar (%s); using plain JSON", exc)
                return LlamaGrammar.from_string(JSON_GBNF, verbose=False)

        return self._grammar("schema:" + text, build)

    def _choice_grammar(self, tools: Sequence[ToolSpec], *, allow_message: bool) -> LlamaGrammar:
        from llama_cpp.llama_grammar import LlamaGrammar

        options = [json.dumps(f"functions.{t.name}:") for t in tools]
        if allow_message:
            options.append(json.dumps("message:"))
        rule = "root ::= " + " | ".join(options)
        return self._grammar(rule, lambda: LlamaGrammar.from_string(rule, verbose=False))

    def _complete(
        self,
        prompt: str,
        *,
        grammar: LlamaGrammar | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> _Completion:
        llama = self._load()
        tokens = llama.tokenize(prompt.encode(), add_bos=True, special=True)
        n_prompt = len(tokens)
        if n_prompt >= self.context_size:
            raise ContextWindowExceededError(
                f"{self.model_name}: the prompt is {n_prompt} tokens but the context window "
                f"is {self.context_size}; compress the context or raise context_size"
            )
        params: dict[str, Any] = {
            "prompt": prompt,
            "max_tokens": max_tokens or self.max_tokens,
            "temperature": self.temperature if temperature is None else temperature,
            "repeat_penalty": 1.1,
            "stop": _STOP,
            "grammar": grammar,
            "seed": self.seed,
        }
        before = _PerfMark.read(llama)
        reusable = _shared_prefix(llama.input_ids[: llama.n_tokens].tolist(), tokens)
        try:
            if on_text is None:
                result: Any = llama.create_completion(**params)
                choice = result["choices"][0]
                done = _Completion(
                    text=choice["text"],
                    prompt_tokens=result["usage"]["prompt_tokens"],
                    completion_tokens=result["usage"]["completion_tokens"],
                    finish_reason=choice["finish_reason"],
                )
            else:
                done = _Completion(prompt_tokens=n_prompt)
                chunks: Iterator[Any] = llama.create_completion(stream=True, **params)  # type: ignore[assignment]
                for chunk in chunks:
                    piece = chunk["choices"][0]
                    if piece["text"]:
                        done.text += piece["text"]
                        on_text(piece["text"])
                    done.finish_reason = piece["finish_reason"] or done.finish_reason
                # Streaming reports no usage; the tokenizer is the model's own.
                done.completion_tokens = len(llama.tokenize(done.text.encode(), add_bos=False))
        except ValueError as exc:
            if "exceed context window" in str(exc):
                raise ContextWindowExceededError(f"{self.model_name}: {exc}") from exc
            raise ModelError(f"{self.model_name}: {exc}") from exc
        except RuntimeError as exc:
            raise ModelError(f"{self.model_name}: llama.cpp failed: {exc}") from exc
        after = _PerfMark.read(llama)
        done.cached_tokens = min(
            before.cached_tokens(after, prompt_tokens=done.prompt_tokens, n_tokens=llama.n_tokens),
            reusable,
        )
        with self._stats_lock:
            self._stats.completions += 1
            self._stats.prompt_tokens += done.prompt_tokens
            self._stats.cache_read_tokens += done.cached_tokens
            self._stats.prompt_eval_seconds += (after.prompt_ms - before.prompt_ms) / 1000
        logger.debug(
            "%s: %d of %d prompt tokens served from the KV cache",
            self.model_name,
            done.cached_tokens,
            done.prompt_tokens,
        )
        return done

    def _run(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
        emit: Emit | None,
    ) -> _Turn:
        names = {t.name for t in tools}
        if tool_choice not in (None, "auto", "none", "required") and tool_choice not in names:
            raise ValueError(f"tool_choice {tool_choice!r} names no offered tool: {sorted(names)}")
        if tool_choice == "required" and not tools:
            raise ValueError("tool_choice='required' needs at least one tool")
        prompt = chatml_prompt(messages, tools, tool_choice)
        on_text = None if emit is None else (lambda t: emit(TextDelta(text=t)))
        with self._lock:
            if not tools_shown(tools, tool_choice):
                done = self._complete(prompt, on_text=on_text)
                return _text_turn(done, request=done)
            forced = forced_tool(tools, tool_choice)
            if forced is not None:
                return self._call(prompt, _by_name(tools, forced), emit, request=None)
            # Like chatml-function-calling: first a constrained choice, then its body.
            choice = self._complete(
                prompt,
                grammar=self._choice_grammar(tools, allow_message=tool_choice != "required"),
                max_tokens=64,
                temperature=0.0,
            )
            picked = choice.text.strip().removesuffix(":")
            if picked.startswith("functions."):
                turn = self._call(
                    prompt + f"{picked}:\n",
                    _by_name(tools, picked.removeprefix("functions.")),
                    emit,
                    request=choice,
                )
            else:
                done = self._complete(prompt + "message:\n", on_text=on_text)
                turn = _text_turn(done, request=choice)
            turn.completion_tokens += choice.completion_tokens
            return turn

    def _call(
        self, prompt: str, tool: ToolSpec, emit: Emit | None, *, request: _Completion | None
    ) -> _Turn:
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        on_text: Callable[[str], None] | None = None
        if emit is not None:
            emit(ToolCallDelta(index=0, id=call_id, name=tool.name))
            on_text = lambda t: emit(ToolCallDelta(index=0, arguments=t))  # noqa: E731
        schema = (self.constrain(tool) if self.constrain is not None else None) or tool.parameters
        done = self._complete(prompt, grammar=self._schema_grammar(schema), on_text=on_text)
        block = _call_block(call_id, tool.name, done.text)
        stop = "max_tokens" if done.finish_reason == "length" else "tool_use"
        # The forced "functions.<name>:" prefix is prompt for llama.cpp; for a call the
        # model chose, the request's prompt is what it saw before choosing.
        first = done if request is None else request
        return _Turn(
            content=[block],
            prompt_tokens=first.prompt_tokens,
            cached_tokens=first.cached_tokens,
            completion_tokens=done.completion_tokens,
            stop_reason=stop,
        )

    # -- the async interface ---------------------------------------------------------

    def _response(self, turn: _Turn) -> ChatResponse:
        return ChatResponse(
            content=turn.content,
            usage=Usage(
                input_tokens=turn.prompt_tokens,
                output_tokens=turn.completion_tokens,
                cache_read_tokens=turn.cached_tokens,
            ),
            stop_reason=turn.stop_reason,
            model=self.model_name,
        )

    async def _generate(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> ChatResponse:
        turn = await asyncio.to_thread(self._run, messages, tools, tool_choice, None)
        return self._response(turn)

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

        def work() -> _Turn | None:
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
            yield ResponseCompleted(response=self._response(turn))

    _structured_retry = "That output was invalid ({problem}). Try again."

    async def _structured_attempt(
        self, messages: Sequence[Msg], feedback: Sequence[Msg], tool: ToolSpec
    ) -> StructuredAnswer:
        """One answer decoded under a grammar built from the schema, instead of a tool call.

        The schema is shown after the conversation (the prefix stays cached), then the
        earlier answers and their errors.
        """
        # The tiny model copes best with the bare schema; a custom description goes first.
        custom = tool.description != DEFAULT_STRUCTURED_DESCRIPTION
        instruction = (
            (tool.description + "\n" if custom else "")
            + "Reply with only a JSON object matching this JSON schema:\n"
            + json.dumps(tool.parameters, ensure_ascii=False)
        )
        sent = [*messages, Msg("system", instruction, "system"), *feedback]
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
        usage = Usage(
            input_tokens=done.prompt_tokens,
            output_tokens=done.completion_tokens,
            cache_read_tokens=done.cached_tokens,
        )
        self._completed(
            sent, tools, None, ChatResponse(content=[TextBlock(text=done.text)], usage=usage)
        )
        shown = (Msg(self.model_name, done.text, "assistant"),)
        try:
            # strict=False: the grammar lets a raw newline or tab into a string, which the
            # small model writes; the value is plain, and a retry would resend the answer.
            value = json.loads(done.text, strict=False)
        except json.JSONDecodeError as exc:
            problem = f"not valid JSON ({exc}); the answer may have hit max_tokens"
            return StructuredAnswer(problem=problem, shown=shown)
        return StructuredAnswer(value, shown=shown)

    def _locked_json(self, prompt: str, schema: dict[str, Any]) -> _Completion:
        bounded = bounded_strings(schema, self.max_tokens)
        with self._lock:
            return self._complete(prompt, grammar=self._schema_grammar(bounded))


_CHARS_PER_TOKEN = 3
"""A conservative ratio for SmolLM2's tokenizer on prose (3.7 measured on English)."""


def bounded_strings(schema: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """``schema`` with a ``maxLength`` on each string property of its top-level object
    that has none, so the whole object fits ``max_tokens`` and the grammar closes it.

    Without a bound the small model can run one field on until the answer is cut, and
    the cut JSON is no answer at all (the demo's summary failed on two seeds of four).
    The room is shared evenly after the object's own keys and punctuation; a field is
    never bounded below 16 characters.
    """
    properties = schema.get("properties")
    if schema.get("type", "object") != "object" or not isinstance(properties, dict):
        return schema
    open_strings = [
        name
        for name, spec in properties.items()
        if isinstance(spec, dict) and spec.get("type") == "string" and "maxLength" not in spec
    ]
    if not open_strings:
        return schema
    skeleton = len(json.dumps(dict.fromkeys(properties, ""), ensure_ascii=False))
    room = max_tokens * _CHARS_PER_TOKEN - skeleton
    each = max(16, room // len(open_strings))
    bounded = {
        name: {**spec, "maxLength": each} if name in open_strings else spec
        for name, spec in properties.items()
    }
    return {**schema, "properties": bounded}


def _shared_prefix(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """How many leading tokens of ``prompt`` the KV cache holds (an upper bound on reuse)."""
    shared = 0
    for held, wanted in zip(cached, prompt, strict=False):
        if held != wanted:
            break
        shared += 1
    return shared


class _StreamCancelled(Exception):
    """Raised inside the worker when the consumer of a stream went away."""


def _by_name(tools: Sequence[ToolSpec], name: str) -> ToolSpec:
    for tool in tools:
        if tool.name == name:
            return tool
    raise ModelError(f"the model chose an unknown tool {name!r}")


def _text_turn(done: _Completion, *, request: _Completion) -> _Turn:
    """A text answer; ``request`` is the completion that first read the request's prompt.

    When the model first chose between a message and a tool, that choice read the prompt
    and the answer's completion re-read it almost entirely from the cache: the response
    reports the choice's prompt figures, as a provider would for one request.
    """
    stop = "max_tokens" if done.finish_reason == "length" else "end_turn"
    content: list[ContentBlock] = [TextBlock(text=done.text.strip())] if done.text.strip() else []
    return _Turn(
        content,
        prompt_tokens=request.prompt_tokens,
        cached_tokens=request.cached_tokens,
        completion_tokens=done.completion_tokens,
        stop_reason=stop,
    )


def _call_block(call_id: str, name: str, text: str) -> ToolCallBlock:
    """A call with its parsed arguments, or with ``input_error`` when they are not an object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return ToolCallBlock(
            id=call_id, name=name, raw_input=text, input_error=f"arguments are not JSON: {exc}"
        )
    if not isinstance(value, dict):
        return ToolCallBlock(
            id=call_id,
            name=name,
            raw_input=text,
            input_error=f"arguments are a JSON {type(value).__name__}, not an object",
        )
    return ToolCallBlock(id=call_id, name=name, input=value, raw_input=text)
