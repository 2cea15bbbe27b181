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

__all__ = ["CacheMeter", "NarratedLocalModel", "build_models", "cache_meter", "is_local"]


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

    @property
    def cached(self) -> int:
        """Prompt tokens served from the KV cache."""
        return max(self.prompt_tokens - self.evaluated, 0)

    @property
    def seconds_saved(self) -> float:
        """Prompt-reading time the cached tokens would have cost, at the measured rate."""
        return self.cached * self.eval_seconds / self.evaluated if self.evaluated else 0.0


def cache_meter(model: ChatModelBase) -> CacheMeter | None:
    """The KV-cache figures of an embedded model; None for a remote one."""
    return CacheMeter.of(model.kv_cache) if isinstance(model, LocalChatModel) else None


class NarratedLocalModel(LocalChatModel):
    """The embedded model as the summarizer: ``on_summary`` is called when a structured
    (summary) request starts, so the demo can say that the model is writing a summary."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_summary: Callable[[], None] | None = None

    async def structured_output(
        self, messages: Sequence[Msg], schema: dict[str, Any], **kwargs: Any
    ) -> StructuredOutput:
        if self.on_summary is not None:
            self.on_summary()
        return await super().structured_output(messages, schema, **kwargs)


def is_local(spec: str) -> bool:
    """Whether ``spec`` names the embedded model (``local`` or ``local:<path.gguf>``)."""
    return split_model_string(spec)[0] == "local"


def _check_local_extra() -> None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("llama-cpp-python", "local") from exc


def build_models(
    spec: str,
    *,
    base_url: str | None,
    context_size: int,
    summary_window: int,
) -> tuple[ChatModelBase, ChatModelBase]:
    """The agent's model and its summarizer.

    The embedded model gets a summarizer of its own (a second llama.cpp context over the
    same weights), so writing a summary does not evict the agent's cached prompt prefix.
    Raises ``ValueError`` for a bad spec, ``MissingDependencyError`` for a missing extra,
    ``AuthenticationError`` for a missing key, ``FileNotFoundError`` for a missing file.
    """
    if is_local(spec):
        if base_url is not None:
            raise ValueError(
                "the embedded model runs in-process and takes no --base-url; for an "
                "OpenAI-compatible server use --model openai:<model> --base-url URL"
            )
        _check_local_extra()
        path = split_model_string(spec)[1]
        local = LocalChatModel(path or None, context_size=context_size, max_tokens=256)
        summarizer = NarratedLocalModel(
            path or None, context_size=summary_window, max_tokens=400, temperature=0.0
        )
        return local, summarizer
    model = model_from_string(spec, base_url=base_url, context_size=context_size)
    return model, model
