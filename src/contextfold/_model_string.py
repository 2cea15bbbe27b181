"""``"provider:name"`` model strings, split the same way wherever one is read."""

from __future__ import annotations

__all__ = ["split_model_string"]


def split_model_string(spec: str) -> tuple[str, str | None]:
    """``(provider, name)`` of ``"provider:name"``, both stripped, the provider lower-cased.

    Only the first colon splits (a GGUF path or a model tag may hold more). Without a
    colon the name is ``None`` and the whole string is in ``provider``: a bare provider
    such as ``"local"``, or a bare model name where the reader accepts one.
    """
    provider, colon, name = spec.partition(":")
    return provider.strip().lower(), name.strip() if colon else None
