"""Choosing the replay's summarizer from a short string."""

from __future__ import annotations

import importlib.util

from .._exceptions import MissingDependencyError
from .._model_string import split_model_string
from ..model import ChatModelBase, model_from_string
from ..token import TokenCounter
from ._extractive import ExtractiveSummarizer

__all__ = ["summarizer_from_string"]


def summarizer_from_string(
    spec: str, *, token_counter: TokenCounter | None = None, base_url: str | None = None
) -> ChatModelBase:
    """``"extractive"`` (default of replay, no model), ``"local"`` / ``"local:<path.gguf>"``
    (the embedded model) or ``"<provider>:<model>"`` (any model adapter, e.g.
    ``"openai:gpt-4o-mini"``, keys from the usual environment variables).

    ``token_counter`` is used by the extractive summarizer; models use their own.
    Raises ``ValueError`` for an unknown spec, ``MissingDependencyError`` when the model's
    extra is not installed and ``AuthenticationError`` when its API key is missing.
    """
    name = spec.strip()
    if name.lower() == "extractive":
        if base_url is not None:
            raise ValueError("the extractive summarizer calls no server: drop base_url")
        return ExtractiveSummarizer(token_counter=token_counter)
    provider, model = split_model_string(name)
    if model is None and provider != "local":
        raise ValueError(
            f"unknown summarizer {spec!r}; use 'extractive', 'local', 'local:<path.gguf>' or "
            "'<provider>:<model>' such as 'openai:gpt-4o-mini' or 'anthropic:claude-sonnet-4-5'"
        )
    if provider == "local" and importlib.util.find_spec("llama_cpp") is None:
        # Fail before replaying: the model would only load at the first compression.
        raise MissingDependencyError("llama-cpp-python", "local")
    return model_from_string(name, base_url=base_url)
