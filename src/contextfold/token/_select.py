"""Choosing the counter for a model name."""

from __future__ import annotations

from .._logging import logger
from .._model_string import split_model_string
from ._anthropic import AnthropicEstimator, CalibratedCounter
from ._openai import ImagePricing, OpenAITokenCounter
from ._protocol import TokenCounter

__all__ = ["counter_for_model"]

_O200K = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss", "o1", "o3", "o4")
_CL100K = ("gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada-002")
_PATCH = {
    "gpt-4.1-mini": "patch-1.62",
    "gpt-4.1-nano": "patch-2.46",
    "gpt-5-mini": "patch-1.62",
    "gpt-5-nano": "patch-2.46",
    "o4-mini": "patch-1.72",
}


def _image_pricing(model: str) -> ImagePricing:
    if model.startswith("gpt-4o-mini"):
        return "tile-mini"
    for prefix, pricing in _PATCH.items():
        if model.startswith(prefix):
            return pricing  # type: ignore[return-value]
    return "tile"


def counter_for_model(model_name: str) -> TokenCounter:
    """The counter that matches ``model_name`` (``"gpt-4o"`` or ``"openai:gpt-4o"``).

    GPT-4o, GPT-4.1, GPT-4.5, GPT-5 and o-series: exact ``o200k_base``; GPT-4 and
    GPT-3.5: exact ``cl100k_base``; Claude (or provider ``anthropic``):
    :class:`AnthropicEstimator`; ``local*`` and ``smollm*``: the embedded model's own
    tokenizer. Anything else gets ``o200k_base``, with a log note. Each call returns a
    new counter; counts are cached on messages, not on the counter.
    """
    provider, name = split_model_string(model_name)
    if not name:
        provider, name = "", model_name
    model = name.strip().lower().rsplit("/", 1)[-1]  # "openai/gpt-4o" (router style)
    if model.startswith(("local", "smollm")) or provider in ("local", "llama", "llamacpp"):
        from ._llama import LlamaTokenCounter

        return LlamaTokenCounter()
    if provider == "anthropic" or model.startswith("claude"):
        # No public tokenizer: estimate high, then correct by the usage the provider reports.
        return CalibratedCounter(AnthropicEstimator())
    if model.startswith(_O200K):
        return OpenAITokenCounter("o200k_base", images=_image_pricing(model))
    if model.startswith(_CL100K):
        return OpenAITokenCounter("cl100k_base")
    logger.info("no known tokenizer for model %r; counting with o200k_base", model_name)
    return OpenAITokenCounter("o200k_base")
