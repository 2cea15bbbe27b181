"""How much of each prompt llama.cpp's KV cache served, measured from its own counters."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._local_runtime import LlamaRuntime

__all__ = ["CacheProbe", "KVCacheMeter", "KVCacheStats", "PerfMark", "shared_prefix"]


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


@dataclass(frozen=True)
class PerfMark:
    """llama.cpp's performance counters for one context, read before and after a call.

    llama.cpp counts every token it decodes: a batch of one as ``n_eval``, a larger one
    as ``n_p_eval``. Their sum is therefore every token decoded, whatever the batching;
    llama-cpp-python decodes the prompt tokens past the prefix it reuses, then each
    sampled token but the last (:class:`~._local_runtime.LlamaRuntime` does the same).
    The prefix it reused is what the KV cache served.

    llama.cpp reports a counter that is still 0 as 1, so on a fresh context the
    difference can come out short by up to 2 and overstate the reuse: the caller bounds
    the result by the prefix the cache could have served at all.
    """

    decoded: int
    prompt_ms: float

    @classmethod
    def read(cls, llama: LlamaRuntime) -> PerfMark:
        counters = llama.perf()
        return cls(decoded=counters.decoded, prompt_ms=counters.prompt_ms)

    def cached_tokens(self, after: PerfMark, *, prompt_tokens: int, n_tokens: int) -> int:
        """Prompt tokens not evaluated between this mark and ``after``.

        ``n_tokens`` is the number of tokens the KV cache holds after the call: the
        prompt plus the sampled tokens that were fed back, so the excess over the prompt
        is generation work.
        """
        sampled = max(n_tokens - prompt_tokens, 0)
        evaluated = after.decoded - self.decoded - sampled
        return prompt_tokens - min(max(evaluated, 0), prompt_tokens)


def shared_prefix(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """How many leading tokens of ``prompt`` the KV cache holds (an upper bound on reuse)."""
    shared = 0
    for held, wanted in zip(cached, prompt, strict=False):
        if held != wanted:
            break
        shared += 1
    return shared


@dataclass(frozen=True)
class CacheProbe:
    """What is known before a completion: llama.cpp's counters and the reusable prefix."""

    before: PerfMark
    reusable: int

    @classmethod
    def start(cls, llama: LlamaRuntime, tokens: Sequence[int]) -> CacheProbe:
        return cls(before=PerfMark.read(llama), reusable=shared_prefix(llama.held, tokens))


class KVCacheMeter:
    """The running :class:`KVCacheStats` of one model, safe to read from any thread."""

    def __init__(self) -> None:
        self._stats = KVCacheStats()
        # Not the model's lock: that one is held for a whole completion.
        self._lock = threading.Lock()

    def snapshot(self) -> KVCacheStats:
        with self._lock:
            return replace(self._stats)

    def record(self, probe: CacheProbe, llama: LlamaRuntime, *, prompt_tokens: int) -> int:
        """Count a finished completion; returns its prompt tokens the KV cache served."""
        after = PerfMark.read(llama)
        cached = min(
            probe.before.cached_tokens(
                after, prompt_tokens=prompt_tokens, n_tokens=len(llama.held)
            ),
            probe.reusable,
        )
        with self._lock:
            self._stats.completions += 1
            self._stats.prompt_tokens += prompt_tokens
            self._stats.cache_read_tokens += cached
            self._stats.prompt_eval_seconds += (after.prompt_ms - probe.before.prompt_ms) / 1000
        return cached
