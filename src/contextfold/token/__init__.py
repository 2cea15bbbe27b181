"""Token accounting: exact counters per tokenizer, cached per message."""

from ._openai import OpenAITokenCounter
from ._protocol import TokenCounter


def counter_for_model(model_name: str) -> TokenCounter:
    """The counter that matches ``model_name``."""
    return OpenAITokenCounter("o200k_base")


__all__ = ["OpenAITokenCounter", "TokenCounter", "counter_for_model"]
