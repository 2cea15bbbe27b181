"""The demo's models: the embedded one, or any adapter; and the KV-cache figures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._exceptions import MissingDependencyError
from .._model_string import split_model_string
from ..message import Msg
from ..model import (
    ChatModelBase,
    KVCacheStats,
    LocalChatModel,
    StructuredOutput,
    model_from_string,
)

__all__ = ["CacheMeter", "NarratedLocalModel", "build_models", "cache_meters", "is_local"]


@dataclass(frozen=True)
class CacheMeter:
    """Prompt tokens llama.cpp was given, and how many it actually evaluated.

    The embedded model measures this itself (:attr:`LocalChatModel.kv_cache`, from
    llama.cpp's own counters); the rest of each prompt was served from the KV cache
    because it matched the previous prompt's prefix.
    """

    prompt_tokens: int = 0
    evaluated: int = 0
    completions: int = 0
    eval_seconds: float = 0.0
    """Time llama.cpp spent evaluating prompt tokens (its ``t_p_eval_ms``)."""

    @classmethod
    def of(cls, stats: KVCacheStats) -> CacheMeter:
        """The figures of one embedded model's running totals."""
        return cls(
            prompt_tokens=stats.prompt_tokens,
            evaluated=stats.evaluated_tokens,
            completions=stats.completions,
            eval_seconds=stats.prompt_eval_seconds,
        )

    def without(self, part: CacheMeter) -> CacheMeter:
        """These figures less ``part`` (e.g. the agent's share of a shared model)."""
        return CacheMeter(
            prompt_tokens=self.prompt_tokens - part.prompt_tokens,
            evaluated=self.evaluated - part.evaluated,
            completions=self.completions - part.completions,
            eval_seconds=self.eval_seconds - part.eval_seconds,
        )

    def plus(self, part: CacheMeter) -> CacheMeter:
        """These figures and ``part``'s."""
        return CacheMeter(
            prompt_tokens=self.prompt_tokens + part.prompt_tokens,
            evaluated=self.evaluated + part.evaluated,
            completions=self.completions + part.completions,
            eval_seconds=self.eval_seconds + part.eval_seconds,
        )

    @property
    def cached(self) -> int:
        """Prompt tokens served from the KV cache."""
        return max(self.prompt_tokens - self.evaluated, 0)

    @property
    def seconds_saved(self) -> float:
        """Prompt-reading time the cached tokens would have cost, at the measured rate."""
        return self.cached * self.eval_seconds / self.evaluated if self.evaluated else 0.0


def cache_meters(model: ChatModelBase) -> tuple[CacheMeter | None, CacheMeter | None]:
    """The KV-cache figures of the agent's calls and of the summaries, on the embedded
    model; None for a remote one."""
    if not isinstance(model, LocalChatModel):
        return None, None
    total = CacheMeter.of(model.kv_cache)
    if not isinstance(model, NarratedLocalModel):
        return total, None
    return total.without(model.summary_cache), model.summary_cache


class NarratedLocalModel(LocalChatModel):
    """The embedded model, agent and summarizer: ``on_summary`` is called when a
    structured (summary) request starts, so the demo can say that the model is writing a
    summary."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_summary: Callable[[], None] | None = None
        self.summary_cache = CacheMeter()
        """The KV-cache figures of the structured (summary) requests alone."""

    async def structured_output(
        self, messages: Sequence[Msg], schema: dict[str, Any], **kwargs: Any
    ) -> StructuredOutput:
        if self.on_summary is not None:
            self.on_summary()
        before = CacheMeter.of(self.kv_cache)
        try:
            return await super().structured_output(messages, schema, **kwargs)
        finally:
            spent = CacheMeter.of(self.kv_cache).without(before)
            self.summary_cache = self.summary_cache.plus(spent)


def is_local(spec: str) -> bool:
    """Whether ``spec`` names the embedded model (``local`` or ``local:<path.gguf>``)."""
    return split_model_string(spec)[0] == "local"


def _check_local_extra() -> None:
    try:
        import cyllama  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("cyllama", "local") from exc


def build_models(
    spec: str,
    *,
    base_url: str | None,
    context_size: int,
    seed: int = 0,
) -> tuple[ChatModelBase, ChatModelBase]:
    """The agent's model and its summarizer: one and the same model.

    The summary request extends the agent's last request (the engine's prefix form), so
    on the embedded model the summary is written by the same llama.cpp instance, with the
    same window, and reads the agent's prompt prefix from the KV cache. ``seed`` seeds
    the embedded model's sampling. Raises ``ValueError`` for a bad spec,
    ``MissingDependencyError`` for a missing extra, ``AuthenticationError`` for a missing
    key, ``FileNotFoundError`` for a missing file.
    """
    if is_local(spec):
        if base_url is not None:
            raise ValueError(
                "the embedded model runs in-process and takes no --base-url; for an "
                "OpenAI-compatible server use --model openai:<model> --base-url URL"
            )
        _check_local_extra()
        path = split_model_string(spec)[1]
        local = NarratedLocalModel(
            path or None, context_size=context_size, max_tokens=400, seed=seed
        )
        return local, local
    model = model_from_string(spec, base_url=base_url, context_size=context_size)
    return model, model
