"""Token accounting: exact counters per tokenizer, cached per message.

``counter_for_model("gpt-4o")`` picks the counter. OpenAI encodings are counted exactly
and offline; Claude is estimated high and corrected by reported usage
(:class:`CalibratedCounter`); the embedded model counts with its own tokenizer.
"""

from typing import TYPE_CHECKING, Any

from ._anthropic import AnthropicEstimator, CalibratedCounter
from ._images import (
    anthropic_image_tokens,
    image_size,
    openai_patch_image_tokens,
    openai_tile_image_tokens,
)
from ._openai import ImagePricing, OpenAITokenCounter
from ._protocol import TokenCounter, TokenSlicer, UsageCalibration
from ._select import counter_for_model
from ._slice import head_within, tail_within
from ._vocab import seed_tiktoken_cache, tiktoken_encoding

if TYPE_CHECKING:
    from ._llama import LlamaTokenCounter


def __getattr__(name: str) -> Any:
    # LlamaTokenCounter needs llama-cpp-python (the ``local`` extra): import on first use.
    if name == "LlamaTokenCounter":
        from ._llama import LlamaTokenCounter

        return LlamaTokenCounter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AnthropicEstimator",
    "CalibratedCounter",
    "ImagePricing",
    "LlamaTokenCounter",
    "OpenAITokenCounter",
    "TokenCounter",
    "TokenSlicer",
    "UsageCalibration",
    "anthropic_image_tokens",
    "counter_for_model",
    "head_within",
    "image_size",
    "openai_patch_image_tokens",
    "openai_tile_image_tokens",
    "seed_tiktoken_cache",
    "tail_within",
    "tiktoken_encoding",
]
