"""Sealing a compaction's summary into an ``encrypted_content`` only this gateway accepts.

OpenAI's compaction items carry opaque content that only OpenAI can read. The gateway's
items carry its summary, compressed and signed with HMAC-SHA256 under a key of its own:
a client cannot forge or alter one, an item from OpenAI or another gateway is refused,
and the gateway reads the summary back without keeping any state per conversation.

The key is ``CONTEXTFOLD_GATEWAY_KEY`` (a secret string, shared by every replica) or,
when that is unset, 32 random bytes kept in ``CONTEXTFOLD_GATEWAY_KEY_FILE`` (default
``$XDG_STATE_HOME/contextfold/gateway.key``), created with mode 0600 on first use.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["KEY_ENV", "KEY_FILE_ENV", "SealError", "SealKey", "default_key_file"]

KEY_ENV = "CONTEXTFOLD_GATEWAY_KEY"
KEY_FILE_ENV = "CONTEXTFOLD_GATEWAY_KEY_FILE"
_PREFIX = "cfc1"
"""Names the format, so a future one can be told apart."""
_MIN_SECRET = 16
_MAX_PAYLOAD = 4 * 1024 * 1024
"""Largest decompressed payload accepted: a summary is far smaller."""


class SealError(ValueError):
    """An ``encrypted_content`` this gateway did not write or that was altered."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def default_key_file(environ: Mapping[str, str] | None = None) -> Path:
    """Where the generated key is kept when no key or key file is configured."""
    env = os.environ if environ is None else environ
    if env.get(KEY_FILE_ENV):
        return Path(env[KEY_FILE_ENV])
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "contextfold" / "gateway.key"


def _read_or_create(path: Path) -> bytes:
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        try:  # O_EXCL: of two replicas starting together, one writes, both read it
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            key = path.read_bytes()
        else:
            with os.fdopen(fd, "wb") as out:
                out.write(key)
    if len(key) < _MIN_SECRET:
        raise ValueError(f"the gateway key in {path} is shorter than {_MIN_SECRET} bytes")
    return key


@dataclass(frozen=True)
class SealKey:
    """The key compaction items are signed with."""

    secret: bytes

    def __post_init__(self) -> None:
        if len(self.secret) < _MIN_SECRET:
            raise ValueError(f"the gateway key must be at least {_MIN_SECRET} bytes")

    def __repr__(self) -> str:
        return "SealKey(<secret>)"

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> SealKey:
        """The configured key: ``CONTEXTFOLD_GATEWAY_KEY``, else the key file (created
        when absent)."""
        env = os.environ if environ is None else environ
        secret = env.get(KEY_ENV)
        if secret:
            return cls(secret.encode())
        return cls(_read_or_create(default_key_file(env)))

    def _mac(self, signed: bytes) -> bytes:
        key = hashlib.sha256(b"contextfold-gateway-compaction\0" + self.secret).digest()
        return hmac.new(key, signed, hashlib.sha256).digest()

    def seal(self, payload: Mapping[str, Any]) -> str:
        """``payload`` as an ``encrypted_content`` string."""
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
        body = _b64(zlib.compress(data.encode(), 9))
        mac = self._mac(f"{_PREFIX}.{body}".encode())
        return f"{_PREFIX}.{body}.{_b64(mac)}"

    def open(self, token: Any) -> dict[str, Any]:
        """The payload of a sealed ``token``; ``SealError`` unless this key sealed it."""
        if not isinstance(token, str) or token.count(".") != 2:
            raise SealError("encrypted_content was not written by this gateway")
        prefix, body, mac = token.split(".")
        if prefix != _PREFIX:
            raise SealError("encrypted_content was not written by this gateway")
        try:
            given = _unb64(mac)
        except (binascii.Error, ValueError):
            raise SealError("encrypted_content is malformed") from None
        if not hmac.compare_digest(given, self._mac(f"{prefix}.{body}".encode())):
            raise SealError("encrypted_content was altered or sealed with another key")
        try:
            decoder = zlib.decompressobj()
            data = decoder.decompress(_unb64(body), _MAX_PAYLOAD)
            payload = json.loads(data)
        except (binascii.Error, ValueError, zlib.error):
            raise SealError("encrypted_content is malformed") from None
        if not isinstance(payload, dict):
            raise SealError("encrypted_content is malformed")
        return payload
