"""Choosing the replay's summarizer from a short string."""

from __future__ import annotations

import importlib.util

from .._exceptions import MissingDependencyError
from .._model_string import split_model_string
from ..context import EmptySummarizer, ExtractiveSummarizer, ModelSummarizer, Summarizer
from ..model import model_from_string

__all__ = ["summarizer_from_string"]


def summarizer_from_string(spec: str, *, base_url: str | None = None) -> Summarizer:
    """``"extractive"`` (default of replay, no model), ``"none"`` (all five fields empty:
    the summary holds only the offload reference and the ledger), ``"local"`` /
    ``"local:<path.gguf>"`` (the embedded model) or ``"<provider>:<model>"`` (any model
    adapter, e.g. ``"openai:gpt-4o-mini"``, keys from the usual environment variables).

    Raises ``ValueError`` for an unknown spec, ``MissingDependencyError`` when the model's
    extra is not installed and ``AuthenticationError`` when its API key is missing.
    """
    name = spec.strip()
    if name.lower() in ("extractive", "none"):
        if base_url is not None:
            raise ValueError(f"the {name.lower()} summarizer calls no server: drop base_url")
        return ExtractiveSummarizer() if name.lower() == "extractive" else EmptySummarizer()
    provider, model = split_model_string(name)
    if model is None and provider != "local":
        raise ValueError(
            f"unknown summarizer {spec!r}; use 'extractive', 'none', 'local', "
            "'local:<path.gguf>' or '<provider>:<model>' such as 'openai:gpt-4o-mini' or "
            "'anthropic:claude-sonnet-4-5'"
        )
    if provider == "local" and importlib.util.find_spec("cyllama") is None:
        # Fail before replaying: the model would only load at the first compression.
        raise MissingDependencyError("cyllama", "local")
    return ModelSummarizer(model_from_string(name, base_url=base_url))
