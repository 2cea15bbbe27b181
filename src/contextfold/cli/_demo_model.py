"""The demo's models: the embedded one, metered for its KV-cache reuse, or any adapter."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._exceptions import MissingDependencyError
from ..message import Msg
from ..model import ChatModelBase, model_from_string
from ..model._local import LocalChatModel

if TYPE_CHECKING:
    from ..model._local import _Completion

__all__ = ["CacheMeter", "MeteredLocalModel", "build_models", "is_local"]


@dataclass
class CacheMeter:
    """Prompt tokens llama.cpp was given, and how many it actually evaluated.

    ``evaluated`` comes from llama.cpp's own performance counters (``n_p_eval``), read
    before and after each completion, so it is measured, not predicted; the rest of each
    prompt was served from the KV cache because it matched the previous prompt's prefix.
    """

    prompt_tokens: int = 0
    evaluated: int = 0
    completions: int = 0
    eval_seconds: float = 0.0
    """Time llama.cpp spent evaluating prompt tokens (its ``t_p_eval_ms``)."""

    @property
    def cached(self) -> int:
        """Prompt tokens served from the KV cache."""
        return max(self.prompt_tokens - self.evaluated, 0)

    @property
    def seconds_saved(self) -> float:
        """Prompt-reading time the cached tokens would have cost, at the measured rate."""
        return self.cached * self.eval_seconds / self.evaluated if self.evaluated else 0.0

    def add(self, prompt_tokens: int, evaluated: int, seconds: float) -> None:
        """Record one completion."""
        self.prompt_tokens += prompt_tokens
        self.evaluated += evaluated
        self.eval_seconds += seconds
        self.completions += 1


class MeteredLocalModel(LocalChatModel):
    """The embedded model, counting the prompt tokens each completion really evaluated.

    ``on_summary`` is called when a structured (summary) request starts, so the demo can
    say that the model is writing a summary.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.meter = CacheMeter()
        self.on_summary: Callable[[], None] | None = None

    def _complete(self, prompt: str, **kwargs: Any) -> _Completion:
        import llama_cpp

        llama = self._load()
        before = llama_cpp.llama_perf_context(llama.ctx)
        done = super()._complete(prompt, **kwargs)
        after = llama_cpp.llama_perf_context(llama.ctx)
        # llama-cpp-python replays at least one prompt token; a single-token batch is
        # counted by llama.cpp as generation (n_eval), not prompt evaluation.
        evaluated = max(after.n_p_eval - before.n_p_eval, 1)
        seconds = (after.t_p_eval_ms - before.t_p_eval_ms) / 1000
        self.meter.add(done.prompt_tokens, evaluated, seconds)
        return done

    async def structured(
        self, messages: Sequence[Msg], schema: dict[str, Any], **kwargs: Any
    ) -> dict[str, Any]:
        if self.on_summary is not None:
            self.on_summary()
        return await super().structured(messages, schema, **kwargs)


def is_local(spec: str) -> bool:
    """Whether ``spec`` names the embedded model (``local`` or ``local:<path.gguf>``)."""
    return spec.strip().lower().split(":", 1)[0] == "local"


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
        path = spec.split(":", 1)[1].strip() if ":" in spec else ""
        local = MeteredLocalModel(path or None, context_size=context_size, max_tokens=256)
        summarizer = MeteredLocalModel(
            path or None, context_size=summary_window, max_tokens=400, temperature=0.0
        )
        return local, summarizer
    model = model_from_string(spec, base_url=base_url, context_size=context_size)
    return model, model
