"""Build a model from a short string such as ``"openai:gpt-4o-mini"``."""

from __future__ import annotations

import importlib
import os
from typing import Any

from .._exceptions import AuthenticationError
from .._model_string import split_model_string
from ._base import ChatModelBase

__all__ = ["model_from_string"]

_KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def model_from_string(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    **kwargs: Any,
) -> ChatModelBase:
    """A model from ``"<provider>:<model>"``.

    * ``"openai:gpt-4o-mini"``: :class:`OpenAIChatModel`, key from ``OPENAI_API_KEY``;
      with ``base_url`` any OpenAI-compatible server (no key needed);
    * ``"anthropic:claude-sonnet-4-5"``: :class:`AnthropicChatModel`, key from
      ``ANTHROPIC_API_KEY``;
    * ``"local"`` or ``"local:/path/model.gguf"``: the embedded model in-process.

    Other keyword arguments go to the model's constructor.
    """
    provider, name = split_model_string(spec)
    if provider == "local":
        if base_url is not None or api_key is not None:
            raise ValueError(
                "the 'local' model runs in-process: it takes no base_url or api_key "
                "(for a llama.cpp server use 'openai:<model>' with base_url=...)"
            )
        from ._local import LocalChatModel

        if name:
            kwargs["model_path"] = name
        return LocalChatModel(**kwargs)
    if provider not in _KEY_VARS:
        raise ValueError(
            f"unknown model provider {provider!r} in {spec!r}; expected 'openai:<model>', "
            "'anthropic:<model>', 'local' or 'local:<path.gguf>'"
        )
    if not name:
        raise ValueError(f"no model name in {spec!r}; write it as '{provider}:<model>'")
    env_var = _KEY_VARS[provider]
    api_key = api_key or os.environ.get(env_var)
    needs_key = not (provider == "openai" and base_url is not None)
    if not api_key and needs_key:
        raise AuthenticationError(
            f"{spec!r} needs an API key: set the {env_var} environment variable or pass api_key="
        )
    module = importlib.import_module(f"._{provider}", __package__)
    cls = module.OpenAIChatModel if provider == "openai" else module.AnthropicChatModel
    model: ChatModelBase = cls(name, api_key=api_key, base_url=base_url, **kwargs)
    return model
