"""One llama.cpp completion, run in the worker thread with the model's lock held: the
weights loaded on first use, the context window checked, the text sampled (streamed or
not) and the KV cache's share of the prompt measured."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .._embedded import close_at_exit
from .._exceptions import ContextWindowExceededError, MissingDependencyError, ModelError
from .._logging import logger
from ..message import Usage
from ._local_kvcache import CacheProbe, KVCacheMeter

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_grammar import LlamaGrammar

__all__ = ["Complete", "Completion", "complete", "load_llama"]

_STOP = ["<|im_end|>"]


@dataclass
class Completion:
    text: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens served from the KV cache, as measured by :class:`PerfMark`."""
    completion_tokens: int = 0
    finish_reason: str | None = None

    def usage(self) -> Usage:
        return Usage(
            input_tokens=self.prompt_tokens,
            output_tokens=self.completion_tokens,
            cache_read_tokens=self.cached_tokens,
        )


class Complete(Protocol):
    """The model's completion with its defaults (``LocalChatModel._complete``)."""

    def __call__(
        self,
        prompt: str,
        *,
        grammar: LlamaGrammar | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion: ...


def load_llama(path: Path, *, n_ctx: int, n_threads: int | None) -> Llama:
    """The GGUF file at ``path`` loaded by llama.cpp, closed when the interpreter exits."""
    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise MissingDependencyError("llama-cpp-python", "local") from exc
    logger.info("loading %s (n_ctx=%d)", path, n_ctx)
    try:
        llama = Llama(str(path), n_ctx=n_ctx, n_threads=n_threads, verbose=False)
    except (ValueError, RuntimeError) as exc:
        raise ModelError(f"could not load {path}: {exc}") from exc
    close_at_exit(llama)
    return llama


def complete(
    llama: Llama,
    prompt: str,
    *,
    model_name: str,
    context_size: int,
    max_tokens: int,
    temperature: float,
    seed: int | None,
    grammar: LlamaGrammar | None,
    on_text: Callable[[str], None] | None,
    meter: KVCacheMeter,
) -> Completion:
    """``prompt`` completed (``on_text`` given each piece as it is sampled), recorded on
    ``meter``. Raises :class:`ContextWindowExceededError` when the prompt does not fit."""
    tokens = llama.tokenize(prompt.encode(), add_bos=True, special=True)
    n_prompt = len(tokens)
    if n_prompt >= context_size:
        raise ContextWindowExceededError(
            f"{model_name}: the prompt is {n_prompt} tokens but the context window "
            f"is {context_size}; compress the context or raise context_size"
        )
    params: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "repeat_penalty": 1.1,
        "stop": _STOP,
        "grammar": grammar,
        "seed": seed,
    }
    probe = CacheProbe.start(llama, tokens)
    try:
        if on_text is None:
            result: Any = llama.create_completion(**params)
            choice = result["choices"][0]
            done = Completion(
                text=choice["text"],
                prompt_tokens=result["usage"]["prompt_tokens"],
                completion_tokens=result["usage"]["completion_tokens"],
                finish_reason=choice["finish_reason"],
            )
        else:
            done = Completion(prompt_tokens=n_prompt)
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
            raise ContextWindowExceededError(f"{model_name}: {exc}") from exc
        raise ModelError(f"{model_name}: {exc}") from exc
    except RuntimeError as exc:
        raise ModelError(f"{model_name}: llama.cpp failed: {exc}") from exc
    done.cached_tokens = meter.record(probe, llama, prompt_tokens=done.prompt_tokens)
    logger.debug(
        "%s: %d of %d prompt tokens served from the KV cache",
        model_name,
        done.cached_tokens,
        done.prompt_tokens,
    )
    return done
