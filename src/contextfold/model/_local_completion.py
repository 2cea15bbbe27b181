"""One llama.cpp completion, run in the worker thread with the model's lock held: the
weights loaded on first use, the context window checked, the text sampled (streamed or
not, by :mod:`._local_runtime`) and the KV cache's share of the prompt measured."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .._embedded import close_at_exit
from .._exceptions import ContextWindowExceededError, ModelError
from .._logging import logger
from ..message import Usage
from ._local_kvcache import CacheProbe, KVCacheMeter
from ._local_runtime import LlamaRuntime

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
        grammar: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion: ...


def load_llama(path: Path, *, n_ctx: int, n_threads: int | None) -> LlamaRuntime:
    """The GGUF file at ``path`` loaded by llama.cpp, closed when the interpreter exits."""
    logger.info("loading %s (n_ctx=%d)", path, n_ctx)
    runtime = LlamaRuntime(path, n_ctx=n_ctx, n_threads=n_threads)
    close_at_exit(runtime)
    return runtime


def complete(
    llama: LlamaRuntime,
    prompt: str,
    *,
    model_name: str,
    context_size: int,
    max_tokens: int,
    temperature: float,
    seed: int | None,
    grammar: str | None,
    on_text: Callable[[str], None] | None,
    meter: KVCacheMeter,
) -> Completion:
    """``prompt`` completed (``on_text`` given each piece as it is sampled), recorded on
    ``meter``. Raises :class:`ContextWindowExceededError` when the prompt does not fit."""
    tokens = llama.tokenize(prompt, add_bos=True)
    n_prompt = len(tokens)
    if n_prompt >= context_size:
        raise ContextWindowExceededError(
            f"{model_name}: the prompt is {n_prompt} tokens but the context window "
            f"is {context_size}; compress the context or raise context_size"
        )
    probe = CacheProbe.start(llama, tokens)
    try:
        out = llama.generate(
            tokens,
            grammar=grammar,
            # Like llama-cpp-python: what is left of the window bounds the answer.
            max_tokens=min(max_tokens, context_size - n_prompt),
            temperature=temperature,
            seed=seed,
            stop=_STOP,
            on_text=on_text,
        )
    except RuntimeError as exc:
        raise ModelError(f"{model_name}: llama.cpp failed: {exc}") from exc
    done = Completion(
        text=out.text,
        prompt_tokens=n_prompt,
        completion_tokens=out.completion_tokens,
        finish_reason=out.finish_reason,
    )
    done.cached_tokens = meter.record(probe, llama, prompt_tokens=done.prompt_tokens)
    logger.debug(
        "%s: %d of %d prompt tokens served from the KV cache",
        model_name,
        done.cached_tokens,
        done.prompt_tokens,
    )
    return done
